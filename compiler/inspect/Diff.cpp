//===- Diff.cpp - dtc plan diff -------------------------------------------===//
//
// Two plans side by side: what differs (model, cluster, degrees, mesh,
// stages) and what the cost model predicts for each. The step is split
// into the parts the planner's verdicts compare (stepBreakdown); each
// differing dimension is shown with the parts it drives, and, when the
// planner of A or B priced that very change alone as a counterfactual,
// with that verdict.
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/Inspect.h"

#include "compiler/planner/Planner.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <cmath>

using namespace dtc;

namespace {
/// The step parts and memory a dimension mostly moves.
struct Drives {
  llvm::SmallVector<llvm::StringRef, 3> parts;
  bool states = false, activations = false, workspace = false;
};

Drives drivenBy(PlanDim dim) {
  switch (dim) {
  case PlanDim::DP:
    return {{"dp comm", "pp bubble"}, false, true, false};
  case PlanDim::TP:
    return {{"tp comm", "kernels"}, true, true, false};
  case PlanDim::PP:
    return {{"pp bubble", "pp comm"}, true, true, false};
  case PlanDim::CP:
    return {{"cp comm", "kernels"}, false, true, false};
  case PlanDim::EP:
    return {{"ep comm"}, true, false, false};
  case PlanDim::VPP:
    return {{"pp bubble", "pp comm"}, false, true, false};
  case PlanDim::Zero:
    return {{"dp comm", "optimizer"}, true, false, true};
  case PlanDim::MicroBatch:
    return {{"pp bubble", "kernels"}, false, true, true};
  case PlanDim::Recompute:
    return {{"recompute"}, false, true, true};
  case PlanDim::SP:
    return {{"tp comm"}, false, true, false};
  case PlanDim::Schedule:
    return {{"pp bubble"}, false, true, false};
  }
  return {};
}

double stepPart(const Prediction &p, llvm::StringRef name) {
  for (const StepPart &part : stepBreakdown(p))
    if (part.name == name)
      return part.seconds;
  return 0;
}

double modelStates(const MemoryBreakdown &m) {
  return m.params + m.grads + m.optimizer;
}

std::string percentChange(double a, double b) {
  if (a == 0)
    return "";
  return llvm::formatv(" ({0}{1:F1}%)", b >= a ? "+" : "", 100 * (b / a - 1))
      .str();
}

std::string meshText(const MeshView &mesh) {
  llvm::SmallVector<std::string, 4> dims;
  for (auto [axis, size] : llvm::zip(mesh.axes, mesh.shape))
    dims.push_back(llvm::formatv("{0}={1}", axis, size).str());
  return llvm::join(dims, " x ");
}

std::string stagesText(const PlanView &v) {
  llvm::SmallVector<std::string, 8> stages;
  for (const StageView &s : v.stages)
    stages.push_back(formatLayers(s));
  return llvm::join(stages, " | ");
}

/// The verdict `v`'s planner gave `change` as a counterfactual, if any.
const AlternativeView *counterfactual(const PlanView &v,
                                      llvm::StringRef change) {
  for (const AlternativeView &alt : v.alternatives)
    if (alt.counterfactual && alt.change == change)
      return &alt;
  return nullptr;
}

class DiffPrinter {
public:
  DiffPrinter(const PlanView &a, const PlanView &b, llvm::raw_ostream &out)
      : a(a), b(b), out(out) {}

  void print() {
    out << llvm::formatv("A  {0}: {1} on {2} x {3}\n", a.bundle, a.model.name,
                         a.cluster.gpus, a.cluster.gpu);
    out << llvm::formatv("B  {0}: {1} on {2} x {3}\n", b.bundle, b.model.name,
                         b.cluster.gpus, b.cluster.gpu);
    printSetup();
    printPrediction();
    printEffects();
    printVerdict();
  }

private:
  const PlanView &a, &b;
  llvm::raw_ostream &out;
  int differences = 0;

  void row(llvm::StringRef what, const std::string &x, const std::string &y,
           const std::string &change = "") {
    if (x.size() > 22 || y.size() > 22) {
      // Too wide for the columns: one line each.
      out << llvm::formatv("  {0,-16} A {1}\n  {2,-16} B {3}\n", what, x, "",
                           y);
      return;
    }
    std::string line =
        llvm::formatv("  {0,-16} {1,-22} {2,-22} {3}", what, x, y, change);
    out << llvm::StringRef(line).rtrim() << "\n";
  }

