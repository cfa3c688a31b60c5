//===- StepTime.cpp - A training step's prediction from its parts ---------===//

#include "compiler/costmodel/StepTime.h"

#include "compiler/costmodel/Pipeline.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace dtc;

Prediction dtc::composeStep(const StepCost &step, const Cluster &cluster,
                            std::vector<StageDetail> *stages) {
  Prediction out;
  const double md = static_cast<double>(step.microBatches);
  const size_t p = step.stages.size();
  llvm::SmallVector<double, 64> stageTimes, weightTimes;
  for (const StageCost &s : step.stages) {
    stageTimes.push_back(s.time);
    weightTimes.push_back(s.weightGrad);
  }
  double pipeline = pipelineTime(step.schedule, stageTimes, weightTimes,
                                 step.microBatches, step.chunksPerStage);
  size_t slowest = std::max_element(stageTimes.begin(), stageTimes.end()) -
                   stageTimes.begin();
  double meanStage = 0;
  for (double t : stageTimes)
    meanStage += t / static_cast<double>(p);
  const StageCost &slow = step.stages[slowest];

  out.tpCommChunks = step.tpCommChunks;
  out.optimizerTimeS = step.optimizerS;
  out.stepTimeS = pipeline + step.exposed.total() + step.optimizerS;
  out.tokensPerS = step.tokens / out.stepTimeS;
  out.modelFlopsPerStep = step.modelFlops;
  out.hwFlopsPerStep = step.hwFlops;
  setFlopRates(out, step.gpus, step.peakFlops);
  out.bubbleFraction = (pipeline - md * slow.time) / out.stepTimeS;
  out.stageImbalance = meanStage > 0 ? slow.time / meanStage - 1 : 0;
  out.computeTimeS = md * slow.kernels;
  out.commTime = slow.comm * md + step.comm;
  out.commExposed = slow.exposed * md + step.exposed;

  // Peak memory: the first stage holding the most.
  out.memory = step.stages.front().memory;
  for (size_t s = 1; s < p; ++s)
    if (step.stages[s].memory.total() > out.memory.total()) {
      out.memory = step.stages[s].memory;
      out.peakMemoryStage = static_cast<int64_t>(s);
    }
  out.memoryPerGpuBytes = out.memory.total();
  if (out.memoryPerGpuBytes > cluster.hbmBytes) {
    out.fits = false;
    out.reason =
        llvm::formatv("OOM: {0:F1} GB > {1:F1} GB", out.memoryPerGpuBytes / 1e9,
                      cluster.hbmBytes / 1e9);
    if (p > 1)
      out.reason +=
          llvm::formatv(" on pipeline stage {0}", out.peakMemoryStage).str();
  }
  if (stages) {
    stages->clear();
    for (const StageCost &s : step.stages)
      stages->push_back(StageDetail{
          s.time, s.kernels > 0 ? s.time * s.forward / s.kernels : 0,
          s.kernels > 0 ? s.time * s.weightGrad / s.kernels : 0, s.memory});
  }
  return out;
}
