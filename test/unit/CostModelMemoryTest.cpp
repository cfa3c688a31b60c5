//===- CostModelMemoryTest.cpp - activations and model states -------------===//
//
// Activation memory per layer against Korthikanti et al. (MLSys'23, Table 2)
// on the configurations of their Table 3, written out here independently of
// the model's component-wise derivation; model states against the ZeRO
// paper's 2 + 2 + 12 bytes per parameter.
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/CostModel.h"
#include "compiler/costmodel/Memory.h"
#include "compiler/costmodel/Pipeline.h"

#include <gtest/gtest.h>

using namespace dtc;

namespace {
/// Korthikanti et al. Table 3: a, h, layers, tp, and the micro-batch of
/// their Table 5 runs (s = 2048 throughout).
struct PaperConfig {
  const char *name;
  int64_t heads, hidden, layers, tp, microBatch;
};
const PaperConfig kConfigs[] = {{"22B", 64, 6144, 48, 8, 4},
                                {"175B", 96, 12288, 96, 8, 1},
                                {"530B", 128, 20480, 105, 8, 1},
                                {"1T", 160, 25600, 128, 8, 1}};

TransformerSpec gptSpec(const PaperConfig &c) {
  TransformerSpec spec;
  spec.name = c.name;
  spec.layers = c.layers;
  spec.hidden = c.hidden;
  spec.heads = c.heads;
  spec.vocab = 51200;
  spec.seqLen = 2048;
  spec.dropout = true;
  spec.dtype = DType::F16;
  return spec;
}

ParallelPlan paperPlan(const PaperConfig &c, bool sp, Recompute recompute) {
  ParallelPlan plan;
  plan.tp = c.tp;
  plan.microBatch = c.microBatch;
  plan.globalBatch = c.microBatch;
  plan.sequenceParallel = sp;
  plan.recompute = recompute;
  plan.fusedAttention = false; // The paper's attention materializes scores.
  return plan;
}
} // namespace

// Table 2, row by row: sbh(10 + 24/t + 5as/(ht)), sbh(34/t + 5as/(ht)),
// sbh(10 + 24/t), sbh(34/t), 2sbh; bytes, fp16.
TEST(Memory, ActivationsMatchKorthikantiTable2) {
  for (const PaperConfig &c : kConfigs) {
    TransformerSpec spec = gptSpec(c);
    double s = 2048, b = static_cast<double>(c.microBatch);
    double h = static_cast<double>(c.hidden);
    double a = static_cast<double>(c.heads), t = static_cast<double>(c.tp);
    double sbh = s * b * h;
    double scores = 5 * a * s / h;
    auto stored = [&](bool sp, Recompute r) {
      return layerActivationBytes(spec, paperPlan(c, sp, r)).stored;
    };
    EXPECT_DOUBLE_EQ(stored(false, Recompute::None),
                     sbh * (10 + 24 / t + scores / t))
        << c.name;
    EXPECT_DOUBLE_EQ(stored(true, Recompute::None), sbh * (34 / t + scores / t))
        << c.name;
    EXPECT_DOUBLE_EQ(stored(false, Recompute::Selective), sbh * (10 + 24 / t))
        << c.name;
    EXPECT_DOUBLE_EQ(stored(true, Recompute::Selective), sbh * 34 / t)
        << c.name;
    EXPECT_DOUBLE_EQ(stored(false, Recompute::Full), 2 * sbh) << c.name;
  }
}

TEST(Memory, NoParallelismIsSbh34Plus5asOverH) {
  PaperConfig c = kConfigs[1];
  c.tp = 1;
  double sbh = 2048.0 * 1 * 12288;
  EXPECT_DOUBLE_EQ(
      layerActivationBytes(gptSpec(c), paperPlan(c, false, Recompute::None))
          .stored,
      sbh * (34 + 5 * 96 * 2048.0 / 12288));
}

