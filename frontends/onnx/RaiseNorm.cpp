//===- RaiseNorm.cpp - RMSNorm, LayerNorm, SiLU, GQA repeat_kv ------------===//
//
// Decompositions exporters write for ops dtc has:
//
//   RMSNorm (HF LLaMA):  x * rsqrt(mean(x^2) + eps) * w, with rsqrt as
//                        1 / sqrt(.) or reciprocal(sqrt(.)), or x / sqrt(.);
//                        x^2 as pow(x, 2) or x * x           -> dtc.rms_norm
//   LayerNorm (opset < 17): d = x - mean(x); d / sqrt(mean(d^2) + eps) * w
//                        [+ b]                                -> dtc.layer_norm
//   SiLU:                x * sigmoid(x)                       -> dtc.silu
//   GQA (HF repeat_kv):  reshape(expand(k[:, :, None], [b, g, r, t, d]),
//                        [b, g*r, t, d]) read by dtc.attention -> the
//                        attention reads k with g heads directly.
//
// All statistics are over the last dim (keep_dims), as the models write
// them.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/Raise.h"

#include "dialects/dtc/DtcOps.h"

using namespace mlir;
using ::dtc::onnx::getSplatFloat;
using ::dtc::onnx::isClose;
namespace d = mlir::dtc;

namespace {

bool isSplat(Value value, double expected) {
  auto c = getSplatFloat(value);
  return c && isClose(*c, expected);
}

/// `mean(sq)` over the last dim with keep_dims, where sq squares `x`:
/// returns x.
std::optional<Value> meanOfSquare(Value value) {
  auto mean = value.getDefiningOp<d::ReduceMeanOp>();
  if (!mean || !mean->hasOneUse() || !mean.getKeepDims())
    return std::nullopt;
  auto inType = cast<RankedTensorType>(mean.getInput().getType());
  if (mean.getDims().size() != 1 || mean.getDims()[0] != inType.getRank() - 1)
    return std::nullopt;
  Operation *sq = mean.getInput().getDefiningOp();
  if (!sq)
    return std::nullopt;
  if (auto pow = dyn_cast<d::PowOp>(sq);
      pow && isSplat(pow.getRhs(), 2.0) &&
      pow.getLhs().getType() == pow.getType())
    return pow.getLhs();
  if (auto mul = dyn_cast<d::MulOp>(sq); mul && mul.getLhs() == mul.getRhs())
    return mul.getLhs();
  return std::nullopt;
}

/// `stat + eps` (either order): returns stat and sets eps.
std::optional<Value> plusEpsilon(Value value, double &eps) {
  auto add = value.getDefiningOp<d::AddOp>();
  if (!add || !add->hasOneUse())
    return std::nullopt;
  for (int i : {0, 1})
    if (auto c = getSplatFloat(add->getOperand(1 - i));
        c && add->getOperand(i).getType() == add.getType()) {
      eps = *c;
      return add->getOperand(i);
    }
  return std::nullopt;
}

/// For `inv` = 1 / sqrt(v) (rsqrt, 1/sqrt, reciprocal(sqrt)): returns v.
std::optional<Value> inverseSqrtOf(Value inv) {
  Operation *op = inv.getDefiningOp();
  if (!op || !op->hasOneUse())
    return std::nullopt;
  if (auto rsqrt = dyn_cast<d::RsqrtOp>(op))
    return rsqrt.getInput();
  Value sqrtOf;
  if (auto div = dyn_cast<d::DivOp>(op); div && isSplat(div.getLhs(), 1.0))
    sqrtOf = div.getRhs();
  else if (auto rec = dyn_cast<d::ReciprocalOp>(op))
    sqrtOf = rec.getInput();
  else
    return std::nullopt;
  auto sqrt = sqrtOf.getDefiningOp<d::SqrtOp>();
  if (!sqrt || !sqrt->hasOneUse())
    return std::nullopt;
  return sqrt.getInput();
}

/// `x * inv_std(v)` (either order) or `x / sqrt(v)`: sets x, returns v.
std::optional<Value> normalizedBy(Value value, Value &x) {
  Operation *op = value.getDefiningOp();
  if (!op || !op->hasOneUse())
    return std::nullopt;
  if (auto mul = dyn_cast<d::MulOp>(op)) {
    for (int i : {0, 1})
      if (auto v = inverseSqrtOf(mul->getOperand(1 - i));
          v && mul->getOperand(i).getType() == mul.getType()) {
        x = mul->getOperand(i);
        return v;
      }
    return std::nullopt;
  }
  if (auto div = dyn_cast<d::DivOp>(op)) {
    auto sqrt = div.getRhs().getDefiningOp<d::SqrtOp>();
    if (!sqrt || !sqrt->hasOneUse() || div.getLhs().getType() != div.getType())
      return std::nullopt;
    x = div.getLhs();
    return sqrt.getInput();
  }
  return std::nullopt;
}

/// True if `w` is a per-feature vector for `x`'s last dim.
bool isFeatureVector(Value w, Value x) {
  auto wType = cast<RankedTensorType>(w.getType());
  auto xType = cast<RankedTensorType>(x.getType());
  return wType.getRank() == 1 && xType.getRank() >= 1 &&
         wType.getDimSize(0) == xType.getShape().back() &&
         wType.getElementType() == xType.getElementType();
}

/// `x * inv_rms(x) * w` (either order), w [D] -> rms_norm.
struct RaiseRmsNorm : OpRewritePattern<d::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(d::MulOp root,
                                PatternRewriter &rewriter) const override {
    for (int i : {0, 1}) {
      Value normed = root->getOperand(i), w = root->getOperand(1 - i);
      Value x;
      auto var = normalizedBy(normed, x);
      if (!var || !isFeatureVector(w, x) || root.getType() != x.getType())
        continue;
      double eps = 0;
      auto stat = plusEpsilon(*var, eps);
      if (!stat)
        continue;
      auto squared = meanOfSquare(*stat);
      if (!squared)
        continue;
      int64_t axis = cast<RankedTensorType>(x.getType()).getRank() - 1;
      // x - mean(x) in place of x: a decomposed LayerNorm (RaiseLayerNorm).
      if (auto sub = x.getDefiningOp<d::SubOp>())
        if (auto mean = sub.getRhs().getDefiningOp<d::ReduceMeanOp>();
            mean && mean.getInput() == sub.getLhs())
          continue;
      if (*squared != x)
        continue;
      rewriter.replaceOpWithNewOp<d::RmsNormOp>(root, root.getType(), x, w,
                                                axis, llvm::APFloat(eps));
      return success();
    }
    return failure();
  }
};

