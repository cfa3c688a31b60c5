//===- CostModelCorpusTest.cpp - Cross-validated error on measured runs ---===//
//
// The cost model priced at each published configuration of
// compiler/costmodel/data (A100 papers, MLPerf Training v3.0-v5.1 on H100,
// H200, B200 and GB200, Megatron-MoE), its per-generation GEMM peaks fitted
// leaving one source out at a time (compiler/costmodel/Validation.h). The
// bars are issue 30's acceptance; a change that makes the model worse on
// runs it was not fitted to fails here. bench/costmodel/corpus_error.cpp
// prints the full table.
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/Validation.h"

#include "gtest/gtest.h"

#include <set>

using namespace dtc;

namespace {
class Corpus : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    auto loaded = loadMeasuredRuns(DTC_COSTMODEL_DATA_DIR, nullptr);
    ASSERT_TRUE(static_cast<bool>(loaded))
        << llvm::toString(loaded.takeError());
    runs = new std::vector<CorpusRun>(std::move(*loaded));
    cv = new CrossValidation(leaveOneSourceOut(*runs, 0.01));
  }
  static void TearDownTestSuite() {
    delete runs;
    delete cv;
  }
  static std::vector<CorpusRun> *runs;
  static CrossValidation *cv;
};
std::vector<CorpusRun> *Corpus::runs = nullptr;
CrossValidation *Corpus::cv = nullptr;
} // namespace

TEST_F(Corpus, CoversFiveGpusThreeArchitecturesDenseAndMoe) {
  std::set<std::string> generations, sources;
  bool moe = false;
  for (const CorpusRun &run : *runs) {
    generations.insert(clusterPresetGeneration(run.clusterPreset).str());
    sources.insert(run.source);
    moe |= run.spec.moe();
  }
  EXPECT_GE(generations.size(), 3u); // ampere, hopper, blackwell
  std::set<std::string> gpus;
  for (const CorpusRun &run : *runs)
    gpus.insert(run.clusterPreset);
  EXPECT_GE(gpus.size(), 5u); // a100, h100, h200, b200, gb200
  EXPECT_GE(sources.size(), 8u);
  EXPECT_TRUE(moe);
  EXPECT_GE(runs->size(), 60u);
}

TEST_F(Corpus, LeaveOneSourceOutErrorStaysUnderTheBar) {
  for (const auto &[source, stats] : cv->bySource)
    std::cout << source << ": " << stats.rows << " runs, median "
              << 100 * stats.median << "%, p90 " << 100 * stats.p90
              << "%, worst " << 100 * stats.worst << "%\n";
  std::cout << "all: " << cv->all.rows << " runs, median "
            << 100 * cv->all.median << "%, p90 " << 100 * cv->all.p90
            << "%, worst " << 100 * cv->all.worst << "%\n";
  // Issue 30's bar: median <= 10%, p90 <= 25% (measured 5.2% / 19.5% /
  // 54.6% worst, docs/cost-model.md).
  EXPECT_GE(cv->all.rows, 55u);
  EXPECT_LE(cv->all.median, 0.10);
  EXPECT_LE(cv->all.p90, 0.25);
  EXPECT_LE(cv->all.worst, 0.60);
}

TEST_F(Corpus, EveryPublishedConfigurationFits) {
  // Each run ran, so the memory model (fragmentation reserve included)
  // must fit it in its GPU's HBM.
  for (const CorpusRun &run : *runs) {
    std::string verdict = memoryVerdict(run);
    EXPECT_TRUE(verdict.empty() || verdict.rfind("OOM", 0) != 0)
        << run.label << " (" << run.model << "): " << verdict;
  }
}

TEST_F(Corpus, FittedConstantsArePhysical) {
  // Fitted on every run: each generation's GEMMs reach a plausible fraction
  // of their dense peak, lower on the newer, faster tensor cores.
  std::vector<bool> all(runs->size(), true);
  FittedConstants c = fitConstants(*runs, all, 0.01);
  double ampere = c.gemmPeakEfficiency["ampere"];
  double hopper = c.gemmPeakEfficiency["hopper"];
  double blackwell = c.gemmPeakEfficiency["blackwell"];
  EXPECT_GT(ampere, hopper);
  EXPECT_GT(hopper, blackwell);
  EXPECT_GE(blackwell, 0.4);
  EXPECT_LE(ampere, 0.95);
}

namespace {
std::vector<CapacityCase> capacityCases() {
  auto cases = loadCapacityCases(DTC_COSTMODEL_DATA_DIR, nullptr);
  EXPECT_TRUE(static_cast<bool>(cases)) << llvm::toString(cases.takeError());
  return cases ? std::move(*cases) : std::vector<CapacityCase>{};
}
} // namespace

TEST(CapacityCases, EveryConfigurationThatRanFits) {
  // The neighbours of documented OOMs that ran, and the largest batches a
  // source found to fit: the headroom must not refuse them.
  int ran = 0;
  for (const CapacityCase &c : capacityCases()) {
    if (c.ranOutOfMemory)
      continue;
    ++ran;
    CapacityVerdict v = capacityVerdict(c);
    EXPECT_TRUE(v.error.empty())
        << c.model << " (" << c.label << "): " << v.error;
    EXPECT_TRUE(v.fits) << c.model << " on " << c.gpu << " (" << c.label
                        << "): predicted " << v.predictedGB << " GB ("
                        << v.breakdown << ")";
  }
  EXPECT_GE(ran, 17);
}

TEST(CapacityCases, CapacityOomsDoNotFit) {
  // The OOMs a source blames on the bytes themselves. Three are missed
  // (docs/cost-model.md): 2020 PyTorch BERT and NeMo Automodel's pp1 run
  // used more than the tensors their scripts keep account for; a change
  // that misses more fails.
  int ooms = 0, called = 0;
  for (const CapacityCase &c : capacityCases()) {
    if (!c.ranOutOfMemory || c.oomCause != "capacity")
      continue;
    ++ooms;
    CapacityVerdict v = capacityVerdict(c);
    EXPECT_TRUE(v.error.empty()) << c.model << ": " << v.error;
    if (!v.fits)
      ++called;
    else
      std::cout << "missed: " << c.model << " on " << c.gpu << ", predicted "
                << v.predictedGB << " GB\n";
  }
  EXPECT_GE(ooms, 10);
  EXPECT_GE(called, 7);
}
