//===- GradientRules.cpp - Vector-Jacobian products of the dtc ops --------===//
//
// One rule per op (or op family), registered in the table at the end. Rules
// read the forward op's operands and results (saved activations: nothing is
// recomputed here; dtc.attention_grad recomputes its probabilities inside
// the kernel) and emit the cotangents of the operands the autodiff wants.
// Every emitted value has exactly the type of the operand it is the
// cotangent of: rules undo broadcasting and casts themselves.
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/GradientRules.h"

#include "dialects/dtc/DtcOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <cmath>
#include <numeric>

namespace d = mlir::dtc;
using mlir::failure;
using mlir::LogicalResult;
using mlir::Operation;
using mlir::RankedTensorType;
using mlir::success;
using mlir::Type;
using mlir::Value;

namespace dtc::autodiff {

//===----------------------------------------------------------------------===//
// GradientEmitter helpers
//===----------------------------------------------------------------------===//

static RankedTensorType tensorType(Value value) {
  return mlir::cast<RankedTensorType>(value.getType());
}

/// Numpy broadcast of shapes that are known to broadcast (they come from
/// verified ops or from rules that only broadcast such shapes).
static llvm::SmallVector<int64_t> broadcastShape(llvm::ArrayRef<int64_t> a,
                                                 llvm::ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  llvm::SmallVector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    result[i] = x == 1 ? y : x;
  }
  return result;
}

Value GradientEmitter::splat(RankedTensorType type, double value) {
  Type element = type.getElementType();
  mlir::Attribute attr;
  if (auto floatType = mlir::dyn_cast<mlir::FloatType>(element))
    attr = mlir::DenseElementsAttr::get(
        type, b.getFloatAttr(floatType, value).getValue());
  else
    attr = mlir::DenseElementsAttr::get(
        type,
        b.getIntegerAttr(element, static_cast<int64_t>(value)).getValue());
  return d::ConstantOp::create(b, loc, mlir::cast<mlir::ElementsAttr>(attr));
}

Value GradientEmitter::scalar(Value like, double value) {
  return splat(RankedTensorType::get({}, getElementTypeOrSelf(like.getType())),
               value);
}

Value GradientEmitter::add(Value lhs, Value rhs) {
  return d::AddOp::create(b, loc, lhs, rhs);
}
Value GradientEmitter::sub(Value lhs, Value rhs) {
  return d::SubOp::create(b, loc, lhs, rhs);
}
Value GradientEmitter::mul(Value lhs, Value rhs) {
  return d::MulOp::create(b, loc, lhs, rhs);
}
Value GradientEmitter::div(Value lhs, Value rhs) {
  return d::DivOp::create(b, loc, lhs, rhs);
}
Value GradientEmitter::neg(Value value) {
  return d::NegOp::create(b, loc, value);
}
Value GradientEmitter::mulScalar(Value value, double factor) {
  return mul(value, scalar(value, factor));
}

Value GradientEmitter::compare(Value lhs, Value rhs,
                               llvm::StringRef predicate) {
  auto type = RankedTensorType::get(
      broadcastShape(tensorType(lhs).getShape(), tensorType(rhs).getShape()),
      b.getI1Type());
  return create("dtc.compare", {lhs, rhs}, {type},
                {attr("predicate", b.getStringAttr(predicate))})
      ->getResult(0);
}

Value GradientEmitter::select(Value cond, Value onTrue, Value onFalse) {
  llvm::SmallVector<int64_t> shape = broadcastShape(
      tensorType(cond).getShape(), tensorType(onTrue).getShape());
  shape = broadcastShape(shape, tensorType(onFalse).getShape());
  auto type = RankedTensorType::get(shape, tensorType(onTrue).getElementType());
  return create("dtc.select", {cond, onTrue, onFalse}, {type}, {})
      ->getResult(0);
}

Value GradientEmitter::reshape(Value value, llvm::ArrayRef<int64_t> shape) {
  RankedTensorType type = tensorType(value);
  if (type.getShape() == shape)
    return value;
  return d::ReshapeOp::create(b, loc, type.clone(shape), value);
}

Value GradientEmitter::cast(Value value, Type elementType) {
  RankedTensorType type = tensorType(value);
  if (type.getElementType() == elementType)
    return value;
  return d::CastOp::create(b, loc, value, mlir::TypeAttr::get(elementType));
}

