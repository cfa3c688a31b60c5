//===- TraceCompare.h - Predicted vs measured step timelines ----*- C++ -*-===//
//
// `dtc plan report BUNDLE --trace DIR`: reads the per-rank Chrome traces
// `dtc run --trace DIR` wrote (docs/observability.md, "Trace files"), picks
// one step, and sets it against the cost model's replay of the same step
// (InstructionCost.h): one representative rank per pipeline stage, and the
// instructions whose measured time differs most from their predicted time.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_INSPECT_TRACECOMPARE_H
#define DTC_COMPILER_INSPECT_TRACECOMPARE_H

#include "compiler/inspect/InstructionCost.h"
#include "compiler/inspect/PlanView.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtc {

/// One rank's trace file, read back.
struct RankTrace {
  std::string path;
  int64_t rank = 0, worldSize = 1;
  std::string mesh, status;
  /// Optimizer step -> [start, end] in seconds on the run's shared clock.
  std::map<int64_t, std::pair<double, double>> steps;
  /// Every instruction event (compute and communication tracks), seconds
  /// on the shared clock; `call` is the trace's `call` argument (0 when
  /// absent).
  struct Event {
    int64_t step = 0;
    TimelineEvent event;
  };
  std::vector<Event> events;
};

/// Parses one `dtc.trace/1` file's text; `path` names it in errors. Bad
/// JSON, another schema or a malformed event is a bad-input error naming
/// `path`.
llvm::Expected<RankTrace> parseRankTrace(llvm::StringRef text,
                                         llvm::StringRef path);

/// The step to compare among the complete steps of every trace: the one
/// of median duration (the span from the first rank's start to the last
/// rank's end), leaving out the first step when there are three or more
/// (it warms up). nullopt when no step is in every trace.
std::optional<int64_t> pickStep(llvm::ArrayRef<RankTrace> traces);

/// One instruction of one rank over the compared step.
struct InstructionDeviation {
  int64_t rank = 0, stage = 0;
  std::string function, op, loc;
  int64_t index = 0, calls = 0;
  double predictedS = 0, measuredS = 0;
};

struct StageComparison {
  int64_t stage = 0, rank = 0;
  RankTimeline predicted, measured; ///< Seconds from the step's start.
};

struct TraceComparison {
  std::string dir;
  std::string clusterName;
  double overheadS = 0; ///< Per kernel call, from the cluster.
  int64_t step = 0;     ///< The compared step.
  int64_t stepsInTrace = 0;
  double measuredStepS = 0, predictedStepS = 0;
  bool matched = true; ///< See PredictedStep::matched.
  std::vector<StageComparison> stages;
  /// Every instruction of the representative ranks, largest
  /// |measured - predicted| first.
  std::vector<InstructionDeviation> deviations;
  /// The median over kernels (not posts or waits) of |measured / predicted
  /// - 1|, each weighted by its measured time; nullopt without kernels.
  std::optional<double> medianKernelError;
};

/// Compares `view`'s bundle (its program.pb) with the traces in `dir`.
/// `cluster` overrides the cluster the bundle was compiled for (a preset
/// or a dtc.cluster/1 file); empty: plan.json's cluster.spec, else (older
/// bundles) its cluster name as a preset. Each call is charged the
/// cluster's kernel_overhead_us. Missing or unreadable trace files, bad JSON
/// and a trace of another bundle (world size, mesh, instructions) are bad-input
/// errors naming the file.
llvm::Expected<TraceComparison> compareTrace(const PlanView &view,
                                             llvm::StringRef dir,
                                             llvm::StringRef cluster = "");

/// The weighted median of `values` (value, weight): the smallest value at
/// which the cumulative weight reaches half the total; nullopt when the
/// total weight is 0.
std::optional<double>
weightedMedian(std::vector<std::pair<double, double>> values);

/// `trace    step 3: measured 12.3 ms, predicted 10.1 ms (x1.22); largest
/// deviation dtc.matmul at '/h.0/mlp/MatMul' (...)`: the kernel (not a post
/// or a wait) with the largest |measured - predicted|, and the median
/// kernel error.
std::string traceSummaryLine(const TraceComparison &comparison);

} // namespace dtc

#endif // DTC_COMPILER_INSPECT_TRACECOMPARE_H
