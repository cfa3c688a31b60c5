//===- bench_ring_balance.cpp - Causal load balance of ring attention -----===//
//
// Context parallelism runs causal attention as a ring: rank c of cp
// attends its query chunk to every key/value chunk in turn, and the step
// lasts as long as the busiest rank. With contiguous chunks rank c has
// c + 1 non-empty blocks; with zigzag chunks (halves c and 2cp - 1 - c,
// docs/partition.md) every rank has the same work. This measures, on one
// thread, each rank's forward and backward block time for both layouts and
// prints the busiest rank against the mean (1.00 is perfect balance) and
// against the whole-sequence attention divided by cp (the ideal).
//
// Usage: bench-ring-balance [SEQ]   (default 2048; 8 heads of 64, batch 1)
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/RingAttention.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

using namespace dtc::runtime::cpu;

namespace {

double seconds(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

std::vector<float> randomValues(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

/// One rank's ring: forward blocks and merges, then the backward blocks,
/// on chunk-sized inputs (the values do not change the work).
double rankSeconds(const RingAttentionDims &dims, RingAttentionChunks at,
                   int64_t rank) {
  size_t q = dims.batch * dims.heads * dims.queries * dims.headDim;
  size_t kv = dims.batch * dims.groups * dims.keys * dims.headDim;
  size_t rows = dims.batch * dims.heads * dims.queries;
  std::vector<float> query = randomValues(q, 1), key = randomValues(kv, 2),
                     value = randomValues(kv, 3), grad = randomValues(q, 4);
  std::vector<float> out(q), lse(rows), blockOut(q), blockLse(rows), dq(q),
      dk(kv), dv(kv);
  auto start = std::chrono::steady_clock::now();
  at.queryChunk = rank;
  for (int64_t shift = 0; shift < at.chunks; ++shift) {
    at.keyChunk = ((rank - shift) % at.chunks + at.chunks) % at.chunks;
    ringAttentionBlock(dims, at, query.data(), key.data(), value.data(),
                       shift ? blockOut.data() : out.data(),
                       shift ? blockLse.data() : lse.data());
    if (shift)
      attentionMerge(rows, dims.valueDim, out.data(), lse.data(),
                     blockOut.data(), blockLse.data(), out.data(), lse.data());
  }
  for (int64_t shift = 0; shift < at.chunks; ++shift) {
    at.keyChunk = ((rank - shift) % at.chunks + at.chunks) % at.chunks;
    ringAttentionBlockGrad(dims, at, query.data(), key.data(), value.data(),
                           out.data(), lse.data(), grad.data(), dq.data(),
                           dk.data(), dv.data());
  }
  return seconds(start);
}

} // namespace

int main(int argc, char **argv) {
  dtc::runtime::cpu::setThreadCount(1);
  const int64_t seq = argc > 1 ? std::atoll(argv[1]) : 2048;
  const int64_t heads = 8, headDim = 64;
  RingAttentionDims whole{1, heads, heads, seq, seq, headDim, headDim};
  RingAttentionChunks one;
  one.causal = true;
  one.scale = 1.0f / std::sqrt(float(headDim));
  double wholeSeconds = 1e30;
  for (int rep = 0; rep < 2; ++rep)
    wholeSeconds = std::min(wholeSeconds, rankSeconds(whole, one, 0));
  std::printf("causal attention, seq %lld, %lld heads of %lld: whole "
              "sequence %.3f s (forward + backward, 1 thread)\n",
              static_cast<long long>(seq), static_cast<long long>(heads),
              static_cast<long long>(headDim), wholeSeconds);
  std::printf("%-4s %-10s %12s %12s %16s\n", "cp", "chunks", "busiest s",
              "busiest/mean", "busiest/ideal");
  for (int64_t cp : {2, 4, 8}) {
    if (seq % (2 * cp))
      continue;
    for (bool zigzag : {false, true}) {
      RingAttentionDims dims = whole;
      dims.queries = dims.keys = seq / cp;
      RingAttentionChunks at = one;
      at.chunks = cp;
      at.zigzag = zigzag;
      double busiest = 0, total = 0;
      for (int64_t rank = 0; rank < cp; ++rank) {
        double t = rankSeconds(dims, at, rank);
        busiest = std::max(busiest, t);
        total += t;
      }
      std::printf("%-4lld %-10s %12.3f %12.2f %16.2f\n",
                  static_cast<long long>(cp), zigzag ? "zigzag" : "contiguous",
                  busiest, busiest / (total / cp),
                  busiest / (wholeSeconds / cp));
    }
  }
  return 0;
}