Value GradientEmitter::reduceSum(Value value, llvm::ArrayRef<int64_t> dims,
                                 bool keepDims) {
  return d::ReduceSumOp::create(b, loc, value, dims, keepDims);
}

Value GradientEmitter::sumToType(Value grad, Type target) {
  auto targetType = mlir::cast<RankedTensorType>(target);
  llvm::ArrayRef<int64_t> shape = tensorType(grad).getShape();
  llvm::ArrayRef<int64_t> targetShape = targetType.getShape();
  int64_t offset = shape.size() - targetShape.size();
  llvm::SmallVector<int64_t> dims;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
    if (i < offset || (targetShape[i - offset] == 1 && shape[i] != 1))
      dims.push_back(i);
  if (!dims.empty())
    grad = reduceSum(grad, dims, /*keepDims=*/false);
  grad = reshape(grad, targetShape);
  return cast(grad, targetType.getElementType());
}

Value GradientEmitter::broadcastTo(Value value, RankedTensorType target) {
  if (value.getType() == target)
    return value;
  return add(value, splat(target.clone(tensorType(value).getElementType()), 0));
}

Operation *
GradientEmitter::create(llvm::StringRef name, mlir::ValueRange operands,
                        mlir::TypeRange resultTypes,
                        llvm::ArrayRef<mlir::NamedAttribute> attributes) {
  mlir::OperationState state(loc, name);
  state.addOperands(operands);
  state.addTypes(resultTypes);
  state.addAttributes(attributes);
  return b.create(state);
}

mlir::NamedAttribute GradientEmitter::attr(llvm::StringRef name,
                                           mlir::Attribute value) {
  return b.getNamedAttr(name, value);
}
mlir::NamedAttribute GradientEmitter::i64Attr(llvm::StringRef name,
                                              int64_t value) {
  return attr(name, b.getI64IntegerAttr(value));
}
mlir::NamedAttribute GradientEmitter::f64Attr(llvm::StringRef name,
                                              double value) {
  return attr(name, b.getF64FloatAttr(value));
}
mlir::NamedAttribute GradientEmitter::intsAttr(llvm::StringRef name,
                                               llvm::ArrayRef<int64_t> values) {
  return attr(name, b.getDenseI64ArrayAttr(values));
}
mlir::NamedAttribute GradientEmitter::unitAttr(llvm::StringRef name) {
  return attr(name, b.getUnitAttr());
}

//===----------------------------------------------------------------------===//
// Elementwise unary ops: dx = g * f'(x), f' in terms of x or y = f(x)
//===----------------------------------------------------------------------===//

