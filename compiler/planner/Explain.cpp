//===- Explain.cpp - Verdicts and plan.json sections ----------------------===//
//
// Why a plan lost is read off the two predictions: the step is split into
// the components the cost model composes it from (kernels, recompute, PP
// bubble, the exposed communication of each kind, the optimizer step) and
// the verdict names the one that grew most.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/Planner.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>

using namespace dtc;

namespace {
enum class Part {
  Kernels,
  Recompute,
  Bubble,
  TpComm,
  CpComm,
  EpComm,
  PpComm,
  DpComm,
  Optimizer,
};
constexpr int kNumParts = 9;

/// Seconds per step spent on each part, on the GPU that sets the pace.
std::array<double, kNumParts> stepParts(const Prediction &p) {
  std::array<double, kNumParts> parts{};
  // Recompute runs at about the speed of the forward it repeats, so its
  // share of the kernel time is its share of the executed FLOPs.
  double share =
      p.hwFlopsPerStep > 0
          ? (p.hwFlopsPerStep - p.modelFlopsPerStep) / p.hwFlopsPerStep
          : 0;
  parts[int(Part::Recompute)] = p.computeTimeS * share;
  parts[int(Part::Kernels)] = p.computeTimeS * (1 - share);
  parts[int(Part::Bubble)] = p.bubbleFraction * p.stepTimeS;
  parts[int(Part::TpComm)] = p.commExposed.tp;
  parts[int(Part::CpComm)] = p.commExposed.cp;
  parts[int(Part::EpComm)] = p.commExposed.ep;
  parts[int(Part::PpComm)] = p.commExposed.pp;
  parts[int(Part::DpComm)] = p.commExposed.dp;
  parts[int(Part::Optimizer)] = p.optimizerTimeS;
  return parts;
}

std::string partName(Part part, const Prediction &best, const Prediction &alt) {
  switch (part) {
  case Part::Kernels:
    // Same FLOPs per GPU: either one stage does more of them, or the
    // kernels run at lower efficiency (smaller GEMMs).
    return alt.stageImbalance > best.stageImbalance + 0.01
               ? "unbalanced pipeline stages"
               : "slower kernels";
  case Part::Recompute:
    return "more recompute";
  case Part::Bubble:
    return "more PP bubble";
  case Part::TpComm:
    return "more TP communication";
  case Part::CpComm:
    return "more CP communication";
  case Part::EpComm:
    return "more EP all-to-all";
  case Part::PpComm:
    return "more PP send/recv";
  case Part::DpComm:
    return "more DP communication";
  case Part::Optimizer:
    return "slower optimizer step";
  }
  return "?";
}
} // namespace

std::vector<StepPart> dtc::stepBreakdown(const Prediction &prediction) {
  static constexpr llvm::StringLiteral names[kNumParts] = {
      "kernels", "recompute", "pp bubble", "tp comm",  "cp comm",
      "ep comm", "pp comm",   "dp comm",   "optimizer"};
  auto parts = stepParts(prediction);
  std::vector<StepPart> result;
  for (int i = 0; i < kNumParts; ++i)
    result.push_back({names[i], parts[i]});
  return result;
}

std::string dtc::slowdownReason(const Prediction &best, const Prediction &alt) {
  auto a = stepParts(alt), b = stepParts(best);
  llvm::SmallVector<std::pair<double, int>, kNumParts> growth;
  for (int i = 0; i < kNumParts; ++i)
    growth.push_back({a[i] - b[i], i});
  llvm::sort(growth, [](auto x, auto y) { return x.first > y.first; });
  if (growth[0].first <= 0)
    return "";
  std::string reason = partName(Part(growth[0].second), best, alt);
  // A second cause when it is nearly as large.
  if (growth[1].first > 0.5 * growth[0].first)
    reason += ", " + partName(Part(growth[1].second), best, alt);
  return reason;
}

std::string dtc::verdict(const Prediction &best, const Prediction &alt) {
  if (!alt.fits)
    return alt.reason;
  double change = alt.stepTimeS / best.stepTimeS - 1;
  double percent = 100 * std::fabs(change);
  if (percent < 0.05)
    return "as fast";
  std::string amount = percent < 1 ? llvm::formatv("{0:F1}%", percent).str()
                                   : llvm::formatv("{0:F0}%", percent).str();
  if (change < 0)
    return amount + " faster";
  std::string reason = slowdownReason(best, alt);
  return amount + " slower" + (reason.empty() ? "" : " (" + reason + ")");
}

std::string dtc::planSummary(const ParallelPlan &plan) {
  std::string text =
      llvm::formatv("dp={0} tp={1} pp={2}", plan.dp, plan.tp, plan.pp).str();
  if (plan.cp > 1)
    text += llvm::formatv(" cp={0}", plan.cp).str();
  if (plan.ep > 1)
    text += llvm::formatv(" ep={0}", plan.ep).str();
  if (plan.vpp > 1)
    text += llvm::formatv(" vpp={0}", plan.vpp).str();
  text += llvm::formatv(" zero={0} micro_batch={1} recompute={2}", plan.zero,
                        plan.microBatch, recomputeName(plan.recompute))
              .str();
  if (plan.sequenceParallel)
    text += " sp=on";
  if (plan.tpCommChunks > 1)
    text += llvm::formatv(" tp_comm_chunks={0}", plan.tpCommChunks).str();
  // 1F1B, or interleaved with vpp > 1, unless named.
  if (plan.pp > 1 && plan.schedule != Schedule::OneFOneB &&
      plan.schedule != Schedule::Interleaved)
    text += " schedule=" + scheduleName(plan.schedule).str();
  return text;
}

