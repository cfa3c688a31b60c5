//===- Timeline.cpp - One step of a pipeline schedule, replayed -----------===//
//
// The cost model prices a pipeline with a closed formula; the report draws
// it. This replays the schedule op by op on the predicted stage times: each
// stage runs its ops in the schedule's order, each op as soon as its input
// is ready, so the bubbles fall where the schedule puts them.
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/Inspect.h"

#include <algorithm>

using namespace dtc;

PipelineTimeline dtc::replayPipeline(const ParallelPlan &plan,
                                     llvm::ArrayRef<double> forward,
                                     llvm::ArrayRef<double> backward) {
  const int64_t p = plan.pp, m = std::max<int64_t>(plan.microBatches(), 1);
  // Megatron interleaves only when the micro-batches fill whole rounds of
  // p; otherwise the stage's chunks run as one.
  const bool interleaved = plan.vpp > 1 && m % p == 0;
  const int64_t v = interleaved ? plan.vpp : 1;
  const int64_t total = m * v;
  PipelineTimeline timeline;
  timeline.lanes.resize(p);
  // Megatron's order: the k-th forward (backward) of a stage takes chunk
  // (k / p) % v (reversed for backward) of micro-batch (k / pv) p + k % p.
  auto op = [&](bool isForward, int64_t k) {
    if (!interleaved)
      return PipelineOp{isForward, 0, k};
    int64_t chunk = (k / p) % v;
    return PipelineOp{isForward, isForward ? chunk : v - 1 - chunk,
                      (k / (p * v)) * p + k % p};
  };
  for (int64_t s = 0; s < p; ++s) {
    std::vector<PipelineOp> &lane = timeline.lanes[s];
    // Forwards before the first backward: all of them for GPipe; for 1F1B
    // the stages downstream; interleaved, Megatron's warm-up.
    int64_t warmup = plan.schedule == Schedule::GPipe ? total
                     : interleaved ? (p - s - 1) * 2 + (v - 1) * p
                                   : p - s - 1;
    warmup = std::min(warmup, total);
    for (int64_t k = 0; k < warmup; ++k)
      lane.push_back(op(true, k));
    for (int64_t k = 0; k < total - warmup; ++k) {
      lane.push_back(op(true, warmup + k));
      lane.push_back(op(false, k));
    }
    for (int64_t k = total - warmup; k < total; ++k)
      lane.push_back(op(false, k));
  }

  // Finish times by virtual stage (chunk * p + stage) and micro-batch; -1
  // until done. A forward needs the previous virtual stage's forward of its
  // micro-batch, a backward the next one's backward (the last virtual
  // stage's backward, its own forward).
  const int64_t stages = p * v;
  std::vector<double> forwardDone(stages * m, -1), backwardDone(stages * m, -1);
  std::vector<size_t> next(p, 0);
  std::vector<double> clock(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < p; ++s) {
      std::vector<PipelineOp> &lane = timeline.lanes[s];
      while (next[s] < lane.size()) {
        PipelineOp &o = lane[next[s]];
        int64_t vs = o.chunk * p + s;
        double ready = 0;
        if (o.forward && vs > 0)
          ready = forwardDone[(vs - 1) * m + o.microBatch];
        else if (!o.forward)
          ready = vs + 1 < stages ? backwardDone[(vs + 1) * m + o.microBatch]
                                  : forwardDone[vs * m + o.microBatch];
        if (ready < 0)
          break;
        o.start = std::max(clock[s], ready);
        o.end = o.start +
                (o.forward ? forward[s] : backward[s]) / static_cast<double>(v);
        clock[s] = o.end;
        (o.forward ? forwardDone : backwardDone)[vs * m + o.microBatch] = o.end;
        ++next[s];
        progress = true;
      }
    }
  }
  timeline.complete = true;
  for (int64_t s = 0; s < p; ++s) {
    if (next[s] != timeline.lanes[s].size())
      timeline.complete = false;
    timeline.makespan = std::max(timeline.makespan, clock[s]);
  }
  return timeline;
}
