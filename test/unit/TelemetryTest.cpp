//===- TelemetryTest.cpp - Traces, non-finite search, stragglers ----------===//
//
// The pieces of compiler/run/Telemetry.h on their own: the NaN/Inf search
// over a rank's variables (every dtype, every position of the blocked f32
// scan), the straggler rule against hand-computed medians, and the trace
// writer's JSON (parsed back: events, lanes that never overlap, the file
// renamed only when closed).
//
//===----------------------------------------------------------------------===//

#include "compiler/run/Telemetry.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/support/Json.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace dtc;
namespace rt = dtc::runtime;

namespace {

program::Variable *addVariable(program::RankProgram &p, const char *name,
                               const char *role, program::DType dtype,
                               int64_t size) {
  program::Variable *v = p.add_variables();
  v->set_name(name);
  v->set_role(role);
  v->mutable_type()->set_dtype(dtype);
  v->mutable_type()->add_shape(size);
  return v;
}

const rt::KernelRegistry &kernels() {
  static rt::KernelRegistry registry = [] {
    rt::KernelRegistry r;
    rt::cpu::registerCpuKernels(r);
    return r;
  }();
  return registry;
}

TEST(FindNonFinite, FindsTheFirstInProgramOrderOfTheRole) {
  program::RankProgram p;
  addVariable(p, "a", "parameter", program::F32, 10000);
  addVariable(p, "grad:a", "grad", program::F32, 10000);
  addVariable(p, "b", "parameter", program::BF16, 8);
  addVariable(p, "c", "parameter", program::F64, 3);
  auto executor = rt::Executor::create(p, kernels());
  ASSERT_TRUE(static_cast<bool>(executor))
      << llvm::toString(executor.takeError());
  rt::Executor &ex = **executor;

  auto find = [&](llvm::StringRef role) {
    auto found = findNonFinite(ex, role);
    EXPECT_TRUE(static_cast<bool>(found));
    return found ? *found : std::nullopt;
  };
  EXPECT_FALSE(find("parameter").has_value());
  EXPECT_FALSE(find("grad").has_value());

  // Every position of the blocked scan: first, inside the second block,
  // the last element (a partial block).
  float *a = ex.variable("a")->as<float>();
  for (int64_t at : {int64_t(0), int64_t(4097), int64_t(9999)}) {
    a[at] = -std::numeric_limits<float>::infinity();
    auto hit = find("parameter");
    ASSERT_TRUE(hit.has_value()) << at;
    EXPECT_EQ(hit->variable, 0);
    EXPECT_EQ(hit->element, at);
    EXPECT_TRUE(std::isinf(hit->value) && hit->value < 0);
    a[at] = 1.0f;
  }
  // Large finite values are not flagged.
  a[5] = std::numeric_limits<float>::max();
  EXPECT_FALSE(find("parameter").has_value());
  // Another role is not searched.
  ex.variable("grad:a")->as<float>()[7] = std::nanf("");
  auto grad = find("grad");
  ASSERT_TRUE(grad.has_value());
  EXPECT_EQ(grad->variable, 1);
  EXPECT_EQ(grad->element, 7);
  EXPECT_FALSE(find("parameter").has_value());
  // bf16 (0x7fc0 is a NaN) and f64.
  ex.variable("b")->as<uint16_t>()[3] = 0x7fc0;
  auto b = find("parameter");
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->variable, 2);
  EXPECT_EQ(b->element, 3);
  ex.variable("b")->as<uint16_t>()[3] = 0;
  ex.variable("c")->as<double>()[2] = std::numeric_limits<double>::infinity();
  auto c = find("parameter");
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->variable, 3);
  EXPECT_EQ(c->element, 2);
}

