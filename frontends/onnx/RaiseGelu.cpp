//===- RaiseGelu.cpp - GELU expansions -> dtc.gelu ------------------------===//
//
// PyTorch exports nn.GELU() as `x * 0.5 * (1 + erf(x / sqrt(2)))` and
// GPT-2's tanh GELU as `0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 *
// x^3)))`, with the products in whatever order the model wrote them. The
// root is a product: flatten it into its factors, fold the constant ones, and
// expect exactly `x` and `1 + erf(...)` / `1 + tanh(...)` besides 0.5.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/Raise.h"

#include "dialects/dtc/DtcOps.h"

#include <cmath>

using namespace mlir;
using ::dtc::onnx::getSplatFloat;
using ::dtc::onnx::isClose;
namespace d = mlir::dtc;

namespace {

/// Collects the factors of a product, looking through single-use inner
/// multiplications (the root may have any number of uses).
void collectFactors(Value value, bool isRoot, SmallVectorImpl<Value> &factors) {
  auto mul = value.getDefiningOp<d::MulOp>();
  if (mul && (isRoot || mul->hasOneUse())) {
    collectFactors(mul.getLhs(), false, factors);
    collectFactors(mul.getRhs(), false, factors);
    return;
  }
  factors.push_back(value);
}

/// For a binary op with a splat constant operand: the other operand and the
/// constant.
template <typename OpTy>
std::optional<std::pair<Value, double>> withConstant(Value value,
                                                     bool commutative) {
  auto op = value.getDefiningOp<OpTy>();
  if (!op || !op->hasOneUse())
    return std::nullopt;
  if (auto c = getSplatFloat(op.getRhs()))
    return std::make_pair(op.getLhs(), *c);
  if (commutative)
    if (auto c = getSplatFloat(op.getLhs()))
      return std::make_pair(op.getRhs(), *c);
  return std::nullopt;
}

/// `1 + f(inner)` for the unary op F: returns `inner`.
template <typename F> std::optional<Value> onePlus(Value value) {
  auto sum = withConstant<d::AddOp>(value, /*commutative=*/true);
  if (!sum || sum->second != 1.0)
    return std::nullopt;
  auto f = sum->first.getDefiningOp<F>();
  if (!f || !f->hasOneUse())
    return std::nullopt;
  return f.getInput();
}

/// `x / sqrt(2)` or `x * (1/sqrt(2))`.
bool isErfArgument(Value value, Value x) {
  if (auto div = withConstant<d::DivOp>(value, false))
    return div->first == x && isClose(div->second, std::sqrt(2.0));
  if (auto mul = withConstant<d::MulOp>(value, true))
    return mul->first == x && isClose(mul->second, 1.0 / std::sqrt(2.0));
  return false;
}

/// `x^3` as pow(x, 3), x * x * x in any grouping.
bool isCube(Value value, Value x) {
  if (auto pow = value.getDefiningOp<d::PowOp>())
    return pow->hasOneUse() && pow.getLhs() == x &&
           getSplatFloat(pow.getRhs()) == 3.0;
  SmallVector<Value> factors;
  auto mul = value.getDefiningOp<d::MulOp>();
  if (!mul || !mul->hasOneUse())
    return false;
  collectFactors(value, true, factors);
  return factors.size() == 3 &&
         llvm::all_of(factors, [&](Value f) { return f == x; });
}

/// `sqrt(2/pi) * (x + 0.044715 * x^3)`.
bool isTanhArgument(Value value, Value x) {
  auto scaled = withConstant<d::MulOp>(value, true);
  if (!scaled || !isClose(scaled->second, std::sqrt(2.0 / M_PI), 1e-4))
    return false;
  auto sum = scaled->first.getDefiningOp<d::AddOp>();
  if (!sum || !sum->hasOneUse())
    return false;
  for (auto [a, b] : {std::pair(sum.getLhs(), sum.getRhs()),
                      std::pair(sum.getRhs(), sum.getLhs())}) {
    if (a != x)
      continue;
    auto cubic = withConstant<d::MulOp>(b, true);
    if (cubic && isClose(cubic->second, 0.044715, 1e-4) &&
        isCube(cubic->first, x))
      return true;
  }
  return false;
}

struct RaiseGelu : OpRewritePattern<d::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(d::MulOp root,
                                PatternRewriter &rewriter) const override {
    SmallVector<Value> factors, others;
    collectFactors(root.getResult(), /*isRoot=*/true, factors);
    double scale = 1.0;
    for (Value f : factors) {
      if (auto c = getSplatFloat(f))
        scale *= *c;
      else
        others.push_back(f);
    }
    if (others.size() != 2 || !isClose(scale, 0.5))
      return failure();
    for (auto [x, term] :
         {std::pair(others[0], others[1]), std::pair(others[1], others[0])}) {
      if (x.getType() != root.getType())
        continue;
      bool tanh = false;
      if (auto arg = onePlus<d::ErfOp>(term); arg && isErfArgument(*arg, x))
        tanh = false;
      else if (auto arg = onePlus<d::TanhOp>(term);
               arg && isTanhArgument(*arg, x))
        tanh = true;
      else
        continue;
      rewriter.replaceOpWithNewOp<d::GeluOp>(root, root.getType(), x, tanh);
      return success();
    }
    return failure();
  }
};

} // namespace

void ::dtc::onnx::populateRaiseGeluPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseGelu>(patterns.getContext());
}
