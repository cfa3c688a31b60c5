//===- corpus_error.cpp - The cost model against every published run ------===//
//
// Prices each measured run of compiler/costmodel/data (the A100 calibration
// rows and corpus/runs.csv: MLPerf Training v3.0-v5.1, Megatron-MoE) at its
// published configuration. Prints, per run, the measured step time, the
// prediction with the compiled-in constants and the leave-one-source-out
// prediction (constants fitted on every other source), then the held-out
// error per source, per GPU generation and over all rows, and the constants
// a fit on every run chooses (what compiler/costmodel/Cluster.cpp holds).
//
//   ninja costmodel-corpus && ./bench/costmodel/costmodel-corpus [-v]
//
// -v also lists the rows of runs.csv the model cannot price and why.
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/CostModel.h"
#include "compiler/costmodel/Validation.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <vector>

using namespace dtc;

static void printStats(llvm::StringRef what, const ErrorStats &s) {
  llvm::outs() << llvm::format(
      "  %-24s %4zu  median %6.1f%%  p90 %6.1f%%  worst %6.1f%%\n",
      what.str().c_str(), s.rows, 100 * s.median, 100 * s.p90, 100 * s.worst);
}

int main(int argc, char **argv) {
  bool verbose = argc > 1 && llvm::StringRef(argv[1]) == "-v";
  std::vector<std::string> skipped;
  auto runs = loadMeasuredRuns(DTC_COSTMODEL_DATA_DIR, &skipped);
  if (!runs) {
    llvm::errs() << llvm::toString(runs.takeError()) << "\n";
    return 1;
  }
  auto start = std::chrono::steady_clock::now();
  CrossValidation cv = leaveOneSourceOut(*runs, 0.01);
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();

  llvm::outs() << llvm::format("%-56s %-11s %5s %-20s %9s %9s %7s %7s\n", "run",
                               "gpu", "gpus", "tp/pp/dp/cp/ep/vpp mb",
                               "measured", "held-out", "err%", "fixed%");
  std::vector<double> fixedErrors;
  std::map<std::string, std::vector<double>> byGeneration;
  int refused = 0;
  for (size_t i = 0; i < runs->size(); ++i) {
    const CorpusRun &run = (*runs)[i];
    std::string config =
        llvm::formatv("{0}/{1}/{2}/{3}/{4}/{5} {6}", run.plan.tp, run.plan.pp,
                      run.plan.dp, run.plan.cp, run.plan.ep, run.plan.vpp,
                      run.plan.microBatch)
            .str();
    std::string name = (run.label + " " + run.model).substr(0, 56);
    std::string why;
    auto fixed = stepTimeRatio(run, nullptr, &why);
    auto heldOut = cv.heldOutRatio.find(i);
    if (!fixed || heldOut == cv.heldOutRatio.end()) {
      ++refused;
      llvm::outs() << llvm::format("%-56s %-11s %5lld %-20s %8.3fs  %s\n",
                                   name.c_str(), run.clusterPreset.c_str(),
                                   (long long)run.gpus, config.c_str(),
                                   run.measuredStepTimeS, why.c_str());
      continue;
    }
    fixedErrors.push_back(std::fabs(*fixed - 1));
    byGeneration[clusterPresetGeneration(run.clusterPreset).str()].push_back(
        std::fabs(heldOut->second - 1));
    llvm::outs() << llvm::format(
        "%-56s %-11s %5lld %-20s %8.3fs %8.3fs %+7.1f %+7.1f\n", name.c_str(),
        run.clusterPreset.c_str(), (long long)run.gpus, config.c_str(),
        run.measuredStepTimeS, heldOut->second * run.measuredStepTimeS,
        100 * (heldOut->second - 1), 100 * (*fixed - 1));
  }

  llvm::outs() << "\nleave-one-source-out error of the step time "
                  "(|predicted / measured - 1|), by source:\n";
  for (const auto &[source, stats] : cv.bySource)
    printStats(source, stats);
  llvm::outs() << "by GPU generation:\n";
  for (const auto &[generation, errors] : byGeneration)
    printStats(generation, errorStats(errors));
  printStats("all (held out)", cv.all);
  int oom = 0;
  for (const CorpusRun &run : *runs)
    if (std::string verdict = memoryVerdict(run);
        !verdict.empty() && verdict.rfind("OOM", 0) == 0) {
      if (!oom++)
        llvm::outs() << "\nruns that ran but the memory model says do not "
                        "fit:\n";
      llvm::outs() << "  " << run.label << " (" << run.model << "): " << verdict
                   << "\n";
    }
  llvm::outs() << llvm::format("%d of %zu runs predicted not to fit\n", oom,
                               runs->size());
  // The headroom evidence: how close to its HBM the model puts each run
  // that ran (the fragmentation reserve and runtime bytes included).
  std::vector<std::pair<double, const CorpusRun *>> tight;
  for (const CorpusRun &run : *runs)
    if (double f = memoryFraction(run); f > 0)
      tight.push_back({f, &run});
  std::sort(tight.begin(), tight.end(),
            [](const auto &a, const auto &b) { return a.first > b.first; });
  llvm::outs() << "closest to their HBM (predicted / HBM):\n";
  for (size_t i = 0; i < std::min<size_t>(5, tight.size()); ++i)
    llvm::outs() << llvm::format("  %5.1f%%  %s (%s)\n", 100 * tight[i].first,
                                 tight[i].second->label.c_str(),
                                 tight[i].second->model.c_str());
  printStats("all (compiled-in)", errorStats(fixedErrors));

  // Documented out-of-memory configurations and their neighbours that ran.
  std::vector<std::string> capacitySkipped;
  auto cases = loadCapacityCases(DTC_COSTMODEL_DATA_DIR, &capacitySkipped);
  if (!cases) {
    llvm::errs() << llvm::toString(cases.takeError()) << "\n";
    return 1;
  }
  llvm::outs() << llvm::format("\n%-22s %-15s %-6s %7s %9s %6s  %s\n", "model",
                               "gpu", "source", "stated", "predicted", "right",
                               "tp/pp/dp zero mb recompute, framework");
  int right = 0, judged = 0;
  for (const CapacityCase &c : *cases) {
    CapacityVerdict v = capacityVerdict(c);
    bool ok = v.error.empty() && v.fits != c.ranOutOfMemory;
    // Only capacity OOMs are the memory model's to predict.
    if (!c.ranOutOfMemory || c.oomCause == "capacity") {
      ++judged;
      right += ok;
    }
    llvm::outs() << llvm::format(
        "%-22s %-15s %-6s %7s %9.1f %6s  %lld/%lld/%lld z%d mb%lld %s, %s\n",
        c.model.c_str(), c.gpu.c_str(),
        c.ranOutOfMemory ? c.oomCause.substr(0, 6).c_str() : "ran",
        c.statedGB > 0 ? llvm::formatv("{0:F1}", c.statedGB).str().c_str()
                       : "-",
        v.predictedGB, ok ? "yes" : "NO", (long long)c.plan.tp,
        (long long)c.plan.pp, (long long)c.plan.dp, c.plan.zero,
        (long long)c.plan.microBatch,
        c.plan.recompute == Recompute::Full        ? "full"
        : c.plan.recompute == Recompute::Selective ? "selective"
                                                   : "none",
        c.framework.substr(0, 40).c_str());
    if (verbose)
      llvm::outs() << "      " << (v.error.empty() ? v.breakdown : v.error)
                   << "\n";
  }
  llvm::outs() << llvm::format(
      "memory verdict right on %d of %d (the runs that ran and the capacity "
      "OOMs; %zu fragmentation or framework OOMs shown, %zu rows not "
      "described)\n",
      right, judged, cases->size() - judged, capacitySkipped.size());

  std::vector<bool> everything(runs->size(), true);
  FittedConstants all = fitConstants(*runs, everything, 0.01);
  llvm::outs() << "\nfit on every run:";
  for (const auto &[generation, peak] : all.gemmPeakEfficiency)
    llvm::outs() << llvm::format(" %s %.2f", generation.c_str(), peak);
  llvm::outs() << "\n";
  llvm::outs() << llvm::format(
      "%zu runs priced, %d refused by the model (above), %zu rows of "
      "runs.csv it cannot price%s; cross-validation took %.1f s\n",
      runs->size() - refused, refused, skipped.size(),
      verbose ? ":" : " (-v lists them)", seconds);
  if (verbose) {
    for (const std::string &s : skipped)
      llvm::outs() << "  " << s << "\n";
    // Where each priced run's predicted step goes (compiled-in constants):
    // exposed communication per axis, and all data-parallel traffic.
    llvm::outs() << llvm::format("\n%-56s %8s %8s %7s %7s %7s %7s %7s %7s "
                                 "%6s\n",
                                 "run", "step s", "compute", "dp", "tp", "pp",
                                 "cp", "ep", "dp all", "bubble");
    for (const CorpusRun &run : *runs) {
      auto cluster = clusterFor(run, nullptr);
      auto p = cluster ? predict(run.spec, run.plan, *cluster)
                       : llvm::Expected<Prediction>(cluster.takeError());
      if (!p) {
        llvm::consumeError(p.takeError());
        continue;
      }
      const CommTimes &x = p->commExposed;
      double dpTotal = p->commTime.dp;
      llvm::outs() << llvm::format(
          "%-56s %8.3f %8.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f %5.1f%%\n",
          (run.label + " " + run.model).substr(0, 56).c_str(), p->stepTimeS,
          p->computeTimeS, x.dp, x.tp, x.pp, x.cp, x.ep, dpTotal,
          100 * p->bubbleFraction);
    }
  }
  return 0;
}
