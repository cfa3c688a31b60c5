//===- Pipeline.h - Pipeline schedules --------------------------*- C++ -*-===//
//
// GPipe, 1F1B (PipeDream-Flush) and interleaved 1F1B (Narayanan et al.,
// SC'21): how long a step takes given each stage's per-micro-batch time, how
// much of it is bubble, and how many micro-batches' activations a stage holds.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_PIPELINE_H
#define DTC_COMPILER_COSTMODEL_PIPELINE_H

#include "compiler/costmodel/Spec.h"

#include "llvm/ADT/ArrayRef.h"

namespace dtc {

/// The paper's bubble fraction: idle time over ideal (bubble-free) time,
/// (p-1)/m for GPipe and 1F1B, (p-1)/(v m) interleaved, for balanced stages.
double bubbleFraction(Schedule schedule, int64_t stages, int64_t microBatches,
                      int64_t chunks);

/// Micro-batches whose activations stage `stage` holds at its peak, in units
/// of the stage's whole layer count (interleaved: chunks in flight / v).
/// GPipe holds all m; 1F1B min(m, p - stage); interleaved Megatron's warm-up
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
/// which is (m + (p-1)/v) t for balanced stages.
double pipelineTime(llvm::ArrayRef<double> stageTimes, int64_t microBatches,
                    int64_t chunks);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_PIPELINE_H