namespace {

Value input(GradientEmitter &e, unsigned i = 0) { return e.op->getOperand(i); }
Value output(GradientEmitter &e, unsigned i = 0) { return e.op->getResult(i); }

LogicalResult negGrad(GradientEmitter &e) {
  e.setGrad(0, e.neg(e.grad()));
  return success();
}

// g * sign(x): 0 at x = 0, as PyTorch.
LogicalResult absGrad(GradientEmitter &e) {
  Value x = input(e), g = e.grad();
  Value zero = e.scalar(x, 0);
  Value isPositive = e.compare(x, zero, "gt");
  Value positive = e.select(isPositive, g, e.scalar(g, 0));
  Value isNegative = e.compare(x, zero, "lt");
  Value negated = e.neg(g);
  e.setGrad(0, e.select(isNegative, negated, positive));
  return success();
}

LogicalResult expGrad(GradientEmitter &e) {
  e.setGrad(0, e.mul(e.grad(), output(e)));
  return success();
}

LogicalResult logGrad(GradientEmitter &e) {
  e.setGrad(0, e.div(e.grad(), input(e)));
  return success();
}

// d sqrt(x) = 1 / (2 sqrt(x))
LogicalResult sqrtGrad(GradientEmitter &e) {
  e.setGrad(0, e.div(e.mulScalar(e.grad(), 0.5), output(e)));
  return success();
}

// d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3
LogicalResult rsqrtGrad(GradientEmitter &e) {
  Value y = output(e);
  Value cube = e.mul(e.mul(y, y), y);
  e.setGrad(0, e.mul(e.mulScalar(e.grad(), -0.5), cube));
  return success();
}

// d (1/x) = -1/x^2 = -y^2
LogicalResult reciprocalGrad(GradientEmitter &e) {
  Value y = output(e);
  e.setGrad(0, e.neg(e.mul(e.grad(), e.mul(y, y))));
  return success();
}

// d tanh = 1 - y^2
LogicalResult tanhGrad(GradientEmitter &e) {
  Value y = output(e);
  Value one = e.scalar(y, 1);
  Value slope = e.sub(one, e.mul(y, y));
  e.setGrad(0, e.mul(e.grad(), slope));
  return success();
}

// d erf = 2/sqrt(pi) e^(-x^2)
LogicalResult erfGrad(GradientEmitter &e) {
  Value x = input(e);
  Value gauss = d::ExpOp::create(e.b, e.loc, e.neg(e.mul(x, x)));
  e.setGrad(0, e.mul(e.mulScalar(e.grad(), 2.0 / std::sqrt(M_PI)), gauss));
  return success();
}

// d sigmoid = y (1 - y)
LogicalResult sigmoidGrad(GradientEmitter &e) {
  Value y = output(e);
  Value slope = e.mul(y, e.sub(e.scalar(y, 1), y));
  e.setGrad(0, e.mul(e.grad(), slope));
  return success();
}

// g where x > 0 (0 at x = 0, as PyTorch).
LogicalResult reluGrad(GradientEmitter &e) {
  Value x = input(e);
  Value positive = e.compare(x, e.scalar(x, 0), "gt");
  e.setGrad(0, e.select(positive, e.grad(), e.scalar(e.grad(), 0)));
  return success();
}

LogicalResult siluGrad(GradientEmitter &e) {
  Value x = input(e);
  e.setGrad(0, e.create("dtc.silu_grad", {x, e.grad()}, {x.getType()}, {})
                   ->getResult(0));
  return success();
}

LogicalResult geluGrad(GradientEmitter &e) {
  auto gelu = mlir::cast<d::GeluOp>(e.op);
  Value x = gelu.getInput();
  llvm::SmallVector<mlir::NamedAttribute> attrs;
  if (gelu.getApproximateTanh())
    attrs.push_back(e.unitAttr("approximate_tanh"));
  e.setGrad(0, e.create("dtc.gelu_grad", {x, e.grad()}, {x.getType()}, attrs)
                   ->getResult(0));
  return success();
}

// The cotangent converts back to the input's element type.
LogicalResult castGrad(GradientEmitter &e) {
  e.setGrad(0, e.cast(e.grad(), getElementTypeOrSelf(input(e).getType())));
  return success();
}

//===----------------------------------------------------------------------===//
// Binary ops with numpy broadcasting: each operand's cotangent is computed
// in the result's shape, then summed over the broadcast dims (sumToType)
//===----------------------------------------------------------------------===//

void setBinaryGrads(GradientEmitter &e, Value lhsGrad, Value rhsGrad) {
  if (e.wants(0) && lhsGrad)
    e.setGrad(0, e.sumToType(lhsGrad, input(e, 0).getType()));
  if (e.wants(1) && rhsGrad)
    e.setGrad(1, e.sumToType(rhsGrad, input(e, 1).getType()));
}

LogicalResult addGrad(GradientEmitter &e) {
  setBinaryGrads(e, e.grad(), e.grad());
  return success();
}

LogicalResult subGrad(GradientEmitter &e) {
  setBinaryGrads(e, e.grad(), e.wants(1) ? e.neg(e.grad()) : Value());
  return success();
}

LogicalResult mulGrad(GradientEmitter &e) {
  Value l = input(e, 0), r = input(e, 1), g = e.grad();
  Value lhsGrad = e.wants(0) ? e.mul(g, r) : Value();
  Value rhsGrad = e.wants(1) ? e.mul(g, l) : Value();
  setBinaryGrads(e, lhsGrad, rhsGrad);
  return success();
}

// d(l/r) = g/r, -g l/r^2 = -(g y)/r
LogicalResult divGrad(GradientEmitter &e) {
  Value r = input(e, 1), g = e.grad();
  Value lhsGrad = e.wants(0) ? e.div(g, r) : Value();
  Value rhsGrad = e.wants(1) ? e.neg(e.div(e.mul(g, output(e)), r)) : Value();
  setBinaryGrads(e, lhsGrad, rhsGrad);
  return success();
}

// The cotangent goes to the chosen operand: lhs on ties.
LogicalResult maxMinGrad(GradientEmitter &e, llvm::StringRef lhsWins,
                         llvm::StringRef rhsWins) {
  Value l = input(e, 0), r = input(e, 1), g = e.grad();
  Value zero = e.scalar(g, 0);
  Value lhsGrad, rhsGrad;
  if (e.wants(0))
    lhsGrad = e.select(e.compare(l, r, lhsWins), g, zero);
  if (e.wants(1))
    rhsGrad = e.select(e.compare(l, r, rhsWins), g, zero);
  setBinaryGrads(e, lhsGrad, rhsGrad);
  return success();
}
LogicalResult maxGrad(GradientEmitter &e) { return maxMinGrad(e, "ge", "lt"); }
LogicalResult minGrad(GradientEmitter &e) { return maxMinGrad(e, "le", "gt"); }

// d l^r = g r l^(r-1) and g y log(l)
LogicalResult powGrad(GradientEmitter &e) {
  Value l = input(e, 0), r = input(e, 1), g = e.grad();
  Value lhsGrad, rhsGrad;
  if (e.wants(0)) {
    Value power = d::PowOp::create(e.b, e.loc, l, e.sub(r, e.scalar(r, 1)));
    lhsGrad = e.mul(e.mul(g, power), r);
  }
  if (e.wants(1)) {
    // Created first so that the IR does not depend on the compiler's
    // argument evaluation order.
    Value log = d::LogOp::create(e.b, e.loc, l);
    rhsGrad = e.mul(e.mul(g, output(e)), log);
  }
  setBinaryGrads(e, lhsGrad, rhsGrad);
  return success();
}

// select(c, t, f): the cotangent goes to the chosen side.
LogicalResult selectGrad(GradientEmitter &e) {
  Value c = input(e, 0), g = e.grad();
  Value zero = e.scalar(g, 0);
  if (e.wants(1))
    e.setGrad(1, e.sumToType(e.select(c, g, zero), input(e, 1).getType()));
  if (e.wants(2))
    e.setGrad(2, e.sumToType(e.select(c, zero, g), input(e, 2).getType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Matmul: with A = op(lhs), B = op(rhs) (op: the transpose flags),
// dA = G B^T and dB = A^T G, expressed through the flags so no transpose
// is materialized; broadcast batch dims are summed.
//===----------------------------------------------------------------------===//

Value matmul(GradientEmitter &e, Value lhs, Value rhs, bool transposeLhs,
             bool transposeRhs) {
  return d::MatmulOp::create(e.b, e.loc, lhs, rhs, transposeLhs, transposeRhs);
}

/// Folds the batch dims of a rank > 2 tensor into its rows: [..., m, k] ->
/// [prod(...) * m, k].
Value foldBatchIntoRows(GradientEmitter &e, Value value) {
  llvm::ArrayRef<int64_t> shape = tensorType(value).getShape();
  int64_t rows = std::accumulate(shape.begin(), shape.end() - 1, int64_t{1},
                                 std::multiplies<int64_t>());
  return e.reshape(value, {rows, shape.back()});
}

LogicalResult matmulGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::MatmulOp>(e.op);
  Value lhs = op.getLhs(), rhs = op.getRhs(), g = e.grad();
  bool ta = op.getTransposeLhs(), tb = op.getTransposeRhs();
  int64_t lhsRank = op.getLhs().getType().getRank();
  int64_t rhsRank = op.getRhs().getType().getRank();

  if (e.wants(0)) {
    if (rhsRank == 2 && lhsRank > 2 && !ta) {
      // A Linear layer: the batch dims are rows of the one GEMM.
      Value flat = matmul(e, foldBatchIntoRows(e, g), rhs, false, !tb);
      e.setGrad(0, e.reshape(flat, op.getLhs().getType().getShape()));
    } else if (!ta) {
      e.setGrad(0, e.sumToType(matmul(e, g, rhs, false, !tb), lhs.getType()));
    } else {
      e.setGrad(0, e.sumToType(matmul(e, rhs, g, tb, true), lhs.getType()));
    }
  }
  if (e.wants(1)) {
    if (rhsRank == 2 && lhsRank > 2 && !ta) {
      // The weight gradient of a Linear layer: one GEMM over all rows
      // instead of a per-batch product summed afterwards.
      Value flatLhs = foldBatchIntoRows(e, lhs);
      Value flatGrad = foldBatchIntoRows(e, g);
      e.setGrad(1, tb ? matmul(e, flatGrad, flatLhs, true, false)
                      : matmul(e, flatLhs, flatGrad, true, false));
    } else if (!tb) {
      e.setGrad(1, e.sumToType(matmul(e, lhs, g, !ta, false), rhs.getType()));
    } else {
      e.setGrad(1, e.sumToType(matmul(e, g, lhs, true, ta), rhs.getType()));
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions: the cotangent is broadcast back over the reduced dims
//===----------------------------------------------------------------------===//

/// The reduction's result shape with the reduced dims kept as 1s.
llvm::SmallVector<int64_t> keptShape(RankedTensorType input,
                                     llvm::ArrayRef<int64_t> dims) {
  llvm::SmallVector<int64_t> shape(input.getShape());
  for (int64_t dim : dims)
    shape[dim] = 1;
  return shape;
}

template <typename ReduceOp>
LogicalResult reduceSumMeanGrad(GradientEmitter &e, bool mean) {
  auto op = mlir::cast<ReduceOp>(e.op);
  RankedTensorType inputType = op.getInput().getType();
  Value g = e.reshape(e.grad(), keptShape(inputType, op.getDims()));
  if (mean) {
    int64_t count = 1;
    for (int64_t dim : op.getDims())
      count *= inputType.getDimSize(dim);
    g = e.mulScalar(g, 1.0 / static_cast<double>(count));
  }
  e.setGrad(0, e.broadcastTo(g, inputType));
  return success();
}
LogicalResult reduceSumGrad(GradientEmitter &e) {
  return reduceSumMeanGrad<d::ReduceSumOp>(e, false);
}
LogicalResult reduceMeanGrad(GradientEmitter &e) {
  return reduceSumMeanGrad<d::ReduceMeanOp>(e, true);
}

// The cotangent is shared evenly by the maxima of each reduced group (as
// PyTorch's amax), so ties do not multiply it.
LogicalResult reduceMaxGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::ReduceMaxOp>(e.op);
  RankedTensorType inputType = op.getInput().getType();
  llvm::SmallVector<int64_t> kept = keptShape(inputType, op.getDims());
  Value x = op.getInput();
  Value isMax = e.compare(x, e.reshape(op.getOutput(), kept), "eq");
  Value g = e.reshape(e.grad(), kept);
  Value one = e.scalar(g, 1), zero = e.scalar(g, 0);
  Value ones = e.select(isMax, one, zero);
  Value count = e.reduceSum(ones, op.getDims(), /*keepDims=*/true);
  Value share = e.div(g, count);
  e.setGrad(0, e.select(isMax, share, zero));
  return success();
}

//===----------------------------------------------------------------------===//
// Normalizations, softmax, losses, attention: the dialect's gradient ops
//===----------------------------------------------------------------------===//

LogicalResult softmaxGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::SoftmaxOp>(e.op);
  e.setGrad(0, e.create("dtc.softmax_grad", {op.getOutput(), e.grad()},
                        {op.getInput().getType()},
                        {e.i64Attr("axis", op.getAxis())})
                   ->getResult(0));
  return success();
}

LogicalResult layerNormGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::LayerNormOp>(e.op);
  Type weightType = op.getWeight().getType();
  Operation *grad =
      e.create("dtc.layer_norm_grad", {op.getInput(), op.getWeight(), e.grad()},
               {op.getInput().getType(), weightType, weightType},
               {e.i64Attr("axis", op.getAxis()),
                e.f64Attr("epsilon", op.getEpsilon().convertToDouble())});
  for (unsigned i = 0; i < e.op->getNumOperands(); ++i)
    if (e.wants(i))
      e.setGrad(i, grad->getResult(i));
  return success();
}

LogicalResult rmsNormGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::RmsNormOp>(e.op);
  Operation *grad =
      e.create("dtc.rms_norm_grad", {op.getInput(), op.getWeight(), e.grad()},
               {op.getInput().getType(), op.getWeight().getType()},
               {e.i64Attr("axis", op.getAxis()),
                e.f64Attr("epsilon", op.getEpsilon().convertToDouble())});
  for (unsigned i = 0; i < 2; ++i)
    if (e.wants(i))
      e.setGrad(i, grad->getResult(i));
  return success();
}

LogicalResult attentionGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::AttentionOp>(e.op);
  llvm::SmallVector<mlir::NamedAttribute> attrs;
  if (op.getCausal())
    attrs.push_back(e.unitAttr("causal"));
  if (op.getScale())
    attrs.push_back(e.f64Attr("scale", op.getScale()->convertToDouble()));
  Operation *grad = e.create(
      "dtc.attention_grad",
      {op.getQuery(), op.getKey(), op.getValue(), e.grad()},
      {op.getQuery().getType(), op.getKey().getType(), op.getValue().getType()},
      attrs);
  for (unsigned i = 0; i < 3; ++i)
    if (e.wants(i))
      e.setGrad(i, grad->getResult(i));
  return success();
}

LogicalResult crossEntropyGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::CrossEntropyOp>(e.op);
  // The loss is f32; the logits' cotangent has the logits' type.
  e.setGrad(0, e.create("dtc.cross_entropy_grad",
                        {op.getLogits(), op.getLabels(), e.grad()},
                        {op.getLogits().getType()},
                        {e.i64Attr("ignore_index", op.getIgnoreIndex())})
                   ->getResult(0));
  return success();
}

