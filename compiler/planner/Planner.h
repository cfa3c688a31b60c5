//===- Planner.h - Search for the fastest parallel plan ---------*- C++ -*-===//
//
// searchPlan() enumerates every parallel plan of a transformer on a cluster
// (dp, tp, pp, cp, ep, vpp, ZeRO stage, micro-batch, recompute, sequence
// parallelism and the mesh order), prices each with the cost model and keeps
// the fastest one that fits in memory, the runners-up and, per dimension, the
// best plan with each other value (the explanation). The search is
// exhaustive with pruning that cannot drop an optimum: docs/planner.md.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_PLANNER_PLANNER_H
#define DTC_COMPILER_PLANNER_PLANNER_H

#include "compiler/costmodel/Cluster.h"
#include "compiler/costmodel/CostModel.h"
#include "compiler/costmodel/Spec.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtc {

/// Values the user fixed on the command line; the rest is searched.
struct PlanPins {
  std::optional<int64_t> dp, tp, pp, cp, ep, vpp;
  std::optional<int> zero;
  std::optional<int64_t> microBatch;
  std::optional<Recompute> recompute;
  std::optional<bool> sequenceParallel;
  std::optional<MeshOrder> meshOrder;
  /// Imposed by the model, not a flag: a graph whose batch is fixed at B
  /// and does not re-bind runs B rows per data-parallel micro-step, which
  /// the data-parallel ranks split: dp x micro-batch = B.
  std::optional<int64_t> dataRows;
  /// --schedule (the rest of the pipeline's settings pinned as they are).
  std::optional<Schedule> schedule;

  bool any() const {
    return dp || tp || pp || cp || ep || vpp || zero || microBatch ||
           recompute || schedule || sequenceParallel || meshOrder || dataRows;
  }
  /// Whether `microBatch` rows per rank over `dp` ranks meet the pins.
  bool allowsMicroBatch(int64_t dp, int64_t micro) const {
    return (!microBatch || micro == *microBatch) &&
           (!dataRows || dp * micro == *dataRows);
  }
};

struct PlanRequest {
  TransformerSpec spec;
  Cluster cluster; ///< Its `gpus` is overridden by `gpus`.
  int64_t gpus = 0;
  /// Sequences per optimizer step; unset: defaultGlobalBatch().
  std::optional<int64_t> globalBatch;
  PlanPins pins;
  /// Execution choices held fixed, not searched: fusedAttention and the
  /// overlap flags. Degrees, schedule and mesh order in it are ignored.
  ParallelPlan execution;
  /// Expert-parallel groups only within data-parallel ranks (ep divides
  /// dp), as the partitioner lowers them; otherwise within dp x cp, as the
  /// cost model and Megatron-Core allow.
  bool expertsWithinData = false;
};

/// A dimension of the search, for pins and explanations.
enum class PlanDim {
  DP,
  TP,
  PP,
  CP,
  EP,
  VPP,
  Zero,
  MicroBatch,
  Recompute,
  SP,
  Schedule
};
constexpr int kNumPlanDims = 11;
/// The plan.json / flag name: "dp", ..., "micro_batch", "sequence_parallel".
llvm::StringRef planDimName(PlanDim dim);
int64_t planDimValue(const ParallelPlan &plan, PlanDim dim);
/// "tp=4", "recompute=full", "sequence_parallel=off", "schedule=zb-h1".
std::string planDimSetting(PlanDim dim, int64_t value);

struct PlanChoice {
  ParallelPlan plan;
  Prediction prediction;
};

/// A runner-up, or the best plan with one dimension changed.
struct Alternative {
  PlanChoice choice;
  /// Counterfactuals: the dimension changed and its value; unset for
  /// runners-up.
  std::optional<PlanDim> dim;
  int64_t value = 0;
  /// "7% slower (more PP bubble)" or "OOM: 93.0 GB > 80.0 GB".
  std::string verdict;
};