/// `d / sqrt(mean(d^2) + eps) * w [+ b]` with d = x - mean(x) -> layer_norm.
/// Rooted at the product; RaiseLayerNormBias adds the bias.
struct RaiseLayerNorm : OpRewritePattern<d::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(d::MulOp root,
                                PatternRewriter &rewriter) const override {
    for (int i : {0, 1}) {
      Value normed = root->getOperand(i), w = root->getOperand(1 - i);
      Operation *op = normed.getDefiningOp();
      if (!op || !op->hasOneUse())
        continue;
      // d is read twice (squared and divided): no single-use check on it.
      Value centered;
      std::optional<Value> var;
      if (auto div = dyn_cast<d::DivOp>(op)) {
        auto sqrt = div.getRhs().getDefiningOp<d::SqrtOp>();
        if (!sqrt || !sqrt->hasOneUse())
          continue;
        centered = div.getLhs();
        var = sqrt.getInput();
      } else if (auto mul = dyn_cast<d::MulOp>(op)) {
        for (int j : {0, 1})
          if (auto v = inverseSqrtOf(mul->getOperand(1 - j))) {
            centered = mul->getOperand(j);
            var = v;
            break;
          }
      }
      if (!var || !centered || centered.getType() != root.getType())
        continue;
      double eps = 0;
      auto stat = plusEpsilon(*var, eps);
      if (!stat)
        continue;
      auto squared = meanOfSquare(*stat);
      if (!squared || *squared != centered)
        continue;
      auto sub = centered.getDefiningOp<d::SubOp>();
      if (!sub)
        continue;
      Value x = sub.getLhs();
      auto mean = sub.getRhs().getDefiningOp<d::ReduceMeanOp>();
      int64_t axis = cast<RankedTensorType>(x.getType()).getRank() - 1;
      if (!mean || mean.getInput() != x || !mean.getKeepDims() ||
          mean.getDims().size() != 1 || mean.getDims()[0] != axis ||
          !isFeatureVector(w, x) || x.getType() != root.getType())
        continue;
      // The centered value has exactly its two readers in the pattern.
      Operation *square = cast<d::ReduceMeanOp>(stat->getDefiningOp())
                              .getInput()
                              .getDefiningOp();
      if (!llvm::all_of(centered.getUsers(), [&](Operation *user) {
            return user == op || user == square;
          }))
        continue;
      rewriter.replaceOpWithNewOp<d::LayerNormOp>(
          root, root.getType(), x, w, Value(), axis, llvm::APFloat(eps));
      return success();
    }
    return failure();
  }
};

