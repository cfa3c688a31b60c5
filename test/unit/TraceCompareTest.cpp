//===- TraceCompareTest.cpp - Per-instruction prices, replay, traces -----===//
//
// The expectations are derived by hand from the cluster's constants below
// (the roofline and alpha-beta formulas of docs/cost-model.md), not by
// calling the cost model.
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/TraceCompare.h"
#include "compiler/inspect/InstructionCost.h"

#include "llvm/Support/FormatVariadic.h"

#include <gtest/gtest.h>

using namespace dtc;

namespace {

/// 1 TFLOP/s in f32, no GEMM efficiency loss, 1 TB/s of HBM at half
/// efficiency (0.5e12 B/s for streaming), NVLink 100 GB/s with 10 us per
/// step, 8 GPUs per domain.
Cluster testCluster() {
  Cluster c;
  c.name = "test";
  c.gpu = "test";
  c.peakTf32Tflops = c.peakBf16Tflops = c.peakFp16Tflops = 1;
  c.gemmPeakEfficiency = 1;
  c.gemmHalfSize = 0;
  c.hbmBytesPerSecond = 1e12;
  c.memoryEfficiency = 0.5;
  c.gpusPerNode = 8;
  c.intraNodeGBps = 100;
  c.intraNodeLatencyUs = 10;
  c.intraNodeEfficiency = 1;
  c.interNodeGBps = 10;
  c.interNodeLatencyUs = 20;
  c.interNodeEfficiency = 1;
  c.gpus = 8;
  return c;
}

runtime::Mesh mesh(llvm::StringRef text) {
  auto parsed = runtime::Mesh::parse(text);
  EXPECT_TRUE(static_cast<bool>(parsed));
  return parsed ? *parsed : runtime::Mesh();
}

/// Adds an f32 value of `shape` (a temporary) to `fn`.
int32_t value(program::Function &fn, std::initializer_list<int64_t> shape) {
  program::Value *v = fn.add_values();
  v->set_id(fn.values_size() - 1);
  v->mutable_type()->set_dtype(program::F32);
  for (int64_t d : shape)
    v->mutable_type()->add_shape(d);
  v->set_arena_offset(0);
  return v->id();
}

program::Instruction &inst(program::Function &fn, llvm::StringRef op,
                           std::initializer_list<int32_t> in,
                           std::initializer_list<int32_t> out) {
  program::Instruction *i = fn.add_instructions();
  i->set_op(op.str());
  for (int32_t id : in)
    i->add_inputs(id);
  for (int32_t id : out)
    i->add_outputs(id);
  i->set_loc(llvm::formatv("/{0}/{1}", op, fn.instructions_size()).str());
  return *i;
}

void comm(program::Instruction &i, llvm::StringRef axis, int64_t request,
          std::optional<int64_t> peer = std::nullopt) {
  (*i.mutable_attrs())["request"].set_i(request);
  if (!axis.empty())
    (*i.mutable_attrs())["mesh_axes"].mutable_strings()->add_values(axis.str());
  if (peer)
    (*i.mutable_attrs())["peer_offset"].set_i(*peer);
}

/// matmul [64,128] x [128,256] -> [64,256]: 2*64*128*256 FLOPs at 1e12/s
/// = 4.194304 us; its bytes, 4*(64*128 + 128*256 + 64*256) = 229376 at
/// 0.5e12 B/s = 0.458752 us, are less: compute-bound.
constexpr double kMatmulS = 2.0 * 64 * 128 * 256 / 1e12;
/// add of two [64,256] f32 into a third: 3 * 65536 bytes at 0.5e12 B/s.
constexpr double kAddS = 3.0 * 65536 / 0.5e12;

program::Program inferProgram(program::Function **fnOut) {
  program::Program p;
  p.set_schema("dtc.program/1");
  p.set_mode("infer");
  p.set_infer_function("f");
  p.set_world_size(1);
  program::RankProgram *rank = p.add_ranks();
  rank->set_rank(0);
  program::Function *fn = rank->add_functions();
  fn->set_name("f");
  *fnOut = fn;
  return p;
}

TEST(InstructionCost, PricesAMatmulAndAnAddByHand) {
  program::Function *fn = nullptr;
  program::Program p = inferProgram(&fn);
  int32_t a = value(*fn, {64, 128}), b = value(*fn, {128, 256}),
          c = value(*fn, {64, 256}), d = value(*fn, {64, 256});
  inst(*fn, "dtc.matmul", {a, b}, {c});
  inst(*fn, "dtc.add", {c, c}, {d});
  Cluster cluster = testCluster();
  InstructionPricer pricer(cluster, mesh(""));
  auto matmul = pricer.price(*fn, fn->instructions(0));
  auto add = pricer.price(*fn, fn->instructions(1));
  ASSERT_TRUE(static_cast<bool>(matmul));
  ASSERT_TRUE(static_cast<bool>(add));
  EXPECT_NEAR(matmul->compute, kMatmulS, 1e-15);
  EXPECT_EQ(matmul->communication, 0);
  EXPECT_NEAR(add->compute, kAddS, 1e-15);

  auto step = predictStep(p, {0}, pricer);
  ASSERT_TRUE(static_cast<bool>(step)) << llvm::toString(step.takeError());
  EXPECT_NEAR(step->stepTimeS, kMatmulS + kAddS, 1e-15);
  ASSERT_EQ(step->ranks.size(), 1u);
  ASSERT_EQ(step->ranks[0].events.size(), 2u);
  EXPECT_NEAR(step->ranks[0].events[1].start, kMatmulS, 1e-15);

  // A transposed lhs [128, 64] is the same product; a per-call overhead of
  // 1 us adds 1 us per instruction.
  (*fn->mutable_instructions(0)->mutable_attrs())["transpose_lhs"].set_b(true);
  fn->mutable_values(a)->mutable_type()->set_shape(0, 128);
  fn->mutable_values(a)->mutable_type()->set_shape(1, 64);
  InstructionPricer withOverhead(cluster, mesh(""), 1e-6);
  auto slower = predictStep(p, {0}, withOverhead);
  ASSERT_TRUE(static_cast<bool>(slower));
  EXPECT_NEAR(slower->stepTimeS, kMatmulS + kAddS + 2e-6, 1e-15);
}

TEST(InstructionCost, CommunicationOverlapsUntilItsWait) {
  program::Program p;
  p.set_mode("infer");
  p.set_infer_function("f");
  p.set_world_size(2);
  p.set_mesh("tp:2");
  program::RankProgram *rank = p.add_ranks();
  rank->set_rank(0);
  rank->add_ranks(0);
  rank->add_ranks(1);
  program::Function *fn = rank->add_functions();
  fn->set_name("f");
  int32_t part = value(*fn, {32, 256}), whole = value(*fn, {64, 256}),
          a = value(*fn, {64, 128}), b = value(*fn, {128, 256}),
          c = value(*fn, {64, 256}), d = value(*fn, {64, 256});
  comm(inst(*fn, "dtc.all_gather_start", {part}, {whole}), "tp", 7);
  inst(*fn, "dtc.matmul", {a, b}, {c});
  comm(inst(*fn, "dtc.wait", {whole}, {whole}), "", 7);
  inst(*fn, "dtc.add", {whole, whole}, {d});

  // Ring all-gather of the 65536-byte output over 2 ranks of one NVLink
  // domain: 1 step of 10 us + (1/2) * 65536 B / 100 GB/s.
  double gather = 10e-6 + 0.5 * 65536 / 100e9;
  InstructionPricer pricer(testCluster(), mesh("tp:2"));
  auto cost = pricer.price(*fn, fn->instructions(0));
  ASSERT_TRUE(static_cast<bool>(cost));
  EXPECT_NEAR(cost->communication, gather, 1e-15);
  EXPECT_EQ(cost->compute, 0);

  auto step = predictStep(p, {0}, pricer);
  ASSERT_TRUE(static_cast<bool>(step)) << llvm::toString(step.takeError());
  // The gather runs from 0 while the matmul computes; the wait blocks until
  // it ends (gather > matmul), then the add.
  ASSERT_GT(gather, kMatmulS);
  EXPECT_NEAR(step->stepTimeS, gather + kAddS, 1e-15);
  const std::vector<TimelineEvent> &events = step->ranks[0].events;
  ASSERT_EQ(events.size(), 5u); // post, its transfer, matmul, wait, add
  EXPECT_EQ(events[1].track, 1);
  EXPECT_NEAR(events[1].start, 0, 1e-15);
  EXPECT_NEAR(events[1].end, gather, 1e-15);
  EXPECT_EQ(events[3].op, "dtc.wait");
  EXPECT_NEAR(events[3].start, kMatmulS, 1e-15);
  EXPECT_NEAR(events[3].end, gather, 1e-15);

  // An axis the mesh lacks is an error naming it.
  (*fn->mutable_instructions(0)->mutable_attrs())["mesh_axes"]
      .mutable_strings()
      ->set_values(0, "dp");
  auto bad = pricer.price(*fn, fn->instructions(0));
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("no mesh axis 'dp'"),
            std::string::npos);
}