TEST(StragglerWatch, NamesARankSlowerThanItsPeersMedianOnce) {
  // Ranks 0-2 run one program, rank 3 another (a pipeline stage of its
  // own: never compared).
  StragglerWatch watch(2.0, {{0, 1, 2}, {0, 1, 2}, {0, 1, 2}, {3}});
  // The first step is skipped whatever it holds.
  EXPECT_TRUE(watch.addStep(1, {1.0, 1.0, 1.0, 1.0}).empty());
  // Step 2: rank 2 at 0.025 s against peers at 0.010 and 0.012 (median of
  // the others 0.012: x2.08 > 2) -- but one step is not enough.
  EXPECT_TRUE(watch.addStep(2, {0.010, 0.012, 0.025, 9.0}).empty());
  // Step 3: totals 0.020, 0.024, 0.050 -> rank 2 is x2.08 its peers'
  // median (0.024), 13 ms per step slower.
  std::vector<std::string> w = watch.addStep(3, {0.010, 0.012, 0.025, 9.0});
  ASSERT_EQ(w.size(), 1u);
  EXPECT_NE(w[0].find("rank 2 is a straggler"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("x2.08"), std::string::npos) << w[0];
  EXPECT_NE(w[0].find("steps 2-3"), std::string::npos) << w[0];
  // Named once.
  EXPECT_TRUE(watch.addStep(4, {0.010, 0.012, 0.025, 9.0}).empty());
}

TEST(StragglerWatch, IgnoresSmallAbsoluteDifferencesAndFactorZero) {
  // x3 but 0.2 ms per step: below the 1 ms floor.
  StragglerWatch small(2.0, {{0, 1}, {0, 1}});
  for (int64_t step = 1; step <= 5; ++step)
    EXPECT_TRUE(small.addStep(step, {0.0001, 0.0003}).empty());
  StragglerWatch off(0.0, {{0, 1}, {0, 1}});
  for (int64_t step = 1; step <= 5; ++step)
    EXPECT_TRUE(off.addStep(step, {0.001, 1.0}).empty());
}

TEST(TraceWriter, WritesCompleteEventsOnNonOverlappingTracks) {
  llvm::SmallString<128> dir;
  ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("dtc-trace-test", dir));
  // One function: two overlapping all-reduces and a matmul between.
  program::RankProgram p;
  program::Function *f = p.add_functions();
  f->set_name("step");
  for (int i = 0; i < 4; ++i) {
    program::Value *v = f->add_values();
    v->set_id(i);
    v->mutable_type()->set_dtype(program::F32);
    v->mutable_type()->add_shape(8);
  }
  auto add = [&](const char *op, int request) {
    program::Instruction *inst = f->add_instructions();
    inst->set_op(op);
    inst->add_inputs(0);
    inst->add_outputs(1);
    if (request >= 0)
      (*inst->mutable_attrs())["request"].set_i(request);
    if (llvm::StringRef(op).ends_with("_start"))
      (*inst->mutable_attrs())["mesh_axes"].mutable_strings()->add_values("dp");
    return inst;
  };
  add("dtc.all_reduce_start", 0);
  add("dtc.all_reduce_start", 1);
  add("dtc.matmul", -1);
  add("dtc.wait", 0);
  add("dtc.wait", 1);
  auto mesh = rt::Mesh::parse("dp:2");
  ASSERT_TRUE(static_cast<bool>(mesh));
  auto zero = rt::TraceClock::now();
  auto writer = TraceWriter::open(dir, p, {1, &*mesh, "b.dtc", "cpu"}, zero);
  ASSERT_TRUE(static_cast<bool>(writer)) << llvm::toString(writer.takeError());

  auto at = [&](int us) { return zero + std::chrono::microseconds(us); };
  // Both all-reduces are in flight from 10/20 us to 100/90 us. The call
  // runs the function twice (as a pipeline step runs a pass function once
  // per micro-batch), the second time for micro-batch 2 of the call, with
  // its all-reduces from 210/220 us to 260/270 us: each start pairs with
  // the wait of its own run.
  std::vector<rt::InstructionEvent> events = {
      {0, 0, at(10), at(12), at(12), 1},
      {0, 1, at(20), at(22), at(22), 1},
      {0, 2, at(30), at(80), at(80), 1},
      {0, 3, at(80), at(100), at(100), 1},
      {0, 4, at(100), at(101), at(90), 1},
      {0, 0, at(210), at(212), at(212), 2},
      {0, 1, at(220), at(222), at(222), 2},
      {0, 2, at(230), at(240), at(240), 2},
      {0, 3, at(240), at(260), at(260), 2},
      {0, 4, at(260), at(280), at(270), 2}};
  std::vector<TraceWriter::Call> calls = {{0, events.size(), 0, 2}};
  ASSERT_FALSE(static_cast<bool>(
      (*writer)->writeStep(7, at(0), at(300), 1.5, events, calls)));
  llvm::SmallString<128> path(dir);
  llvm::sys::path::append(path, "rank-1.trace.json");
  EXPECT_FALSE(llvm::sys::fs::exists(path)) << "renamed before close";
  ASSERT_FALSE(static_cast<bool>((*writer)->close("complete")));

  auto buffer = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(static_cast<bool>(buffer));
  auto json = rt::parseJson((*buffer)->getBuffer());
  ASSERT_TRUE(static_cast<bool>(json)) << llvm::toString(json.takeError());
  const llvm::json::Object &root = *json->getAsObject();
  EXPECT_EQ(root.getObject("otherData")->getString("status"), "complete");
  EXPECT_EQ(root.getObject("otherData")->getInteger("first_step"), 7);
  int compute = 0;
  std::vector<int64_t> matmulMicroBatches;
  std::vector<std::pair<double, double>> comms; // (ts, dur)
  std::vector<int64_t> commTracks;
  for (const llvm::json::Value &v : *root.getArray("traceEvents")) {
    const llvm::json::Object &e = *v.getAsObject();
    if (e.getString("ph") != "X")
      continue;
    EXPECT_EQ(e.getInteger("pid"), 1);
    llvm::StringRef cat = *e.getString("cat");
    const llvm::json::Object &args = *e.getObject("args");
    EXPECT_EQ(args.getInteger("step"), 7);
    if (cat == "compute") {
      ++compute;
      // The call's first micro-batch plus the run's own.
      if (e.getString("name") == "dtc.matmul")
        matmulMicroBatches.push_back(*args.getInteger("micro_batch"));
    } else if (cat == "communication") {
      EXPECT_EQ(e.getString("name"), "dtc.all_reduce");
      comms.push_back({*e.getNumber("ts"), *e.getNumber("dur")});
      commTracks.push_back(*e.getInteger("tid"));
      const llvm::json::Array &ranks = *args.getArray("ranks");
      EXPECT_EQ(ranks.size(), 2u);
    }
  }
  EXPECT_EQ(compute, 10);
  EXPECT_EQ(matmulMicroBatches, (std::vector<int64_t>{3, 4}));
  // The all-reduces end when they completed (100 us: the wait's end; 90
  // us: its recorded completion), overlap, and so sit on two tracks.
  ASSERT_EQ(comms.size(), 4u);
  EXPECT_NEAR(comms[0].first, 10, 1e-3);
  EXPECT_NEAR(comms[0].second, 90, 1e-3);
  EXPECT_NEAR(comms[1].first, 20, 1e-3);
  EXPECT_NEAR(comms[1].second, 70, 1e-3);
  EXPECT_NE(commTracks[0], commTracks[1]);
  // The second run's, paired with its own waits (not the first run's).
  EXPECT_NEAR(comms[2].first, 210, 1e-3);
  EXPECT_NEAR(comms[2].second, 50, 1e-3);
  EXPECT_NEAR(comms[3].first, 220, 1e-3);
  EXPECT_NEAR(comms[3].second, 50, 1e-3);
  llvm::sys::fs::remove_directories(dir);
}

} // namespace
