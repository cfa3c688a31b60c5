//===- bench_predict.cpp - Time per predict() call ------------------------===//
//
// The planner evaluates millions of candidate plans, so one predict() must
// take microseconds. Times 1e5 calls for a few representative plans and,
// for scale, 1e5 calls of lookupClusterPreset() (a string compare and a
// struct copy).
//
//   ninja bench-costmodel && ./bench/costmodel/bench-costmodel [calls]
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/Cluster.h"
#include "compiler/costmodel/CostModel.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstdlib>
#include <vector>

using namespace dtc;

namespace {
struct Case {
  const char *name;
  TransformerSpec spec;
  ParallelPlan plan;
  Cluster cluster;
};

TransformerSpec gpt(int64_t layers, int64_t hidden, int64_t heads) {
  TransformerSpec spec;
  spec.layers = layers;
  spec.hidden = hidden;
  spec.heads = heads;
  spec.vocab = 51200;
  spec.seqLen = 2048;
  return spec;
}

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}
} // namespace

int main(int argc, char **argv) {
  long calls = argc > 1 ? std::atol(argv[1]) : 100000;
  std::vector<Case> cases;
  {
    Case c{"gpt-175b tp8 pp8 dp16 interleaved",
           gpt(96, 12288, 96),
           {},
           *lookupClusterPreset("h100", 1024)};
    c.plan.tp = 8;
    c.plan.pp = 8;
    c.plan.dp = 16;
    c.plan.vpp = 4;
    c.plan.schedule = Schedule::Interleaved;
    c.plan.globalBatch = 1024;
    c.plan.recompute = Recompute::Selective;
    c.plan.sequenceParallel = true;
    c.plan.zero = 1;
    cases.push_back(c);
  }
  {
    Case c{"llama-8b tp2 dp32 zero3",
           gpt(32, 4096, 32),
           {},
           *lookupClusterPreset("h100", 64)};
    c.spec.kvHeads = 8;
    c.spec.ffnHidden = 14336;
    c.spec.gatedMlp = true;
    c.spec.vocab = 128256;
    c.spec.seqLen = 8192;
    c.plan.tp = 2;
    c.plan.dp = 32;
    c.plan.zero = 3;
    c.plan.microBatch = 2;
    c.plan.globalBatch = 512;
    cases.push_back(c);
  }
  {
    Case c{"moe 8x top2 tp4 pp4 ep8 cp2",
           gpt(32, 4096, 32),
           {},
           *lookupClusterPreset("gb200-nvl72", 256)};
    c.spec.experts = 8;
    c.spec.topK = 2;
    c.spec.gatedMlp = true;
    c.spec.seqLen = 32768;
    c.plan.tp = 4;
    c.plan.pp = 4;
    c.plan.cp = 2;
    c.plan.dp = 8;
    c.plan.ep = 8;
    c.plan.globalBatch = 256;
    c.plan.recompute = Recompute::Full;
    cases.push_back(c);
  }

  volatile double sink = 0;
  llvm::outs() << llvm::format("%-36s %12s %14s\n", "case", "us/predict",
                               "predicts/s");
  for (Case &c : cases) {
    auto check = predict(c.spec, c.plan, c.cluster);
    if (!check) {
      llvm::errs() << c.name << ": " << llvm::toString(check.takeError())
                   << "\n";
      return 1;
    }
    auto start = std::chrono::steady_clock::now();
    for (long i = 0; i < calls; ++i) {
      // Alternate the recompute choice so no call repeats the previous one.
      c.plan.recompute = i & 1 ? Recompute::Full : Recompute::Selective;
      auto p = predict(c.spec, c.plan, c.cluster);
      sink = sink + (p ? p->stepTimeS : 0);
      if (!p)
        llvm::consumeError(p.takeError());
    }
    double seconds = secondsSince(start);
    llvm::outs() << llvm::format("%-36s %12.3f %14.0f\n", c.name,
                                 1e6 * seconds / calls, calls / seconds);
  }

  auto start = std::chrono::steady_clock::now();
  for (long i = 0; i < calls; ++i) {
    auto cluster = lookupClusterPreset(i & 1 ? "h100" : "a100-80g", 8);
    sink = sink + (cluster ? cluster->peakBf16Tflops : 0);
  }
  double seconds = secondsSince(start);
  llvm::outs() << llvm::format("%-36s %12.3f %14.0f\n",
                               "baseline: lookupClusterPreset",
                               1e6 * seconds / calls, calls / seconds);
  return 0;
}