  void printSetup() {
    out << "\nwhat differs     A                      B\n";
    int before = differences;
    auto text = [&](llvm::StringRef what, const std::string &x,
                    const std::string &y) {
      if (x != y) {
        row(what, x, y);
        ++differences;
      }
    };
    text("model", a.model.name, b.model.name);
    text("parameters", formatCount(a.model.params),
         formatCount(b.model.params));
    text("gpu", a.cluster.gpu, b.cluster.gpu);
    text("gpus", std::to_string(a.cluster.gpus),
         std::to_string(b.cluster.gpus));
    text("gpus per node", std::to_string(a.cluster.gpusPerNode),
         std::to_string(b.cluster.gpusPerNode));
    text("dtype", a.dtype, b.dtype);
    text("global batch", std::to_string(a.plan.globalBatch),
         std::to_string(b.plan.globalBatch));
    for (int i = 0; i < kNumPlanDims; ++i) {
      auto dim = static_cast<PlanDim>(i);
      int64_t x = planDimValue(a.plan, dim), y = planDimValue(b.plan, dim);
      if (x != y && dim != PlanDim::Schedule) // after the micro-batches
        text(planDimName(dim), valueText(dim, x), valueText(dim, y));
    }
    text("grad accum", std::to_string(a.plan.microBatches()),
         std::to_string(b.plan.microBatches()));
    text("schedule", scheduleName(a.plan.schedule).str(),
         scheduleName(b.plan.schedule).str());
    text("mesh", meshText(a.mesh), meshText(b.mesh));
    text("stage layers", stagesText(a), stagesText(b));
    if (differences == before)
      out << "  nothing: the same plan\n";
  }

  static std::string valueText(PlanDim dim, int64_t value) {
    // "recompute=full" -> "full".
    std::string setting = planDimSetting(dim, value);
    return setting.substr(setting.find('=') + 1);
  }

  void printPrediction() {
    const Prediction &x = a.predicted, &y = b.predicted;
    out << "\npredicted        A                      B                      "
           "B - A\n";
    row("step time", formatSeconds(x.stepTimeS), formatSeconds(y.stepTimeS),
        formatSecondsDelta(y.stepTimeS - x.stepTimeS) +
            percentChange(x.stepTimeS, y.stepTimeS));
    row("tokens/s", formatCount(x.tokensPerS), formatCount(y.tokensPerS),
        percentChange(x.tokensPerS, y.tokensPerS).substr(1));
    row("MFU", llvm::formatv("{0:F1}%", 100 * x.mfu).str(),
        llvm::formatv("{0:F1}%", 100 * y.mfu).str(),
        llvm::formatv("{0}{1:F1} points", y.mfu >= x.mfu ? "+" : "-",
                      100 * std::fabs(y.mfu - x.mfu))
            .str());
    row("bubble", llvm::formatv("{0:F1}%", 100 * x.bubbleFraction).str(),
        llvm::formatv("{0:F1}%", 100 * y.bubbleFraction).str());
    row("memory/GPU", formatBytes(x.memoryPerGpuBytes),
        formatBytes(y.memoryPerGpuBytes),
        formatBytesDelta(y.memoryPerGpuBytes - x.memoryPerGpuBytes));
    out << "  step parts (exposed, per step):\n";
    auto px = stepBreakdown(x), py = stepBreakdown(y);
    for (auto [sx, sy] : llvm::zip(px, py)) {
      if (sx.seconds == 0 && sy.seconds == 0)
        continue;
      row(("  " + sx.name).str(), formatSeconds(sx.seconds),
          formatSeconds(sy.seconds),
          formatSecondsDelta(sy.seconds - sx.seconds));
    }
    out << "  communication issued (per step):\n";
    auto comm = [&](llvm::StringRef kind, double cx, double cy) {
      if (cx != 0 || cy != 0)
        row(("  " + kind).str(), formatSeconds(cx), formatSeconds(cy),
            formatSecondsDelta(cy - cx));
    };
    comm("tp", x.commTime.tp, y.commTime.tp);
    comm("cp", x.commTime.cp, y.commTime.cp);
    comm("ep", x.commTime.ep, y.commTime.ep);
    comm("pp", x.commTime.pp, y.commTime.pp);
    comm("dp", x.commTime.dp, y.commTime.dp);
  }

