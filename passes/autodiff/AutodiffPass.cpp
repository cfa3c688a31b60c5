//===- AutodiffPass.cpp - dtc-autodiff: gradient functions for tests ------===//
//
// Builds `@<name>_grad` for every function whose result `loss-index` is a 0-d
// float tensor, so lit tests can check the backward ops each rule emits.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/autodiff/Autodiff.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "dtc-autodiff"

namespace mlir::dtc {
#define GEN_PASS_DEF_DTCAUTODIFF
#include "passes/Passes.h.inc"
} // namespace mlir::dtc

namespace {
struct DtcAutodiffPass : mlir::dtc::impl::DtcAutodiffBase<DtcAutodiffPass> {
  using Base::Base;

  void runOnOperation() override {
    // Functions built here are not differentiated again.
    llvm::SmallVector<mlir::func::FuncOp> funcs(
        getOperation().getOps<mlir::func::FuncOp>());
    ::dtc::GradientOptions options;
    options.wrtArguments = wrtArguments;
    for (mlir::func::FuncOp func : funcs) {
      if (!::dtc::hasScalarLoss(func, lossIndex))
        continue;
      if (failed(::dtc::buildGradientFunction(
              func, lossIndex, (func.getSymName() + "_grad").str(), options)))
        signalPassFailure();
      LLVM_DEBUG(llvm::dbgs()
                 << "dtc-autodiff: @" << func.getSymName() << "_grad built\n");
    }
  }
};
} // namespace
