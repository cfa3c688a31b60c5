//===- CostModelTest.cpp - predict() as a whole ---------------------------===//

#include "compiler/costmodel/CostModel.h"
#include "compiler/costmodel/Compute.h"
#include "compiler/costmodel/KernelTime.h"
#include "runtime/support/Error.h"

#include <gtest/gtest.h>

#include <map>

using namespace dtc;

namespace {
TransformerSpec llama8b() {
  TransformerSpec spec;
  spec.name = "llama-8b";
  spec.layers = 32;
  spec.hidden = 4096;
  spec.heads = 32;
  spec.kvHeads = 8;
  spec.ffnHidden = 14336;
  spec.gatedMlp = true;
  spec.vocab = 128256;
  spec.seqLen = 8192;
  return spec;
}

ParallelPlan basePlan() {
  ParallelPlan plan;
  plan.tp = 4;
  plan.pp = 2;
  plan.dp = 8;
  plan.microBatch = 1;
  plan.globalBatch = 128;
  plan.recompute = Recompute::Selective;
  plan.sequenceParallel = true;
  plan.zero = 1;
  return plan;
}

Cluster h100(int64_t gpus) { return *lookupClusterPreset("h100", gpus); }

/// The message of a bad-input error; fails the test for anything else.
std::string badInputMessage(llvm::Error err) {
  std::string message;
  llvm::handleAllErrors(std::move(err), [&](const DtcError &e) {
    EXPECT_EQ(e.getKind(), ErrorKind::BadInput);
    message = e.getMessage();
  });
  return message;
}

std::string predictError(const TransformerSpec &spec, const ParallelPlan &plan,
                         const Cluster &cluster) {
  auto p = predict(spec, plan, cluster);
  if (p) {
    ADD_FAILURE() << "expected an error";
    return "";
  }
  return badInputMessage(p.takeError());
}
} // namespace

TEST(CostModel, PredictsAPlausibleStep) {
  auto p = predict(llama8b(), basePlan(), h100(64));
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  EXPECT_GT(p->stepTimeS, 0);
  EXPECT_GT(p->mfu, 0.2);
  EXPECT_LT(p->mfu, 0.8);
  EXPECT_LE(p->mfu, p->hfu + 1e-12);
  EXPECT_NEAR(p->tokensPerS, 128 * 8192 / p->stepTimeS, 1e-6);
  EXPECT_NEAR(p->tflopsPerGpu,
              trainingFlopsPerToken(llama8b()) * p->tokensPerS / 64 / 1e12,
              1e-6);
  EXPECT_TRUE(p->fits);
  EXPECT_TRUE(p->reason.empty());
  // Every kind of communication is split into exposed and hidden parts.
  CommTimes hidden = p->commHidden();
  for (double part : {hidden.dp, hidden.tp, hidden.pp, hidden.cp, hidden.ep})
    EXPECT_GE(part, -1e-12);
  EXPECT_GT(p->commTime.tp, 0);
  EXPECT_GT(p->commTime.dp, 0);
  EXPECT_GT(p->commTime.pp, 0);
  EXPECT_EQ(p->commTime.cp, 0);
  EXPECT_EQ(p->commTime.ep, 0);
}

TEST(CostModel, TrainingFlopsPerTokenIsTheSc21Formula) {
  // 72 B s l h^2 (1 + s/(6h) + V/(12 l h)) per B s tokens.
  TransformerSpec spec;
  spec.layers = 96;
  spec.hidden = 12288;
  spec.heads = 96;
  spec.vocab = 51200;
  spec.seqLen = 2048;
  double l = 96, h = 12288, s = 2048, v = 51200;
  EXPECT_NEAR(trainingFlopsPerToken(spec),
              72 * l * h * h * (1 + s / (6 * h) + v / (12 * l * h)), 1e3);
}

