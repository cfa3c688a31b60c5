//===- PipelineSchedule.cpp - The order a pipeline stage runs -------------===//

#include "runtime/core/PipelineSchedule.h"
#include "runtime/proto/program.pb.h"
#include "runtime/support/Error.h"
#include "runtime/support/ParallelPlan.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

namespace dtc::runtime {

namespace {

llvm::Error shapeError(const llvm::Twine &message) {
  return dtc::failureText("pipeline: " + message);
}

/// Who talks to whom: what a pass reads from other stages and what it
/// sends to them (with the receiving stage).
struct Traffic {
  const PipelineShape &shape;

  int64_t ownerOf(int64_t chunk) const { return chunk % shape.stages; }
  /// The stage that sends `m`: the previous chunk's for an activation, the
  /// next chunk's for a gradient.
  int64_t senderOf(const PipelineMessage &m) const {
    return ownerOf(m.kind == PipelineMessage::Activation ? m.chunk - 1
                                                         : m.chunk + 1);
  }
  void exchanges(
      int64_t stage, const PipelinePass &p,
      llvm::SmallVectorImpl<PipelineMessage> &in,
      llvm::SmallVectorImpl<std::pair<PipelineMessage, int64_t>> &out) const {
    if (p.kind == PipelinePass::BackwardWeight)
      return; // reads what its input-gradient pass kept, sends nothing
    int64_t c = shape.modelChunk(stage, p.chunk);
    bool first = c == 0, last = c == shape.chunks() - 1;
    if (p.kind == PipelinePass::Forward) {
      if (last)
        return; // the last chunk's backward runs its forward
      if (!first)
        in.push_back({PipelineMessage::Activation, c, p.micro});
      out.push_back(
          {{PipelineMessage::Activation, c + 1, p.micro}, ownerOf(c + 1)});
      return;
    }
    if (last && !first)
      in.push_back({PipelineMessage::Activation, c, p.micro});
    if (!last)
      in.push_back({PipelineMessage::Gradient, c, p.micro});
    if (!first)
      out.push_back(
          {{PipelineMessage::Gradient, c - 1, p.micro}, ownerOf(c - 1)});
  }
};

PipelineAction::Kind actionOf(PipelinePass::Kind kind) {
  switch (kind) {
  case PipelinePass::Forward:
    return PipelineAction::Forward;
  case PipelinePass::Backward:
    return PipelineAction::Backward;
  case PipelinePass::BackwardInput:
    return PipelineAction::BackwardInput;
  case PipelinePass::BackwardWeight:
    return PipelineAction::BackwardWeight;
  }
  return PipelineAction::Backward;
}

} // namespace

PipelineShape pipelineShapeOf(const program::Pipeline &pipeline,
                              int64_t microBatches) {
  PipelineShape shape;
  shape.schedule = pipeline.schedule();
  shape.stages = pipeline.stages();
  shape.virtualStages = std::max(1, pipeline.virtual_stages());
  shape.microBatches = microBatches;
  return shape;
}

MessageReader messageReader(const program::Pipeline &pipeline,
                            const PipelineShape &shape,
                            const PipelineMessage &message) {
  const program::PipelineChunk &chunk =
      pipeline.chunks(static_cast<int>(message.chunk / shape.stages));
  bool last = message.chunk == shape.chunks() - 1;
  if (message.kind == PipelineMessage::Activation)
    return {last ? &chunk.backward() : &chunk.forward(), false};
  return {&chunk.backward(), true};
}

llvm::Error checkPipelineShape(const PipelineShape &shape) {
  std::optional<Schedule> schedule = parseSchedule(shape.schedule);
  // "interleaved" is 1f1b with virtual stages in a program.
  if (!schedule || *schedule == Schedule::Interleaved)
    return shapeError(llvm::formatv("schedule '{0}' is not known (1f1b, its "
                                    "interleaved form with virtual stages, "
                                    "gpipe and zb-h1 are)",
                                    shape.schedule));
  if (shape.stages < 1 || shape.virtualStages < 1 || shape.microBatches < 1)
    return shapeError(llvm::formatv("{0} stages x {1} virtual stages over {2} "
                                    "micro-batches cannot run",
                                    shape.stages, shape.virtualStages,
                                    shape.microBatches));
  if (shape.virtualStages > 1 && *schedule != Schedule::OneFOneB)
    return shapeError(llvm::formatv("virtual stages (vpp={0}) need the 1f1b "
                                    "schedule, not {1}",
                                    shape.virtualStages, shape.schedule));
  if (shape.virtualStages > 1 && shape.microBatches % shape.stages != 0)
    return shapeError(llvm::formatv(
        "the interleaved schedule runs micro-batches in groups of pp={0}, "
        "but there are {1}; pick a global batch giving a multiple of {0} "
        "micro-batches",
        shape.stages, shape.microBatches));
  return llvm::Error::success();
}

std::vector<PipelinePass> pipelinePasses(const PipelineShape &shape,
                                         int64_t stage) {
  const int64_t stages = shape.stages, vpp = shape.virtualStages,
                micro = shape.microBatches;
  std::vector<PipelinePass> order;
  const Schedule schedule =
      parseSchedule(shape.schedule).value_or(Schedule::OneFOneB);
  if (schedule == Schedule::GPipe) {
    for (int64_t i = 0; i < micro; ++i)
      order.push_back({PipelinePass::Forward, 0, i});
    for (int64_t i = 0; i < micro; ++i)
      order.push_back({PipelinePass::Backward, 0, i});
    return order;
  }
  // 1F1B, and its interleaved form (Megatron-LM's): the passes go through
  // micro-batches in groups of `stages`, each group through every chunk in
  // turn (backward in reverse chunk order). The warmup fills the pipeline,
  // then one forward and one backward alternate, so at most about
  // `stages - stage` micro-batches (times the chunks) are in flight.
  const int64_t total = micro * vpp;
  const int64_t round = stages * vpp;
  auto pass = [&](PipelinePass::Kind kind, int64_t id) {
    int64_t chunk = (id % round) / stages;
    if (kind != PipelinePass::Forward)
      chunk = vpp - 1 - chunk;
    return PipelinePass{kind, chunk, id / round * stages + id % stages};
  };
  int64_t warmup =
      vpp == 1 ? std::min(stages - stage - 1, micro)
               : std::min((stages - stage - 1) * 2 + (vpp - 1) * stages, total);
  // ZB-H1 (Qi et al., 2024): the same forwards and input gradients; stage
  // s runs the weight gradient of micro-batch i after the input gradient
  // of i + s, so the input gradients race up the pipeline and the deferred
  // weight gradients fill the bubble the upstream stages would wait in.
  // Every stage then holds up to p micro-batches' weight-gradient inputs,
  // the peak 1F1B's first stage has.
  const bool zeroBubble = splitsBackward(schedule);
  const int64_t delay = stage;
  int64_t weights = 0; // weight-gradient passes emitted
  auto backward = [&](int64_t id) {
    if (!zeroBubble) {
      order.push_back(pass(PipelinePass::Backward, id));
      return;
    }
    order.push_back(pass(PipelinePass::BackwardInput, id));
    if (id - delay >= 0)
      order.push_back(pass(PipelinePass::BackwardWeight, weights++));
  };
  for (int64_t id = 0; id < warmup; ++id)
    order.push_back(pass(PipelinePass::Forward, id));
  for (int64_t id = 0; id + warmup < total; ++id) {
    order.push_back(pass(PipelinePass::Forward, id + warmup));
    backward(id);
  }
  for (int64_t id = total - warmup; id < total; ++id)
    backward(id);
  while (zeroBubble && weights < total)
    order.push_back(pass(PipelinePass::BackwardWeight, weights++));
  return order;
}

llvm::Expected<std::vector<std::vector<PipelineAction>>>
pipelineActions(const PipelineShape &shape, bool overlap) {
  if (llvm::Error e = checkPipelineShape(shape))
    return std::move(e);
  const int64_t stages = shape.stages;
  std::vector<std::vector<PipelinePass>> passes;
  for (int64_t s = 0; s < stages; ++s)
    passes.push_back(pipelinePasses(shape, s));
  Traffic traffic{shape};

  // Run every stage's passes against the others and record each channel's
  // order: messages from stage `from` to stage `to`, as `from` sends them.
  std::map<std::pair<int64_t, int64_t>, std::vector<PipelineMessage>> channels;
  {
    std::set<PipelineMessage> sent;
    std::vector<size_t> next(stages, 0);
    llvm::SmallVector<PipelineMessage, 2> in;
    llvm::SmallVector<std::pair<PipelineMessage, int64_t>, 2> out;
    for (bool progress = true; progress;) {
      progress = false;
      for (int64_t s = 0; s < stages; ++s) {
        while (next[s] < passes[s].size()) {
          in.clear();
          out.clear();
          traffic.exchanges(s, passes[s][next[s]], in, out);
          if (!llvm::all_of(in, [&](const PipelineMessage &m) {
                return sent.count(m) != 0;
              }))
            break;
          for (auto &[m, to] : out) {
            sent.insert(m);
            channels[{s, to}].push_back(m);
          }
          ++next[s];
          progress = true;
        }
      }
    }
    for (int64_t s = 0; s < stages; ++s)
      if (next[s] < passes[s].size())
        return shapeError(llvm::formatv("the schedule deadlocks at stage {0}, "
                                        "pass {1} of {2}",
                                        s, next[s], passes[s].size()));
  }

  std::vector<std::vector<PipelineAction>> actions(stages);
  for (int64_t s = 0; s < stages; ++s) {
    std::vector<PipelineAction> &list = actions[s];
    std::set<PipelineMessage> posted;
    std::map<int64_t, size_t> postedUpTo; // sender -> messages posted
    // Posts the receives from m's sender up to m, in the sender's order.
    auto post = [&](const PipelineMessage &m) {
      int64_t from = traffic.senderOf(m);
      const std::vector<PipelineMessage> &channel = channels[{from, s}];
      size_t &n = postedUpTo[from];
      while (!posted.count(m) && n < channel.size()) {
        const PipelineMessage &next = channel[n++];
        posted.insert(next);
        PipelineAction a;
        a.kind = PipelineAction::PostReceive;
        a.message = next;
        a.peer = from - s;
        list.push_back(a);
      }
    };
    auto receive = [&](const PipelineMessage &m) {
      post(m);
      PipelineAction a;
      a.kind = PipelineAction::WaitReceive;
      a.message = m;
      list.push_back(a);
    };
    llvm::SmallVector<PipelineMessage, 2> in;
    llvm::SmallVector<std::pair<PipelineMessage, int64_t>, 2> out;
    bool sends = false;
    // Input-gradient passes run, whose weight-gradient pass may follow.
    std::set<std::pair<int64_t, int64_t>> inputGradients;
    for (size_t index = 0; index < passes[s].size(); ++index) {
      const PipelinePass &p = passes[s][index];
      if (p.kind == PipelinePass::BackwardInput)
        inputGradients.insert({p.chunk, p.micro});
      if (p.kind == PipelinePass::BackwardWeight &&
          !inputGradients.erase({p.chunk, p.micro}))
        return shapeError(llvm::formatv("stage {0} runs the weight gradient "
                                        "of micro-batch {1} before its input "
                                        "gradient",
                                        s, p.micro));
      int64_t c = shape.modelChunk(s, p.chunk);
      if (p.kind == PipelinePass::Forward && c == shape.chunks() - 1)
        continue; // the last chunk's backward runs its forward
      in.clear();
      out.clear();
      traffic.exchanges(s, p, in, out);
      for (const PipelineMessage &m : in)
        receive(m);
      // The next pass that reads messages (weight-gradient passes read
      // none): its receives are posted before this pass computes.
      size_t ahead = index + 1;
      while (ahead < passes[s].size() &&
             passes[s][ahead].kind == PipelinePass::BackwardWeight)
        ++ahead;
      if (overlap && ahead < passes[s].size()) {
        llvm::SmallVector<PipelineMessage, 2> nextIn;
        llvm::SmallVector<std::pair<PipelineMessage, int64_t>, 2> nextOut;
        traffic.exchanges(s, passes[s][ahead], nextIn, nextOut);
        for (const PipelineMessage &m : nextIn)
          post(m);
      }
      PipelineAction run;
      run.kind = actionOf(p.kind);
      run.chunk = p.chunk;
      run.micro = p.micro;
      list.push_back(run);
      for (auto &[m, to] : out) {
        PipelineAction a;
        a.kind = PipelineAction::Send;
        a.message = m;
        a.peer = to - s;
        list.push_back(a);
        sends = true;
      }
    }
    if (!inputGradients.empty())
      return shapeError(llvm::formatv("stage {0} leaves {1} weight gradients "
                                      "unrun",
                                      s, inputGradients.size()));
    if (sends) {
      PipelineAction a;
      a.kind = PipelineAction::WaitSends;
      list.push_back(a);
    }
  }
  return actions;
}

std::string passName(const PipelineShape &shape, int64_t stage,
                     const PipelinePass &pass) {
  const char *letter = pass.kind == PipelinePass::Forward          ? "F"
                       : pass.kind == PipelinePass::BackwardWeight ? "W"
                                                                   : "B";
  return llvm::formatv("{0}{1}.{2}", letter,
                       shape.modelChunk(stage, pass.chunk), pass.micro)
      .str();
}

} // namespace dtc::runtime
