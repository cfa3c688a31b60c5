//===- Autodiff.h - Reverse-mode autodiff over the dtc dialect --*- C++ -*-===//
//
// Builds the gradient of a forward function as a new function: the forward
// ops, then their backward ops in reverse order, each emitted by the op's
// gradient rule (GradientRules.cpp). See docs/autodiff.md.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_AUTODIFF_AUTODIFF_H
#define DTC_PASSES_AUTODIFF_AUTODIFF_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

namespace dtc {

struct GradientOptions {
  bool wrtArguments = false; // also d loss / d float function arguments
};

/// Builds a new func.func `name` next to `forward` (same module) with the
/// same arguments and results (forward results..., then d loss / d p for
/// every float `dtc.parameter` p in order of first appearance, each result
/// with attribute `dtc.grad_of = "<parameter name>"`, then, with
/// wrtArguments, d loss / d argument i for each float argument, attribute
/// `dtc.grad_of_arg = i`). `lossIndex` names a 0-d float result; the seed
/// is 1. Parameters read more than once get their gradients summed.
///
/// Fails with an error at the offending op (an op without a gradient rule on
/// the path from a parameter to the loss) or at `forward` (bad loss index,
/// several blocks, a name already taken); `forward` is left unchanged.
mlir::FailureOr<mlir::func::FuncOp>
buildGradientFunction(mlir::func::FuncOp forward, unsigned lossIndex,
                      llvm::StringRef name,
                      const GradientOptions &options = {});

/// Whether `func` has a body and result `lossIndex` is a 0-d float: the
/// functions the autodiff and recompute passes act on.
bool hasScalarLoss(mlir::func::FuncOp func, unsigned lossIndex);

/// The name of the result attribute naming the parameter a gradient is of.
inline constexpr llvm::StringLiteral kGradOfAttrName = "dtc.grad_of";
/// ... and the one naming the argument index.
inline constexpr llvm::StringLiteral kGradOfArgAttrName = "dtc.grad_of_arg";

} // namespace dtc

#endif // DTC_PASSES_AUTODIFF_AUTODIFF_H