LogicalResult embeddingGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::EmbeddingOp>(e.op);
  RankedTensorType table = op.getTable().getType();
  e.setGrad(0, e.create("dtc.embedding_grad", {e.grad(), op.getIds()}, {table},
                        {e.i64Attr("num_rows", table.getDimSize(0))})
                   ->getResult(0));
  return success();
}

//===----------------------------------------------------------------------===//
// Mixture of experts: route (gates, aux) -> logits, dispatch -> input,
// combine -> experts and gates. Slots are integers (no cotangent).
//===----------------------------------------------------------------------===//

LogicalResult moeRouteGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::MoeRouteOp>(e.op);
  // A result nothing reads back from the loss has a zero cotangent.
  Value gates = e.grad(0) ? e.grad(0) : e.splat(op.getGates().getType(), 0);
  Value aux = e.grad(2) ? e.grad(2) : e.splat(op.getAux().getType(), 0);
  llvm::SmallVector<mlir::NamedAttribute> attrs{
      e.i64Attr("top_k", op.getTopK()), e.i64Attr("capacity", op.getCapacity()),
      e.attr("score", op.getScoreAttr())};
  if (op.getNormalize())
    attrs.push_back(e.unitAttr("normalize"));
  e.setGrad(0, e.create("dtc.moe_route_grad", {op.getLogits(), gates, aux},
                        {op.getLogits().getType()}, attrs)
                   ->getResult(0));
  return success();
}

