//===- StepTime.h - A training step's prediction from its parts -*- C++ -*-===//
//
// The one composition of a step's time and memory, whichever way its parts
// were priced: the transformer cost model's per-block formulas (predict)
// or the IR-priced planner's ops (GraphPlanner). Each pipeline stage gives
// its time per micro-batch, its kernels and communication and its memory;
// the step gives what happens once (the data-parallel reduction, a tied
// embedding's sum, the tensor-parallel gradient sync, the optimizer).
// Pipeline fill and drain, bubble, imbalance, throughput, FLOP rates, the
// slowest stage's communication, peak memory and the out-of-memory verdict
// are composed here and nowhere else.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_STEPTIME_H
#define DTC_COMPILER_COSTMODEL_STEPTIME_H

#include "compiler/costmodel/CostModel.h"

#include "llvm/ADT/SmallVector.h"

#include <vector>

namespace dtc {

/// One micro-batch on one pipeline stage's GPU, all its model chunks.
struct StageCost {
  /// Kernels plus the communication on the critical path (p2p included).
  double time = 0;
  double kernels = 0; ///< Forward, backward and recompute kernels.
  double forward = 0; ///< The forward kernels among them.
  /// The weight-gradient kernels among them (W; zero-bubble schedules).
  double weightGrad = 0;
  CommTimes comm;    ///< Issued.
  CommTimes exposed; ///< On the critical path (part of `time`).
  MemoryBreakdown memory;
};

struct StepCost {
  llvm::SmallVector<StageCost, 8> stages;
  int64_t microBatches = 1;
  int64_t chunksPerStage = 1; ///< Virtual pipeline stages.
  Schedule schedule = Schedule::OneFOneB;
  /// Once per step: the data-parallel reduction and ZeRO's gathers, a tied
  /// embedding's sum over its stages, the TP sum of replicated gradients.
  CommTimes comm, exposed;
  double optimizerS = 0;
  /// Per step, whole cluster.
  double modelFlops = 0, hwFlops = 0, tokens = 0;
  double gpus = 1, peakFlops = 0;
  int64_t tpCommChunks = 1;
};

/// The prediction `step` composes to; `stages`, when given, receives each
/// stage's share.
Prediction composeStep(const StepCost &step, const Cluster &cluster,
                       std::vector<StageDetail> *stages = nullptr);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_STEPTIME_H
