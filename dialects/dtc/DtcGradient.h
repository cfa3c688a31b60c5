//===- DtcGradient.h - What an op's gradient rule builds with ---*- C++ -*-===//
//
// Every differentiable dtc op implements DifferentiableOpInterface's
// buildGradient next to its shape and sharding rules (DtcOps.cpp,
// DtcMoeOps.cpp): it receives the cotangents of the op's results and emits
// the cotangents of the operands the autodiff asks for (vector-Jacobian
// products, like PyTorch's derivatives.yaml entries or JAX's defvjp). Rules
// are composed of dtc ops, built with their ODS builders; where composition
// would be slow or unstable, of the dialect's gradient ops (dtc.*_grad).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_DIALECTS_DTC_DTCGRADIENT_H
#define DTC_DIALECTS_DTC_DTCGRADIENT_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

namespace mlir::dtc {

/// What a rule sees (the forward op, its results' cotangents, which operand
/// cotangents are wanted) and the helpers it emits with. Emitted ops carry
/// the forward op's location.
class GradientBuilder {
public:
  GradientBuilder(OpBuilder &builder, Operation *op,
                  ArrayRef<Value> resultGrads, ArrayRef<bool> wanted)
      : b(builder), loc(op->getLoc()), op(op), resultGrads(resultGrads),
        wanted(wanted), operandGrads(op->getNumOperands()) {}

  OpBuilder &b;
  Location loc;

  /// The cotangent of result `i`; null when nothing downstream reaches the
  /// loss through it (rules of multi-result ops must allow that).
  Value grad(unsigned i = 0) const { return resultGrads[i]; }
  /// Whether the autodiff needs the cotangent of operand `i` (it is a float
  /// value that depends on a differentiated input).
  bool wants(unsigned i) const { return wanted[i]; }
  /// Sets the cotangent of operand `i`; it must have the operand's type.
  void setGrad(unsigned i, Value grad) { operandGrads[i] = grad; }
  /// Sets the wanted operand cotangents from the results of `gradOp`, whose
  /// result `i` is the cotangent of operand `operands[i]`.
  void setGrads(Operation *gradOp, ArrayRef<unsigned> operands);
  ArrayRef<Value> getOperandGrads() const { return operandGrads; }

  //===--------------------------------------------------------------------===//
  // Emission helpers
  //===--------------------------------------------------------------------===//

  /// A 0-d constant with `like`'s element type (broadcasts in binary ops).
  Value scalar(Value like, double value);
  /// A splat constant of `type`.
  Value splat(RankedTensorType type, double value);

  Value add(Value lhs, Value rhs);
  Value sub(Value lhs, Value rhs);
  Value mul(Value lhs, Value rhs);
  Value div(Value lhs, Value rhs);
  Value neg(Value value);
  Value mulScalar(Value value, double factor);
  /// `dtc.compare` (i1 result with the broadcast shape).
  Value compare(Value lhs, Value rhs, StringRef predicate);
  /// `dtc.select` (broadcast shape, the element type of `onTrue`).
  Value select(Value cond, Value onTrue, Value onFalse);
  Value reshape(Value value, ArrayRef<int64_t> shape);
  Value cast(Value value, Type elementType);
  Value reduceSum(Value value, ArrayRef<int64_t> dims, bool keepDims);

  /// Undoes numpy broadcasting: sums `grad` (of a broadcast shape) over the
  /// dims that broadcasting added or stretched, reshapes to `target`'s
  /// shape and casts to its element type.
  Value sumToType(Value grad, Type target);
  /// Broadcasts `value` (whose shape broadcasts to `target`'s) to `target`:
  /// `value + zeros`, the importer's idiom for Expand.
  Value broadcastTo(Value value, RankedTensorType target);
  /// For binary ops with numpy broadcasting: sets each wanted operand's
  /// cotangent from one computed in the result's shape (null: none).
  void setBroadcastGrads(Value lhsGrad, Value rhsGrad);

private:
  Operation *op;
  ArrayRef<Value> resultGrads;
  ArrayRef<bool> wanted;
  SmallVector<Value> operandGrads;
};

} // namespace mlir::dtc

#endif // DTC_DIALECTS_DTC_DTCGRADIENT_H
