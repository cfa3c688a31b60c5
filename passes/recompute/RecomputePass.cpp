//===- RecomputePass.cpp - dtc-recompute: activation recompute ------------===//
//
// Applies applyRecompute to every function whose result `loss-index` is a
// 0-d float tensor (gradient functions; on a plain forward function nothing
// follows the loss, so nothing changes).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/recompute/Recompute.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/FormatVariadic.h"

#define DEBUG_TYPE "dtc-recompute"

namespace mlir::dtc {
#define GEN_PASS_DEF_DTCRECOMPUTE
#include "passes/Passes.h.inc"
} // namespace mlir::dtc

namespace {
struct DtcRecomputePass : mlir::dtc::impl::DtcRecomputeBase<DtcRecomputePass> {
  using Base::Base;

  void runOnOperation() override {
    auto mode = ::dtc::parseRecompute(this->mode);
    if (!mode) {
      getOperation().emitError("dtc-recompute: mode must be none, selective "
                               "or full, got '")
          << this->mode << "'";
      return signalPassFailure();
    }
    for (auto func : getOperation().getOps<mlir::func::FuncOp>()) {
      if (!::dtc::hasScalarLoss(func, lossIndex))
        continue;
      auto stats = ::dtc::applyRecompute(func, lossIndex, *mode);
      if (mlir::failed(stats))
        return signalPassFailure();
      LLVM_DEBUG(llvm::dbgs()
                 << "dtc-recompute: @" << func.getSymName() << " "
                 << ::dtc::recomputeName(*mode) << ": " << stats->savedValues
                 << " saved, " << stats->recomputedValues << " recomputed, "
                 << stats->clonedOps << " ops cloned\n");
      if (report)
        func.emitRemark(llvm::formatv(
            "@{6}: recompute {0}: {1} values saved ({2} bytes), {3} recomputed "
            "({4} "
            "bytes), {5} ops cloned",
            ::dtc::recomputeName(*mode), stats->savedValues, stats->savedBytes,
            stats->recomputedValues, stats->recomputedBytes, stats->clonedOps,
            func.getSymName()));
    }
  }
};
} // namespace
