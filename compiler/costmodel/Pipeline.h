//===- Pipeline.h - Pipeline schedules --------------------------*- C++ -*-===//
//
// GPipe, 1F1B (PipeDream-Flush), interleaved 1F1B (Narayanan et al.,
// SC'21) and ZB-H1 (Qi et al., ICLR'24): how long a step takes given each
// stage's per-micro-batch time, how much of it is bubble, and how many
// micro-batches' activations a stage holds.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_PIPELINE_H
#define DTC_COMPILER_COSTMODEL_PIPELINE_H

#include "compiler/costmodel/Spec.h"

#include "llvm/ADT/ArrayRef.h"

namespace dtc {

/// The paper's bubble fraction: idle time over ideal (bubble-free) time,
/// (p-1)/m for GPipe and 1F1B, (p-1)/(v m) interleaved, for balanced stages.
/// ZB-H1's is (p-1)(F+B-W)/(m (F+B+W)): `weightShare` is W/(F+B+W), the
/// weight gradient's share of a micro-batch's time (0 elsewhere).
double bubbleFraction(Schedule schedule, int64_t stages, int64_t microBatches,
                      int64_t chunks, double weightShare = 0);

/// Micro-batches whose activations stage `stage` holds at its peak, in units
/// of the stage's whole layer count (interleaved: chunks in flight / v).
/// GPipe holds all m; 1F1B min(m, p - stage); ZB-H1 min(m, p) on every
/// stage (stage s defers s weight gradients, whose inputs it keeps: priced
/// as whole micro-batches, an upper bound; 1F1B's first stage holds as
/// many); interleaved Megatron's warm-up
/// plus one, min(m v, 2 (p - stage - 1) + (v - 1) p + 1) chunks, which makes
/// stage 0 hold L (1 + (p-1)/(p v)) layers' worth (Korthikanti et al.).
double microBatchesInFlight(Schedule schedule, int64_t stages,
                            int64_t microBatches, int64_t chunks,
                            int64_t stage);

/// Step time of the pipelined part: `stageTimes[i]` is the forward plus
/// backward time of one micro-batch on device i (all its chunks). The
/// slowest stage sets the steady-state pace; filling and draining costs the
/// sum of the other stages, divided by v when chunks interleave:
///   m max(t) + (sum(t) - max(t)) / v
/// which is (m + (p-1)/v) t for balanced stages. ZB-H1 fills with the other
/// stages' t - 2 W (`weightTimes[i]`: W of stage i), the paper's
/// (p-1)(F+B-W) for balanced stages: the deferred weight gradients run in
/// the bubble.
double pipelineTime(Schedule schedule, llvm::ArrayRef<double> stageTimes,
                    llvm::ArrayRef<double> weightTimes, int64_t microBatches,
                    int64_t chunks);
inline double pipelineTime(llvm::ArrayRef<double> stageTimes,
                           int64_t microBatches, int64_t chunks) {
  return pipelineTime(Schedule::OneFOneB, stageTimes, {}, microBatches, chunks);
}

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_PIPELINE_H