TEST(InstructionCost, SendWaitsForTheMatchingReceive) {
  program::Program p;
  p.set_mode("infer");
  p.set_infer_function("f");
  p.set_world_size(2);
  p.set_mesh("pp:2");
  // Stage 0 computes, then sends; stage 1 receives, then adds.
  program::RankProgram *first = p.add_ranks();
  first->set_rank(0);
  program::Function *f0 = first->add_functions();
  f0->set_name("f");
  int32_t a = value(*f0, {64, 128}), b = value(*f0, {128, 256}),
          c = value(*f0, {64, 256});
  inst(*f0, "dtc.matmul", {a, b}, {c});
  comm(inst(*f0, "dtc.send_start", {c}, {}), "pp", 1, 1);
  comm(inst(*f0, "dtc.wait", {c}, {c}), "", 1);
  program::RankProgram *second = p.add_ranks();
  second->set_rank(1);
  program::Function *f1 = second->add_functions();
  f1->set_name("f");
  int32_t r = value(*f1, {64, 256}), s = value(*f1, {64, 256});
  comm(inst(*f1, "dtc.recv_start", {}, {r}), "pp", 1, -1);
  comm(inst(*f1, "dtc.wait", {r}, {r}), "", 1);
  inst(*f1, "dtc.add", {r, r}, {s});

  // Neighbours on one node: 10 us + 65536 B / 100 GB/s, from when both
  // sides posted (the send, after the matmul).
  double transfer = 10e-6 + 65536 / 100e9;
  InstructionPricer pricer(testCluster(), mesh("pp:2"));
  auto step = predictStep(p, {0, 1}, pricer);
  ASSERT_TRUE(static_cast<bool>(step)) << llvm::toString(step.takeError());
  EXPECT_TRUE(step->matched);
  EXPECT_NEAR(step->ranks[0].end, kMatmulS + transfer, 1e-15);
  EXPECT_NEAR(step->ranks[1].end, kMatmulS + transfer + kAddS, 1e-15);
  EXPECT_NEAR(step->stepTimeS, kMatmulS + transfer + kAddS, 1e-15);

  // Replayed alone, stage 1's receive does not wait for stage 0.
  auto alone = predictStep(p, {1}, pricer);
  ASSERT_TRUE(static_cast<bool>(alone));
  EXPECT_NEAR(alone->stepTimeS, transfer + kAddS, 1e-15);
}

