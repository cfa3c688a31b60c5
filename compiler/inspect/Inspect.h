//===- Inspect.h - dtc plan show | explain | diff | report ------*- C++ -*-===//
//
// The plan inspection commands over a bundle's plan.json (PlanView.h). The
// text commands print to a stream; the report is one self-contained HTML
// page (inline CSS, SVG and script; no network requests).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_INSPECT_INSPECT_H
#define DTC_COMPILER_INSPECT_INSPECT_H

#include "compiler/inspect/PlanView.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtc {

/// `dtc plan show`: the plan as a table; with `rank`, that rank's place in
/// the mesh and its program summary.
llvm::Error showPlan(const PlanView &view, std::optional<int64_t> rank,
                     llvm::raw_ostream &out);

/// Collectives of one kind over one group (mesh axes) in one function.
struct CollectiveSummary {
  std::string kind; ///< "all_reduce", "all_gather", ...
  std::string axes; ///< "tp", "dp,tp"
  int64_t count = 0;
  int64_t bytes = 0;                 ///< Input bytes of all of them.
  std::map<int64_t, int64_t> bySize; ///< Input bytes -> count.
};

/// Sends or receives to one peer (axis and offset) in one function.
struct TransferSummary {
  std::string kind; ///< "send" or "recv"
  std::string axis;
  int64_t peerOffset = 0;
  int64_t count = 0;
  int64_t bytes = 0;
};

struct FunctionSummary {
  std::string name;
  int64_t instructions = 0, compute = 0, collectives = 0, transfers = 0,
          waits = 0;
  /// Compute ops (without "dtc."), most frequent first, ties by name.
  std::vector<std::pair<std::string, int64_t>> ops;
  std::vector<CollectiveSummary> collectiveGroups; ///< By kind, then axes.
  std::vector<TransferSummary> transferGroups;     ///< By kind, axis, offset.
  int64_t arenaBytes = 0, liveBytesPeak = 0, temporariesBytes = 0;
  /// A pipeline step: its schedule ("1f1b over 4 micro-batches, stage 1 of
  /// 2") and its passes per step; the counts above are then those of one
  /// step as the schedule runs it (chunk functions, transfers, loss).
  std::string schedule;
  int64_t passes = 0;
};

struct RoleSummary {
  std::string role;
  int64_t count = 0, bytes = 0;
};

/// What one rank runs, from program.pb.
struct RankProgramSummary {
  std::string path, mode, mesh;
  int64_t worldSize = 1, rank = 0;
  std::vector<int64_t> sharedWith; ///< Every rank that runs this program.
  /// The rank's coordinates in the program's mesh, outermost first.
  std::vector<std::pair<std::string, int64_t>> coordinates;
  std::optional<int64_t> stage; ///< Its pp coordinate, when there is a pp.
  int64_t stages = 1;
  int64_t variables = 0, variableBytes = 0, constants = 0;
  std::vector<RoleSummary> roles; ///< parameter, grad, exp_avg, exp_avg_sq.
  std::vector<FunctionSummary> functions;
};

/// Summarizes the program that `rank` runs in `bundle`/program.pb; nullopt
/// when the bundle has no program.pb. A rank outside the program's world, an
/// unreadable program or one without a program for `rank` is a bad-input
/// error naming program.pb.
llvm::Expected<std::optional<RankProgramSummary>>
summarizeRankProgram(llvm::StringRef bundle, int64_t rank);
void printRankProgram(const RankProgramSummary &summary,
                      llvm::raw_ostream &out);

/// `dtc plan explain`: the chosen plan, the `k` best runners-up and every
/// per-dimension counterfactual with its verdict, in sentences.
llvm::Error explainPlan(const PlanView &view, int64_t k,
                        llvm::raw_ostream &out);

/// `dtc plan diff`: what differs between `a` and `b` and the predicted
/// effect of each difference.
llvm::Error diffPlans(const PlanView &a, const PlanView &b,
                      llvm::raw_ostream &out);

struct TraceComparison; // TraceCompare.h

/// `dtc plan report`: the HTML page; with `trace` (`--trace DIR`), a
/// "Predicted vs measured" section sets the step `dtc run --trace` measured
/// against the cost model's replay of it.
std::string renderReport(const PlanView &view,
                         const TraceComparison *trace = nullptr);
/// Writes renderReport(view, trace) to `path` (atomically: a temporary file
/// renamed into place).
llvm::Error writeReport(const PlanView &view, llvm::StringRef path,
                        const TraceComparison *trace = nullptr);

/// One forward or backward of one micro-batch (one chunk of it when
/// interleaved) on a pipeline stage, in seconds from the step's start.
struct PipelineOp {
  bool forward = true;
  bool weight = false; ///< A zero-bubble schedule's weight-gradient pass.
  int64_t chunk = 0, microBatch = 0;
  double start = 0, end = 0;
};

struct PipelineTimeline {
  std::vector<std::vector<PipelineOp>> lanes; ///< One per stage, in order.
  double makespan = 0;                        ///< When the last op ends.
  bool complete = false; ///< False if the schedule deadlocked (never).
};

/// One step of `plan`'s schedule (1F1B, interleaved 1F1B, GPipe or ZB-H1),
/// replayed on `forward[s]` and `backward[s]`, stage s's time for one
/// micro-batch (all its chunks); a zero-bubble schedule runs `weight[s]` of
/// the backward as its own pass (the input-gradient pass the rest).
PipelineTimeline replayPipeline(const ParallelPlan &plan,
                                llvm::ArrayRef<double> forward,
                                llvm::ArrayRef<double> backward,
                                llvm::ArrayRef<double> weight = {});

/// Where an axis's groups sit: "inside a node", "across nodes (1 per
/// node)", "2 per node".
std::string axisPlacement(const PlanView &view, llvm::StringRef axis);

} // namespace dtc

#endif // DTC_COMPILER_INSPECT_INSPECT_H