LogicalResult moeDispatchGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::MoeDispatchOp>(e.op);
  RankedTensorType input = op.getInput().getType();
  e.setGrad(0, e.create("dtc.moe_dispatch_grad", {e.grad(), op.getSlots()},
                        {input}, {e.i64Attr("seq_len", input.getDimSize(1))})
                   ->getResult(0));
  return success();
}

LogicalResult moeCombineGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::MoeCombineOp>(e.op);
  Operation *grad =
      e.create("dtc.moe_combine_grad",
               {op.getExperts(), op.getSlots(), op.getGates(), e.grad()},
               {op.getExperts().getType(), op.getGates().getType()}, {});
  if (e.wants(0))
    e.setGrad(0, grad->getResult(0));
  if (e.wants(2))
    e.setGrad(2, grad->getResult(1));
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

LogicalResult convGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::ConvOp>(e.op);
  Value g = e.grad();
  auto window = [&](llvm::StringRef shapeName, llvm::ArrayRef<int64_t> shape) {
    return llvm::SmallVector<mlir::NamedAttribute>{
        e.intsAttr(shapeName, shape), e.intsAttr("strides", op.getStrides()),
        e.intsAttr("dilations", op.getDilations()),
        e.intsAttr("pads", op.getPads()), e.i64Attr("groups", op.getGroups())};
  };
  RankedTensorType inputType = op.getInput().getType();
  RankedTensorType weightType = op.getWeight().getType();
  if (e.wants(0))
    e.setGrad(0,
              e.create("dtc.conv_grad_input", {g, op.getWeight()}, {inputType},
                       window("input_shape", inputType.getShape()))
                  ->getResult(0));
  if (e.wants(1))
    e.setGrad(1,
              e.create("dtc.conv_grad_weight", {op.getInput(), g}, {weightType},
                       window("weight_shape", weightType.getShape()))
                  ->getResult(0));
  if (op.getBias() && e.wants(2)) {
    // The bias is added at every batch element and output position.
    llvm::SmallVector<int64_t> dims = {0};
    for (int64_t i = 2; i < inputType.getRank(); ++i)
      dims.push_back(i);
    e.setGrad(2, e.reduceSum(g, dims, /*keepDims=*/false));
  }
  return success();
}