TEST(InstructionCost, CollectiveAcrossStagesStartsWhenBothPosted) {
  // Each stage all-reduces a [64, 256] buffer over pp: stage 0 after a
  // matmul, stage 1 at once; stage 1 then adds.
  program::Program p;
  p.set_mode("infer");
  p.set_infer_function("f");
  p.set_world_size(2);
  p.set_mesh("pp:2");
  for (int stage = 0; stage < 2; ++stage) {
    program::RankProgram *rank = p.add_ranks();
    rank->set_rank(stage);
    program::Function *fn = rank->add_functions();
    fn->set_name("f");
    int32_t buffer = value(*fn, {64, 256}), out = value(*fn, {64, 256});
    if (stage == 0) {
      int32_t a = value(*fn, {64, 128}), b = value(*fn, {128, 256});
      inst(*fn, "dtc.matmul", {a, b}, {buffer});
    }
    program::Instruction &reduce =
        inst(*fn, "dtc.all_reduce_start", {buffer}, {buffer});
    comm(reduce, "pp", 3);
    (*reduce.mutable_attrs())["reduction"].set_s("sum");
    comm(inst(*fn, "dtc.wait", {buffer}, {buffer}), "", 3);
    if (stage == 1)
      inst(*fn, "dtc.add", {buffer, buffer}, {out});
  }
  // Ring all-reduce over 2 ranks of one domain: 2 steps of 10 us and
  // 2 * (1/2) * 65536 B at 100 GB/s (the tree, 2 steps and 2 * 65536 B, is
  // slower).
  double reduce = 2 * 10e-6 + 65536 / 100e9;
  InstructionPricer pricer(testCluster(), mesh("pp:2"));
  auto step = predictStep(p, {0, 1}, pricer);
  ASSERT_TRUE(static_cast<bool>(step)) << llvm::toString(step.takeError());
  EXPECT_TRUE(step->matched);
  EXPECT_NEAR(step->ranks[0].end, kMatmulS + reduce, 1e-15);
  EXPECT_NEAR(step->ranks[1].end, kMatmulS + reduce + kAddS, 1e-15);
  // Stage 1's wait covers the matmul it waited for and the all-reduce.
  const TimelineEvent &wait = step->ranks[1].events[2];
  EXPECT_EQ(wait.op, "dtc.wait");
  EXPECT_NEAR(wait.end - wait.start, kMatmulS + reduce, 1e-15);
}

