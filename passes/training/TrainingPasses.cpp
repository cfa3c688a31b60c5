//===- TrainingPasses.cpp - The training step's passes and pipeline -------===//
//
// Each stage of the data/tensor-parallel training step as a registered pass
// (declared in passes/Passes.td), and --dtc-training-pipeline, which runs
// them as `dtc compile` does (buildTrainingPipeline).
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "passes/training/StepParts.h"
#include "passes/training/TrainingStep.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "dtc-training"

namespace mlir::dtc {
#define GEN_PASS_DEF_DTCBINDLOSS
#define GEN_PASS_DEF_DTCSTEPGRADIENT
#define GEN_PASS_DEF_DTCCHUNKTPCOLLECTIVES
#define GEN_PASS_DEF_DTCSCHEDULECOLLECTIVES
#define GEN_PASS_DEF_DTCMICROSTEP
#define GEN_PASS_DEF_DTCBUILDAPPLY
#include "passes/Passes.h.inc"
} // namespace mlir::dtc

namespace {
namespace t = ::dtc::training;

/// Reports `err` as an error at `op`; true if there was one.
bool emitIfError(mlir::Operation *op, llvm::Error err) {
  if (!err)
    return false;
  op->emitError() << llvm::toString(std::move(err));
  return true;
}

struct DtcBindLossPass : mlir::dtc::impl::DtcBindLossBase<DtcBindLossPass> {
  using Base::Base;
  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto funcs = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
    if (funcs.size() != 1) {
      module.emitError() << "training step: expected one forward function, "
                            "found "
                         << funcs.size();
      return signalPassFailure();
    }
    auto info = t::bindLoss(funcs.front());
    if (!info) {
      emitIfError(funcs.front(), info.takeError());
      return signalPassFailure();
    }
    LLVM_DEBUG(llvm::dbgs()
               << "bind-loss: micro-batch " << info->microBatch << ", sequence "
               << info->seqLen << ", vocabulary " << info->vocab
               << ", MoE layers " << info->moeLayers << "\n");
    t::writeStepInfo(module, *info);
  }
};

struct DtcStepGradientPass
    : mlir::dtc::impl::DtcStepGradientBase<DtcStepGradientPass> {
  using Base::Base;
  void runOnOperation() override {
    if (mlir::failed(t::buildStepGradient(getOperation(), stepName)))
      return signalPassFailure();
    LLVM_DEBUG({
      auto step = getOperation().lookupSymbol<mlir::func::FuncOp>(stepName);
      llvm::dbgs() << "step-gradient: @" << stepName << " returns "
                   << step.getNumResults() - 1 << " gradients\n";
    });
  }
};

struct DtcChunkTpCollectivesPass
    : mlir::dtc::impl::DtcChunkTpCollectivesBase<DtcChunkTpCollectivesPass> {
  using Base::Base;
  void runOnOperation() override {
    LLVM_DEBUG(llvm::dbgs()
               << "chunk-tp-collectives: @" << getOperation().getSymName()
               << " in " << chunks << " row blocks\n");
    t::chunkTensorParallelCollectives(getOperation(), chunks);
  }
};

struct DtcScheduleCollectivesPass
    : mlir::dtc::impl::DtcScheduleCollectivesBase<DtcScheduleCollectivesPass> {
  using Base::Base;
  void runOnOperation() override {
    LLVM_DEBUG(llvm::dbgs() << "schedule-collectives: @"
                            << getOperation().getSymName() << "\n");
    t::scheduleCollectives(getOperation());
  }
};

struct DtcMicroStepPass : mlir::dtc::impl::DtcMicroStepBase<DtcMicroStepPass> {
  using Base::Base;
  void runOnOperation() override {
    ::dtc::TrainingStepOptions options;
    options.mesh = mesh;
    options.zeroStage = zeroStage;
    options.overlap = overlap;
    options.gradBucketBytes = gradBucketBytes;
    options.zeroPrefetchElements = zeroPrefetchElements;
    if (emitIfError(getOperation(), t::buildMicroStep(getOperation(), options)))
      return signalPassFailure();
    LLVM_DEBUG(llvm::dbgs()
               << "micro-step: ZeRO-" << zeroStage << ", overlap " << overlap
               << (getOperation().lookupSymbol("micro_step_sync")
                       ? ", with @micro_step_sync\n"
                       : "\n"));
  }
};