  void printEffects() {
    llvm::SmallVector<PlanDim, kNumPlanDims> changed;
    for (int i = 0; i < kNumPlanDims; ++i) {
      auto dim = static_cast<PlanDim>(i);
      // Interleaving is the vpp line's (vpp > 1 means interleaved).
      if (dim == PlanDim::Schedule &&
          (a.plan.schedule == Schedule::Interleaved ||
           b.plan.schedule == Schedule::Interleaved))
        continue;
      if (planDimValue(a.plan, dim) != planDimValue(b.plan, dim))
        changed.push_back(dim);
    }
    if (changed.empty())
      return;
    if (a.model.name != b.model.name || a.model.params != b.model.params ||
        a.cluster.gpu != b.cluster.gpu || a.cluster.gpus != b.cluster.gpus ||
        a.plan.globalBatch != b.plan.globalBatch) {
      out << "\npredicted effect of each difference: not split, since A and B "
             "differ in model, cluster or batch as well as in the plan\n";
      return;
    }
    out << "\npredicted effect of each difference (A -> B, the parts it "
           "drives)\n";
    const Prediction &x = a.predicted, &y = b.predicted;
    for (PlanDim dim : changed) {
      int64_t va = planDimValue(a.plan, dim), vb = planDimValue(b.plan, dim);
      Drives drives = drivenBy(dim);
      llvm::SmallVector<std::string, 6> effects;
      for (llvm::StringRef part : drives.parts) {
        double delta = stepPart(y, part) - stepPart(x, part);
        if (delta != 0)
          effects.push_back(
              llvm::formatv("{0} {1}/step", part, formatSecondsDelta(delta))
                  .str());
      }
      auto memory = [&](const char *what, double mx, double my) {
        if (my != mx)
          effects.push_back(
              llvm::formatv("{0} {1}/GPU", what, formatBytesDelta(my - mx))
                  .str());
      };
      if (drives.states)
        memory("model states", modelStates(x.memory), modelStates(y.memory));
      if (drives.activations)
        memory("activations", x.memory.activations, y.memory.activations);
      if (drives.workspace)
        memory("workspace", x.memory.workspace, y.memory.workspace);
      out << llvm::formatv("  {0} {1} -> {2}: {3}\n", planDimName(dim),
                           valueText(dim, va), valueText(dim, vb),
                           effects.empty() ? std::string("no change predicted "
                                                         "in what it drives")
                                           : llvm::join(effects, ", "));
      // The planner's own price of this change alone, where it kept one.
      if (const AlternativeView *alt =
              counterfactual(a, planDimSetting(dim, vb)))
        out << llvm::formatv("    A's search, the best plan with {0}: {1}\n",
                             alt->change, alt->verdict);
      if (const AlternativeView *alt =
              counterfactual(b, planDimSetting(dim, va)))
        out << llvm::formatv("    B's search, the best plan with {0}: {1}\n",
                             alt->change, alt->verdict);
    }
    if (changed.size() > 1)
      out << "  (the changes act together: a part driven by several of them "
             "shows their joint change on each line)\n";
  }

  void printVerdict() {
    const Prediction &x = a.predicted, &y = b.predicted;
    std::string text;
    if (!x.fits || !y.fits) {
      text = !y.fits ? "B does not fit: " + y.reason
                     : "A does not fit: " + x.reason;
    } else {
      // The planner's verdict, read from the slower plan's side.
      bool bSlower = y.stepTimeS >= x.stepTimeS;
      const Prediction &fast = bSlower ? x : y, &slow = bSlower ? y : x;
      std::string said = verdict(fast, slow); // "8% slower (more PP bubble)"
      if (said == "as fast") {
        text = "A and B are predicted as fast";
      } else {
        size_t cut = said.find(" slower");
        std::string amount = said.substr(0, cut);
        std::string reason = slowdownReason(fast, slow);
        text = llvm::formatv("{0} is {1} slower than {2}{3}",
                             bSlower ? "B" : "A", amount, bSlower ? "A" : "B",
                             reason.empty() ? "" : " (" + reason + ")");
      }
    }
    out << "\nverdict  " << text << "\n";
  }
};
} // namespace

llvm::Error dtc::diffPlans(const PlanView &a, const PlanView &b,
                           llvm::raw_ostream &out) {
  if (llvm::Error err = requirePlanned(a))
    return err;
  if (llvm::Error err = requirePlanned(b))
    return err;
  DiffPrinter(a, b, out).print();
  return llvm::Error::success();
}