TEST(InstructionCost, TrainingStepCalls) {
  program::Program p;
  p.set_mode("train");
  p.mutable_training()->set_micro_step("m");
  p.mutable_training()->set_last_micro_step("l");
  p.mutable_training()->set_apply("a");
  p.mutable_training()->set_grad_accum(3);
  std::vector<FunctionCall> calls = stepCalls(p);
  ASSERT_EQ(calls.size(), 4u);
  EXPECT_EQ(calls[0].function, "m");
  EXPECT_EQ(calls[1].function, "m");
  EXPECT_EQ(calls[1].call, 1);
  EXPECT_EQ(calls[2].function, "l");
  EXPECT_EQ(calls[2].call, 0);
  EXPECT_EQ(calls[3].function, "a");
}

std::string traceText(int rank, llvm::ArrayRef<std::pair<double, double>> steps,
                      llvm::StringRef schema = "dtc.trace/1") {
  // Plain concatenation: the braces of JSON are formatv's.
  std::string r = std::to_string(rank), events;
  for (auto [i, step] : llvm::enumerate(steps)) {
    std::string n = std::to_string(i + 1), ts = std::to_string(step.first);
    events += R"({"ph": "X", "cat": "step", "name": "step )" + n +
              R"(", "pid": )" + r + R"(, "tid": 1, "ts": )" + ts +
              R"(, "dur": )" + std::to_string(step.second) +
              R"(, "args": {"step": )" + n + "}},\n";
    events += R"({"ph": "X", "cat": "compute", "name": "dtc.matmul", "pid": )" +
              r + R"(, "tid": 0, "ts": )" + ts +
              R"(, "dur": 1.5, "args": {"step": )" + n +
              R"(, "function": "f", "index": 0, "loc": "/mm", "call": 0}},)" +
              "\n";
  }
  return R"({"displayTimeUnit": "ms", "otherData": {"schema": ")" +
         schema.str() + R"(", "rank": )" + r +
         R"(, "world_size": 2, "mesh": "pp:2", "status": "complete"},
  "traceEvents": [)" +
         events + R"({"ph": "M", "name": "process_name", "pid": )" + r +
         R"(, "tid": 0, "args": {"name": "rank"}}]})";
}

