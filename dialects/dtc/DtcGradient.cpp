//===- DtcGradient.cpp - Emission helpers of the gradient rules -----------===//
//
// Every emitted value has exactly the type of the operand it is the
// cotangent of: the helpers undo broadcasting and casts. All ops are built
// with their ODS builders, so their result types come from the shape rules.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcGradient.h"

#include "dialects/dtc/DtcOps.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::dtc;

static RankedTensorType tensorType(Value value) {
  return cast<RankedTensorType>(value.getType());
}

void GradientBuilder::setGrads(Operation *gradOp, ArrayRef<unsigned> operands) {
  for (auto [result, operand] : llvm::enumerate(operands))
    if (wants(operand))
      setGrad(operand, gradOp->getResult(result));
}

Value GradientBuilder::splat(RankedTensorType type, double value) {
  Type element = type.getElementType();
  Attribute attr;
  if (auto floatType = dyn_cast<FloatType>(element))
    attr = DenseElementsAttr::get(type,
                                  b.getFloatAttr(floatType, value).getValue());
  else
    attr = DenseElementsAttr::get(
        type,
        b.getIntegerAttr(element, static_cast<int64_t>(value)).getValue());
  return ConstantOp::create(b, loc, llvm::cast<ElementsAttr>(attr));
}

Value GradientBuilder::scalar(Value like, double value) {
  return splat(RankedTensorType::get({}, getElementTypeOrSelf(like.getType())),
               value);
}

Value GradientBuilder::add(Value lhs, Value rhs) {
  return AddOp::create(b, loc, lhs, rhs);
}
Value GradientBuilder::sub(Value lhs, Value rhs) {
  return SubOp::create(b, loc, lhs, rhs);
}
Value GradientBuilder::mul(Value lhs, Value rhs) {
  return MulOp::create(b, loc, lhs, rhs);
}
Value GradientBuilder::div(Value lhs, Value rhs) {
  return DivOp::create(b, loc, lhs, rhs);
}
Value GradientBuilder::neg(Value value) { return NegOp::create(b, loc, value); }
Value GradientBuilder::mulScalar(Value value, double factor) {
  return mul(value, scalar(value, factor));
}

Value GradientBuilder::compare(Value lhs, Value rhs, StringRef predicate) {
  return CompareOp::create(b, loc, lhs, rhs, predicate);
}

Value GradientBuilder::select(Value cond, Value onTrue, Value onFalse) {
  return SelectOp::create(b, loc, cond, onTrue, onFalse);
}

Value GradientBuilder::reshape(Value value, ArrayRef<int64_t> shape) {
  RankedTensorType type = tensorType(value);
  if (type.getShape() == shape)
    return value;
  return ReshapeOp::create(b, loc, type.clone(shape), value);
}

Value GradientBuilder::cast(Value value, Type elementType) {
  RankedTensorType type = tensorType(value);
  if (type.getElementType() == elementType)
    return value;
  return CastOp::create(b, loc, value, TypeAttr::get(elementType));
}

Value GradientBuilder::reduceSum(Value value, ArrayRef<int64_t> dims,
                                 bool keepDims) {
  return ReduceSumOp::create(b, loc, value, dims, keepDims);
}

Value GradientBuilder::sumToType(Value grad, Type target) {
  auto targetType = llvm::cast<RankedTensorType>(target);
  ArrayRef<int64_t> shape = tensorType(grad).getShape();
  ArrayRef<int64_t> targetShape = targetType.getShape();
  int64_t offset = shape.size() - targetShape.size();
  SmallVector<int64_t> dims;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i)
    if (i < offset || (targetShape[i - offset] == 1 && shape[i] != 1))
      dims.push_back(i);
  if (!dims.empty())
    grad = reduceSum(grad, dims, /*keepDims=*/false);
  grad = reshape(grad, targetShape);
  return cast(grad, targetType.getElementType());
}

Value GradientBuilder::broadcastTo(Value value, RankedTensorType target) {
  if (value.getType() == target)
    return value;
  return add(value, splat(target.clone(tensorType(value).getElementType()), 0));
}

void GradientBuilder::setBroadcastGrads(Value lhsGrad, Value rhsGrad) {
  if (wants(0) && lhsGrad)
    setGrad(0, sumToType(lhsGrad, op->getOperand(0).getType()));
  if (wants(1) && rhsGrad)
    setGrad(1, sumToType(rhsGrad, op->getOperand(1).getType()));
}