/// `layer_norm(x, w) + b` (b [D]) -> layer_norm(x, w, b).
struct RaiseLayerNormBias : OpRewritePattern<d::AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(d::AddOp add,
                                PatternRewriter &rewriter) const override {
    for (int i : {0, 1}) {
      auto norm = add->getOperand(i).getDefiningOp<d::LayerNormOp>();
      Value b = add->getOperand(1 - i);
      if (!norm || !norm->hasOneUse() || norm.getBias() ||
          norm.getType() != add.getType() ||
          b.getType() != norm.getWeight().getType())
        continue;
      rewriter.replaceOpWithNewOp<d::LayerNormOp>(
          add, add.getType(), norm.getInput(), norm.getWeight(), b,
          norm.getAxis(), norm.getEpsilon());
      return success();
    }
    return failure();
  }
};

/// `x * sigmoid(x)` -> silu(x).
struct RaiseSilu : OpRewritePattern<d::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(d::MulOp mul,
                                PatternRewriter &rewriter) const override {
    for (int i : {0, 1}) {
      Value x = mul->getOperand(i);
      auto sig = mul->getOperand(1 - i).getDefiningOp<d::SigmoidOp>();
      if (!sig || sig.getInput() != x || !sig->hasOneUse() ||
          x.getType() != mul.getType())
        continue;
      rewriter.replaceOpWithNewOp<d::SiluOp>(mul, mul.getType(), x);
      return success();
    }
    return failure();
  }
};

/// HF repeat_kv after import: reshape(reshape(x [b,g,t,d]) [b,g,1,t,d] +
/// zeros [b,g,r,t,d]) [b,g*r,t,d]. Returns x.
std::optional<Value> unrepeat(Value value) {
  auto outer = value.getDefiningOp<d::ReshapeOp>();
  if (!outer)
    return std::nullopt;
  auto add = outer.getInput().getDefiningOp<d::AddOp>();
  if (!add)
    return std::nullopt;
  for (int i : {0, 1}) {
    if (!isSplat(add->getOperand(1 - i), 0.0))
      continue;
    auto inner = add->getOperand(i).getDefiningOp<d::ReshapeOp>();
    if (!inner)
      continue;
    Value x = inner.getInput();
    auto xType = cast<RankedTensorType>(x.getType());
    auto midType = cast<RankedTensorType>(inner.getType());
    auto repType = cast<RankedTensorType>(add.getType());
    auto outType = cast<RankedTensorType>(outer.getType());
    if (xType.getRank() != 4 || outType.getRank() != 4 ||
        midType.getRank() != 5)
      return std::nullopt;
    int64_t b = xType.getDimSize(0), g = xType.getDimSize(1),
            t = xType.getDimSize(2), dd = xType.getDimSize(3);
    int64_t r = repType.getDimSize(2);
    if (midType.getShape() != ArrayRef<int64_t>{b, g, 1, t, dd} ||
        repType.getShape() != ArrayRef<int64_t>{b, g, r, t, dd} ||
        outType.getShape() != ArrayRef<int64_t>{b, g * r, t, dd})
      return std::nullopt;
    return x;
  }
  return std::nullopt;
}

struct RaiseGroupedQueryAttention : OpRewritePattern<d::AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(d::AttentionOp op,
                                PatternRewriter &rewriter) const override {
    auto key = unrepeat(op.getKey());
    auto value = unrepeat(op.getValue());
    if (!key || !value ||
        cast<RankedTensorType>(key->getType()).getDimSize(1) !=
            cast<RankedTensorType>(value->getType()).getDimSize(1))
      return failure();
    rewriter.replaceOpWithNewOp<d::AttentionOp>(op, op.getType(), op.getQuery(),
                                                *key, *value, op.getCausal(),
                                                op.getScaleAttr());
    return success();
  }
};

} // namespace

void ::dtc::onnx::populateRaiseNormPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseRmsNorm, RaiseLayerNorm, RaiseLayerNormBias, RaiseSilu,
               RaiseGroupedQueryAttention>(patterns.getContext());
}
