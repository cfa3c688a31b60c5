//===- InstructionCost.h - The cost model per instruction ------*- C++ -*-===//
//
// Prices every instruction of a rank's program (program.pb) with the cost
// model's own primitives (Compute.h, Collectives.h) on the bundle's cluster,
// and replays one training step of the ranks' programs into a predicted
// timeline: a serial compute track, and a communication track on which each
// posted collective or transfer runs for its priced time. `dtc plan report
// --trace` draws it next to the timeline `dtc run --trace` measured
// (TraceCompare.h).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_INSPECT_INSTRUCTIONCOST_H
#define DTC_COMPILER_INSPECT_INSTRUCTIONCOST_H

#include "compiler/costmodel/Cluster.h"

#include "runtime/core/Communicator.h"
#include "runtime/proto/program.pb.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtc {

/// What one instruction costs.
struct InstructionCost {
  /// Seconds on the compute track: the kernel, or for a `dtc.*_start` and a
  /// `dtc.wait` only the call overhead (a wait's blocking comes from the
  /// replay).
  double compute = 0;
  /// Seconds a `dtc.*_start`'s collective or transfer occupies the
  /// communication track; 0 for everything else.
  double communication = 0;
};

/// Prices instructions on one cluster and mesh.
class InstructionPricer {
public:
  /// `overheadS` is added to every instruction's compute time (a kernel
  /// call's fixed cost; 0 when the cluster does not know one).
  InstructionPricer(const Cluster &cluster, runtime::Mesh mesh,
                    double overheadS = 0)
      : cluster(cluster), mesh(std::move(mesh)), overheadS(overheadS) {}

  /// The cost of instruction `inst` of `fn`. Matmuls, convolutions and
  /// fused attention are priced as GEMMs (gemmTime) and with the fused
  /// attention curve, every other kernel streams its operand and result
  /// bytes (streamTime); collectives and transfers use collectiveTime on
  /// the group the instruction's mesh axes name, placed in the cluster's
  /// NVLink domains. An unknown mesh axis is an error.
  llvm::Expected<InstructionCost> price(const program::Function &fn,
                                        const program::Instruction &inst) const;

  const Cluster &getCluster() const { return cluster; }
  const runtime::Mesh &getMesh() const { return mesh; }
  double getOverhead() const { return overheadS; }

private:
  Cluster cluster;
  runtime::Mesh mesh;
  double overheadS;
};

/// One call of a function in a step.
struct FunctionCall {
  std::string function;
  int64_t call = 0; ///< Which call of this function within the step.
};

/// The function calls of one step of `program`, in order: training runs
/// the micro-step grad_accum times (the last one `last_micro_step` when
/// set), then `apply`; inference runs its function once.
std::vector<FunctionCall> stepCalls(const program::Program &program);

/// Where an instruction of an expanded pipeline step comes from: a chunk
/// function's instruction and its run within the step, or (null) a
/// transfer between stages that the schedule adds.
struct InstructionOrigin {
  const program::Function *function = nullptr;
  int64_t index = 0, call = 0;
};

/// A pipeline step (Function.pipeline) written out as one function.
struct ExpandedStep {
  program::Function function;
  std::vector<InstructionOrigin> origins; ///< One per instruction.
};

/// The schedule of pipeline step `step` of `rank` for `microBatches`
/// (runtime/core/PipelineSchedule.h), as the executor runs it
/// (ExecutorPipeline.cpp): per pass, its chunk function's instructions
/// (value and request ids renumbered); per transfer, a send or receive
/// start and its wait where the executor posts and waits for it; then the
/// loss function. For replay and summaries; nothing runs it.
llvm::Expected<ExpandedStep>
expandPipelineStep(const program::RankProgram &rank,
                   const program::Function &step, int64_t microBatches);

/// One instruction's interval on a predicted or measured timeline.
struct TimelineEvent {
  std::string function;
  int64_t index = 0; ///< In the function's instructions.
  int64_t call = 0;  ///< Call of the function within the step.
  std::string op, loc;
  /// 0: the compute track; 1: communication (a `_start`'s operation).
  int track = 0;
  double start = 0, end = 0; ///< Seconds from the step's start.
};

/// One rank's step.
struct RankTimeline {
  int64_t rank = 0;
  std::vector<TimelineEvent> events; ///< Compute track in program order.
  double end = 0;                    ///< When its last event ends.
};

struct PredictedStep {
  std::vector<RankTimeline> ranks; ///< In the order asked for.
  double stepTimeS = 0;            ///< The latest end over the ranks.
  /// False when transfers or collectives between the ranks could not be
  /// matched (then each rank was replayed on its own).
  bool matched = true;
};

/// Replays one step (stepCalls) of `ranks`' programs. Each rank's compute
/// track runs its instructions serially; a `dtc.*_start` posts its
/// operation, which runs on the rank's communication track in post order
/// from max(post, track free) for its priced time; a `dtc.wait` blocks the
/// compute track until the operation ended. A send and its matching
/// receive (the k-th send from one rank to another and the k-th receive
/// there from it), and a collective whose group holds several of `ranks`
/// (the k-th over the same axes), start together once every side posted
/// them, off the communication track (the runtime runs transfers between
/// stages independently, and receives are posted ahead). Peers outside
/// `ranks` are assumed to be in step (SPMD ranks of one stage run the same
/// program at the same pace).
llvm::Expected<PredictedStep> predictStep(const program::Program &program,
                                          llvm::ArrayRef<int64_t> ranks,
                                          const InstructionPricer &pricer);

} // namespace dtc

#endif // DTC_COMPILER_INSPECT_INSTRUCTIONCOST_H
