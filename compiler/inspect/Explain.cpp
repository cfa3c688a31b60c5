//===- Explain.cpp - dtc plan explain -------------------------------------===//
//
// The planner's explanation from plan.json, in sentences: the verdicts are
// the ones the planner wrote (compiler/planner/Explain.cpp), the one-line
// plan summaries its planSummary().
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/Inspect.h"

#include "compiler/planner/Planner.h"
#include "runtime/support/Error.h"

#include "llvm/Support/FormatVariadic.h"

using namespace dtc;

/// "is 8% slower (more PP bubble)", "does not fit (OOM: ...)".
static std::string verdictPhrase(const AlternativeView &alt) {
  if (!alt.predicted.fits)
    return "does not fit (" + alt.verdict + ")";
  return "is " + alt.verdict;
}

llvm::Error dtc::explainPlan(const PlanView &v, int64_t k,
                             llvm::raw_ostream &out) {
  if (k < 0)
    return badInput("-k {0}: must be >= 0", k);
  if (llvm::Error err = requirePlanned(v))
    return err;
  const Prediction &p = v.predicted;
  out << llvm::formatv("The chosen plan for {0} on {1} x {2} is {3}: {4} per "
                       "step, MFU {5:F1}%, {6} per GPU of {7}.\n",
                       v.model.name, v.cluster.gpus, v.cluster.gpu,
                       planSummary(v.plan), formatSeconds(p.stepTimeS),
                       100 * p.mfu, formatBytes(p.memoryPerGpuBytes),
                       formatBytes(v.cluster.hbmBytes));
  if (v.candidatesEvaluated)
    out << llvm::formatv("The planner priced {0} candidates in {1}.\n",
                         v.candidatesEvaluated, formatSeconds(v.searchTimeS));

  std::vector<const AlternativeView *> runnersUp, counterfactuals;
  for (const AlternativeView &alt : v.alternatives)
    (alt.counterfactual ? counterfactuals : runnersUp).push_back(&alt);

  // -k 0: the counterfactuals only.
  if (k > 0 && runnersUp.empty()) {
    out << "\nNo runner-up: no other plan was priced (every degree pinned, "
           "or only one plan is valid).\n";
  } else if (k > 0) {
    size_t shown = std::min<size_t>(k, runnersUp.size());
    out << llvm::formatv("\nThe {0} next fastest plan{1}:\n", shown,
                         shown == 1 ? "" : "s");
    for (size_t i = 0; i < shown; ++i)
      out << llvm::formatv("  {0}. {1} {2}.\n", i + 1,
                           planSummary(runnersUp[i]->plan),
                           verdictPhrase(*runnersUp[i]));
    if (static_cast<size_t>(k) > runnersUp.size())
      out << llvm::formatv("  The bundle holds {0}; 'dtc compile --explain "
                           "{1}' keeps more.\n",
                           runnersUp.size(), k);
  }

  out << "\n";
  if (counterfactuals.empty()) {
    out << "No dimension was searched with another value (all pinned, or "
           "none has another valid value).\n";
    return llvm::Error::success();
  }
  out << "Each searched dimension set to another value, with the best plan "
         "that has it:\n";
  for (const AlternativeView *alt : counterfactuals)
    out << llvm::formatv("  With {0}, the best plan {1}: {2}.\n", alt->change,
                         verdictPhrase(*alt), planSummary(alt->plan));
  out << "Dimensions not listed were pinned or have no other valid value.\n";
  return llvm::Error::success();
}
