//===- PlanView.h - A plan bundle's plan.json, read back --------*- C++ -*-===//
//
// `dtc plan show|explain|diff|report` read a bundle's plan.json, never the
// model: the plan and its prediction come back as the planner's own structs
// (ParallelPlan, Prediction), so the one-line summaries and verdicts are
// the planner's. Everything here is plain C++ over llvm::json.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_INSPECT_PLANVIEW_H
#define DTC_COMPILER_INSPECT_PLANVIEW_H

#include "compiler/costmodel/CostModel.h"
#include "compiler/costmodel/Spec.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace dtc {

/// The `mesh` section: axes outermost first; rank = row-major index.
struct MeshView {
  std::vector<std::string> axes;
  std::vector<int64_t> shape;
  int64_t epSize = 1; ///< Experts split the innermost ep ranks of dp.

  int64_t size() const;
  /// Position of `axis` in `axes`, or -1.
  int axisIndex(llvm::StringRef axis) const;
  /// Rank distance between neighbours along `axis` (0 if absent).
  int64_t stride(llvm::StringRef axis) const;
  int64_t degree(llvm::StringRef axis) const;
  /// Coordinates of `rank`, one per axis.
  std::vector<int64_t> coordinates(int64_t rank) const;
  /// The ranks that differ from `rank` only along `axis`, ascending.
  std::vector<int64_t> groupOf(int64_t rank, llvm::StringRef axis) const;
};

/// One entry of `stages`.
struct StageView {
  int64_t index = 0;
  /// [first, last] layer ranges: one, or one per chunk when interleaved.
  /// A plan of the any-graph planner (compiler/GraphPlanner.h) splits ops,
  /// not layers: `unit` says which the ranges count.
  std::vector<std::pair<int64_t, int64_t>> layers;
  std::string unit = "layers";
  bool embedding = false, output = false;
  std::vector<int64_t> ranks;
  /// Written by dtc compile since the report landed; absent in older
  /// bundles.
  std::optional<double> timePerMicroBatchS, forwardPerMicroBatchS;
  /// The weight-gradient part (W) of timePerMicroBatchS.
  std::optional<double> weightGradPerMicroBatchS;
  std::optional<MemoryBreakdown> memory;

  int64_t layerCount() const;
};

/// One entry of `alternatives`.
struct AlternativeView {
  bool counterfactual = false;
  std::string change; ///< "tp=4" for counterfactuals.
  ParallelPlan plan;
  MeshView mesh;
  Prediction predicted;
  std::string verdict;
};

struct ClusterView {
  std::string name, gpu;
  int64_t gpus = 0, gpusPerNode = 0;
  double peakTflops = 0, hbmBytes = 0, intraNodeGBps = 0, interNodeGBps = 0;
};

struct ModelView {
  std::string name;
  int64_t params = 0, parameterTensors = 0, tokensPerForward = 0;
  double flopsPerToken = 0;
};

/// A bundle's plan.json.
struct PlanView {
  std::string bundle;   ///< The directory, as given.
  std::string planPath; ///< bundle/plan.json
  std::string text;     ///< plan.json as read.
  ModelView model;
  ClusterView cluster;
  std::string mode, dtype;
  double compileTimeS = 0;

  /// False when dtc compile could not plan the model; then only model,
  /// cluster and pendingReason are set.
  bool planned = false;
  std::string pendingReason;
  ParallelPlan plan;
  MeshView mesh;
  std::vector<StageView> stages;
  Prediction predicted;
  std::vector<AlternativeView> alternatives;
  int64_t candidatesEvaluated = 0;
  double searchTimeS = 0;
  bool globalBatchDefaulted = false;

  /// Pipeline stage of `rank`.
  int64_t stageOf(int64_t rank) const;
  /// Whether every stage carries its own time and memory.
  bool hasStageDetails() const;
};

/// Reads and checks `bundle`/plan.json. A missing bundle or plan.json, bad
/// JSON, a different schema or a missing or mistyped field is a bad-input
/// error naming the file (and the field).
llvm::Expected<PlanView> loadPlanView(llvm::StringRef bundle);
/// The same from plan.json's text; `path` names it in errors.
llvm::Expected<PlanView> parsePlanView(llvm::StringRef text,
                                       llvm::StringRef path);

/// A bad-input error when the bundle holds no plan (dtc compile could not
/// plan its model), saying why.
llvm::Error requirePlanned(const PlanView &view);

// Formatting shared by the text commands and the report.

/// "1.23 s", "45.6 ms", "789 us" (three significant digits).
std::string formatSeconds(double seconds);
/// "12.3 GB", "456 MB", "66.3 KB", "12 B".
std::string formatBytes(double bytes);
/// A signed change: "+1.2 s", "-12.0 GB" (via formatSeconds/formatBytes).
std::string formatSecondsDelta(double seconds);
std::string formatBytesDelta(double bytes);
/// "175 B", "6.7 B", "124 M", "110 K" parameters.
std::string formatCount(double count);
/// Ascending ranks as runs: "0-3,8-11"; more than `maxRuns` runs end in
/// ",...".
std::string formatRanks(llvm::ArrayRef<int64_t> ranks, size_t maxRuns = 4);
/// Layer ranges: "0-11", "0-1,8-9" (interleaved chunks).
std::string formatLayers(const StageView &stage);
/// formatLayers() when at most `maxChars` long, else "16 layers, 16
/// chunks".
std::string formatLayersCompact(const StageView &stage, size_t maxChars);

} // namespace dtc

#endif // DTC_COMPILER_INSPECT_PLANVIEW_H