LogicalResult maxPoolGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::MaxPoolOp>(e.op);
  e.setGrad(0, e.create("dtc.max_pool_grad", {op.getInput(), e.grad()},
                        {op.getInput().getType()},
                        {e.intsAttr("kernel_shape", op.getKernelShape()),
                         e.intsAttr("strides", op.getStrides()),
                         e.intsAttr("dilations", op.getDilations()),
                         e.intsAttr("pads", op.getPads())})
                   ->getResult(0));
  return success();
}

LogicalResult avgPoolGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::AvgPoolOp>(e.op);
  RankedTensorType inputType = op.getInput().getType();
  llvm::SmallVector<mlir::NamedAttribute> attrs = {
      e.intsAttr("input_shape", inputType.getShape()),
      e.intsAttr("kernel_shape", op.getKernelShape()),
      e.intsAttr("strides", op.getStrides()),
      e.intsAttr("dilations", op.getDilations()),
      e.intsAttr("pads", op.getPads())};
  if (op.getCountIncludePad())
    attrs.push_back(e.unitAttr("count_include_pad"));
  e.setGrad(0, e.create("dtc.avg_pool_grad", {e.grad()}, {inputType}, attrs)
                   ->getResult(0));
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement: the inverse movement of the cotangent
//===----------------------------------------------------------------------===//

