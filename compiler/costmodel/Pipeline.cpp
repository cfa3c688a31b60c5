//===- Pipeline.cpp - Pipeline schedules ----------------------------------===//

#include "compiler/costmodel/Pipeline.h"

#include <algorithm>

using namespace dtc;

double dtc::bubbleFraction(Schedule schedule, int64_t stages,
                           int64_t microBatches, int64_t chunks) {
  if (microBatches <= 0)
    return 0;
  double idle =
      static_cast<double>(stages - 1) / static_cast<double>(microBatches);
  if (schedule == Schedule::Interleaved)
    idle /= static_cast<double>(std::max<int64_t>(chunks, 1));
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
  case Schedule::Interleaved: {
    int64_t v = std::max<int64_t>(chunks, 1);
    int64_t inFlight = std::min(microBatches * v, 2 * (stages - stage - 1) +
                                                      (v - 1) * stages + 1);
    return static_cast<double>(inFlight) / static_cast<double>(v);
  }
  }
  return 1;
}

double dtc::pipelineTime(llvm::ArrayRef<double> stageTimes,
                         int64_t microBatches, int64_t chunks) {
  if (stageTimes.empty())
    return 0;
  double slowest = 0, sum = 0;
  for (double t : stageTimes) {
    slowest = std::max(slowest, t);
    sum += t;
  }
  return static_cast<double>(microBatches) * slowest +
         (sum - slowest) / static_cast<double>(std::max<int64_t>(chunks, 1));
}
