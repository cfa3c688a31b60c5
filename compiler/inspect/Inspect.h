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

#include <optional>
#include <vector>

namespace dtc {

/// `dtc plan show`: the plan as a table; with `rank`, that rank's place in
/// the mesh and its program summary.
llvm::Error showPlan(const PlanView &view, std::optional<int64_t> rank,
                     llvm::raw_ostream &out);

/// `dtc plan explain`: the chosen plan, the `k` best runners-up and every
/// per-dimension counterfactual with its verdict, in sentences.
llvm::Error explainPlan(const PlanView &view, int64_t k,
                        llvm::raw_ostream &out);

/// `dtc plan diff`: what differs between `a` and `b` and the predicted
/// effect of each difference.
llvm::Error diffPlans(const PlanView &a, const PlanView &b,
                      llvm::raw_ostream &out);

/// `dtc plan report`: the HTML page.
std::string renderReport(const PlanView &view);
/// Writes renderReport(view) to `path` (atomically: a temporary file renamed
/// into place).
llvm::Error writeReport(const PlanView &view, llvm::StringRef path);

/// One forward or backward of one micro-batch (one chunk of it when
/// interleaved) on a pipeline stage, in seconds from the step's start.
struct PipelineOp {
  bool forward = true;
  int64_t chunk = 0, microBatch = 0;
  double start = 0, end = 0;
};

struct PipelineTimeline {
  std::vector<std::vector<PipelineOp>> lanes; ///< One per stage, in order.
  double makespan = 0;                        ///< When the last op ends.
  bool complete = false; ///< False if the schedule deadlocked (never).
};

/// One step of `plan`'s schedule (1F1B, interleaved 1F1B or GPipe), replayed
/// on `forward[s]` and `backward[s]`, stage s's time for one micro-batch (all
/// its chunks).
PipelineTimeline replayPipeline(const ParallelPlan &plan,
                                llvm::ArrayRef<double> forward,
                                llvm::ArrayRef<double> backward);

/// Where an axis's groups sit: "inside a node", "across nodes (1 per
/// node)", "2 per node".
std::string axisPlacement(const PlanView &view, llvm::StringRef axis);

} // namespace dtc

#endif // DTC_COMPILER_INSPECT_INSPECT_H
