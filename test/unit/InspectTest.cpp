//===- InspectTest.cpp - plan.json read back; the schedule replay ---------===//
//
// Expected values are worked out by hand: mesh coordinates from the
// row-major rule, and pipeline makespans from the schedules' textbook
// formulas ((m + p - 1)(f + b) for GPipe and 1F1B, m (f + b) + (p - 1)(f +
// b) / v interleaved).
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/Inspect.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

using namespace dtc;

namespace {

ParallelPlan pipeline(int64_t pp, int64_t microBatches, int64_t vpp,
                      Schedule schedule) {
  ParallelPlan plan;
  plan.pp = pp;
  plan.vpp = vpp;
  plan.microBatch = 1;
  plan.globalBatch = microBatches;
  plan.schedule = schedule;
  return plan;
}

/// No two ops of a lane overlap, and every op lasts its stage's time.
void expectWellFormed(const PipelineTimeline &t, llvm::ArrayRef<double> f,
                      llvm::ArrayRef<double> b, int64_t v) {
  for (size_t s = 0; s < t.lanes.size(); ++s) {
    double clock = 0;
    for (const PipelineOp &op : t.lanes[s]) {
      EXPECT_GE(op.start, clock - 1e-12) << "stage " << s;
      EXPECT_NEAR(op.end - op.start, (op.forward ? f[s] : b[s]) / v, 1e-12);
      clock = op.end;
    }
  }
}

TEST(InspectTimeline, OneFOneBBalanced) {
  // p = 4, m = 8, f = 1, b = 2: (8 + 3) * 3 = 33.
  std::vector<double> f(4, 1.0), b(4, 2.0);
  PipelineTimeline t =
      replayPipeline(pipeline(4, 8, 1, Schedule::OneFOneB), f, b);
  ASSERT_TRUE(t.complete);
  EXPECT_DOUBLE_EQ(t.makespan, 33);
  expectWellFormed(t, f, b, 1);
  // Stage 0 warms up with p - 1 = 3 forwards, then alternates.
  ASSERT_EQ(t.lanes[0].size(), 16u);
  for (int i = 0; i < 3; ++i)
    EXPECT_TRUE(t.lanes[0][i].forward);
  EXPECT_TRUE(t.lanes[0][3].forward);
  EXPECT_FALSE(t.lanes[0][4].forward);
  EXPECT_EQ(t.lanes[0][4].microBatch, 0);
  // The last stage starts after three forwards upstream and never idles:
  // 3 + 8 * 3 = 27; the backwards drain to stage 0 in 3 * 2 more.
  EXPECT_DOUBLE_EQ(t.lanes[3].front().start, 3);
  EXPECT_DOUBLE_EQ(t.lanes[3].back().end, 27);
  EXPECT_DOUBLE_EQ(t.lanes[0].back().end, 33);
  // Its first backward follows its first forward at once: 1F1B.
  EXPECT_FALSE(t.lanes[3][1].forward);
  EXPECT_DOUBLE_EQ(t.lanes[3][1].start, 4);
}

TEST(InspectTimeline, ZeroBubbleH1Balanced) {
  // p = 4, m = 8, F = B = W = 1: ZB-H1's bubble (p-1)(F+B-W) = 3 on top of
  // m (F+B+W) = 24 (worked out by hand on the schedule's pass order).
  std::vector<double> f(4, 1.0), b(4, 2.0), w(4, 1.0);
  PipelineTimeline t =
      replayPipeline(pipeline(4, 8, 1, Schedule::ZeroBubbleH1), f, b, w);
  ASSERT_TRUE(t.complete);
  EXPECT_DOUBLE_EQ(t.makespan, 27);
  // Each stage runs 8 forwards, input gradients and weight gradients.
  for (const auto &lane : t.lanes) {
    int weights = 0;
    for (const PipelineOp &op : lane) {
      weights += op.weight ? 1 : 0;
      EXPECT_DOUBLE_EQ(op.end - op.start, 1.0);
    }
    EXPECT_EQ(weights, 8);
  }
}

TEST(InspectTimeline, GPipeAllForwardsFirst) {
  // Same makespan as 1F1B; every forward precedes every backward.
  std::vector<double> f(3, 1.0), b(3, 2.0);
  PipelineTimeline t = replayPipeline(pipeline(3, 4, 1, Schedule::GPipe), f, b);
  ASSERT_TRUE(t.complete);
  EXPECT_DOUBLE_EQ(t.makespan, (4 + 3 - 1) * 3);
  for (const auto &lane : t.lanes)
    for (size_t i = 0; i < lane.size(); ++i)
      EXPECT_EQ(lane[i].forward, i < 4);
}

TEST(InspectTimeline, InterleavedShrinksTheBubble) {
  // p = 2, v = 2, m = 4, f = 1, b = 2 per micro-batch (chunks 0.5 and 1):
  // m (f + b) + (p - 1)(f + b) / v = 12 + 1.5.
  std::vector<double> f(2, 1.0), b(2, 2.0);
  PipelineTimeline t =
      replayPipeline(pipeline(2, 4, 2, Schedule::Interleaved), f, b);
  ASSERT_TRUE(t.complete);
  EXPECT_DOUBLE_EQ(t.makespan, 13.5);
  expectWellFormed(t, f, b, 2);
  // Every stage runs each of its 2 chunks forward and backward for all 4
  // micro-batches.
  for (const auto &lane : t.lanes) {
    ASSERT_EQ(lane.size(), 16u);
    int forwards[2] = {0, 0}, backwards[2] = {0, 0};
    for (const PipelineOp &op : lane)
      ++(op.forward ? forwards : backwards)[op.chunk];
    EXPECT_EQ(forwards[0], 4);
    EXPECT_EQ(forwards[1], 4);
    EXPECT_EQ(backwards[0], 4);
    EXPECT_EQ(backwards[1], 4);
  }
}

TEST(InspectTimeline, UnbalancedStagesPaceTheSteadyState) {
  // The cost model's m max t + (sum t - max t): stage 1 is twice as slow.
  // p = 2, m = 4, t = (3, 6): 4 * 6 + 3 = 27.
  std::vector<double> f = {1, 2}, b = {2, 4};
  PipelineTimeline t =
      replayPipeline(pipeline(2, 4, 1, Schedule::OneFOneB), f, b);
  ASSERT_TRUE(t.complete);
  EXPECT_DOUBLE_EQ(t.makespan, 27);
}

TEST(InspectMesh, RowMajorCoordinatesAndGroups) {
  // pp=2 x dp=2 x cp=1 x tp=2, outermost first: rank 5 = 1*4 + 0*2 + 0*2 + 1.
  MeshView mesh;
  mesh.axes = {"pp", "dp", "cp", "tp"};
  mesh.shape = {2, 2, 1, 2};
  EXPECT_EQ(mesh.size(), 8);
  EXPECT_EQ(mesh.coordinates(5), (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(mesh.stride("pp"), 4);
  EXPECT_EQ(mesh.stride("dp"), 2);
  EXPECT_EQ(mesh.stride("tp"), 1);
  EXPECT_EQ(mesh.groupOf(5, "tp"), (std::vector<int64_t>{4, 5}));
  EXPECT_EQ(mesh.groupOf(5, "dp"), (std::vector<int64_t>{5, 7}));
  EXPECT_EQ(mesh.groupOf(5, "pp"), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(mesh.groupOf(5, "cp"), (std::vector<int64_t>{5}));
}

TEST(InspectFormat, RanksLayersAndUnits) {
  EXPECT_EQ(formatRanks({0, 1, 2, 3, 8, 9, 12}), "0-3,8-9,12");
  EXPECT_EQ(formatRanks({0, 2, 4, 6, 8}, 3), "0,2,4,...");
  EXPECT_EQ(formatSeconds(43.1555), "43.2 s");
  EXPECT_EQ(formatSeconds(0.000113), "113 us");
  EXPECT_EQ(formatSeconds(0.0217), "21.7 ms");
  EXPECT_EQ(formatBytes(72.5e9), "72.5 GB");
  EXPECT_EQ(formatBytes(66304), "66.3 KB");
  EXPECT_EQ(formatBytesDelta(-1.3e9), "-1.3 GB");
  EXPECT_EQ(formatCount(68976648192.0), "69.0 B");
  StageView interleaved;
  interleaved.layers = {{0, 9}, {20, 29}};
  EXPECT_EQ(formatLayers(interleaved), "0-9,20-29");
  EXPECT_EQ(formatLayersCompact(interleaved, 5), "20 layers, 2 chunks");
}

TEST(InspectPlanView, ErrorsNameTheFileAndField) {
  auto message = [](llvm::StringRef text) {
    auto view = parsePlanView(text, "b.dtc/plan.json");
    return view ? std::string("ok") : llvm::toString(view.takeError());
  };
  EXPECT_EQ(message("{"), "b.dtc/plan.json: not valid JSON: [1:1, byte=1]: "
                          "Expected object key; recompile the bundle with "
                          "'dtc compile'");
  EXPECT_EQ(message("[]"), "b.dtc/plan.json: expected a JSON object");
  EXPECT_EQ(message(R"({"schema": "other"})"),
            "b.dtc/plan.json: schema \"other\" is not dtc.plan/1; this dtc "
            "reads dtc.plan/1");
  EXPECT_EQ(message(R"({"schema": "dtc.plan/1", "model": {"name": "m"}})"),
            "b.dtc/plan.json: missing value at plan.model.params");
  // A bundle without a plan loads, with the reason.
  auto unplanned = parsePlanView(
      R"({"schema": "dtc.plan/1", "model": {"name": "m", "params": 1},
          "cluster": {"name": "h100", "gpu": "H100", "gpus": 8,
                      "gpus_per_node": 8, "peak_tflops": 989,
                      "hbm_bytes": 8e10},
          "pending_reason": "not a transformer"})",
      "b.dtc/plan.json");
  ASSERT_TRUE(static_cast<bool>(unplanned))
      << llvm::toString(unplanned.takeError());
  EXPECT_FALSE(unplanned->planned);
  EXPECT_EQ(llvm::toString(requirePlanned(*unplanned)),
            "b.dtc/plan.json: the bundle holds no plan (not a transformer)");
}

} // namespace

// The seeds of fuzz-plan-json (test/fuzz/make_plan_seeds.py) through what
// `dtc plan show | explain | diff | report` run: plan.json files dtc wrote
// give their text; the hostile ones (issue 61) a bad-input error naming the
// field, never a crash or a figure that is inf or NaN.
TEST(PlanView, FuzzSeedsReadOrRefused) {
  std::string dir = std::string(DTC_TEST_MODELS_DIR) + "/../fuzz/corpus/"
                                                       "plan-json/";
  auto read = [&](const char *name) {
    auto buffer = llvm::MemoryBuffer::getFile(dir + name);
    EXPECT_TRUE(static_cast<bool>(buffer)) << name;
    return buffer ? (*buffer)->getBuffer().str() : std::string();
  };
  for (const char *name : {"tiny-gpt-1", "tiny-gpt-8-tp2-pp2", "tiny-gpt-infer",
                           "cnn-any-graph", "llama-70b-64-tp4"}) {
    auto view = parsePlanView(read(name), name);
    ASSERT_TRUE(static_cast<bool>(view))
        << name << ": " << llvm::toString(view.takeError());
    std::string text;
    llvm::raw_string_ostream out(text);
    EXPECT_FALSE(static_cast<bool>(showPlan(*view, std::nullopt, out)));
    EXPECT_FALSE(static_cast<bool>(explainPlan(*view, 3, out)));
    EXPECT_FALSE(static_cast<bool>(diffPlans(*view, *view, out)));
    std::string html = renderReport(*view);
    for (const std::string *s : {&text, &html}) {
      std::string lower = llvm::StringRef(*s).lower();
      EXPECT_EQ(lower.find("inf%"), std::string::npos) << name;
      EXPECT_EQ(lower.find(" nan"), std::string::npos) << name;
      EXPECT_EQ(lower.find(" inf "), std::string::npos) << name;
    }
    EXPECT_NE(text.find("dp="), std::string::npos) << name;
  }
  // A bundle dtc could not plan reads, and says so.
  auto pending = parsePlanView(read("cnn-8"), "cnn-8");
  ASSERT_TRUE(static_cast<bool>(pending));
  EXPECT_FALSE(pending->planned);
  EXPECT_NE(llvm::toString(requirePlanned(*pending)).find("holds no plan"),
            std::string::npos);
  const std::pair<const char *, const char *> refused[] = {
      {"huge-degrees", "parallel.dp is 4611686018427387904; expected 1 to "
                       "1048576"},
      {"negative-counts", "cluster.gpus is -1; expected 1 to 1048576"},
      {"huge-numbers", "predicted.step_time_s is"},
      {"nested-2000", "nested deeper than 256 levels"},
      {"wrong-types", "expected object at plan.mesh"}};
  for (auto [name, message] : refused) {
    auto view = parsePlanView(read(name), name);
    ASSERT_FALSE(static_cast<bool>(view)) << name;
    std::string error = llvm::toString(view.takeError());
    EXPECT_NE(error.find(message), std::string::npos) << name << ": " << error;
  }
}
