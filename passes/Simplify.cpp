//===- Simplify.cpp - the dtc-simplify pass -------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "dtc-simplify"

namespace mlir::dtc {
#define GEN_PASS_DEF_DTCSIMPLIFY
#include "passes/Passes.h.inc"
} // namespace mlir::dtc

using namespace mlir;
using namespace mlir::dtc;

namespace {
struct DtcSimplifyPass : mlir::dtc::impl::DtcSimplifyBase<DtcSimplifyPass> {
  using DtcSimplifyBase::DtcSimplifyBase;

  LogicalResult initialize(MLIRContext *ctx) override {
    RewritePatternSet set(ctx);
    for (RegisteredOperationName op : ctx->getRegisteredOperations())
      if (op.getDialectNamespace() == DtcDialect::getDialectNamespace())
        op.getCanonicalizationPatterns(set, ctx);
    patterns = FrozenRewritePatternSet(std::move(set));
    return success();
  }

  void runOnOperation() override {
    GreedyRewriteConfig config;
    config.setMaxIterations(maxIterations);
    // The greedy driver folds, applies the patterns and erases dead
    // side-effect-free ops; it fails when no fixed point is reached.
    bool changed = false;
    if (failed(applyPatternsGreedily(getOperation(), patterns, config,
                                     &changed))) {
      getOperation()->emitError("dtc-simplify did not converge in ")
          << static_cast<int64_t>(maxIterations) << " iterations";
      return signalPassFailure();
    }
    LLVM_DEBUG(llvm::dbgs()
               << "dtc-simplify: "
               << (changed ? "rewrote the IR" : "nothing to do") << "\n");
  }

  FrozenRewritePatternSet patterns;
};
} // namespace
