//===- CollectiveCorpusTest.cpp - Collectives against nccl-tests ----------===//
//
// The collective model (Collectives.h) on the nccl-tests rows of
// compiler/costmodel/data/corpus, held out one source at a time
// (CollectiveCorpus.h). The presets' link latencies are the ones the fit
// chooses with their efficiencies held; a change to the formulas that makes
// them worse on rows they were not fitted to fails here.
// bench/costmodel/collective_error.cpp prints the whole table.
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/CollectiveCorpus.h"

#include "gtest/gtest.h"

#include <set>

using namespace dtc;

namespace {
std::vector<CollectiveRun> loadRuns() {
  auto runs = loadCollectiveRuns(DTC_COSTMODEL_DATA_DIR, nullptr);
  EXPECT_TRUE(static_cast<bool>(runs)) << llvm::toString(runs.takeError());
  return runs ? std::move(*runs) : std::vector<CollectiveRun>();
}
} // namespace

TEST(CollectiveCorpus, CoversGenerationsFabricsAndSizes) {
  std::vector<CollectiveRun> runs = loadRuns();
  std::set<std::string> presets, fabrics, sources;
  std::set<MessageRegime> regimes;
  for (const CollectiveRun &run : runs) {
    presets.insert(run.cluster.gpu);
    fabrics.insert(run.fabric);
    sources.insert(run.source);
    regimes.insert(messageRegime(run.bytes));
  }
  EXPECT_GE(runs.size(), 100u);
  EXPECT_GE(presets.size(), 4u); // A100, H100, H200, B200, GB200
  EXPECT_GE(sources.size(), 8u);
  for (const char *fabric : {"nvlink", "infiniband", "roce"})
    EXPECT_TRUE(fabrics.count(fabric)) << fabric;
  EXPECT_EQ(regimes.size(), 3u);
}

TEST(CollectiveCorpus, HeldOutErrorStaysUnderTheBar) {
  std::vector<CollectiveRun> runs = loadRuns();
  CollectiveCrossValidation cv = leaveOneSourceOut(runs, false);
  // Large messages are bandwidth-bound: the links' physics.
  const ErrorStats &large = cv.byRegime[MessageRegime::Bandwidth];
  EXPECT_GE(large.rows, 50u);
  EXPECT_LE(large.median, 0.25);
  EXPECT_LE(large.p90, 0.40);
  // Small messages are what one latency per hop fits least well.
  EXPECT_LE(cv.all.median, 0.30);
}

TEST(CollectiveCorpus, PresetLatenciesAreTheFittedOnes) {
  std::vector<CollectiveRun> runs = loadRuns();
  std::vector<bool> use(runs.size());
  for (size_t i = 0; i < runs.size(); ++i)
    use[i] = presetFabric(runs[i]);
  LinkConstants preset = presetLinkConstants();
  LinkConstants fitted = fitLinkConstants(runs, use, preset, false);
  EXPECT_NEAR(fitted.intraLatencyUs, preset.intraLatencyUs, 0.5);
  EXPECT_NEAR(fitted.interLatencyUs, preset.interLatencyUs, 0.5);
}

TEST(CollectiveCorpus, LevelsStreamThroughEachOther) {
  // Two H100 nodes on 400 Gb/s per GPU: nccl-tests measures 1-16 GiB
  // all-reduces at a bus bandwidth the NICs only reach if the NVLink phases
  // overlap the scale-out one; summing the phases priced them 2x slow.
  std::vector<CollectiveRun> runs = loadRuns();
  size_t checked = 0;
  for (const CollectiveRun &run : runs)
    if (run.kind == Collective::AllReduce && run.nodes == 2 &&
        run.cluster.gpusPerNode == 8 && run.fabric == "infiniband" &&
        run.bytes >= (1ull << 30)) {
      double ratio = collectiveTimeRatio(run, presetLinkConstants());
      EXPECT_GT(ratio, 0.6) << run.system;
      EXPECT_LT(ratio, 1.35) << run.system;
      ++checked;
    }
  EXPECT_GE(checked, 4u);
}
