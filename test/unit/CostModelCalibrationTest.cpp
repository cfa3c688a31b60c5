//===- CostModelCalibrationTest.cpp - against published runs --------------===//
//
// Issue 5's acceptance: with one set of constants (the a100-80g preset),
// predicted hardware TFLOP/s per GPU for every SC'21 Table 1 row within 10%
// median and 20% worst, the 8 MLSys'23 step times within 10% median and 15%
// worst, and every row's memory within the 80 GB of an A100. The table is
// printed so a failure shows which rows moved.
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/Calibration.h"
#include "compiler/costmodel/Cluster.h"
#include "compiler/costmodel/CostModel.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace dtc;

namespace {
struct Row {
  CalibrationRun run;
  Prediction prediction;
  double error; ///< Signed, relative.
};

class Calibration : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    auto runs = loadCalibrationRuns(DTC_COSTMODEL_DATA_DIR);
    ASSERT_TRUE(static_cast<bool>(runs)) << llvm::toString(runs.takeError());
    for (CalibrationRun &run : *runs) {
      auto cluster = lookupClusterPreset("a100-80g", run.gpus);
      ASSERT_TRUE(static_cast<bool>(cluster));
      cluster->software = Software::Megatron; // What ran the runs.
      auto p = predict(run.spec, run.plan, *cluster);
      ASSERT_TRUE(static_cast<bool>(p))
          << run.label() << ": " << llvm::toString(p.takeError());
      double error = run.set == CalibrationSet::SC21
                         ? p->hwTflopsPerGpu / run.measuredHwTflops - 1
                         : p->stepTimeS / run.measuredStepTimeS - 1;
      rows().push_back({run, *p, error});
    }
  }
  static std::vector<Row> &rows() {
    static std::vector<Row> all;
    return all;
  }
  static std::vector<double> absErrors(CalibrationSet set) {
    std::vector<double> errors;
    for (const Row &row : rows())
      if (row.run.set == set)
        errors.push_back(std::fabs(row.error));
    return errors;
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}
} // namespace

TEST_F(Calibration, PrintsTheTable) {
  llvm::raw_ostream &os = llvm::outs();
  os << llvm::format("%-30s %5s %10s %10s %10s %7s %8s\n", "row", "gpus",
                     "tp/pp/dp", "measured", "predicted", "error", "mem GB");
  for (const Row &row : rows()) {
    bool sc = row.run.set == CalibrationSet::SC21;
    os << llvm::format(
        "%-30s %5lld %4lld/%2lld/%2lld %8.2f%s %8.2f%s %+6.1f%% %8.1f\n",
        row.run.label().c_str(), (long long)row.run.gpus,
        (long long)row.run.plan.tp, (long long)row.run.plan.pp,
        (long long)row.run.plan.dp,
        sc ? row.run.measuredHwTflops : row.run.measuredStepTimeS,
        sc ? "TF" : "s ",
        sc ? row.prediction.hwTflopsPerGpu : row.prediction.stepTimeS,
        sc ? "TF" : "s ", 100 * row.error,
        row.prediction.memoryPerGpuBytes / 1e9);
  }
  for (CalibrationSet set : {CalibrationSet::SC21, CalibrationSet::MLSys23}) {
    std::vector<double> errors = absErrors(set);
    os << llvm::format("%s: %zu rows, median %.1f%%, worst %.1f%%\n",
                       set == CalibrationSet::SC21 ? "SC21 hw TFLOP/s/GPU"
                                                   : "MLSys23 step time",
                       errors.size(), 100 * median(errors),
                       100 * *std::max_element(errors.begin(), errors.end()));
  }
  os.flush();
  EXPECT_EQ(absErrors(CalibrationSet::SC21).size(), 10u);
  EXPECT_EQ(absErrors(CalibrationSet::MLSys23).size(), 8u);
}

TEST_F(Calibration, Sc21ThroughputWithinBounds) {
  std::vector<double> errors = absErrors(CalibrationSet::SC21);
  ASSERT_FALSE(errors.empty());
  EXPECT_LE(median(errors), 0.10);
  for (const Row &row : rows())
    if (row.run.set == CalibrationSet::SC21) {
      EXPECT_LE(std::fabs(row.error), 0.20) << row.run.label();
    }
}

TEST_F(Calibration, MlSys23StepTimesWithinBounds) {
  std::vector<double> errors = absErrors(CalibrationSet::MLSys23);
  ASSERT_FALSE(errors.empty());
  EXPECT_LE(median(errors), 0.10);
  for (const Row &row : rows())
    if (row.run.set == CalibrationSet::MLSys23) {
      EXPECT_LE(std::fabs(row.error), 0.15) << row.run.label();
    }
}

TEST_F(Calibration, EveryRowFitsInAnA100) {
  for (const Row &row : rows()) {
    EXPECT_TRUE(row.prediction.fits)
        << row.run.label() << ": " << row.prediction.reason;
    EXPECT_LE(row.prediction.memoryPerGpuBytes, usableHbmBytes(80))
        << row.run.label();
  }
}

// Selective recompute with sequence parallelism is what made the MLSys'23
// runs faster; the model must reproduce the direction and rough size.
TEST_F(Calibration, SelectiveRecomputeSpeedupMatchesThePaper) {
  for (const Row &full : rows()) {
    if (full.run.set != CalibrationSet::MLSys23 ||
        full.run.plan.recompute != Recompute::Full)
      continue;
    for (const Row &sel : rows()) {
      if (sel.run.set != CalibrationSet::MLSys23 ||
          sel.run.model != full.run.model ||
          sel.run.plan.recompute != Recompute::Selective)
        continue;
      double measured = full.run.measuredStepTimeS / sel.run.measuredStepTimeS;
      double predicted = full.prediction.stepTimeS / sel.prediction.stepTimeS;
      EXPECT_NEAR(predicted, measured, 0.1 * measured) << full.run.model;
    }
  }
}
