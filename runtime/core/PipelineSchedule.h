//===- PipelineSchedule.h - The order a pipeline stage runs -----*- C++ -*-===//
//
// A pipeline step is data, not code (docs/runtime.md, "Pipeline
// schedules"): each stage's program holds every one of its model chunks'
// forward and backward pass once, and this file derives, from the schedule
// kind, the stage count, the virtual stages and the number of
// micro-batches, the action list a stage runs: which pass of which
// micro-batch through which chunk, and when each activation and gradient is
// received and sent. The compiler calls it to prove its plan cannot
// deadlock; the executor calls it to run a step, with as many
// micro-batches as the data it is given holds. One definition for both.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_PIPELINESCHEDULE_H
#define DTC_RUNTIME_CORE_PIPELINESCHEDULE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace dtc::program {
class Pipeline;
} // namespace dtc::program

namespace dtc::runtime {

/// The shape of a pipeline: model chunk c (of stages * virtualStages) runs
/// on stage c % stages, as its local chunk c / stages (Megatron-LM's
/// interleaved placement; one chunk per stage without virtual stages).
struct PipelineShape {
  /// scheduleName() of a dtc::Schedule: "1f1b" (interleaved with vpp > 1),
  /// "gpipe", "zb-h1".
  std::string schedule = "1f1b";
  int64_t stages = 1;
  int64_t virtualStages = 1;
  int64_t microBatches = 1;

  int64_t chunks() const { return stages * virtualStages; }
  /// The model chunk of `stage`'s local chunk `local`.
  int64_t modelChunk(int64_t stage, int64_t local) const {
    return local * stages + stage;
  }
};

/// The shape of a program's pipeline step (Function.pipeline) run over
/// `microBatches`.
PipelineShape pipelineShapeOf(const program::Pipeline &pipeline,
                              int64_t microBatches);

/// Errors (bad input) when the schedule cannot run this shape: an unknown
/// kind, virtual stages outside 1F1B, or an interleaved schedule whose
/// micro-batches are not a multiple of the stages.
llvm::Error checkPipelineShape(const PipelineShape &shape);

/// One pass of a stage: the forward or backward of micro-batch `micro`
/// through its local chunk `chunk`. Zero-bubble schedules run each
/// backward as its input-gradient pass (what the previous stage waits for)
/// and, later, its weight-gradient pass (what only the accumulators read).
struct PipelinePass {
  enum Kind : uint8_t { Forward, Backward, BackwardInput, BackwardWeight };
  Kind kind = Forward;
  int64_t chunk = 0, micro = 0;
};

/// The passes of `stage` in schedule order: GPipe (all forwards, then all
/// backwards), 1F1B, Megatron-LM's interleaved 1F1B, or ZB-H1 (1F1B's
/// forwards and input gradients, stage s deferring each weight gradient by
/// s micro-batches: Qi et al.'s ZB-H1 at 1F1B's peak memory).
std::vector<PipelinePass> pipelinePasses(const PipelineShape &shape,
                                         int64_t stage);

/// An activation into model chunk `chunk` or the gradient of its output,
/// for micro-batch `micro`.
struct PipelineMessage {
  enum Kind : uint8_t { Activation, Gradient };
  Kind kind = Activation;
  int64_t chunk = 0, micro = 0;
  auto key() const { return std::make_tuple(kind, chunk, micro); }
  bool operator<(const PipelineMessage &o) const { return key() < o.key(); }
  bool operator==(const PipelineMessage &o) const { return key() == o.key(); }
};

/// Where a message to this stage lands: argument `argument` of the pass
/// function `function` of the stage's local chunk (an activation: the
/// first argument of the chunk's forward pass, of its step on the last
/// model chunk; a gradient: the last argument of its backward pass).
struct MessageReader {
  const std::string *function = nullptr;
  bool lastArgument = false;
};
MessageReader messageReader(const program::Pipeline &pipeline,
                            const PipelineShape &shape,
                            const PipelineMessage &message);

/// One step of a stage's action list.
struct PipelineAction {
  enum Kind : uint8_t {
    /// Post the receive of `message` from the stage `peer` away.
    PostReceive,
    /// Wait until `message` has arrived.
    WaitReceive,
    /// The forward pass of `micro` through local chunk `chunk`: reads the
    /// received activation (not on the first model chunk), keeps what its
    /// backward pass reads and leaves its output to send.
    Forward,
    /// Its backward pass: reads what the forward pass kept and the
    /// received gradient, adds the parameter gradients to the accumulators
    /// and leaves the input's gradient to send. On the last model chunk the
    /// forward pass, loss and backward pass in one.
    Backward,
    /// Zero-bubble schedules: the backward's input-gradient part (B), as
    /// Backward but without the parameter gradients; it keeps what its
    /// weight-gradient part reads.
    BackwardInput,
    /// The weight-gradient part (W): reads what BackwardInput kept and adds
    /// the parameter gradients to the accumulators; no messages.
    BackwardWeight,
    /// Send what the previous pass left (`message`) to the stage `peer`
    /// away.
    Send,
    /// Wait for every send of the step (the step's last action).
    WaitSends,
  };
  Kind kind = Forward;
  int64_t chunk = 0, micro = 0; ///< Forward/Backward: local chunk, micro-batch
  PipelineMessage message;      ///< PostReceive/WaitReceive/Send
  int64_t peer = 0;             ///< PostReceive/Send: stage offset
};

/// The action list of every stage. Each pair of stages matches its
/// messages in the order they are posted (as MPI and NCCL do), so a
/// receiver posts its receives from a sender in the order the sender sends
/// them, ahead of use when needed. The stages are simulated against each
/// other (sends never block, a pass waits for the messages it reads): an
/// error names the stage that would wait forever. With `overlap`, the
/// receives of the next pass are posted before a pass computes, so its
/// input arrives meanwhile.
llvm::Expected<std::vector<std::vector<PipelineAction>>>
pipelineActions(const PipelineShape &shape, bool overlap);

/// "F3.1": the forward of micro-batch 1 through model chunk 3 ("B" for a
/// backward or its input-gradient part, "W" for its weight-gradient part),
/// the notation of `dtc plan show --rank` and of the docs.
std::string passName(const PipelineShape &shape, int64_t stage,
                     const PipelinePass &pass);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_PIPELINESCHEDULE_H
