//===- CostModel.h - Step time and memory of one plan -----------*- C++ -*-===//
//
// predict() prices one candidate plan: identical blocks are costed once per
// micro-batch and multiplied; pipeline stages, the schedule and the overlap
// of each communication with the computation it hides behind are composed
// from those per-block costs. Formulas, constants and measured accuracy:
// docs/cost-model.md.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_COSTMODEL_H
#define DTC_COMPILER_COSTMODEL_COSTMODEL_H

#include "compiler/costmodel/Cluster.h"
#include "compiler/costmodel/Collectives.h"
#include "compiler/costmodel/Spec.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <string>
#include <vector>

namespace dtc {

/// Seconds per step by kind of parallelism.
struct CommTimes {
  double dp = 0, tp = 0, pp = 0, cp = 0, ep = 0;
  double total() const { return dp + tp + pp + cp + ep; }
  CommTimes operator*(double k) const {
    return {k * dp, k * tp, k * pp, k * cp, k * ep};
  }
  CommTimes operator+(const CommTimes &o) const {
    return {dp + o.dp, tp + o.tp, pp + o.pp, cp + o.cp, ep + o.ep};
  }
};

/// Peak bytes on the GPU that needs the most.
struct MemoryBreakdown {
  double params = 0, grads = 0, optimizer = 0, activations = 0;
  double workspace = 0; ///< Transient buffers and the runtime's own.
  double reserve = 0;   ///< Allocator fragmentation (kFragmentationReserve).
  double total() const {
    return params + grads + optimizer + activations + workspace + reserve;
  }
  /// Sets `reserve` from the bytes allocated and freed within a step.
  void reserveForFragmentation();
};

struct Prediction {
  double stepTimeS = 0;
  double tokensPerS = 0;
  double tflopsPerGpu = 0;   ///< Model FLOPs (no recompute) per second.
  double hwTflopsPerGpu = 0; ///< FLOPs executed, recompute included.
  double mfu = 0;
  double hfu = 0;
  double bubbleFraction = 0; ///< Pipeline fill/drain over step time.
  double stageImbalance = 0; ///< Slowest stage over mean stage, minus 1.
  double computeTimeS = 0;   ///< Kernels on the slowest stage's GPU.
  double optimizerTimeS = 0;
  double modelFlopsPerStep = 0; ///< Whole cluster.
  double hwFlopsPerStep = 0;
  double memoryPerGpuBytes = 0;
  MemoryBreakdown memory;
  int64_t peakMemoryStage = 0;
  CommTimes commTime;    ///< All communication issued by one GPU.
  CommTimes commExposed; ///< The part on the critical path.
  /// Row blocks of the TP GEMMs and their collectives (the plan's, or the
  /// fastest when it left the choice to the cost model).
  int64_t tpCommChunks = 1;
  CommTimes commHidden() const;
  bool fits = true;
  std::string reason; ///< Why it does not fit, e.g. "OOM: 91.2 GB > 80.0 GB".
};

/// Bytes kept free for allocator fragmentation, per byte of activations
/// and workspace: what a step allocates and frees. Model states are
/// allocated once, in contiguous buffers, and do not fragment. Bounded by
/// the corpus (docs/cost-model.md, "Memory and headroom"): every published
/// run fits below 0.61, every documented capacity OOM the model describes
/// needs more than 0.14.
constexpr double kFragmentationReserve = 0.2;
/// CUDA context, cuBLAS workspace and NCCL buffers per GPU.
constexpr double kRuntimeBytes = 1.0e9;

/// Training FLOPs per token (forward + backward, no recompute), counting
/// full (unmasked) attention as Megatron's and the papers' formulas do.
double trainingFlopsPerToken(const TransformerSpec &spec);

/// A bad-input error naming the first thing that makes the plan impossible.
llvm::Error validatePlan(const TransformerSpec &spec, const ParallelPlan &plan,
                         const Cluster &cluster);

/// One pipeline stage's share of a prediction, for plan inspection (the
/// timeline and memory bars of `dtc plan report`).
struct StageDetail {
  /// Forward plus backward of one micro-batch on the stage's GPU, all its
  /// chunks, exposed communication and p2p included.
  double timeS = 0;
  /// The forward part of timeS, in the ratio of the block's forward kernels
  /// to all its kernels.
  double forwardS = 0;
  /// The weight-gradient part of timeS (W, which zero-bubble schedules run
  /// apart), in the ratio of the weight-gradient kernels to all kernels.
  double weightS = 0;
  MemoryBreakdown memory;
};

/// The data-parallel reduction of one GPU's gradients (`gradBytes` over
/// `gradGroup`, `expertGradBytes` over the expert data-parallel group) under
/// the plan's ZeRO stage, and ZeRO's parameter all-gather; the overlapped
/// parts hide behind the last micro-batch's backward and the first's
/// forward. Shared by both predictors (predict, GraphPlanner.h).
struct DataParallelCost {
  double time = 0, exposed = 0;
};
DataParallelCost dataParallelCost(const ParallelPlan &plan, double gradBytes,
                                  double expertGradBytes, double elementBytes,
                                  const GroupPlacement &gradGroup,
                                  const GroupPlacement &expertGradGroup,
                                  double lastBackward, double firstForward,
                                  const Cluster &cluster);

/// TFLOP/s per GPU, MFU and HFU from the step's FLOPs and time.
void setFlopRates(Prediction &out, double gpus, double peakFlops);

/// Seconds of the optimizer step over `shardParams` parameters.
double optimizerStepSeconds(double shardParams, double elementBytes,
                            const Cluster &cluster);

/// `stages`, when given, receives one StageDetail per pipeline stage.
llvm::Expected<Prediction> predict(const TransformerSpec &spec,
                                   const ParallelPlan &plan,
                                   const Cluster &cluster,
                                   std::vector<StageDetail> *stages = nullptr);

/// The `predicted` section of plan.json.
llvm::json::Object predictionToJson(const Prediction &prediction);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_COSTMODEL_H