TEST(TraceCompare, ParsesATraceAndPicksTheMedianStep) {
  // Steps of 10, 5, 7 and 6 us: the first is left out, the median of 5, 6
  // and 7 is step 4's 6.
  auto trace = parseRankTrace(
      traceText(0, {{0, 10}, {20, 5}, {30, 7}, {40, 6}}), "r0.json");
  ASSERT_TRUE(static_cast<bool>(trace)) << llvm::toString(trace.takeError());
  EXPECT_EQ(trace->rank, 0);
  EXPECT_EQ(trace->worldSize, 2);
  EXPECT_EQ(trace->mesh, "pp:2");
  ASSERT_EQ(trace->steps.size(), 4u);
  EXPECT_NEAR(trace->steps.at(2).first, 20e-6, 1e-12);
  EXPECT_NEAR(trace->steps.at(2).second, 25e-6, 1e-12);
  ASSERT_EQ(trace->events.size(), 4u);
  EXPECT_EQ(trace->events[1].step, 2);
  EXPECT_EQ(trace->events[1].event.op, "dtc.matmul");
  EXPECT_EQ(trace->events[1].event.loc, "/mm");
  EXPECT_NEAR(trace->events[1].event.end - trace->events[1].event.start, 1.5e-6,
              1e-12);
  std::vector<RankTrace> one{*trace};
  EXPECT_EQ(pickStep(one), 4);

  // Across ranks a step spans the first start to the last end: rank 1's
  // step 4 runs late, so step 3 (7 us) is the median of 5, 7 and 12.
  auto late = parseRankTrace(traceText(1, {{0, 10}, {20, 5}, {30, 7}, {46, 6}}),
                             "r1.json");
  ASSERT_TRUE(static_cast<bool>(late));
  std::vector<RankTrace> two{*trace, *late};
  EXPECT_EQ(pickStep(two), 3);

  // Two steps: neither is left out; the shorter of the two.
  auto pair = parseRankTrace(traceText(0, {{0, 9}, {20, 4}}), "r0.json");
  ASSERT_TRUE(static_cast<bool>(pair));
  std::vector<RankTrace> few{*pair};
  EXPECT_EQ(pickStep(few), 2);
}

TEST(TraceCompare, BadTracesNameTheFile) {
  auto json = parseRankTrace("{\"otherData\": ", "dir/rank-3.trace.json");
  ASSERT_FALSE(static_cast<bool>(json));
  EXPECT_NE(llvm::toString(json.takeError())
                .find("dir/rank-3.trace.json: not valid JSON"),
            std::string::npos);
  auto schema = parseRankTrace(traceText(0, {{0, 1}}, "other/2"), "x.json");
  ASSERT_FALSE(static_cast<bool>(schema));
  EXPECT_NE(llvm::toString(schema.takeError())
                .find("x.json: otherData.schema must be \"dtc.trace/1\""),
            std::string::npos);
}

TEST(TraceCompare, WeightedMedian) {
  EXPECT_EQ(weightedMedian({{0.1, 1}, {0.5, 10}, {2.0, 1}}), 0.5);
  EXPECT_EQ(weightedMedian({{3, 1}, {1, 1}}), 1);
  EXPECT_EQ(weightedMedian({{0.9, 5}, {0.2, 1}, {0.4, 1}}), 0.9);
  EXPECT_EQ(weightedMedian({}), std::nullopt);
}

} // namespace