// Section 5's headline: selective recompute with SP keeps 34/(34 + 5as/h)
// of the baseline, e.g. the 175B model's 5as/h = 80 term is gone.
TEST(Memory, SelectiveRecomputeDropsOnlyTheScores) {
  const PaperConfig &c = kConfigs[1];
  TransformerSpec spec = gptSpec(c);
  LayerActivations sel =
      layerActivationBytes(spec, paperPlan(c, true, Recompute::Selective));
  LayerActivations none =
      layerActivationBytes(spec, paperPlan(c, true, Recompute::None));
  double sbh = 2048.0 * 12288;
  EXPECT_DOUBLE_EQ(sel.working, sbh * 80 / 8); // 5as/h = 5*96*2048/12288.
  EXPECT_DOUBLE_EQ(sel.stored + sel.working, none.stored);
}

TEST(Memory, FullRecomputeWorksOnOneLayerAtATime) {
  const PaperConfig &c = kConfigs[0];
  TransformerSpec spec = gptSpec(c);
  LayerActivations full =
      layerActivationBytes(spec, paperPlan(c, false, Recompute::Full));
  EXPECT_DOUBLE_EQ(full.working, full.full);
  EXPECT_DOUBLE_EQ(
      full.full,
      layerActivationBytes(spec, paperPlan(c, false, Recompute::None)).stored);
}

TEST(Memory, FusedAttentionKeepsNoScores) {
  const PaperConfig &c = kConfigs[1];
  TransformerSpec spec = gptSpec(c);
  spec.dropout = false;
  ParallelPlan plan = paperPlan(c, true, Recompute::None);
  plan.fusedAttention = true;
  double sbh = 2048.0 * 12288;
  // 34 - 2 dropout masks = 32 sbh/t, plus fp32 log-sum-exp rows per head.
  EXPECT_DOUBLE_EQ(layerActivationBytes(spec, plan).stored,
                   sbh * 32 / 8 + 4.0 * 96 / 8 * 2048);
}

TEST(Memory, GatedMlpAndGroupedQueryAttention) {
  TransformerSpec spec;
  spec.layers = 32;
  spec.hidden = 4096;
  spec.heads = 32;
  spec.kvHeads = 8;
  spec.ffnHidden = 14336;
  spec.gatedMlp = true;
  spec.vocab = 128256;
  spec.seqLen = 8192;
  ParallelPlan plan; // tp 1, no SP, fused attention, no dropout.
  double s = 8192, h = 4096, f = 14336, e = 2;
  double x = s * h;
  double attention = 2 * e * x                // norm input, QKV input
                     + e * s * (32 + 8) * 128 // Q, K
                     + e * s * 8 * 128        // V
                     + e * x                  // output projection input
                     + 4 * 32 * s;            // log-sum-exp
  double mlp = 2 * e * x + 2 * e * s * f + e * s * f;
  EXPECT_DOUBLE_EQ(layerActivationBytes(spec, plan).stored, attention + mlp);
}

// Megatron's interleaved warm-up holds L (1 + (p-1)/(p v)) layers' worth on
// the first stage (Korthikanti et al. section 4.2.3).
TEST(Memory, InterleavedFirstStageHoldsTheFormula) {
  for (auto [p, v] : {std::pair<int64_t, int64_t>{8, 3}, {35, 3}, {4, 2}}) {
    int64_t layers = p * v * 2, m = 4 * p;
    double perStage = static_cast<double>(layers / p);
    double layersHeld =
        microBatchesInFlight(Schedule::Interleaved, p, m, v, 0) * perStage;
    double expected =
        static_cast<double>(layers) *
        (1 + static_cast<double>(p - 1) / static_cast<double>(p * v));
    EXPECT_DOUBLE_EQ(layersHeld, expected) << p << "x" << v;
  }
  // 1F1B: p in flight on the first stage, so L layers' worth; GPipe all m.
  EXPECT_DOUBLE_EQ(microBatchesInFlight(Schedule::OneFOneB, 8, 64, 1, 0), 8);
  EXPECT_DOUBLE_EQ(microBatchesInFlight(Schedule::OneFOneB, 8, 64, 1, 7), 1);
  EXPECT_DOUBLE_EQ(microBatchesInFlight(Schedule::OneFOneB, 8, 3, 1, 0), 3);
  EXPECT_DOUBLE_EQ(microBatchesInFlight(Schedule::GPipe, 8, 64, 1, 0), 64);
}

