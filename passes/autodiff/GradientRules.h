//===- GradientRules.h - The table of per-op gradient rules -----*- C++ -*-===//
//
// Internal to the autodiff: a gradient rule receives the cotangents of an
// op's results and emits the ops computing the cotangents of the operands
// the autodiff asks for (vector-Jacobian products, like PyTorch's
// derivatives.yaml entries or JAX's defvjp). Rules are composed of dtc ops;
// where composition would be slow or unstable, of the dialect's gradient ops
// (dtc.softmax_grad, dtc.attention_grad, ...).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_AUTODIFF_GRADIENTRULES_H
#define DTC_PASSES_AUTODIFF_GRADIENTRULES_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"

namespace dtc::autodiff {

/// What a rule sees (the forward op, its results' cotangents, which operand
/// cotangents are wanted) and the helpers it emits with. Emitted ops carry the
/// forward op's location.
class GradientEmitter {
public:
  GradientEmitter(mlir::OpBuilder &builder, mlir::Operation *op,
                  llvm::ArrayRef<mlir::Value> resultGrads,
                  llvm::ArrayRef<bool> wanted)
      : b(builder), op(op), loc(op->getLoc()), resultGrads(resultGrads),
        wanted(wanted), operandGrads(op->getNumOperands()) {}

  mlir::OpBuilder &b;
  mlir::Operation *op;
  mlir::Location loc;

  /// The cotangent of result `i`; null when nothing downstream reaches the
  /// loss through it (rules of multi-result ops must allow that).
  mlir::Value grad(unsigned i = 0) const { return resultGrads[i]; }
  /// Whether the autodiff needs the cotangent of operand `i` (it is a float
  /// value that depends on a differentiated input).
  bool wants(unsigned i) const { return wanted[i]; }
  /// Sets the cotangent of operand `i`; it must have the operand's type.
  void setGrad(unsigned i, mlir::Value grad) { operandGrads[i] = grad; }
  llvm::ArrayRef<mlir::Value> getOperandGrads() const { return operandGrads; }

  //===--------------------------------------------------------------------===//
  // Emission helpers
  //===--------------------------------------------------------------------===//

  /// A 0-d constant with `like`'s element type (broadcasts in binary ops).
  mlir::Value scalar(mlir::Value like, double value);
  /// A splat constant of `type`.
  mlir::Value splat(mlir::RankedTensorType type, double value);

  mlir::Value add(mlir::Value lhs, mlir::Value rhs);
  mlir::Value sub(mlir::Value lhs, mlir::Value rhs);
  mlir::Value mul(mlir::Value lhs, mlir::Value rhs);
  mlir::Value div(mlir::Value lhs, mlir::Value rhs);
  mlir::Value neg(mlir::Value value);
  mlir::Value mulScalar(mlir::Value value, double factor);
  /// `dtc.compare` (i1 result with the broadcast shape).
  mlir::Value compare(mlir::Value lhs, mlir::Value rhs,
                      llvm::StringRef predicate);
  /// `dtc.select` (broadcast shape, the element type of `onTrue`).
  mlir::Value select(mlir::Value cond, mlir::Value onTrue, mlir::Value onFalse);
  mlir::Value reshape(mlir::Value value, llvm::ArrayRef<int64_t> shape);
  mlir::Value cast(mlir::Value value, mlir::Type elementType);
  mlir::Value reduceSum(mlir::Value value, llvm::ArrayRef<int64_t> dims,
                        bool keepDims);

  /// Undoes numpy broadcasting: sums `grad` (of a broadcast shape) over the
  /// dims that broadcasting added or stretched, reshapes to `target`'s
  /// shape and casts to its element type.
  mlir::Value sumToType(mlir::Value grad, mlir::Type target);
  /// Broadcasts `value` (whose shape broadcasts to `target`'s) to `target`:
  /// `value + zeros`, the importer's idiom for Expand.
  mlir::Value broadcastTo(mlir::Value value, mlir::RankedTensorType target);

  /// Creates the op `name` generically (operands, attributes, result types
  /// given). Used for the dialect's gradient ops, whose results the rule
  /// knows (they have the forward operands' types).
  mlir::Operation *create(llvm::StringRef name, mlir::ValueRange operands,
                          mlir::TypeRange resultTypes,
                          llvm::ArrayRef<mlir::NamedAttribute> attributes);
  mlir::NamedAttribute attr(llvm::StringRef name, mlir::Attribute value);
  mlir::NamedAttribute i64Attr(llvm::StringRef name, int64_t value);
  mlir::NamedAttribute f64Attr(llvm::StringRef name, double value);
  mlir::NamedAttribute intsAttr(llvm::StringRef name,
                                llvm::ArrayRef<int64_t> values);
  mlir::NamedAttribute unitAttr(llvm::StringRef name);

private:
  llvm::ArrayRef<mlir::Value> resultGrads;
  llvm::ArrayRef<bool> wanted;
  llvm::SmallVector<mlir::Value> operandGrads;
};

/// A rule: emits the wanted operand cotangents through `emitter.setGrad`.
/// Failure (after an error at the op) for attributes it cannot handle.
using GradientRule = mlir::LogicalResult (*)(GradientEmitter &emitter);

/// The rule for `op`'s kind, or null if it has none.
GradientRule lookupGradientRule(mlir::Operation *op);

/// The op names with a rule (for docs and tests).
llvm::SmallVector<llvm::StringRef> opsWithGradientRules();

} // namespace dtc::autodiff

#endif // DTC_PASSES_AUTODIFF_GRADIENTRULES_H
