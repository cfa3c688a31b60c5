//===- Timeline.cpp - One step of a pipeline schedule, replayed -----------===//
//
// The cost model prices a pipeline with a closed formula; the report draws
// it. This replays the schedule op by op on the predicted stage times: each
// stage runs its ops in the schedule's order, each op as soon as its input
// is ready, so the bubbles fall where the schedule puts them.
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/Inspect.h"
#include "runtime/core/PipelineSchedule.h"

#include <algorithm>

using namespace dtc;

PipelineTimeline dtc::replayPipeline(const ParallelPlan &plan,
                                     llvm::ArrayRef<double> forward,
                                     llvm::ArrayRef<double> backward,
                                     llvm::ArrayRef<double> weight) {
  const int64_t p = plan.pp, m = std::max<int64_t>(plan.microBatches(), 1);
  // Megatron interleaves only when the micro-batches fill whole rounds of
  // p; otherwise the stage's chunks run as one.
  const bool interleaved =
      plan.vpp > 1 && m % p == 0 && plan.schedule != Schedule::GPipe;
  const int64_t v = interleaved ? plan.vpp : 1;
  PipelineTimeline timeline;
  timeline.lanes.resize(p);
  // Each stage's passes in the order the executor runs them (one
  // definition: runtime/core/PipelineSchedule.h).
  runtime::PipelineShape shape;
  shape.schedule =
      scheduleName(plan.schedule == Schedule::Interleaved ? Schedule::OneFOneB
                                                          : plan.schedule)
          .str();
  const bool split = splitsBackward(plan.schedule);
  auto weightOf = [&](int64_t s) {
    return split && s < static_cast<int64_t>(weight.size()) ? weight[s] : 0.0;
  };
  shape.stages = p;
  shape.virtualStages = v;
  shape.microBatches = m;
  for (int64_t s = 0; s < p; ++s)
    for (const runtime::PipelinePass &pass : runtime::pipelinePasses(shape, s))
      timeline.lanes[s].push_back(
          PipelineOp{pass.kind == runtime::PipelinePass::Forward,
                     pass.kind == runtime::PipelinePass::BackwardWeight,
                     pass.chunk, pass.micro});

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
        if (o.weight)
          ready = backwardDone[vs * m + o.microBatch]; // its input gradient
        else if (o.forward && vs > 0)
          ready = forwardDone[(vs - 1) * m + o.microBatch];
        else if (!o.forward)
          ready = vs + 1 < stages ? backwardDone[(vs + 1) * m + o.microBatch]
                                  : forwardDone[vs * m + o.microBatch];
        if (ready < 0)
          break;
        o.start = std::max(clock[s], ready);
        double time = o.forward  ? forward[s]
                      : o.weight ? weightOf(s)
                                 : backward[s] - weightOf(s);
        o.end = o.start + time / static_cast<double>(v);
        clock[s] = o.end;
        if (!o.weight)
          (o.forward ? forwardDone : backwardDone)[vs * m + o.microBatch] =
              o.end;
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