LogicalResult reshapeGrad(GradientEmitter &e) {
  e.setGrad(0, e.reshape(e.grad(), tensorType(input(e)).getShape()));
  return success();
}

LogicalResult transposeGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::TransposeOp>(e.op);
  llvm::ArrayRef<int64_t> permutation = op.getPermutation();
  llvm::SmallVector<int64_t> inverse(permutation.size());
  for (auto [i, p] : llvm::enumerate(permutation))
    inverse[p] = static_cast<int64_t>(i);
  e.setGrad(0, d::TransposeOp::create(e.b, e.loc, e.grad(), inverse));
  return success();
}

// Each input's cotangent is its slice of the result's.
LogicalResult concatGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::ConcatOp>(e.op);
  int64_t axis = op.getAxis(), offset = 0;
  llvm::ArrayRef<int64_t> shape = op.getOutput().getType().getShape();
  for (auto [i, operand] : llvm::enumerate(op.getInputs())) {
    int64_t size = tensorType(operand).getDimSize(axis);
    if (e.wants(i)) {
      llvm::SmallVector<int64_t> starts(shape.size(), 0), limits(shape);
      llvm::SmallVector<int64_t> strides(shape.size(), 1);
      starts[axis] = offset;
      limits[axis] = offset + size;
      e.setGrad(
          i, d::SliceOp::create(e.b, e.loc, e.grad(), starts, limits, strides));
    }
    offset += size;
  }
  return success();
}

LogicalResult sliceGrad(GradientEmitter &e) {
  auto op = mlir::cast<d::SliceOp>(e.op);
  RankedTensorType inputType = op.getInput().getType();
  e.setGrad(0, e.create("dtc.slice_grad", {e.grad()}, {inputType},
                        {e.intsAttr("input_shape", inputType.getShape()),
                         e.intsAttr("starts", op.getStarts()),
                         e.intsAttr("strides", op.getStrides())})
                   ->getResult(0));
  return success();
}