TEST(Memory, ZeroStagesShardStatesAsRajbhandari) {
  TransformerSpec spec;
  spec.dtype = DType::BF16;
  ParallelPlan plan;
  plan.dp = 8;
  double params = 1e9;
  for (int zero = 0; zero <= 3; ++zero) {
    plan.zero = zero;
    StateBytes b = modelStateBytes(spec, plan, params, 0);
    EXPECT_DOUBLE_EQ(b.params, zero >= 3 ? 2e9 / 8 : 2e9) << zero;
    EXPECT_DOUBLE_EQ(b.grads, zero >= 2 ? 2e9 / 8 : 2e9) << zero;
    EXPECT_DOUBLE_EQ(b.optimizer, zero >= 1 ? 12e9 / 8 : 12e9) << zero;
  }
  // 16 bytes per parameter unsharded.
  plan.zero = 0;
  StateBytes b = modelStateBytes(spec, plan, params, 0);
  EXPECT_DOUBLE_EQ(b.params + b.grads + b.optimizer, 16e9);
  // fp32 training keeps no master copy: 4 + 4 + 8.
  spec.dtype = DType::F32;
  b = modelStateBytes(spec, plan, params, 0);
  EXPECT_DOUBLE_EQ(b.params + b.grads + b.optimizer, 16e9);
  EXPECT_DOUBLE_EQ(b.optimizer, 8e9);
}

TEST(Memory, ExpertStatesShardOverExpertDataParallelGroup) {
  TransformerSpec spec;
  ParallelPlan plan;
  plan.dp = 8;
  plan.ep = 4;
  plan.zero = 1;
  // 1e9 dense over 8 replicas, 1e9 expert over 8 / 4 = 2.
  StateBytes b = modelStateBytes(spec, plan, 2e9, 1e9);
  EXPECT_DOUBLE_EQ(b.optimizer, 12 * (1e9 / 8 + 1e9 / 2));
}

TEST(Memory, ParameterCountOfGpt3) {
  TransformerSpec spec = gptSpec(kConfigs[1]);
  spec.tiedEmbeddings = true;
  // 12 l h^2 (1 + 13/(12h)) + V h: 174.6B for GPT-3.
  double l = 96, h = 12288;
  double expected = 12 * l * h * h + 13 * l * h + 51200 * h + 2 * h;
  EXPECT_NEAR(totalParamCount(spec), expected, 0.002 * expected);
  EXPECT_NEAR(totalParamCount(spec) / 1e9, 174.6, 0.5);
}

TEST(Memory, PredictionReportsTheLargerStage) {
  const PaperConfig &c = kConfigs[1];
  TransformerSpec spec = gptSpec(c);
  spec.tiedEmbeddings = true;
  ParallelPlan plan = paperPlan(c, true, Recompute::Selective);
  plan.pp = 8;
  plan.vpp = 3;
  plan.schedule = Schedule::Interleaved;
  plan.globalBatch = 64;
  Cluster cluster = *lookupClusterPreset("a100-80g", 64);
  auto p = predict(spec, plan, cluster);
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  const MemoryBreakdown &m = p->memory;
  // First stage: L (1 + (p-1)/(p v)) = 96 (1 + 7/24) layers of 34 sbh/t.
  double sbh = 2048.0 * 12288;
  double perLayer = sbh * 34 / 8;
  EXPECT_EQ(p->peakMemoryStage, 0);
  EXPECT_GE(m.activations, 96 * (1 + 7.0 / 24) * perLayer);
  EXPECT_LE(m.activations, 96 * (1 + 7.0 / 24) * perLayer * 1.01);
  EXPECT_NEAR(m.reserve, kFragmentationReserve * (m.activations + m.workspace),
              1);
  EXPECT_DOUBLE_EQ(p->memoryPerGpuBytes, m.total());
  EXPECT_TRUE(p->fits);
}
