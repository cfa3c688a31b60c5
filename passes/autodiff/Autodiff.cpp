//===- Autodiff.cpp - Reverse-mode autodiff over one function body --------===//
//
// buildGradientFunction copies the forward function, finds the values on a
// path from a differentiated input (a float dtc.parameter, or a float
// argument when asked) to the loss, walks the ops backwards from the loss
// accumulating one cotangent per value (summed with dtc.add where a value
// has several uses), and lets each op's gradient rule (its
// DifferentiableOpInterface, defined beside the op in dialects/dtc) emit the
// cotangents of its operands after the forward ops.
//
//===----------------------------------------------------------------------===//

#include "passes/autodiff/Autodiff.h"

#include "dialects/dtc/DtcGradient.h"
#include "dialects/dtc/DtcOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"

namespace d = mlir::dtc;
using mlir::failure;
using mlir::Operation;
using mlir::RankedTensorType;
using mlir::Type;
using mlir::Value;

namespace dtc {
namespace {

bool isFloatTensor(Value value) {
  return mlir::isa<mlir::FloatType>(getElementTypeOrSelf(value.getType()));
}

Value splat(mlir::OpBuilder &b, mlir::Location loc, Type type, double value) {
  auto tensorType = mlir::cast<RankedTensorType>(type);
  auto floatType = mlir::cast<mlir::FloatType>(tensorType.getElementType());
  auto attr = mlir::DenseElementsAttr::get(
      tensorType, b.getFloatAttr(floatType, value).getValue());
  return d::ConstantOp::create(b, loc, mlir::cast<mlir::ElementsAttr>(attr));
}

/// The state of one reverse sweep over a copy of the forward function.
class ReverseSweep {
public:
  ReverseSweep(mlir::func::FuncOp func, const GradientOptions &options)
      : func(func), options(options) {}

  /// Marks the values between the differentiated inputs and `loss`.
  void analyze(Value loss);
  /// Emits the backward ops before the return; failure after an error.
  mlir::LogicalResult run(Value loss);
  /// The accumulated cotangent of `value`, or null (a zero cotangent).
  Value cotangent(Value value) const { return cotangents.lookup(value); }
  /// The float parameters, grouped by name in order of first appearance.
  const llvm::MapVector<llvm::StringRef, llvm::SmallVector<d::ParameterOp>> &
  parameters() const {
    return parametersByName;
  }

private:
  bool active(Value value) const {
    return varied.contains(value) && useful.contains(value);
  }
  void accumulate(mlir::OpBuilder &b, mlir::Location loc, Value value,
                  Value grad);

