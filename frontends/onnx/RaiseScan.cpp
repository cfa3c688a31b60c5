//===- RaiseScan.cpp - Mamba's selective scan unrolled over positions -----===//
//
// transformers' Mamba without the mamba_ssm kernels (MambaMixer's slow
// path) runs its state-space recurrence as a Python loop over the
// positions, which the exporters unroll: for each position i,
//
//   h_i = a[:, :, i] * h_{i-1} + x[:, :, i]       (h_{-1} = 0)
//   y_i = h_i @ c[:, i, :, None]                  [b, d, 1]
//
// and y = concat(y_0, ..., y_{L-1}) along the last dim, with a = exp(delta
// * A) and x = delta * B * u of [b, d, L, n] and c of [b, L, n] computed
// once before the loop. That is one dtc.selective_scan(a, x, c) -> [b, d,
// L]: L steps of a dozen ops each become one op whose loops split the
// channels, and whose kernel runs the positions in order.
//
// Recognized by what the ops compute, not by names: each step's operands
// must be the unit slices at its own position of the same a, x and c, each
// state the previous step's, the first from a zero constant, the concat in
// position order. Anything else is left as it was (the unrolled ops are
// exact, only long).
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/Raise.h"

#include "dialects/dtc/DtcOps.h"

using namespace mlir;
using ::dtc::onnx::getSplatFloat;
namespace d = mlir::dtc;

namespace {

/// `value` through any chain of reshapes.
Value throughReshapes(Value value) {
  while (auto reshape = value.getDefiningOp<d::ReshapeOp>())
    value = reshape.getInput();
  return value;
}

/// A value that is `source` at one position `index` of dim `axis`: a unit
/// slice of it there (whole along every other dim, stride 1), possibly
/// reshaped (the dim dropped or moved among unit dims, so the elements keep
/// their order).
struct Position {
  Value source;
  int64_t axis = -1, index = -1;
};

std::optional<Position> positionOf(Value value) {
  auto slice = throughReshapes(value).getDefiningOp<d::SliceOp>();
  if (!slice)
    return std::nullopt;
  auto input = cast<RankedTensorType>(slice.getInput().getType());
  Position p{slice.getInput()};
  for (int64_t dim = 0; dim < input.getRank(); ++dim) {
    int64_t start = slice.getStarts()[dim], limit = slice.getLimits()[dim];
    if (slice.getStrides()[dim] != 1)
      return std::nullopt;
    if (start == 0 && limit == input.getDimSize(dim))
      continue;
    if (limit != start + 1 || p.axis >= 0)
      return std::nullopt;
    p.axis = dim;
    p.index = start;
  }
  // A dim of extent 1 is whole and at position 0.
  if (p.axis < 0)
    return std::nullopt;
  return p;
}

bool isZeroConstant(Value value) {
  std::optional<double> splat = getSplatFloat(value);
  return splat && *splat == 0.0;
}

bool hasShape(Value value, ArrayRef<int64_t> shape) {
  return cast<RankedTensorType>(value.getType()).getShape() == shape;
}

/// What the steps have in common: the tensors they read one position of.
struct ScanOperands {
  Value a, x, c;
};

/// Matches step `i` of the recurrence producing `state` ([b, d, n]):
/// `a_i * previous + x_i` in either operand order, where a_i and x_i are
/// position i along dim 2 of [b, d, L, n] tensors. Returns the previous
/// state, or null.
Value matchStep(Value state, int64_t i, ScanOperands &scan) {
  auto add = state.getDefiningOp<d::AddOp>();
  if (!add)
    return {};
  for (int side = 0; side < 2; ++side) {
    Value product = add->getOperand(side), input = add->getOperand(1 - side);
    auto mul = product.getDefiningOp<d::MulOp>();
    std::optional<Position> x = positionOf(input);
    if (!mul || !x || x->axis != 2 || x->index != i ||
        !hasShape(input, cast<RankedTensorType>(state.getType()).getShape()))
      continue;
    for (int factor = 0; factor < 2; ++factor) {
      Value decay = mul->getOperand(factor),
            previous = mul->getOperand(1 - factor);
      std::optional<Position> a = positionOf(decay);
      if (!a || a->axis != 2 || a->index != i ||
          decay.getType() != state.getType() ||
          previous.getType() != state.getType())
        continue;
      if ((scan.a && scan.a != a->source) || (scan.x && scan.x != x->source))
        continue;
      scan.a = a->source;
      scan.x = x->source;
      return previous;
    }
  }
  return {};
}

/// concat_i(h_i @ c_i) along the last dim -> dtc.selective_scan(a, x, c).
struct RaiseSelectiveScan : OpRewritePattern<d::ConcatOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(d::ConcatOp op,
                                PatternRewriter &rewriter) const override {
    auto result = cast<RankedTensorType>(op.getType());
    int64_t rank = result.getRank(), length = op.getInputs().size();
    int64_t axis = op.getAxis() < 0 ? op.getAxis() + rank : op.getAxis();
    if (rank != 3 || axis != 2 || length < 2)
      return rewriter.notifyMatchFailure(op, "not a stack of [b, d] rows");
    int64_t batch = result.getDimSize(0), channels = result.getDimSize(1);

    // The readouts y_i = h_i @ c_i, in position order.
    SmallVector<Value> states;
    Value c;
    int64_t stateSize = -1;
    for (auto [i, input] : llvm::enumerate(op.getInputs())) {
      auto matmul = throughReshapes(input).getDefiningOp<d::MatmulOp>();
      if (!matmul || matmul.getTransposeLhs() || matmul.getTransposeRhs())
        return rewriter.notifyMatchFailure(op, "an input is not a readout");
      auto state = cast<RankedTensorType>(matmul.getLhs().getType());
      if (state.getRank() != 3 || state.getDimSize(0) != batch ||
          state.getDimSize(1) != channels)
        return rewriter.notifyMatchFailure(op, "a state is not [b, d, n]");
      int64_t n = state.getDimSize(2);
      std::optional<Position> ci = positionOf(matmul.getRhs());
      if (!ci || ci->axis != 1 || ci->index != static_cast<int64_t>(i) ||
          !hasShape(matmul.getRhs(), {batch, n, 1}) ||
          !hasShape(ci->source, {batch, length, n}) || (c && c != ci->source) ||
          (stateSize >= 0 && stateSize != n))
        return rewriter.notifyMatchFailure(op, "c is not read position-wise");
      c = ci->source;
      stateSize = n;
      states.push_back(matmul.getLhs());
    }

    // Each state the previous one's step, the first from zero.
    ScanOperands scan;
    for (int64_t i = 0; i < length; ++i) {
      Value previous = matchStep(states[i], i, scan);
      bool chained = i == 0 ? previous && isZeroConstant(previous)
                            : previous == states[i - 1];
      if (!chained)
        return rewriter.notifyMatchFailure(op, "the states do not chain");
    }
    SmallVector<int64_t> full = {batch, channels, length, stateSize};
    if (!hasShape(scan.a, full) || scan.x.getType() != scan.a.getType() ||
        cast<RankedTensorType>(c.getType()).getElementType() !=
            result.getElementType() ||
        cast<RankedTensorType>(scan.a.getType()).getElementType() !=
            result.getElementType())
      return rewriter.notifyMatchFailure(op, "operands of other shapes");

    rewriter.replaceOpWithNewOp<d::SelectiveScanOp>(op, result, scan.a, scan.x,
                                                    c);
    return success();
  }
};

} // namespace

namespace dtc::onnx {

void populateRaiseScanPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseSelectiveScan>(patterns.getContext());
}

} // namespace dtc::onnx
