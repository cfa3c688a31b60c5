//===- RaiseAttention.cpp - decomposed SDPA -> dtc.attention --------------===//
//
// Exported scaled-dot-product attention is
//
//   softmax((q * s1) @ (kT * s2) [* s3] [+ mask], axis=-1) @ v
//
// with q [b, h, s, d], kT [b, h, d, t] (PyTorch transposes the [b, t, h, d]
// key reshape with perm [0, 2, 3, 1]), v [b, h, t, e], the scales splat
// constants (PyTorch splits 1/sqrt(d) into sqrt of it on each side) and the
// mask, after host evaluation, a constant that is 0 on and below the diagonal
// and -inf (or <= -1e4) above it. The key the op wants, [b, h, t, d], is kT
// with its last two dims swapped, folded into kT's own transpose. PyTorch's
// dynamo exporter (torchlib) transposes the key through 3-D instead:
// kT = reshape [b, h, d, t] of transpose [0, 2, 1] of reshape [b*h, t, d].
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/Raise.h"

#include "dialects/dtc/DtcOps.h"

#include "mlir/IR/Matchers.h"

#include <cmath>

using namespace mlir;
using ::dtc::onnx::getSplatFloat;
namespace d = mlir::dtc;

namespace {

/// Strips `value * c`, `c * value` and `value / c` (splat c) off `value`,
/// multiplying `scale` by the factor. Needs a single use only when
/// `requireOneUse`: scaling q for attention alone is folded into the op,
/// but the unscaled q may also be read elsewhere.
Value stripScale(Value value, double &scale, bool requireOneUse) {
  while (true) {
    Operation *op = value.getDefiningOp();
    if (!op || (requireOneUse && !op->hasOneUse()))
      return value;
    if (auto mul = dyn_cast<d::MulOp>(op)) {
      if (auto c = getSplatFloat(mul.getRhs());
          c && mul.getLhs().getType() == mul.getType()) {
        scale *= *c;
        value = mul.getLhs();
        continue;
      }
      if (auto c = getSplatFloat(mul.getLhs());
          c && mul.getRhs().getType() == mul.getType()) {
        scale *= *c;
        value = mul.getRhs();
        continue;
      }
    }
    if (auto div = dyn_cast<d::DivOp>(op))
      if (auto c = getSplatFloat(div.getRhs());
          c && *c != 0 && div.getLhs().getType() == div.getType()) {
        scale /= *c;
        value = div.getLhs();
        continue;
      }
    return value;
  }
}

/// torchlib's key transpose: reshape[b, h, d, t](transpose[0, 2, 1](
/// reshape[b*h, t, d](x))) is x read as [b, h, t, d] with the last two dims
/// swapped. Returns x as [b, h, t, d] (a reshape, so GQA's repeat_kv under
/// it stays visible to RaiseGroupedQueryAttention).
std::optional<Value> untransposeFlatKey(Value kT, PatternRewriter &rewriter) {
  auto outer = kT.getDefiningOp<d::ReshapeOp>();
  if (!outer)
    return std::nullopt;
  auto transpose = outer.getInput().getDefiningOp<d::TransposeOp>();
  if (!transpose || transpose.getPermutation() != ArrayRef<int64_t>{0, 2, 1})
    return std::nullopt;
  auto inner = transpose.getInput().getDefiningOp<d::ReshapeOp>();
  if (!inner)
    return std::nullopt;
  auto kTType = cast<RankedTensorType>(kT.getType());
  auto flatType = cast<RankedTensorType>(inner.getType());
  if (kTType.getRank() != 4 || flatType.getRank() != 3)
    return std::nullopt;
  int64_t b = kTType.getDimSize(0), h = kTType.getDimSize(1),
          dd = kTType.getDimSize(2), t = kTType.getDimSize(3);
  if (flatType.getShape() != ArrayRef<int64_t>{b * h, t, dd})
    return std::nullopt;
  Value x = inner.getInput();
  auto keyType = kTType.clone({b, h, t, dd});
  if (x.getType() == keyType)
    return x;
  return d::ReshapeOp::create(rewriter, kT.getLoc(), keyType, x).getResult();
}

enum class MaskKind { None, Causal };

/// Classifies a constant additive mask over [s, t] scores: all zeros, or
/// causal (0 where key <= query, very negative where key > query).
std::optional<MaskKind> classifyMaskElements(DenseElementsAttr dense, int64_t s,
                                             int64_t t) {
  auto type = cast<RankedTensorType>(dense.getType());
  if (type.getRank() < 2 || type.getShape().take_back(2) != ArrayRef{s, t})
    return std::nullopt;
  bool allZero = true, causal = true;
  int64_t i = 0;
  auto visit = [&](double x) {
    int64_t col = i % t, row = (i / t) % s;
    ++i;
    allZero &= x == 0;
    causal &= col > row ? x <= -1e4 : x == 0;
    return allZero || causal;
  };
  // f32 directly: converting each element through APFloat is slow for
  // long-sequence masks.
  if (dense.getElementType().isF32()) {
    for (float v : dense.getValues<float>())
      if (!visit(v))
        return std::nullopt;
  } else {
    for (APFloat v : dense.getValues<APFloat>())
      if (!visit(v.convertToDouble()))
        return std::nullopt;
  }
  return allZero ? MaskKind::None : MaskKind::Causal;
}

/// Every layer adds the same (uniqued) mask constant: scanning its s*t
/// elements once, not once per layer, is most of a long-sequence import.
class MaskClassifier {
public:
  std::optional<MaskKind> classify(Value mask, int64_t s, int64_t t) {
    DenseElementsAttr dense;
    if (!matchPattern(mask, m_Constant(&dense)) ||
        !isa<FloatType>(dense.getElementType()))
      return std::nullopt;
    auto [it, inserted] = cache.try_emplace({dense, s, t}, std::nullopt);
    if (inserted)
      it->second = classifyMaskElements(dense, s, t);
    return it->second;
  }

private:
  llvm::DenseMap<std::tuple<Attribute, int64_t, int64_t>,
                 std::optional<MaskKind>>
      cache;
};

struct RaiseAttention : OpRewritePattern<d::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(d::MatmulOp pv,
                                PatternRewriter &rewriter) const override {
    if (pv.getTransposeLhs() || pv.getTransposeRhs())
      return failure();
    auto softmax = pv.getLhs().getDefiningOp<d::SoftmaxOp>();
    Value v = pv.getRhs();
    auto vType = cast<RankedTensorType>(v.getType());
    if (!softmax || !softmax->hasOneUse() || vType.getRank() != 4 ||
        softmax.getAxis() != 3)
      return failure();

    Value scores = softmax.getInput();
    bool causal = false;
    auto scoreType = cast<RankedTensorType>(scores.getType());
    int64_t s = scoreType.getDimSize(2), t = scoreType.getDimSize(3);
    if (auto add = scores.getDefiningOp<d::AddOp>()) {
      if (!add->hasOneUse())
        return failure();
      std::optional<MaskKind> kind;
      for (int i : {0, 1}) {
        Value other = add->getOperand(1 - i);
        if (other.getType() != add.getType())
          continue;
        kind = masks.classify(add->getOperand(i), s, t);
        if (kind) {
          scores = other;
          break;
        }
      }
      if (!kind)
        return failure(); // e.g. a padding mask: not expressible
      causal = *kind == MaskKind::Causal;
    }
    double scale = 1.0;
    scores = stripScale(scores, scale, /*requireOneUse=*/true);
    auto qk = scores.getDefiningOp<d::MatmulOp>();
    if (!qk || !qk->hasOneUse() || qk.getTransposeLhs())
      return failure();
    Value q = stripScale(qk.getLhs(), scale, /*requireOneUse=*/false);
    Value kT = stripScale(qk.getRhs(), scale, /*requireOneUse=*/false);
    auto qType = cast<RankedTensorType>(q.getType());
    auto kType = cast<RankedTensorType>(kT.getType());
    if (qType.getRank() != 4 || kType.getRank() != 4)
      return failure();

    // Shapes as dtc.attention reads them; matmul's batch broadcasting must
    // not be doing anything attention would do differently.
    int64_t b = qType.getDimSize(0), h = qType.getDimSize(1),
            d = qType.getDimSize(3);
    int64_t g = kType.getDimSize(1);
    int64_t kd =
        qk.getTransposeRhs() ? kType.getDimSize(3) : kType.getDimSize(2);
    int64_t kt =
        qk.getTransposeRhs() ? kType.getDimSize(2) : kType.getDimSize(3);
    if (kType.getDimSize(0) != b || vType.getDimSize(0) != b || kd != d ||
        kt != t || qType.getDimSize(2) != s || vType.getDimSize(1) != g ||
        vType.getDimSize(2) != t || g == 0 || h % g != 0 ||
        (g != h && g != 1) ||
        pv.getType().getShape() != ArrayRef{b, h, s, vType.getDimSize(3)})
      return failure();

    Value key = kT;
    if (!qk.getTransposeRhs()) {
      if (auto flat = untransposeFlatKey(kT, rewriter)) {
        key = *flat;
      } else {
        // key = kT with the last two dims swapped, merged into kT's
        // transpose.
        SmallVector<int64_t> perm = {0, 1, 3, 2};
        if (auto inner = kT.getDefiningOp<d::TransposeOp>()) {
          ArrayRef<int64_t> p = inner.getPermutation();
          perm = {p[0], p[1], p[3], p[2]};
          key = inner.getInput();
        }
        key = d::TransposeOp::create(rewriter, kT.getLoc(), key, perm);
      }
    }
    rewriter.replaceOpWithNewOp<d::AttentionOp>(
        pv, pv.getType(), q, key, v, causal, rewriter.getF64FloatAttr(scale));
    return success();
  }

  // The rewrite driver is single-threaded over one function.
  mutable MaskClassifier masks;
};

} // namespace

void ::dtc::onnx::populateRaiseAttentionPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseAttention>(patterns.getContext());
}