std::string dtc::formatExplanation(const PlanResult &result) {
  std::string text;
  llvm::raw_string_ostream os(text);
  const Prediction &best = result.best.prediction;
  os << llvm::formatv("chosen  {0}: {1:F3} s/step, {2:F1}% MFU, {3}\n",
                      planSummary(result.best.plan), best.stepTimeS,
                      100 * best.mfu,
                      llvm::formatv("{0:F1} GB", best.memoryPerGpuBytes / 1e9));
  for (const Alternative &alt : result.runnersUp)
    os << llvm::formatv("  next  {0}: {1}\n", planSummary(alt.choice.plan),
                        alt.verdict);
  for (const Alternative &alt : result.counterfactuals)
    os << llvm::formatv("  {0,-22} {1}  [{2}]\n",
                        planDimSetting(*alt.dim, alt.value) + ":", alt.verdict,
                        planSummary(alt.choice.plan));
  return text;
}

llvm::json::Object dtc::parallelToJson(const ParallelPlan &plan) {
  return llvm::json::Object{
      {"gpus", plan.gpus()},
      {"dp", plan.dp},
      {"tp", plan.tp},
      {"pp", plan.pp},
      {"cp", plan.cp},
      {"ep", plan.ep},
      {"vpp", plan.vpp},
      {"zero", plan.zero},
      {"micro_batch", plan.microBatch},
      {"global_batch", plan.globalBatch},
      {"grad_accum", plan.microBatches()},
      {"recompute", recomputeName(plan.recompute)},
      {"sequence_parallel", plan.sequenceParallel},
      {"schedule", scheduleName(plan.schedule)},
      {"tp_comm_chunks", plan.tpCommChunks},
  };
}

llvm::json::Object dtc::meshToJson(const ParallelPlan &plan) {
  llvm::json::Array axes, shape;
  // meshOrder is innermost first; plan.json lists outermost first.
  for (MeshAxis axis : llvm::reverse(plan.meshOrder)) {
    axes.push_back(meshAxisName(axis));
    shape.push_back(plan.degree(axis));
  }
  llvm::json::Object mesh{{"axes", std::move(axes)},
                          {"shape", std::move(shape)}};
  if (plan.ep > 1)
    // Experts split the innermost ep ranks of the dp axis.
    mesh["ep"] = llvm::json::Object{{"axis", "dp"}, {"size", plan.ep}};
  return mesh;
}

llvm::json::Array dtc::stagesToJson(const TransformerSpec &spec,
                                    const ParallelPlan &plan) {
  const int64_t p = plan.pp, v = plan.vpp, layers = spec.layers;
  // The cost model's split: interleaved chunks are equal (the planner
  // searches and accepts no others); one chunk per stage gives the extra
  // layers to the first stages.
  auto stageLayers = [&](int64_t stage) {
    return layers / p + (stage < layers % p ? 1 : 0);
  };
  llvm::json::Array stages;
  int64_t first = 0;
  for (int64_t stage = 0; stage < p; ++stage) {
    llvm::json::Object object{{"index", stage}};
    if (v == 1) {
      int64_t count = stageLayers(stage);
      object["layers"] = llvm::json::Array{first, first + count - 1};
      first += count;
    } else {
      int64_t chunk = layers / (p * v);
      llvm::json::Array ranges;
      for (int64_t c = 0; c < v; ++c) {
        int64_t start = (c * p + stage) * chunk;
        ranges.push_back(llvm::json::Array{start, start + chunk - 1});
      }
      object["layers"] = std::move(ranges);
    }
    object["embedding"] = stage == 0;
    object["output"] = stage == p - 1;
    // Ranks whose pp coordinate is `stage`, ascending.
    llvm::json::Array ranks;
    int64_t ppStride = plan.stride(MeshAxis::PP);
    for (int64_t rank = 0; rank < plan.gpus(); ++rank)
      if (rank / ppStride % p == stage)
        ranks.push_back(rank);
    object["ranks"] = std::move(ranks);
    stages.push_back(std::move(object));
  }
  return stages;
}

static llvm::json::Object alternativeJson(const Alternative &alt) {
  llvm::json::Object object{
      {"kind", alt.dim ? "counterfactual" : "runner_up"},
      {"parallel", parallelToJson(alt.choice.plan)},
      {"mesh", meshToJson(alt.choice.plan)},
      {"predicted", predictionToJson(alt.choice.prediction)},
      {"verdict", alt.verdict},
  };
  if (alt.dim)
    object["change"] = planDimSetting(*alt.dim, alt.value);
  return object;
}

llvm::json::Object dtc::planToJson(const PlanResult &result,
                                   const TransformerSpec &spec) {
  return planToJson(result, stagesToJson(spec, result.best.plan));
}

llvm::json::Object dtc::planToJson(const PlanResult &result,
                                   llvm::json::Array stages) {
  llvm::json::Array alternatives;
  for (const Alternative &alt : result.runnersUp)
    alternatives.push_back(alternativeJson(alt));
  for (const Alternative &alt : result.counterfactuals)
    alternatives.push_back(alternativeJson(alt));
  const ParallelPlan &plan = result.best.plan;
  return llvm::json::Object{
      {"parallel", parallelToJson(plan)},
      {"mesh", meshToJson(plan)},
      {"stages", std::move(stages)},
      {"predicted", predictionToJson(result.best.prediction)},
      {"alternatives", std::move(alternatives)},
      {"search",
       llvm::json::Object{
           {"candidates_evaluated", result.candidatesEvaluated},
           {"plans_considered", result.plansConsidered},
           {"search_time_s", result.searchSeconds},
           {"global_batch_defaulted", result.globalBatchDefaulted},
       }},
  };
}