  mlir::func::FuncOp func;
  const GradientOptions &options;
  /// Float values that depend on a differentiated input.
  llvm::DenseSet<Value> varied;
  /// Values the loss depends on.
  llvm::DenseSet<Value> useful;
  llvm::DenseMap<Value, Value> cotangents;
  llvm::MapVector<llvm::StringRef, llvm::SmallVector<d::ParameterOp>>
      parametersByName;
};

void ReverseSweep::analyze(Value loss) {
  mlir::Block &body = func.getBody().front();
  if (options.wrtArguments)
    for (Value arg : body.getArguments())
      if (isFloatTensor(arg))
        varied.insert(arg);
  for (Operation &op : body.without_terminator()) {
    if (auto parameter = mlir::dyn_cast<d::ParameterOp>(op)) {
      // A frozen tensor (a buffer) is read, never differentiated.
      if (isFloatTensor(parameter) && !parameter.getFrozen()) {
        varied.insert(parameter);
        parametersByName[parameter.getName()].push_back(parameter);
      }
      continue;
    }
    if (llvm::any_of(op.getOperands(),
                     [&](Value v) { return varied.contains(v); }))
      for (Value result : op.getResults())
        if (isFloatTensor(result))
          varied.insert(result);
  }
  useful.insert(loss);
  for (Operation &op : llvm::reverse(body.without_terminator()))
    if (llvm::any_of(op.getResults(),
                     [&](Value v) { return useful.contains(v); }))
      useful.insert(op.operand_begin(), op.operand_end());
}

void ReverseSweep::accumulate(mlir::OpBuilder &b, mlir::Location loc,
                              Value value, Value grad) {
  Value &slot = cotangents[value];
  slot = slot ? Value(d::AddOp::create(b, loc, slot, grad)) : grad;
}

mlir::LogicalResult ReverseSweep::run(Value loss) {
  mlir::Block &body = func.getBody().front();
  Operation *terminator = body.getTerminator();
  mlir::OpBuilder b(terminator);
  if (!active(loss))
    return mlir::success(); // Every gradient is zero.
  cotangents[loss] = splat(b, loss.getLoc(), loss.getType(), 1.0);

  // The forward ops, fixed before backward ops are inserted after them.
  llvm::SmallVector<Operation *> forwardOps;
  for (Operation &op : body.without_terminator())
    forwardOps.push_back(&op);
  for (Operation *op : llvm::reverse(forwardOps)) {
    if (mlir::isa<d::ParameterOp>(op))
      continue;
    llvm::SmallVector<Value> resultGrads;
    for (Value result : op->getResults())
      resultGrads.push_back(cotangents.lookup(result));
    if (llvm::all_of(resultGrads, [](Value v) { return !v; }))
      continue;
    llvm::SmallVector<bool> wanted;
    for (Value operand : op->getOperands())
      wanted.push_back(active(operand));
    if (llvm::none_of(wanted, [](bool w) { return w; }))
      continue;

    auto differentiable = mlir::dyn_cast<d::DifferentiableOpInterface>(op);
    if (!differentiable)
      return op->emitError() << op->getName() << " has no gradient rule";
    b.setInsertionPoint(terminator);
    d::GradientBuilder rule(b, op, resultGrads, wanted);
    if (failed(differentiable.buildGradient(rule)))
      return failure();
    for (auto [i, grad] : llvm::enumerate(rule.getOperandGrads())) {
      if (!grad || !wanted[i])
        continue;
      Value operand = op->getOperand(i);
      // A rule's bug, reported rather than left to the verifier far away.
      if (grad.getType() != operand.getType())
        return op->emitError()
               << "gradient rule of " << op->getName() << " produced "
               << grad.getType() << " for operand " << i << " of type "
               << operand.getType();
      accumulate(b, op->getLoc(), operand, grad);
    }
  }
  return mlir::success();
}

} // namespace

mlir::FailureOr<mlir::func::FuncOp>
buildGradientFunction(mlir::func::FuncOp forward, unsigned lossIndex,
                      llvm::StringRef name, const GradientOptions &options) {
  if (!forward->getBlock())
    return forward.emitError("autodiff needs a function inside a module");
  if (forward.isExternal() || !forward.getBody().hasOneBlock())
    return forward.emitError("autodiff needs a function with one block");
  auto forwardReturn =
      mlir::dyn_cast<mlir::func::ReturnOp>(forward.getBody().front().back());
  if (!forwardReturn)
    return forward.emitError("autodiff needs a function ending in return");
  if (lossIndex >= forward.getNumResults())
    return forward.emitError("loss index ")
           << lossIndex << " is out of range: the function has "
           << forward.getNumResults() << " results";
  auto lossType =
      mlir::dyn_cast<RankedTensorType>(forward.getResultTypes()[lossIndex]);
  if (!lossType || lossType.getRank() != 0 ||
      !mlir::isa<mlir::FloatType>(lossType.getElementType()))
    return forward.emitError("loss (result ")
           << lossIndex << ") must be a 0-d float tensor, got "
           << forward.getResultTypes()[lossIndex];
  Operation *symbolTableOp =
      forward->getParentWithTrait<mlir::OpTrait::SymbolTable>();
  if (symbolTableOp &&
      mlir::SymbolTable::lookupSymbolIn(
          symbolTableOp, mlir::StringAttr::get(forward.getContext(), name)))
    return forward.emitError("cannot create gradient function '")
           << name << "': the name is taken";

  auto grad = mlir::cast<mlir::func::FuncOp>(forward->clone());
  grad.setSymName(name);
  forward->getBlock()->getOperations().insertAfter(forward->getIterator(),
                                                   grad);

  mlir::Block &body = grad.getBody().front();
  auto terminator = mlir::cast<mlir::func::ReturnOp>(body.getTerminator());
  Value loss = terminator.getOperand(lossIndex);
  ReverseSweep sweep(grad, options);
  sweep.analyze(loss);
  if (failed(sweep.run(loss))) {
    grad.erase();
    return failure();
  }

  // Results: the forward ones, then one gradient per parameter name, then
  // one per float argument.
  mlir::MLIRContext *ctx = forward.getContext();
  mlir::OpBuilder b(terminator);
  llvm::SmallVector<Value> results(terminator.getOperands());
  llvm::SmallVector<mlir::Attribute> resultAttrs;
  for (unsigned i = 0; i < forward.getNumResults(); ++i) {
    mlir::DictionaryAttr attrs = forward.getResultAttrDict(i);
    resultAttrs.push_back(attrs ? attrs : mlir::DictionaryAttr::get(ctx));
  }
  auto addResult = [&](Value grad, mlir::NamedAttribute attr) {
    results.push_back(grad);
    resultAttrs.push_back(mlir::DictionaryAttr::get(ctx, {attr}));
  };
  for (const auto &[paramName, reads] : sweep.parameters()) {
    d::ParameterOp first = reads.front();
    Type type = first.getType();
    Value sum;
    for (d::ParameterOp read : reads) {
      if (read.getType() != type) {
        read.emitError("parameter '") << paramName << "' is read as both "
                                      << type << " and " << read.getType();
        grad.erase();
        return failure();
      }
      if (Value g = sweep.cotangent(read))
        sum = sum ? Value(d::AddOp::create(b, read.getLoc(), sum, g)) : g;
    }
    if (!sum)
      sum = splat(b, first.getLoc(), type, 0.0);
    addResult(sum, b.getNamedAttr(kGradOfAttrName, b.getStringAttr(paramName)));
  }
  if (options.wrtArguments)
    for (mlir::BlockArgument arg : body.getArguments()) {
      if (!isFloatTensor(arg))
        continue;
      Value g = sweep.cotangent(arg);
      if (!g)
        g = splat(b, arg.getLoc(), arg.getType(), 0.0);
      addResult(g, b.getNamedAttr(kGradOfArgAttrName,
                                  b.getI64IntegerAttr(arg.getArgNumber())));
    }
  mlir::func::ReturnOp::create(b, terminator.getLoc(), results);
  terminator.erase();
  llvm::SmallVector<Type> resultTypes;
  for (Value v : results)
    resultTypes.push_back(v.getType());
  grad.setFunctionType(
      mlir::FunctionType::get(ctx, grad.getArgumentTypes(), resultTypes));
  grad.setAllResultAttrs(resultAttrs);
  return grad;
}

bool hasScalarLoss(mlir::func::FuncOp func, unsigned lossIndex) {
  if (func.isExternal() || lossIndex >= func.getNumResults())
    return false;
  auto type =
      mlir::dyn_cast<mlir::RankedTensorType>(func.getResultTypes()[lossIndex]);
  return type && type.getRank() == 0 &&
         mlir::isa<mlir::FloatType>(type.getElementType());
}

} // namespace dtc