struct PlanResult {
  PlanChoice best;
  /// The next fastest plans that fit, best first (the mesh order of each is
  /// its own best; plans differing only in mesh order are not listed).
  std::vector<Alternative> runnersUp;
  /// For each searched dimension and each of its other valid values, the
  /// fastest plan with that value, or (if none fits) the one needing least
  /// memory.
  std::vector<Alternative> counterfactuals;
  int64_t globalBatch = 0;
  bool globalBatchDefaulted = false;
  int64_t candidatesEvaluated = 0; ///< predict() calls.
  int64_t plansConsidered = 0;     ///< Valid plans, each mesh order counted.
  double searchSeconds = 0;
};

struct SearchOptions {
  /// Runners-up to keep; > 0 also computes the counterfactuals.
  int explainK = 3;
  /// Off: price every plan in every mesh order (tests check that pruning
  /// never changes the answer).
  bool prune = true;
};

/// Sequences per step when --global-batch is not given: the tokens per step
/// published runs use at this model size (0.5M below 1B parameters, 1M
/// below 5B, 2M below 30B, 4M above), over seqLen, rounded to a multiple of the
/// GPU count's odd part times as much of its power of two as that leaves, so
/// most dp degrees divide it (docs/planner.md).
int64_t defaultGlobalBatch(const TransformerSpec &spec, int64_t gpus,
                           const PlanPins &pins = {});

llvm::Expected<PlanResult> searchPlan(const PlanRequest &request,
                                      const SearchOptions &options);
inline llvm::Expected<PlanResult> searchPlan(const PlanRequest &request,
                                             int explainK) {
  SearchOptions options;
  options.explainK = explainK;
  return searchPlan(request, options);
}

/// Why `alt` is slower than `best`: the component of the step that grew
/// most, e.g. "more PP bubble", "more exposed TP communication".
std::string slowdownReason(const Prediction &best, const Prediction &alt);
/// One part of a predicted step, as verdicts compare them.
struct StepPart {
  llvm::StringRef name; ///< "kernels", "recompute", "pp bubble", "tp comm"...
  double seconds = 0;   ///< Per step, on the GPU that sets the pace.
};
/// The step split into the parts the cost model composes it from: kernels,
/// recompute, pp bubble, the exposed tp/cp/ep/pp/dp communication and the
/// optimizer step (for `dtc plan report`).
std::vector<StepPart> stepBreakdown(const Prediction &prediction);

/// "12% slower (more PP bubble)", or the OOM reason when `alt` does not fit.
std::string verdict(const Prediction &best, const Prediction &alt);

/// A one-line summary: "dp=8 tp=8 pp=4 vpp=2 zero=1 mb=1 recompute=none
/// sp=on", with "schedule=zb-h1" where a pipeline runs neither 1F1B nor
/// (vpp > 1) interleaved 1F1B.
std::string planSummary(const ParallelPlan &plan);

/// The explanation as text: the chosen plan, the runners-up and, per
/// dimension, the best plan with each other value and its verdict.
std::string formatExplanation(const PlanResult &result);

/// The `parallel` section of plan.json.
llvm::json::Object parallelToJson(const ParallelPlan &plan);
/// The `mesh` section: axes outermost first, their shape; rank = row-major.
llvm::json::Object meshToJson(const ParallelPlan &plan);
/// The `stages` section: per pipeline stage its layers and ranks.
llvm::json::Array stagesToJson(const TransformerSpec &spec,
                               const ParallelPlan &plan);
/// Sections `parallel`, `mesh`, `stages`, `predicted`, `alternatives` and
/// `search` of plan.json, for the driver to merge into the document.
llvm::json::Object planToJson(const PlanResult &result,
                              const TransformerSpec &spec);
/// The same with the `stages` section given (the IR-priced planner's).
llvm::json::Object planToJson(const PlanResult &result,
                              llvm::json::Array stages);

} // namespace dtc

#endif // DTC_COMPILER_PLANNER_PLANNER_H