//===----------------------------------------------------------------------===//
// The table
//===----------------------------------------------------------------------===//

const llvm::DenseMap<llvm::StringRef, GradientRule> &ruleTable() {
  static const llvm::DenseMap<llvm::StringRef, GradientRule> table = [] {
    llvm::DenseMap<llvm::StringRef, GradientRule> t;
    auto add = [&](llvm::StringRef name, GradientRule rule) { t[name] = rule; };
    // Elementwise unary.
    add(d::NegOp::getOperationName(), negGrad);
    add(d::AbsOp::getOperationName(), absGrad);
    add(d::ExpOp::getOperationName(), expGrad);
    add(d::LogOp::getOperationName(), logGrad);
    add(d::SqrtOp::getOperationName(), sqrtGrad);
    add(d::RsqrtOp::getOperationName(), rsqrtGrad);
    add(d::ReciprocalOp::getOperationName(), reciprocalGrad);
    add(d::TanhOp::getOperationName(), tanhGrad);
    add(d::ErfOp::getOperationName(), erfGrad);
    add(d::SigmoidOp::getOperationName(), sigmoidGrad);
    add(d::ReluOp::getOperationName(), reluGrad);
    add(d::SiluOp::getOperationName(), siluGrad);
    add(d::GeluOp::getOperationName(), geluGrad);
    add(d::CastOp::getOperationName(), castGrad);
    // Elementwise binary (numpy broadcasting) and select.
    add(d::AddOp::getOperationName(), addGrad);
    add(d::SubOp::getOperationName(), subGrad);
    add(d::MulOp::getOperationName(), mulGrad);
    add(d::DivOp::getOperationName(), divGrad);
    add(d::MaxOp::getOperationName(), maxGrad);
    add(d::MinOp::getOperationName(), minGrad);
    add(d::PowOp::getOperationName(), powGrad);
    add("dtc.select", selectGrad);
    // Contractions and reductions.
    add(d::MatmulOp::getOperationName(), matmulGrad);
    add(d::ReduceSumOp::getOperationName(), reduceSumGrad);
    add(d::ReduceMeanOp::getOperationName(), reduceMeanGrad);
    add(d::ReduceMaxOp::getOperationName(), reduceMaxGrad);
    // Normalizations, transformer ops, losses.
    add(d::SoftmaxOp::getOperationName(), softmaxGrad);
    add(d::LayerNormOp::getOperationName(), layerNormGrad);
    add(d::RmsNormOp::getOperationName(), rmsNormGrad);
    add(d::AttentionOp::getOperationName(), attentionGrad);
    add(d::CrossEntropyOp::getOperationName(), crossEntropyGrad);
    add(d::EmbeddingOp::getOperationName(), embeddingGrad);
    add(d::MoeRouteOp::getOperationName(), moeRouteGrad);
    add(d::MoeDispatchOp::getOperationName(), moeDispatchGrad);
    add(d::MoeCombineOp::getOperationName(), moeCombineGrad);
    // Convolution and pooling.
    add(d::ConvOp::getOperationName(), convGrad);
    add(d::MaxPoolOp::getOperationName(), maxPoolGrad);
    add(d::AvgPoolOp::getOperationName(), avgPoolGrad);
    // Data movement.
    add(d::ReshapeOp::getOperationName(), reshapeGrad);
    add(d::TransposeOp::getOperationName(), transposeGrad);
    add(d::ConcatOp::getOperationName(), concatGrad);
    add(d::SliceOp::getOperationName(), sliceGrad);
    return t;
  }();
  return table;
}

} // namespace

GradientRule lookupGradientRule(Operation *op) {
  return ruleTable().lookup(op->getName().getStringRef());
}

llvm::SmallVector<llvm::StringRef> opsWithGradientRules() {
  llvm::SmallVector<llvm::StringRef> names;
  for (const auto &entry : ruleTable())
    names.push_back(entry.first);
  llvm::sort(names);
  return names;
}

} // namespace dtc::autodiff
