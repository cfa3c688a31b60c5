//===- bench_sgemm.cpp - sgemm GFLOP/s of each OpenBLAS kernel table ------===//
//
// The baseline of the CPU training-step benchmark (bench/train_step.sh) and
// the evidence for runtime/cpu/Blas.h's choice: OpenBLAS's own
// multithreaded sgemm on square and transformer-shaped problems (transposed
// operands included), best of several runs, for every kernel table
// ("core") this CPU runs. The last lines name the core the CPU backend uses
// and the best measured one.
//
// Usage: bench-sgemm [THREADS]   (default: all cores)
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Blas.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

struct Shape {
  const char *name;
  bool transA, transB;
  int m, n, k;
};

// Tokens = 4 x 256 (the training-step benchmark's micro-batch).
const Shape kShapes[] = {
    {"square-1024", false, false, 1024, 1024, 1024},
    {"qkv (512->1536)", false, false, 1024, 1536, 512},
    {"mlp-down (2048->512)", false, false, 1024, 512, 2048},
    {"head (512->50304, W^T)", false, true, 1024, 50304, 512},
    {"head dX (dY W)", false, false, 1024, 512, 50304},
    {"mlp-up dW (X^T dY)", true, false, 512, 2048, 1024},
};

double gflops(const Shape &s) {
  int rowsA = s.transA ? s.k : s.m, colsA = s.transA ? s.m : s.k;
  int rowsB = s.transB ? s.n : s.k, colsB = s.transB ? s.k : s.n;
  std::vector<float> a(size_t(rowsA) * colsA, 0.5f),
      b(size_t(rowsB) * colsB, 0.25f), c(size_t(s.m) * s.n);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, s.transA ? CblasTrans : CblasNoTrans,
                s.transB ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.0f,
                a.data(), colsA, b.data(), colsB, 0.0f, c.data(), s.n);
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  return 2.0 * s.m * s.n * s.k / best / 1e9;
}

} // namespace

int main(int argc, char **argv) {
  using namespace dtc::runtime::cpu;
  const BlasKernels &chosen = chooseBlasKernels();
  if (argc > 1)
    openblas_set_num_threads(std::atoi(argv[1]));
  std::printf("%s, threads %d\n", chosen.config.c_str(),
              openblas_get_num_threads());
  std::vector<std::string> cores = {chosen.detected};
  for (const char *core :
       {"Cooperlake", "SkylakeX", "Zen", "Haswell", "Sandybridge"})
    if (!llvm::StringRef(core).equals_insensitive(chosen.detected) &&
        cpuRunsOpenBlasCore(core))
      cores.push_back(core);
  std::string bestCore;
  double bestSquare = 0;
  for (const std::string &core : cores) {
    if (!useOpenBlasCore(core))
      continue;
    for (const Shape &s : kShapes) {
      double g = gflops(s);
      std::printf("sgemm %-12s %-26s %8.1f GFLOP/s\n", core.c_str(), s.name, g);
      if (s.name == kShapes[0].name && g > bestSquare) {
        bestSquare = g;
        bestCore = core;
      }
    }
  }
  useOpenBlasCore(chosen.used);
  std::printf("detected %s, used %s (%s)\n", chosen.detected.c_str(),
              chosen.used.c_str(), chosen.reason.c_str());
  std::printf("best square-1024: %s %.1f GFLOP/s\n", bestCore.c_str(),
              bestSquare);
  return 0;
}
