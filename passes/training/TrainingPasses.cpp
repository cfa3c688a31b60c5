//===- TrainingPasses.cpp - The training step's passes and pipeline -------===//
//
// Each stage of the data/tensor-parallel training step as a registered pass
// (declared in passes/Passes.td), and --dtc-training-pipeline, which runs
// them as `dtc compile` does (buildTrainingPipeline).
//
//===----------------------------------------------------------------------===//

#include "passes/MeshOption.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "passes/training/StepParts.h"
#include "passes/training/TrainingStep.h"
#include "runtime/support/Error.h"

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
#define GEN_PASS_DEF_DTCPIPELINESPLIT
#define GEN_PASS_DEF_DTCCHUNKGRADIENT
#define GEN_PASS_DEF_DTCCHUNKBOUNDARY
#define GEN_PASS_DEF_DTCPIPELINEASSEMBLE
#include "passes/Passes.h.inc"
} // namespace mlir::dtc

namespace {
namespace t = ::dtc::training;

/// The AdamW settings of a pass's or pipeline's options (members beta1 ...
/// gradClip).
template <typename Options>
::dtc::OptimizerConfig optimizerOf(const Options &o) {
  ::dtc::OptimizerConfig c;
  c.beta1 = o.beta1;
  c.beta2 = o.beta2;
  c.epsilon = o.epsilon;
  c.weightDecay = o.weightDecay;
  c.gradClip = o.gradClip;
  return c;
}

/// The TrainingStepOptions that --dtc-training-pipeline's options (members of
/// the same names) state; `recompute` must parse; an error for a bad mesh.
template <typename Options>
llvm::Expected<::dtc::TrainingStepOptions>
trainingStepOptionsOf(const Options &o) {
  ::dtc::TrainingStepOptions t;
  auto mesh = ::dtc::meshOption(o.mesh);
  if (!mesh)
    return mesh.takeError();
  t.mesh = std::move(*mesh);
  t.sequenceParallel = o.sequenceParallel;
  t.flopsPerByte = o.flopsPerByte;
  t.recompute =
      ::dtc::parseRecompute(o.recompute).value_or(::dtc::Recompute::None);
  t.zeroStage = o.zeroStage;
  t.overlap = o.overlap;
  t.pipelineStages = o.stages;
  t.virtualStages = o.virtualStages;
  t.schedule =
      ::dtc::parseSchedule(o.schedule).value_or(::dtc::Schedule::OneFOneB);
  t.gradAccum = o.microBatches;
  t.tpCommChunks = o.tpCommChunks;
  t.zeroPrefetchElements = o.zeroPrefetchElements;
  t.optimizer = optimizerOf(o);
  return t;
}

/// Reports `err` as an error at `op`, marking the module when it is the
/// input's fault (kBadInputAttr); true if there was one.
bool emitIfError(mlir::Operation *op, llvm::Error err) {
  if (!err)
    return false;
  bool badInput = false;
  std::string message;
  llvm::handleAllErrors(
      std::move(err),
      [&](const ::dtc::DtcError &e) {
        badInput = e.getKind() == ::dtc::ErrorKind::BadInput;
        message = e.getMessage();
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  auto module = llvm::dyn_cast<mlir::ModuleOp>(op);
  if (!module)
    module = op->getParentOfType<mlir::ModuleOp>();
  // A pipeline chunk's fault is the whole program's (buildTrainingStep
  // reads the mark on the outermost module).
  while (module && module->getParentOfType<mlir::ModuleOp>())
    module = module->getParentOfType<mlir::ModuleOp>();
  if (badInput && module)
    module->setAttr(t::kBadInputAttr, mlir::UnitAttr::get(op->getContext()));
  op->emitError() << message;
  return true;
}

/// Reads a pass's mesh option into `mesh`; false, after an error at `op`,
/// when the text is not a mesh.
bool readMeshOption(mlir::Operation *op, llvm::StringRef text,
                    ::dtc::runtime::Mesh &mesh) {
  auto parsed = ::dtc::meshOption(text);
  if (emitIfError(op, parsed.takeError()))
    return false;
  mesh = std::move(*parsed);
  return true;
}

struct DtcBindLossPass : mlir::dtc::impl::DtcBindLossBase<DtcBindLossPass> {
  using Base::Base;
  void runOnOperation() override {
    mlir::ModuleOp module = getOperation();
    auto funcs = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
    if (funcs.size() != 1) {
      emitIfError(module, ::dtc::badInput("training step: expected one "
                                          "forward function, found {0}",
                                          funcs.size()));
      return signalPassFailure();
    }
    ::dtc::LossRequest request;
    request.objective = objective;
    request.lossOutput = lossOutput;
    request.feeds.assign(feeds.begin(), feeds.end());
    request.maskTokenId = maskTokenId;
    request.maskProbability = maskProbability;
    request.decoderStartTokenId = decoderStartTokenId;
    auto info = t::bindLoss(funcs.front(), request);
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
    if (!readMeshOption(getOperation(), mesh, options.mesh))
      return signalPassFailure();
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
  // They read the (protected) options.
  template <typename Options>
  friend ::dtc::OptimizerConfig optimizerOf(const Options &);
  void runOnOperation() override {
    if (emitIfError(getOperation(), t::buildApplyFromGradientTable(
                                        getOperation(), optimizerOf(*this))))
      return signalPassFailure();
    LLVM_DEBUG(llvm::dbgs() << "build-apply: AdamW, clip " << gradClip << "\n");
  }
};

struct DtcPipelineSplitPass
    : mlir::dtc::impl::DtcPipelineSplitBase<DtcPipelineSplitPass> {
  using Base::Base;
  void runOnOperation() override {
    ::dtc::TrainingStepOptions options;
    if (!readMeshOption(getOperation(), mesh, options.mesh))
      return signalPassFailure();
    options.pipelineStages = stages;
    options.virtualStages = virtualStages;
    std::optional<::dtc::Schedule> parsed = ::dtc::parseSchedule(schedule);
    if (!parsed) {
      emitIfError(getOperation(),
                  ::dtc::badInput("pipeline: schedule '{0}' is not known "
                                  "(1f1b, its interleaved form with virtual "
                                  "stages, gpipe and zb-h1 are)",
                                  schedule.getValue()));
      return signalPassFailure();
    }
    options.schedule = *parsed;
    options.gradAccum = microBatches;
    options.overlap = overlap;
    if (emitIfError(getOperation(),
                    t::splitIntoChunks(getOperation(), options)))
      return signalPassFailure();
    LLVM_DEBUG(llvm::dbgs() << "pipeline-split: " << stages << " stages x "
                            << virtualStages << " chunks, " << schedule << ", "
                            << microBatches << " micro-batches\n");
  }
};

struct DtcChunkGradientPass
    : mlir::dtc::impl::DtcChunkGradientBase<DtcChunkGradientPass> {
  using Base::Base;
  void runOnOperation() override {
    if (emitIfError(getOperation(), t::differentiateChunk(getOperation())))
      return signalPassFailure();
  }
};

struct DtcChunkBoundaryPass
    : mlir::dtc::impl::DtcChunkBoundaryBase<DtcChunkBoundaryPass> {
  using Base::Base;
  void runOnOperation() override {
    ::dtc::runtime::Mesh stage;
    if (!readMeshOption(getOperation(), mesh, stage) ||
        emitIfError(getOperation(),
                    t::setChunkBoundaries(getOperation(), stage)))
      return signalPassFailure();
  }
};

struct DtcPipelineAssemblePass
    : mlir::dtc::impl::DtcPipelineAssembleBase<DtcPipelineAssemblePass> {
  using Base::Base;
  template <typename Options>
  friend ::dtc::OptimizerConfig optimizerOf(const Options &);
  void runOnOperation() override {
    ::dtc::TrainingStepOptions options;
    options.zeroStage = zeroStage;
    options.zeroPrefetchElements = zeroPrefetchElements;
    options.optimizer = optimizerOf(*this);
    if (emitIfError(getOperation(),
                    t::assemblePipeline(getOperation(), options).takeError()))
      return signalPassFailure();
  }
};

/// --dtc-training-pipeline's options: TrainingStepOptions as text, with its
/// defaults.
struct TrainingPipelineOptions
    : ::dtc::MeshPipelineOptions<TrainingPipelineOptions> {
  ::dtc::TrainingStepOptions defaults;
  Option<std::string> recompute{
      *this, "recompute", llvm::cl::desc("none, selective or full"),
      llvm::cl::init(::dtc::recomputeName(defaults.recompute).str())};
  Option<int> zeroStage{*this, "zero-stage", llvm::cl::desc("ZeRO stage 0-3"),
                        llvm::cl::init(defaults.zeroStage)};
  Option<bool> overlap{*this, "overlap",
                       llvm::cl::desc("Overlap communication with compute"),
                       llvm::cl::init(defaults.overlap)};
  Option<int64_t> stages{
      *this, "pipeline-stages",
      llvm::cl::desc("Pipeline stages over the mesh's pp axis (1: none)"),
      llvm::cl::init(defaults.pipelineStages)};
  Option<int64_t> virtualStages{*this, "virtual-stages",
                                llvm::cl::desc("Model chunks per stage"),
                                llvm::cl::init(defaults.virtualStages)};
  Option<std::string> schedule{
      *this, "schedule",
      llvm::cl::desc("Pipeline schedule: 1f1b, gpipe, zb-h1"),
      llvm::cl::init(::dtc::scheduleName(defaults.schedule).str())};
  Option<int64_t> microBatches{
      *this, "micro-batches",
      llvm::cl::desc("Micro-batches per step (a pipeline step's)"),
      llvm::cl::init(defaults.gradAccum)};
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

  llvm::Expected<::dtc::TrainingStepOptions> toTrainingStepOptions() const {
    auto o = trainingStepOptionsOf(*this);
    if (o)
      o->gradBucketBytes = gradBucketBytes;
    return o;
  }
};
} // namespace

void dtc::registerTrainingPipeline() {
  mlir::PassPipelineRegistration<TrainingPipelineOptions>(
      "dtc-training-pipeline",
      "The training step `dtc compile --emit partitioned` prints: loss "
      "binding, sharding, gradient, recompute, partitioning, collective "
      "overlap, micro-step and apply; with pipeline-stages > 1, loss "
      "binding and the pipeline split",
      [](mlir::OpPassManager &pm, const TrainingPipelineOptions &options) {
        if (!::dtc::parseSchedule(options.schedule)) {
          // dtc-pipeline-split reports the bad schedule.
          mlir::dtc::DtcPipelineSplitOptions split;
          split.schedule = options.schedule;
          pm.addPass(mlir::dtc::createDtcPipelineSplit(split));
          return;
        }
        if (!::dtc::parseRecompute(options.recompute)) {
          // dtc-recompute reports the bad mode.
          mlir::dtc::DtcRecomputeOptions recompute;
          recompute.mode = options.recompute;
          pm.addPass(mlir::dtc::createDtcRecompute(recompute));
          return;
        }
        auto step = options.toTrainingStepOptions();
        if (!step) {
          // dtc-propagate-sharding reports the bad mesh.
          llvm::consumeError(step.takeError());
          mlir::dtc::DtcPropagateShardingOptions propagate;
          propagate.mesh = options.mesh;
          pm.addPass(mlir::dtc::createDtcPropagateSharding(propagate));
          return;
        }
        ::dtc::buildTrainingPipeline(pm, *step);
      });
}