TEST(CostModel, FullRecomputeAddsOneForwardOfHardwareFlops) {
  ParallelPlan plan = basePlan();
  plan.recompute = Recompute::Full;
  plan.sequenceParallel = false;
  auto full = predict(llama8b(), plan, h100(64));
  plan.recompute = Recompute::None;
  auto none = predict(llama8b(), plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(full) && static_cast<bool>(none));
  EXPECT_DOUBLE_EQ(full->modelFlopsPerStep, none->modelFlopsPerStep);
  double ratio = full->hwFlopsPerStep / full->modelFlopsPerStep;
  EXPECT_GT(ratio, 1.3);
  EXPECT_LT(ratio, 4.0 / 3);
  EXPECT_GT(full->stepTimeS, 1.2 * none->stepTimeS);
  EXPECT_LT(full->memory.activations, none->memory.activations / 5);
}

TEST(CostModel, OomNamesSizesAndStage) {
  ParallelPlan plan = basePlan();
  plan.recompute = Recompute::None;
  plan.sequenceParallel = false;
  plan.microBatch = 16;
  auto p = predict(llama8b(), plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  EXPECT_FALSE(p->fits);
  EXPECT_EQ(p->reason.rfind("OOM: ", 0), 0u) << p->reason;
  EXPECT_NE(p->reason.find("> 85.0 GB"), std::string::npos) << p->reason;
  EXPECT_NE(p->reason.find("pipeline stage"), std::string::npos) << p->reason;
}

TEST(CostModel, GradientReductionHidesBehindTheLastBackward) {
  ParallelPlan plan = basePlan();
  plan.zero = 0;
  auto overlapped = predict(llama8b(), plan, h100(64));
  plan.overlapGradReduce = false;
  auto exposed = predict(llama8b(), plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(overlapped) && static_cast<bool>(exposed));
  EXPECT_DOUBLE_EQ(overlapped->commTime.dp, exposed->commTime.dp);
  EXPECT_DOUBLE_EQ(exposed->commExposed.dp, exposed->commTime.dp);
  EXPECT_LT(overlapped->commExposed.dp, 0.5 * exposed->commExposed.dp);
  EXPECT_LT(overlapped->stepTimeS, exposed->stepTimeS);
}

TEST(CostModel, TpOverlapHidesInputGradientReductions) {
  ParallelPlan plan = basePlan();
  plan.tpCommChunks = 1;
  auto async = predict(llama8b(), plan, h100(64));
  plan.overlapTpComm = false;
  auto blocking = predict(llama8b(), plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(async) && static_cast<bool>(blocking));
  EXPECT_DOUBLE_EQ(async->commTime.tp, blocking->commTime.tp);
  EXPECT_LT(async->commExposed.tp, blocking->commExposed.tp);
}

TEST(CostModel, OutputLayerCollectivesGoInBlocksWithTheHead) {
  // One stage, so the embedding and the output layer are on it; the edges'
  // share of the TP communication is what one layer less does not remove.
  ParallelPlan plan = basePlan();
  plan.tp = 8;
  plan.pp = 1;
  plan.dp = 8;
  struct Edge {
    double total, exposed;
  };
  auto edges = [&](int64_t chunks, bool sequenceParallel) {
    plan.tpCommChunks = chunks;
    plan.sequenceParallel = sequenceParallel;
    TransformerSpec spec = llama8b();
    spec.layers = 2;
    auto two = predict(spec, plan, h100(64));
    spec.layers = 1;
    auto one = predict(spec, plan, h100(64));
    EXPECT_TRUE(static_cast<bool>(two) && static_cast<bool>(one));
    if (!two || !one)
      return Edge{0, 0};
    EXPECT_EQ(one->tpCommChunks, chunks);
    return Edge{2 * one->commTime.tp - two->commTime.tp,
                2 * one->commExposed.tp - two->commExposed.tp};
  };
  for (bool sequenceParallel : {false, true}) {
    Edge whole = edges(1, sequenceParallel),
         blocked = edges(4, sequenceParallel);
    // Blocks pay more latencies for the same bytes and hide more of them
    // behind the head's GEMMs: the sequence gather before the logits (SP);
    // the input gradient's reduction already hides behind the head's
    // weight gradient.
    EXPECT_GT(blocked.total, whole.total) << sequenceParallel;
    EXPECT_LE(blocked.exposed, whole.exposed) << sequenceParallel;
    if (sequenceParallel)
      EXPECT_LT(blocked.exposed, whole.exposed);
    // That reduction hides: less is exposed than sent.
    EXPECT_LT(whole.exposed, whole.total) << sequenceParallel;
  }
  // Without TP overlap every edge collective blocks.
  plan.overlapTpComm = false;
  Edge serial = edges(1, true);
  EXPECT_NEAR(serial.exposed, serial.total, 1e-9 * serial.total);
}

TEST(CostModel, TpCommChunksPipelineCollectivesWithTheirGemms) {
  // tp = 8 over NVLink at one sequence per micro-batch: the collectives
  // take about as long as the GEMMs they follow or feed.
  ParallelPlan plan = basePlan();
  plan.tp = 8;
  plan.dp = 4;
  std::map<int64_t, Prediction> by;
  for (int64_t chunks : {1, 2, 4}) {
    plan.tpCommChunks = chunks;
    auto p = predict(llama8b(), plan, h100(64));
    ASSERT_TRUE(static_cast<bool>(p));
    EXPECT_EQ(p->tpCommChunks, chunks);
    by[chunks] = *p;
  }
  // More blocks pay more latencies for the same bytes and hide more of
  // them behind the GEMMs.
  EXPECT_GT(by[2].commTime.tp, by[1].commTime.tp);
  EXPECT_GT(by[4].commTime.tp, by[2].commTime.tp);
  EXPECT_LT(by[2].commExposed.tp, 0.9 * by[1].commExposed.tp);
  // Left to the cost model: the fastest of the three.
  plan.tpCommChunks = 0;
  auto chosen = predict(llama8b(), plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(chosen));
  for (auto &[chunks, p] : by) {
    EXPECT_LE(chosen->stepTimeS, p.stepTimeS);
    if (chunks == chosen->tpCommChunks)
      EXPECT_DOUBLE_EQ(chosen->stepTimeS, p.stepTimeS);
  }
  // Without TP overlap nothing is split.
  plan.overlapTpComm = false;
  auto serial = predict(llama8b(), plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(serial));
  EXPECT_EQ(serial->tpCommChunks, 1);
}

TEST(CostModel, TpCommChunksOnlyWhereTheRowsSplit) {
  // 8191 tokens, one sequence: no row block count divides (sequence
  // parallelism's strided blocks need the 8191 / 8 rows per rank to).
  TransformerSpec spec = llama8b();
  spec.seqLen = 8191;
  ParallelPlan plan = basePlan();
  plan.tp = 8;
  plan.dp = 4;
  auto p = predict(spec, plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(p));
  EXPECT_EQ(p->tpCommChunks, 1);
  // Two sequences per micro-batch split into two blocks.
  plan.microBatch = 2;
  plan.sequenceParallel = false;
  plan.tpCommChunks = 2;
  p = predict(spec, plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(p));
  EXPECT_EQ(p->tpCommChunks, 2);
}

TEST(CostModel, MeshOrderDecidesWhichLinksTpUses) {
  ParallelPlan plan = basePlan();
  plan.tp = 8;
  plan.pp = 1;
  plan.dp = 8;
  auto inner = predict(llama8b(), plan, h100(64));
  // dp innermost pushes each TP group across eight nodes.
  plan.meshOrder = {MeshAxis::DP, MeshAxis::TP, MeshAxis::CP, MeshAxis::PP};
  auto outer = predict(llama8b(), plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(inner) && static_cast<bool>(outer));
  EXPECT_GT(outer->commTime.tp, 5 * inner->commTime.tp);
  EXPECT_LT(outer->commTime.dp, inner->commTime.dp);
  EXPECT_GT(outer->stepTimeS, inner->stepTimeS);
}

TEST(CostModel, Zero3ShardsParamsAndPaysPerLayerGathers) {
  ParallelPlan plan = basePlan();
  plan.pp = 1;
  plan.dp = 16;
  plan.zero = 1;
  auto z1 = predict(llama8b(), plan, h100(64));
  plan.zero = 3;
  auto z3 = predict(llama8b(), plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(z1) && static_cast<bool>(z3));
  EXPECT_NEAR(z3->memory.params, z1->memory.params / 16, 1);
  EXPECT_NEAR(z3->memory.grads, z1->memory.grads / 16, 1);
  EXPECT_DOUBLE_EQ(z3->memory.optimizer, z1->memory.optimizer);
  EXPECT_GT(z3->commTime.dp, 2 * z1->commTime.dp);
}

TEST(CostModel, ContextParallelRingHidesBehindAttention) {
  TransformerSpec spec = llama8b();
  spec.seqLen = 131072;
  ParallelPlan plan = basePlan();
  plan.pp = 1;
  plan.tp = 8;
  plan.cp = 8;
  plan.dp = 1;
  plan.globalBatch = 8;
  plan.recompute = Recompute::Full;
  auto p = predict(spec, plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  EXPECT_GT(p->commTime.cp, 0);
  // At 128K tokens attention dwarfs the K/V ring.
  EXPECT_LT(p->commExposed.cp, 0.1 * p->commTime.cp);
}

TEST(CostModel, ExpertParallelAllToAll) {
  TransformerSpec spec = llama8b();
  spec.experts = 8;
  spec.topK = 2;
  ParallelPlan plan = basePlan();
  plan.ep = 8;
  auto p = predict(spec, plan, h100(64));
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  EXPECT_GT(p->commTime.ep, 0);
  EXPECT_DOUBLE_EQ(p->commExposed.ep, p->commTime.ep);
  // Eight experts, two per token: about twice the dense MLP FLOPs.
  double ratio = trainingFlopsPerToken(spec) / trainingFlopsPerToken(llama8b());
  EXPECT_GT(ratio, 1.5);
  EXPECT_LT(ratio, 2.0);
}

// dtc's MoE ops exchange and compute the whole static buffer: dropless
// (capacity = sequence) is experts / top-k = 4 times the all-to-all bytes of
// a ragged top-2 dispatch; a capacity factor of 1.25 is 1.25 times. A
// ragged dispatch pays for its busiest expert instead.
TEST(CostModel, ExpertBufferAndImbalance) {
  TransformerSpec spec = llama8b();
  spec.experts = 8;
  spec.topK = 2;
  ParallelPlan plan = basePlan();
  plan.ep = 8;
  auto predictWith = [&](double rows, double imbalance) {
    TransformerSpec s = spec;
    s.expertRowsPerToken = rows;
    s.routingImbalance = imbalance;
    // Without link latencies the all-to-alls scale with their bytes alone.
    Cluster cluster = h100(64);
    cluster.intraNodeLatencyUs = cluster.interNodeLatencyUs = 0;
    auto p = predict(s, plan, cluster);
    EXPECT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
    return p ? *p : Prediction{};
  };
  Prediction ragged = predictWith(0, 1), dropless = predictWith(8, 1),
             factor = predictWith(2.5, 1), skewed = predictWith(0, 1.5);
  // Four and 1.25 times the bytes.
  double droplessRatio = dropless.commTime.ep / ragged.commTime.ep;
  double factorRatio = factor.commTime.ep / ragged.commTime.ep;
  EXPECT_GT(droplessRatio, 3.8);
  EXPECT_LE(droplessRatio, 4 + 1e-9);
  EXPECT_GT(factorRatio, 1.2);
  EXPECT_LE(factorRatio, 1.25 + 1e-9);
  EXPECT_GT(dropless.computeTimeS, factor.computeTimeS);
  EXPECT_GT(factor.computeTimeS, ragged.computeTimeS);
  EXPECT_GT(skewed.computeTimeS, ragged.computeTimeS);
  EXPECT_DOUBLE_EQ(skewed.commTime.ep, ragged.commTime.ep);
  // Model FLOPs count the useful top-k work whatever the dispatch.
  EXPECT_DOUBLE_EQ(dropless.modelFlopsPerStep, ragged.modelFlopsPerStep);
  EXPECT_GT(dropless.memoryPerGpuBytes, ragged.memoryPerGpuBytes);
}

TEST(CostModel, SkinnyGemmsRunFarBelowPeak) {
  Cluster cluster = h100(8);
  double big = gemmEfficiency(8192, 8192, 8192, cluster);
  // A large GEMM runs near the curve's peak (H100's fitted 0.67: about 650
  // of 989 dense TFLOP/s, what cuBLAS reaches in bf16).
  EXPECT_GT(big, 0.9 * cluster.gemmPeakEfficiency);
  EXPECT_GT(big, 0.55);
  EXPECT_LE(big, cluster.gemmPeakEfficiency);
  EXPECT_LT(gemmEfficiency(64, 8192, 8192, cluster), 0.5 * big);
  EXPECT_LT(gemmEfficiency(8192, 8192, 64, cluster), 0.5 * big);
  // A matrix-vector product takes about the time of reading the matrix
  // (on H100 the curve's m = 1 efficiency, peak / 241, lands within a few
  // percent of it).
  double t = gemmTime(1, 8192, 8192, 1, DType::BF16, cluster);
  double read = streamTime(2.0 * (8192 + 8192 * 8192 + 8192), cluster);
  EXPECT_GE(t, read);
  EXPECT_LT(t, 1.05 * read);
}

TEST(CostModel, JsonHasThePlanJsonKeys) {
  auto p = predict(llama8b(), basePlan(), h100(64));
  ASSERT_TRUE(static_cast<bool>(p));
  llvm::json::Object json = predictionToJson(*p);
  for (llvm::StringRef key :
       {"step_time_s", "tokens_per_s", "tflops_per_gpu", "hw_tflops_per_gpu",
        "mfu", "bubble_fraction", "memory_per_gpu_bytes", "memory_breakdown",
        "comm_time_s", "comm_exposed_s", "comm_hidden_s", "fits"})
    EXPECT_TRUE(json.get(key)) << key.str();
  const llvm::json::Object *mem = json.getObject("memory_breakdown");
  ASSERT_TRUE(mem);
  for (llvm::StringRef key :
       {"params", "grads", "optimizer", "activations", "workspace"})
    EXPECT_TRUE(mem->get(key)) << key.str();
  const llvm::json::Object *comm = json.getObject("comm_time_s");
  ASSERT_TRUE(comm);
  for (llvm::StringRef key : {"dp", "tp", "pp", "cp", "ep"})
    EXPECT_TRUE(comm->get(key)) << key.str();
  EXPECT_FALSE(json.get("reason"));
}

TEST(CostModel, InterleavedChunksMayBeUneven) {
  // 32 layers in pp 3 x vpp 2 = 6 chunks of 6, 6, 5, 5, 5, 5 layers (the
  // pipeline pass balances its cuts by cost; Megatron's MLPerf Llama 405B
  // runs 126 layers in 8 x 8 chunks): stages hold 11, 11 and 10 layers.
  TransformerSpec spec = llama8b();
  ParallelPlan plan = basePlan();
  plan.pp = 3;
  plan.dp = 4;
  plan.vpp = 2;
  plan.schedule = Schedule::Interleaved;
  plan.globalBatch = 48; // 12 micro-batches, a multiple of pp.
  std::vector<StageDetail> stages;
  auto p = predict(spec, plan, h100(48), &stages);
  ASSERT_TRUE(static_cast<bool>(p)) << llvm::toString(p.takeError());
  ASSERT_EQ(stages.size(), 3u);
  // Stage 1 holds one layer more than stage 2's ten (which adds the output
  // layer) and no embedding: it is slower than a ten-layer stage would be.
  ParallelPlan even = plan;
  even.vpp = 1;
  even.schedule = Schedule::OneFOneB;
  spec.layers = 30;
  std::vector<StageDetail> evenStages;
  auto q = predict(spec, even, h100(48), &evenStages);
  ASSERT_TRUE(static_cast<bool>(q)) << llvm::toString(q.takeError());
  EXPECT_GT(stages[1].timeS, evenStages[1].timeS);
}

TEST(CostModel, InvalidPlansAreBadInputWithAReason) {
  TransformerSpec spec = llama8b();
  Cluster cluster = h100(64);
  ParallelPlan plan;

  plan = basePlan();
  plan.dp = 4;
  EXPECT_NE(predictError(spec, plan, cluster)
                .find("32 GPUs, but the cluster "
                      "has 64"),
            std::string::npos);
  // 6 kv heads cannot be split four ways, nor can four ranks share them.
  spec.hidden = 6144;
  spec.heads = 48;
  spec.kvHeads = 6;
  EXPECT_NE(predictError(spec, basePlan(), cluster).find("kv heads"),
            std::string::npos);
  spec.hidden = 2560;
  spec.heads = 20;
  spec.kvHeads = 20;
  plan = basePlan();
  plan.tp = 8;
  plan.dp = 4;
  EXPECT_NE(predictError(spec, plan, cluster)
                .find("tp=8 does not divide the "
                      "20 attention heads"),
            std::string::npos);
  spec = llama8b();
  spec.layers = 1;
  EXPECT_NE(predictError(spec, basePlan(), cluster).find("pp=2"),
            std::string::npos);
  spec = llama8b();
  plan = basePlan();
  plan.globalBatch = 100;
  EXPECT_NE(predictError(spec, plan, cluster).find("not a multiple"),
            std::string::npos);
  plan = basePlan();
  plan.vpp = 2;
  EXPECT_NE(predictError(spec, plan, cluster).find("interleaved"),
            std::string::npos);
  plan.schedule = Schedule::Interleaved;
  plan.vpp = 17; // 32 layers do not fill 2 x 17 chunks.
  EXPECT_NE(predictError(spec, plan, cluster).find("do not fill"),
            std::string::npos);
  plan = basePlan();
  plan.ep = 2;
  EXPECT_NE(predictError(spec, plan, cluster).find("mixture-of-experts"),
            std::string::npos);
  plan = basePlan();
  plan.zero = 4;
  EXPECT_NE(predictError(spec, plan, cluster).find("ZeRO"), std::string::npos);
  plan = basePlan();
  plan.meshOrder = {MeshAxis::TP, MeshAxis::TP, MeshAxis::DP, MeshAxis::PP};
  EXPECT_NE(predictError(spec, plan, cluster).find("mesh order"),
            std::string::npos);
  plan = basePlan();
  plan.cp = 3;
  plan.dp = 1;
  EXPECT_FALSE(static_cast<bool>(predict(spec, plan, h100(24)))) << "seq % cp";
  spec.dtype = DType::FP8;
  EXPECT_NE(predictError(spec, basePlan(), *lookupClusterPreset("a100-80g", 64))
                .find("no fp8 peak"),
            std::string::npos);
}

// Context parallelism: a ring step's attention block (this rank's queries
// over one key chunk) is attention work, so the blocks of all ranks and
// steps add up to the whole attention's FLOPs, and the trace of a cp run
// prices them at the attention kernel's rate, not as a memory pass.
TEST(CostModel, RingAttentionBlocksAddUpToTheWholeAttention) {
  const int64_t b = 1, heads = 4, seq = 128, d = 32, cp = 2;
  auto desc = [&](llvm::StringRef op, int64_t queries, int64_t keys) {
    KernelDesc k;
    k.op = op;
    k.causal = true;
    k.inputs = {TensorDesc{{b, heads, queries, d}},
                TensorDesc{{b, heads, keys, d}},
                TensorDesc{{b, heads, keys, d}}};
    k.outputs = {TensorDesc{{b, heads, queries, d}}};
    return k;
  };
  KernelWork whole = kernelWork(desc("dtc.attention", seq, seq));
  KernelWork block =
      kernelWork(desc("dtc.attention_block", seq / cp, seq / cp));
  EXPECT_EQ(block.kind, KernelWork::Kind::Attention);
  EXPECT_FALSE(block.gradient);
  // cp ranks, cp ring steps each.
  EXPECT_DOUBLE_EQ(block.flops * cp * cp, whole.flops);
  EXPECT_DOUBLE_EQ(block.executedFlops * cp * cp, whole.executedFlops);
  KernelWork blockGrad =
      kernelWork(desc("dtc.attention_block_grad", seq / cp, seq / cp));
  EXPECT_EQ(blockGrad.kind, KernelWork::Kind::Attention);
  EXPECT_TRUE(blockGrad.gradient);
}
