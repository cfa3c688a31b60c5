//===- Validation.cpp - The cost model against measured runs --------------===//

#include "compiler/costmodel/Validation.h"

#include "compiler/costmodel/CostModel.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <set>

using namespace dtc;

llvm::Expected<std::vector<CorpusRun>>
dtc::loadMeasuredRuns(llvm::StringRef dataDir,
                      std::vector<std::string> *skipped) {
  auto calibration = loadCalibrationRuns(dataDir);
  if (!calibration)
    return calibration.takeError();
  std::vector<CorpusRun> rows;
  for (const CalibrationRun &run : *calibration) {
    CorpusRun row;
    row.source = run.set == CalibrationSet::SC21 ? "SC21" : "MLSys23";
    row.label = run.label();
    row.model = run.model;
    row.clusterPreset = "a100-80g";
    row.spec = run.spec;
    row.plan = run.plan;
    row.gpus = run.gpus;
    row.measuredStepTimeS = run.measuredStepTimeS;
    if (run.set == CalibrationSet::SC21) {
      // The executed FLOPs do not depend on the constants being fitted.
      auto cluster = clusterFor(row, nullptr);
      if (!cluster)
        return cluster.takeError();
      auto p = predict(row.spec, row.plan, *cluster);
      if (!p)
        return p.takeError();
      row.measuredStepTimeS =
          p->hwFlopsPerStep / (row.gpus * run.measuredHwTflops * 1e12);
    }
    rows.push_back(std::move(row));
  }
  auto corpus = loadCorpusRuns(dataDir, skipped);
  if (!corpus)
    return corpus.takeError();
  rows.insert(rows.end(), corpus->begin(), corpus->end());
  return rows;
}

llvm::Expected<Cluster> dtc::clusterFor(const CorpusRun &run,
                                        const FittedConstants *constants) {
  auto cluster = lookupClusterPreset(run.clusterPreset, run.gpus);
  if (!cluster)
    return cluster;
  // Every measured run ran on Megatron-LM or a framework that splits its
  // pipeline as it does.
  cluster->software = Software::Megatron;
  if (!constants)
    return cluster;
  auto it = constants->gemmPeakEfficiency.find(
      clusterPresetGeneration(run.clusterPreset).str());
  if (it != constants->gemmPeakEfficiency.end())
    cluster->gemmPeakEfficiency = it->second;
  return cluster;
}

std::optional<double> dtc::stepTimeRatio(const CorpusRun &run,
                                         const FittedConstants *constants,
                                         std::string *why) {
  auto cluster = clusterFor(run, constants);
  if (!cluster) {
    std::string message = llvm::toString(cluster.takeError());
    if (why)
      *why = message;
    return std::nullopt;
  }
  auto p = predict(run.spec, run.plan, *cluster);
  if (!p) {
    std::string message = llvm::toString(p.takeError());
    if (why)
      *why = message;
    return std::nullopt;
  }
  return p->stepTimeS / run.measuredStepTimeS;
}

std::string dtc::memoryVerdict(const CorpusRun &run) {
  auto cluster = clusterFor(run, nullptr);
  if (!cluster)
    return llvm::toString(cluster.takeError());
  auto p = predict(run.spec, run.plan, *cluster);
  if (!p)
    return llvm::toString(p.takeError());
  if (p->fits)
    return "";
  const MemoryBreakdown &m = p->memory;
  return llvm::formatv("{0} (GB: params {1:F1}, grads {2:F1}, optimizer "
                       "{3:F1}, activations {4:F1}, workspace {5:F1}, "
                       "reserve {6:F1})",
                       p->reason, m.params / 1e9, m.grads / 1e9,
                       m.optimizer / 1e9, m.activations / 1e9,
                       m.workspace / 1e9, m.reserve / 1e9)
      .str();
}

CapacityVerdict dtc::capacityVerdict(const CapacityCase &c) {
  CapacityVerdict v;
  // Only the capacity is the case's own; a preset of the same generation
  // (or A100's, for GPUs without one) supplies what memory does not use.
  llvm::StringRef preset =
      llvm::StringRef(c.gpu).starts_with("H100") || c.spec.dtype == DType::FP8
          ? "h100"
          : "a100-80g";
  auto cluster = lookupClusterPreset(preset, c.plan.gpus());
  if (!cluster) {
    v.error = llvm::toString(cluster.takeError());
    return v;
  }
  cluster->hbmBytes = usableHbmBytes(c.hbmGB);
  cluster->software = Software::Megatron; // Published runs, as above.
  auto p = predict(c.spec, c.plan, *cluster);
  if (!p) {
    v.error = llvm::toString(p.takeError());
    return v;
  }
  v.fits = p->fits;
  v.predictedGB = p->memoryPerGpuBytes / 1e9;
  const MemoryBreakdown &m = p->memory;
  v.breakdown =
      llvm::formatv("params {0:F1}, grads {1:F1}, optimizer {2:F1}, "
                    "activations {3:F1}, workspace {4:F1}, reserve "
                    "{5:F1}",
                    m.params / 1e9, m.grads / 1e9, m.optimizer / 1e9,
                    m.activations / 1e9, m.workspace / 1e9, m.reserve / 1e9)
          .str();
  return v;
}

