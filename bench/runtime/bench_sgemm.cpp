//===- bench_sgemm.cpp - OpenBLAS sgemm GFLOP/s on this machine -----------===//
//
// The baseline of the CPU training-step benchmark (bench/train_step.sh):
// OpenBLAS's own multithreaded sgemm on square and transformer-shaped
// problems, best of several runs.
//
// Usage: bench-sgemm [THREADS]   (default: all cores)
//
//===----------------------------------------------------------------------===//

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

static double gflops(int m, int n, int k) {
  std::vector<float> a(size_t(m) * k, 0.5f), b(size_t(k) * n, 0.25f),
      c(size_t(m) * n);
  double best = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    auto start = std::chrono::steady_clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f,
                a.data(), k, b.data(), n, 0.0f, c.data(), n);
    best = std::min(best, std::chrono::duration<double>(
                              std::chrono::steady_clock::now() - start)
                              .count());
  }
  return 2.0 * m * n * k / best / 1e9;
}

int main(int argc, char **argv) {
  if (argc > 1)
    openblas_set_num_threads(std::atoi(argv[1]));
  struct Shape {
    const char *name;
    int m, n, k;
  } shapes[] = {{"square-1024", 1024, 1024, 1024},
                {"gpt-mlp-up (4x256 tokens, 512->2048)", 1024, 2048, 512},
                {"gpt-qkv (4x256 tokens, 512->1536)", 1024, 1536, 512}};
  std::printf("openblas threads %d\n", openblas_get_num_threads());
  for (const Shape &s : shapes)
    std::printf("sgemm %-40s %8.1f GFLOP/s\n", s.name, gflops(s.m, s.n, s.k));
  return 0;
}
