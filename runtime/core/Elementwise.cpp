//===- Elementwise.cpp - Elementwise operand checks -----------------------===//

#include "runtime/core/Elementwise.h"

#include "llvm/ADT/StringSwitch.h"

#include <optional>

namespace dtc::runtime {

llvm::Error checkUnary(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (llvm::Error err = expectFloat(call, in, "input"))
    return err;
  if (in.dtype != out.dtype || in.numElements() != out.numElements())
    return call.error("output " + shapeString(out.shape) + " " +
                      dtypeName(out.dtype) + " does not match input " +
                      shapeString(in.shape) + " " + dtypeName(in.dtype));
  return llvm::Error::success();
}

llvm::Error checkCast(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (in.numElements() != out.numElements())
    return call.error("output " + shapeString(out.shape) +
                      " does not match input " + shapeString(in.shape));
  if (dtypeSize(in.dtype) == 0 || dtypeSize(out.dtype) == 0)
    return call.error("unsupported dtype " + dtypeName(in.dtype) + " -> " +
                      dtypeName(out.dtype));
  return llvm::Error::success();
}

llvm::Expected<Predicate> readCompare(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &lhs = call.input(0), &rhs = call.input(1);
  llvm::StringRef name = call.str("predicate");
  std::optional<Predicate> pred =
      llvm::StringSwitch<std::optional<Predicate>>(name)
          .Case("eq", Predicate::Eq)
          .Case("ne", Predicate::Ne)
          .Case("lt", Predicate::Lt)
          .Case("le", Predicate::Le)
          .Case("gt", Predicate::Gt)
          .Case("ge", Predicate::Ge)
          .Default(std::nullopt);
  if (!pred)
    return call.error("unknown predicate '" + name + "'");
  if (lhs.dtype != rhs.dtype)
    return call.error("operand dtypes " + dtypeName(lhs.dtype) + " and " +
                      dtypeName(rhs.dtype) + " differ");
  if (call.output(0).dtype != DType::BOOL)
    return call.error("result must be i1, got " +
                      dtypeName(call.output(0).dtype));
  return *pred;
}

llvm::Error checkSelect(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 3, 1))
    return err;
  const TensorRef &cond = call.input(0), &onTrue = call.input(1),
                  &onFalse = call.input(2), &out = call.output(0);
  if (cond.dtype != DType::BOOL)
    return call.error("condition must be i1, got " + dtypeName(cond.dtype));
  if (onTrue.dtype != out.dtype || onFalse.dtype != out.dtype)
    return call.error("value dtypes " + dtypeName(onTrue.dtype) + ", " +
                      dtypeName(onFalse.dtype) + " differ from the result's " +
                      dtypeName(out.dtype));
  return llvm::Error::success();
}

llvm::Error checkActivationGrad(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 2, 1))
    return err;
  const TensorRef &x = call.input(0), &dy = call.input(1),
                  &out = call.output(0);
  if (llvm::Error err = expectFloat(call, x, "input"))
    return err;
  if (llvm::Error err = expectFloat(call, dy, "grad"))
    return err;
  if (llvm::Error err = expectFloat(call, out, "result"))
    return err;
  return expectSameShapes(call, {&x, &dy, &out});
}

} // namespace dtc::runtime