double dtc::memoryFraction(const CorpusRun &run) {
  auto cluster = clusterFor(run, nullptr);
  if (!cluster) {
    llvm::consumeError(cluster.takeError());
    return 0;
  }
  auto p = predict(run.spec, run.plan, *cluster);
  if (!p) {
    llvm::consumeError(p.takeError());
    return 0;
  }
  return p->memoryPerGpuBytes / cluster->hbmBytes;
}

ErrorStats dtc::errorStats(std::vector<double> v) {
  ErrorStats s;
  s.rows = v.size();
  if (v.empty())
    return s;
  std::sort(v.begin(), v.end());
  auto at = [&](double q) {
    double pos = q * static_cast<double>(v.size() - 1);
    size_t lo = static_cast<size_t>(pos);
    size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
  };
  s.median = at(0.5);
  s.p90 = at(0.9);
  s.worst = v.back();
  return s;
}

FittedConstants dtc::fitConstants(const std::vector<CorpusRun> &runs,
                                  const std::vector<bool> &use, double step) {
  // The objective is a sum over runs and each run depends on its own
  // generation's peak only: one one-dimensional search per generation.
  std::set<std::string> generations;
  for (size_t i = 0; i < runs.size(); ++i)
    if (use[i])
      generations.insert(clusterPresetGeneration(runs[i].clusterPreset).str());
  FittedConstants fitted;
  for (const std::string &generation : generations) {
    double best = INFINITY, bestPeak = 0;
    for (double peak = 0.30; peak <= 0.95 + 1e-9; peak += step) {
      fitted.gemmPeakEfficiency[generation] = peak;
      double sum = 0;
      for (size_t i = 0; i < runs.size(); ++i) {
        if (!use[i] ||
            clusterPresetGeneration(runs[i].clusterPreset) != generation)
          continue;
        if (auto ratio = stepTimeRatio(runs[i], &fitted))
          sum += std::fabs(std::log(*ratio));
      }
      if (sum < best) {
        best = sum;
        bestPeak = peak;
      }
    }
    fitted.gemmPeakEfficiency[generation] = bestPeak;
  }
  // A generation the fitting runs do not cover gets the mean of the fitted
  // ones, not the compiled-in value (fitted on every run, the held-out
  // ones included).
  double mean = 0;
  for (const std::string &generation : generations)
    mean += fitted.gemmPeakEfficiency[generation] /
            static_cast<double>(generations.size());
  for (llvm::StringRef preset : clusterPresetNames()) {
    std::string generation = clusterPresetGeneration(preset).str();
    if (!generations.empty() && !fitted.gemmPeakEfficiency.count(generation))
      fitted.gemmPeakEfficiency[generation] = mean;
  }
  return fitted;
}

CrossValidation dtc::leaveOneSourceOut(const std::vector<CorpusRun> &runs,
                                       double step) {
  std::set<std::string> sources;
  for (const CorpusRun &run : runs)
    sources.insert(run.source);
  CrossValidation cv;
  std::map<std::string, std::vector<double>> errors;
  std::vector<double> all;
  for (const std::string &source : sources) {
    std::vector<bool> use(runs.size());
    for (size_t i = 0; i < runs.size(); ++i)
      use[i] = runs[i].source != source;
    FittedConstants constants = fitConstants(runs, use, step);
    for (size_t i = 0; i < runs.size(); ++i) {
      if (use[i])
        continue;
      auto ratio = stepTimeRatio(runs[i], &constants);
      if (!ratio)
        continue;
      cv.heldOutRatio[i] = *ratio;
      errors[source].push_back(std::fabs(*ratio - 1));
      all.push_back(std::fabs(*ratio - 1));
    }
  }
  for (auto &[source, e] : errors)
    cv.bySource[source] = errorStats(e);
  cv.all = errorStats(all);
  return cv;
}