struct DtcBuildApplyPass
    : mlir::dtc::impl::DtcBuildApplyBase<DtcBuildApplyPass> {
  using Base::Base;
  void runOnOperation() override {
    ::dtc::OptimizerConfig optimizer;
    optimizer.beta1 = beta1;
    optimizer.beta2 = beta2;
    optimizer.epsilon = epsilon;
    optimizer.weightDecay = weightDecay;
    optimizer.gradClip = gradClip;
    if (emitIfError(getOperation(),
                    t::buildApplyFromGradientTable(getOperation(), optimizer)))
      return signalPassFailure();
    LLVM_DEBUG(llvm::dbgs() << "build-apply: AdamW, clip " << gradClip << "\n");
  }
};

/// --dtc-training-pipeline's options: TrainingStepOptions as text, with its
/// defaults.
struct TrainingPipelineOptions
    : ::dtc::MeshPipelineOptions<TrainingPipelineOptions> {
  ::dtc::TrainingStepOptions defaults;
  Option<std::string> recompute{
      *this, "recompute", llvm::cl::desc("none, selective or full"),
      llvm::cl::init(::dtc::recomputeModeName(defaults.recompute).str())};
  Option<int> zeroStage{*this, "zero-stage", llvm::cl::desc("ZeRO stage 0-3"),
                        llvm::cl::init(defaults.zeroStage)};
  Option<bool> overlap{*this, "overlap",
                       llvm::cl::desc("Overlap communication with compute"),
                       llvm::cl::init(defaults.overlap)};
  Option<int64_t> tpCommChunks{
      *this, "tp-comm-chunks",
      llvm::cl::desc("Row blocks per tensor-parallel collective"),
      llvm::cl::init(defaults.tpCommChunks)};
  Option<int64_t> gradBucketBytes{
      *this, "grad-bucket-bytes",
      llvm::cl::desc("Bytes per overlapped gradient all-reduce"),
      llvm::cl::init(defaults.gradBucketBytes)};
  Option<int64_t> zeroPrefetchElements{
      *this, "zero-prefetch-elements",
      llvm::cl::desc("ZeRO-3 parameter elements gathered ahead"),
      llvm::cl::init(defaults.zeroPrefetchElements)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("AdamW beta1"),
                       llvm::cl::init(defaults.optimizer.beta1)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("AdamW beta2"),
                       llvm::cl::init(defaults.optimizer.beta2)};
  Option<double> epsilon{*this, "epsilon", llvm::cl::desc("AdamW epsilon"),
                         llvm::cl::init(defaults.optimizer.epsilon)};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("AdamW weight decay"),
                             llvm::cl::init(defaults.optimizer.weightDecay)};
  Option<double> gradClip{*this, "grad-clip",
                          llvm::cl::desc("Global gradient-norm clip"),
                          llvm::cl::init(defaults.optimizer.gradClip)};

  ::dtc::TrainingStepOptions toTrainingStepOptions() const {
    ::dtc::TrainingStepOptions o;
    o.mesh = mesh;
    o.sequenceParallel = sequenceParallel;
    o.flopsPerByte = flopsPerByte;
    o.recompute = ::dtc::parseRecomputeMode(recompute).value_or(
        ::dtc::RecomputeMode::None);
    o.zeroStage = zeroStage;
    o.overlap = overlap;
    o.tpCommChunks = tpCommChunks;
    o.gradBucketBytes = gradBucketBytes;
    o.zeroPrefetchElements = zeroPrefetchElements;
    o.optimizer.beta1 = beta1;
    o.optimizer.beta2 = beta2;
    o.optimizer.epsilon = epsilon;
    o.optimizer.weightDecay = weightDecay;
    o.optimizer.gradClip = gradClip;
    return o;
  }
};
} // namespace

void dtc::registerTrainingPipeline() {
  mlir::PassPipelineRegistration<TrainingPipelineOptions>(
      "dtc-training-pipeline",
      "The training step `dtc compile --emit partitioned` prints: loss "
      "binding, sharding, gradient, recompute, partitioning, collective "
      "overlap, micro-step and apply",
      [](mlir::OpPassManager &pm, const TrainingPipelineOptions &options) {
        if (!::dtc::parseRecomputeMode(options.recompute)) {
          // dtc-recompute reports the bad mode.
          mlir::dtc::DtcRecomputeOptions recompute;
          recompute.mode = options.recompute;
          pm.addPass(mlir::dtc::createDtcRecompute(recompute));
          return;
        }
        ::dtc::buildTrainingPipeline(pm, options.toTrainingStepOptions());
      });
}
