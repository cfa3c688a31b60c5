//===- Pipeline.cpp - Pipeline schedules ----------------------------------===//

#include "compiler/costmodel/Pipeline.h"

#include <algorithm>

using namespace dtc;

double dtc::bubbleFraction(Schedule schedule, int64_t stages,
                           int64_t microBatches, int64_t chunks,
                           double weightShare) {
  if (microBatches <= 0)
    return 0;
  double idle =
      static_cast<double>(stages - 1) / static_cast<double>(microBatches);
  if (schedule == Schedule::Interleaved)
    idle /= static_cast<double>(std::max<int64_t>(chunks, 1));
  if (splitsBackward(schedule))
    idle *= std::max(0.0, 1 - 2 * weightShare);
  return idle;
}

double dtc::microBatchesInFlight(Schedule schedule, int64_t stages,
                                 int64_t microBatches, int64_t chunks,
                                 int64_t stage) {
  switch (schedule) {
  case Schedule::GPipe:
    return static_cast<double>(microBatches);
  case Schedule::OneFOneB:
    return static_cast<double>(std::min(microBatches, stages - stage));
  case Schedule::ZeroBubbleH1:
    return static_cast<double>(std::min(microBatches, stages));
  case Schedule::Interleaved: {
    int64_t v = std::max<int64_t>(chunks, 1);
    int64_t inFlight = std::min(microBatches * v, 2 * (stages - stage - 1) +
                                                      (v - 1) * stages + 1);
    return static_cast<double>(inFlight) / static_cast<double>(v);
  }
  }
  return 1;
}

double dtc::pipelineTime(Schedule schedule, llvm::ArrayRef<double> stageTimes,
                         llvm::ArrayRef<double> weightTimes,
                         int64_t microBatches, int64_t chunks) {
  if (stageTimes.empty())
    return 0;
  const bool zeroBubble =
      splitsBackward(schedule) && weightTimes.size() == stageTimes.size();
  size_t slowest = 0;
  double fill = 0;
  for (size_t i = 0; i < stageTimes.size(); ++i) {
    if (stageTimes[i] > stageTimes[slowest])
      slowest = i;
    fill += zeroBubble ? std::max(0.0, stageTimes[i] - 2 * weightTimes[i])
                       : stageTimes[i];
  }
  fill -= zeroBubble
              ? std::max(0.0, stageTimes[slowest] - 2 * weightTimes[slowest])
              : stageTimes[slowest];
  return static_cast<double>(microBatches) * stageTimes[slowest] +
         fill / static_cast<double>(std::max<int64_t>(chunks, 1));
}
