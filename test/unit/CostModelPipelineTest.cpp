//===- CostModelPipelineTest.cpp - schedules and bubbles ------------------===//

#include "compiler/costmodel/CostModel.h"
#include "compiler/costmodel/Pipeline.h"

#include <gtest/gtest.h>

#include <vector>

using namespace dtc;

TEST(Pipeline, BubbleFractionOfEachSchedule) {
  // (p-1)/m for GPipe and 1F1B: 7/64.
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::GPipe, 8, 64, 1), 7.0 / 64);
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::OneFOneB, 8, 64, 1), 7.0 / 64);
  // (p-1)/(v m) interleaved: 7/192.
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::Interleaved, 8, 64, 3), 7.0 / 192);
  // SC'21 1T: p = 64, m = 512.
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::OneFOneB, 64, 512, 1), 63.0 / 512);
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::OneFOneB, 1, 16, 1), 0);
}

TEST(Pipeline, BalancedStagesTakeMPlusPMinusOneSlots) {
  std::vector<double> stages(8, 2.0);
  EXPECT_DOUBLE_EQ(pipelineTime(stages, 64, 1), (64 + 7) * 2.0);
  // Interleaving divides the fill and drain by v.
  EXPECT_DOUBLE_EQ(pipelineTime(stages, 64, 4), (64 + 7.0 / 4) * 2.0);
  // Bubble over ideal equals the paper's fraction.
  double ideal = 64 * 2.0;
  EXPECT_DOUBLE_EQ((pipelineTime(stages, 64, 4) - ideal) / ideal,
                   bubbleFraction(Schedule::Interleaved, 8, 64, 4));
}

TEST(Pipeline, ZeroBubbleH1FillsTheBubbleWithWeightGradients) {
  // Qi et al.: ZB-H1's bubble is (p-1)(F+B-W), a third of 1F1B's
  // (p-1)(F+B+W) when F = B = W. p = 4, m = 8, F = B = W = 1: 8 * 3 + 3 * 1
  // = 27 (a hand replay of the schedule gives the same), 1F1B 8 * 3 + 3 * 3.
  std::vector<double> stages(4, 3.0), weights(4, 1.0);
  EXPECT_DOUBLE_EQ(pipelineTime(Schedule::ZeroBubbleH1, stages, weights, 8, 1),
                   27);
  EXPECT_DOUBLE_EQ(pipelineTime(Schedule::OneFOneB, stages, weights, 8, 1), 33);
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::ZeroBubbleH1, 4, 8, 1, 1.0 / 3),
                   3.0 / 8 / 3);
  // Without a weight gradient there is nothing to defer: 1F1B's bubble.
  EXPECT_DOUBLE_EQ(bubbleFraction(Schedule::ZeroBubbleH1, 4, 8, 1, 0),
                   bubbleFraction(Schedule::OneFOneB, 4, 8, 1));
  // Every stage holds up to p micro-batches (1F1B's first stage).
  for (int64_t s = 0; s < 4; ++s)
    EXPECT_DOUBLE_EQ(microBatchesInFlight(Schedule::ZeroBubbleH1, 4, 8, 1, s),
                     4);
}

TEST(Pipeline, SlowestStageSetsThePace) {
  // m max + (sum - max) = 10 * 3 + (1 + 1 + 1).
  EXPECT_DOUBLE_EQ(pipelineTime({1, 1, 3, 1}, 10, 1), 33);
  EXPECT_DOUBLE_EQ(pipelineTime({5}, 10, 1), 50);
}

namespace {
TransformerSpec gpt175() {
  TransformerSpec spec;
  spec.name = "gpt-175b";
  spec.layers = 96;
  spec.hidden = 12288;
  spec.heads = 96;
  spec.vocab = 51200;
  spec.seqLen = 2048;
  return spec;
}
ParallelPlan plan175(Schedule schedule, int64_t vpp) {
  ParallelPlan plan;
  plan.tp = 8;
  plan.pp = 8;
  plan.dp = 16;
  plan.vpp = vpp;
  plan.schedule = schedule;
  plan.microBatch = 1;
  plan.globalBatch = 16 * 32;
  plan.recompute = Recompute::Selective;
  plan.sequenceParallel = true;
  plan.zero = 1;
  return plan;
}
} // namespace

TEST(Pipeline, PredictedBubbleShrinksWithInterleaving) {
  Cluster cluster = *lookupClusterPreset("h100", 1024);
  auto oneF = predict(gpt175(), plan175(Schedule::OneFOneB, 1), cluster);
  auto inter = predict(gpt175(), plan175(Schedule::Interleaved, 4), cluster);
  ASSERT_TRUE(static_cast<bool>(oneF)) << llvm::toString(oneF.takeError());
  ASSERT_TRUE(static_cast<bool>(inter)) << llvm::toString(inter.takeError());
  EXPECT_GT(oneF->bubbleFraction, 1.5 * inter->bubbleFraction);
  EXPECT_LT(inter->stepTimeS, oneF->stepTimeS);
  // Interleaving multiplies the p2p transfers by v.
  EXPECT_NEAR(inter->commTime.pp, 4 * oneF->commTime.pp,
              1e-9 + 0.01 * inter->commTime.pp);
  // Near (p-1)/(m + p-1) of the step for 1F1B (m = 32, p = 8).
  EXPECT_NEAR(oneF->bubbleFraction, 7.0 / 39, 0.03);
}

TEST(Pipeline, GPipeMatches1F1BInTimeButNotMemory) {
  Cluster cluster = *lookupClusterPreset("h100", 1024);
  auto gpipe = predict(gpt175(), plan175(Schedule::GPipe, 1), cluster);
  auto oneF = predict(gpt175(), plan175(Schedule::OneFOneB, 1), cluster);
  ASSERT_TRUE(static_cast<bool>(gpipe) && static_cast<bool>(oneF));
  EXPECT_DOUBLE_EQ(gpipe->stepTimeS, oneF->stepTimeS);
  EXPECT_GT(gpipe->memory.activations, 3 * oneF->memory.activations);
}

TEST(Pipeline, LastStageCarriesTheOutputLayer) {
  // Few layers per stage make the vocabulary projection visible.
  Cluster cluster = *lookupClusterPreset("h100", 128);
  ParallelPlan plan = plan175(Schedule::OneFOneB, 1);
  plan.pp = 16;
  plan.dp = 1;
  plan.globalBatch = 64;
  TransformerSpec spec = gpt175();
  spec.vocab = 256000;
  auto p = predict(spec, plan, cluster);
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  EXPECT_GT(p->stageImbalance, 0.05);
}

TEST(Pipeline, UnevenLayersGoToTheFirstStages) {
  TransformerSpec spec = gpt175();
  spec.layers = 30; // 30 over pp = 4: 8, 8, 7, 7.
  ParallelPlan plan = plan175(Schedule::OneFOneB, 1);
  plan.pp = 4;
  plan.dp = 32;
  Cluster cluster = *lookupClusterPreset("h100", 1024);
  auto p = predict(spec, plan, cluster);
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  EXPECT_GT(p->stageImbalance, 0);
}
