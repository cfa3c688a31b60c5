//===- Moe.cu - Mixture-of-experts routing, dispatch and combine ----------===//
//
// The dtc.moe_* ops; runtime/cpu/Moe.cpp is the reference (docs/moe.md).
// No float atomics, so results are deterministic and every sum runs in the
// CPU kernel's order except the dot products of moe_combine_grad (a warp
// tree over the hidden dim):
// - Routing: one thread per token computes its scores and top-k choices
//   serially, like the CPU; then one block per sequence fills the slots,
//   one thread per expert walking the choices in GShard's priority order
//   (choice rank, then position).
// - Combine and the dispatch gradient invert the slots into per-token lists
//   of rows sorted by (expert, slot), so each output element sums its rows
//   in the CPU's order.
// Slots outside [-1, positions) flag kSlotOutOfRange and count as empty.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaCommon.cuh"

namespace dtc::cuda {

namespace {

constexpr int kTokenThreads = 128;
constexpr int kSequenceThreads = 256;

/// The token's slot position at flat index `i` of `slots`, or -1 (empty or
/// out of range, which is flagged).
__device__ __forceinline__ int64_t slotAt(const void *slots, int dtype,
                                          int64_t i, int64_t positions,
                                          int *error) {
  int64_t t = loadI(slots, dtype, i);
  if (t < -1 || t >= positions) {
    flagError(error, kSlotOutOfRange);
    return -1;
  }
  return t;
}

/// Element `i` of a [b, E, C, h] buffer of expert rows: its row, the
/// token its slot holds (a flat [b, s] index, -1 for an empty slot) and its
/// offset within the hidden dim.
struct RowElement {
  int64_t row, token, offset;
};
__device__ __forceinline__ RowElement rowElement(const MoeSlots &sl, int64_t i,
                                                 int *error) {
  int64_t row = i / sl.hidden;
  int64_t b = row / (sl.experts * sl.capacity);
  int64_t t = slotAt(sl.data, sl.dtype, row, sl.positions, error);
  return {row, t < 0 ? -1 : b * sl.positions + t, i % sl.hidden};
}

//===----------------------------------------------------------------------===//
// Routing
//===----------------------------------------------------------------------===//

/// Per token: softmax or sigmoid scores, then the top-k experts by score,
/// ties to the lower index (the CPU kernel's selection).
__global__ void routeScoresKernel(MoeRoute r, const void *logits, int dtype,
                                  float *scores, int *chosen) {
  int64_t tokens = r.batch * r.positions, e = r.experts, k = r.topK;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < tokens;
       i += int64_t(gridDim.x) * blockDim.x) {
    float *out = scores + i * e;
    if (r.sigmoid) {
      for (int64_t x = 0; x < e; ++x)
        out[x] = 1.0f / (1.0f + expf(-loadF(logits, dtype, i * e + x)));
    } else {
      float max = loadF(logits, dtype, i * e);
      for (int64_t x = 1; x < e; ++x) {
        float v = loadF(logits, dtype, i * e + x);
        max = max < v ? v : max; // std::max's NaN behaviour
      }
      float sum = 0;
      for (int64_t x = 0; x < e; ++x)
        sum += out[x] = expf(loadF(logits, dtype, i * e + x) - max);
      for (int64_t x = 0; x < e; ++x)
        out[x] /= sum;
    }
    int *c = chosen + i * k;
    for (int64_t j = 0; j < k; ++j) {
      // The first unchosen expert of the highest score: strict > keeps the
      // lower index on ties, and a NaN score still yields a valid index.
      int best = -1;
      for (int64_t x = 0; x < e; ++x) {
        bool taken = false;
        for (int64_t q = 0; q < j && !taken; ++q)
          taken = c[q] == x;
        if (!taken && (best < 0 || out[x] > out[best]))
          best = static_cast<int>(x);
      }
      c[j] = best;
    }
  }
}

/// One block per sequence, threads over experts: each expert takes the
/// choices naming it in priority order until its capacity is full. Writes
/// `kept` [b, s, k] and `picks` [b, E] (choices before drops), and when
/// asked the slots (-1 past the last taken), the auxiliary loss
/// E * sum_e f_e P_e (in doubles, summed in expert order; `terms` [b, E]
/// holds the addends) and the stats row [b, E + 1] (picks, then the loss).
__global__ void routeSlotsKernel(MoeRoute r, const int *chosen,
                                 const float *scores, uint8_t *kept, int *picks,
                                 int64_t *slots, double *terms, int auxDtype,
                                 void *aux, double *stats) {
  __shared__ int tile[kSequenceThreads];
  int64_t b = blockIdx.x, s = r.positions, e = r.experts, k = r.topK;
  int64_t cap = r.capacity;
  const int *seqChosen = chosen + b * s * k;
  // Every thread runs the same number of rounds (they share the tiles).
  for (int64_t x0 = 0; x0 < e; x0 += blockDim.x) {
    int64_t x = x0 + threadIdx.x;
    int64_t count = 0;
    for (int64_t j = 0; j < k; ++j)
      for (int64_t t0 = 0; t0 < s; t0 += blockDim.x) {
        int64_t n = s - t0 < blockDim.x ? s - t0 : int64_t(blockDim.x);
        __syncthreads();
        if (threadIdx.x < n)
          tile[threadIdx.x] = seqChosen[(t0 + threadIdx.x) * k + j];
        __syncthreads();
        if (x >= e)
          continue;
        for (int64_t u = 0; u < n; ++u) {
          if (tile[u] != x)
            continue;
          int64_t t = t0 + u;
          kept[(b * s + t) * k + j] = count < cap;
          if (slots && count < cap)
            slots[(b * e + x) * cap + count] = t;
          ++count;
        }
      }
    if (x >= e)
      continue;
    picks[b * e + x] = static_cast<int>(count);
    if (slots)
      for (int64_t c = count; c < cap; ++c)
        slots[(b * e + x) * cap + c] = -1;
    if (aux) {
      double meanScore = 0;
      for (int64_t t = 0; t < s; ++t)
        meanScore += scores[(b * s + t) * e + x];
      // A sequence of no tokens has no loss (not 0 / 0).
      terms[b * e + x] =
          s ? double(count) / double(s * k) * meanScore / s : 0.0;
    }
    if (stats)
      stats[b * (e + 1) + x] = double(count);
  }
  if (!aux)
    return;
  __syncthreads();
  if (threadIdx.x == 0) {
    double loss = 0;
    for (int64_t x = 0; x < e; ++x)
      loss += terms[b * e + x];
    float value = static_cast<float>(e * loss);
    storeF(aux, auxDtype, b, value);
    if (stats)
      stats[b * (e + 1) + e] = value;
  }
}

/// The normalizer of token `i`'s gates: the sum of its chosen scores (kept
/// or dropped), or 1.
__device__ float gateNorm(const MoeRoute &r, const float *scores,
                          const int *chosen, int64_t i) {
  if (!r.normalize)
    return 1.0f;
  float sum = 0;
  for (int64_t j = 0; j < r.topK; ++j)
    sum += scores[i * r.experts + chosen[i * r.topK + j]];
  return sum;
}

/// The choice rank of expert `x` among token `i`'s choices, or -1.
__device__ __forceinline__ int64_t choiceOf(const MoeRoute &r,
                                            const int *chosen, int64_t i,
                                            int64_t x) {
  for (int64_t j = 0; j < r.topK; ++j)
    if (chosen[i * r.topK + j] == x)
      return j;
  return -1;
}

/// Per token: the chosen score over the normalizer where the choice kept a
/// slot, else 0.
__global__ void routeGatesKernel(MoeRoute r, const float *scores,
                                 const int *chosen, const uint8_t *kept,
                                 int dtype, void *gates) {
  int64_t tokens = r.batch * r.positions, e = r.experts;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < tokens;
       i += int64_t(gridDim.x) * blockDim.x) {
    float norm = gateNorm(r, scores, chosen, i);
    for (int64_t x = 0; x < e; ++x) {
      int64_t j = choiceOf(r, chosen, i, x);
      bool gated = j >= 0 && kept[i * r.topK + j];
      storeF(gates, dtype, i * e + x, gated ? scores[i * e + x] / norm : 0.0f);
    }
  }
}

/// Per token: the gradient of the scores (through the kept gates and the
/// auxiliary loss's mean scores), then through the softmax or sigmoid.
__global__ void routeGradKernel(MoeRoute r, const float *scores,
                                const int *chosen, const uint8_t *kept,
                                const int *picks, int ggDtype,
                                const void *gatesGrad, int agDtype,
                                const void *auxGrad, int outDtype, void *out) {
  int64_t s = r.positions, e = r.experts, k = r.topK;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < r.batch * s; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t b = i / s;
    const float *p = scores + i * e;
    float auxScale = loadF(auxGrad, agDtype, b) * float(e) / float(s);
    float sum = gateNorm(r, scores, chosen, i), weighted = 0;
    for (int64_t j = 0; j < k; ++j)
      if (kept[i * k + j]) {
        int64_t x = chosen[i * k + j];
        weighted += __fmul_rn(loadF(gatesGrad, ggDtype, i * e + x), p[x]);
      }
    // d/dp[x]: E f_x / s from the loss, G_x / S - sum_kept G p / S^2 for a
    // chosen x (G_x only when kept); the CPU's order of operations.
    auto dScore = [&](int64_t x) {
      float d = auxScale * (float(picks[b * e + x]) / float(s * k));
      int64_t j = choiceOf(r, chosen, i, x);
      if (j < 0)
        return d;
      if (kept[i * k + j])
        d += loadF(gatesGrad, ggDtype, i * e + x) / sum;
      if (r.normalize)
        d -= weighted / (sum * sum);
      return d;
    };
    if (r.sigmoid) {
      for (int64_t x = 0; x < e; ++x)
        storeF(out, outDtype, i * e + x, dScore(x) * p[x] * (1.0f - p[x]));
      continue;
    }
    float dot = 0;
    for (int64_t x = 0; x < e; ++x)
      dot += __fmul_rn(p[x], dScore(x));
    for (int64_t x = 0; x < e; ++x)
      storeF(out, outDtype, i * e + x, p[x] * (dScore(x) - dot));
  }
}

/// The route's intermediate buffers ([b, s, E] scores, [b, s, k] choices
/// and kept flags, [b, E] picks).
struct RouteBuffers {
  explicit RouteBuffers(const MoeRoute &r)
      : scores(r.batch * r.positions * r.experts * sizeof(float)),
        chosen(r.batch * r.positions * r.topK * sizeof(int)),
        kept(r.batch * r.positions * r.topK),
        picks(r.batch * r.experts * sizeof(int)) {}
  explicit operator bool() const { return scores && chosen && kept && picks; }
  Scratch scores, chosen, kept, picks;
};

/// Scores, choices, kept flags and picks of every sequence, plus what
/// routeSlotsKernel writes when `slots`/`aux` are given.
std::string route(const MoeRoute &r, int logitsDtype, const void *logits,
                  const RouteBuffers &buf, int64_t *slots, int auxDtype,
                  void *aux, double *stats) {
  cudaStream_t stream = computeStream();
  int64_t tokens = r.batch * r.positions;
  routeScoresKernel<<<blocksFor(tokens, kTokenThreads), kTokenThreads, 0,
                      stream>>>(r, logits, logitsDtype, buf.scores.as<float>(),
                                buf.chosen.as<int>());
  if (std::string err = launched("moe_route scores kernel"); !err.empty())
    return err;
  Scratch terms(aux ? r.batch * r.experts * sizeof(double) : 0);
  if (!terms)
    return "out of device memory";
  routeSlotsKernel<<<static_cast<unsigned>(r.batch), kSequenceThreads, 0,
                     stream>>>(r, buf.chosen.as<int>(), buf.scores.as<float>(),
                               buf.kept.as<uint8_t>(), buf.picks.as<int>(),
                               slots, terms.as<double>(), auxDtype, aux, stats);
  return launched("moe_route slots kernel");
}

//===----------------------------------------------------------------------===//
// Dispatch and combine
//===----------------------------------------------------------------------===//

__global__ void dispatchKernel(MoeSlots sl, int xDtype, const void *x,
                               int outDtype, void *out, int *error) {
  int64_t n = sl.batch * sl.experts * sl.capacity * sl.hidden;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    RowElement e = rowElement(sl, i, error);
    float v =
        e.token < 0 ? 0.0f : loadF(x, xDtype, e.token * sl.hidden + e.offset);
    storeF(out, outDtype, i, v);
  }
}

/// Inclusive prefix sum over the block (blockDim.x <= kSequenceThreads);
/// `total` gets the block's sum.
__device__ int blockInclusiveScan(int v, int &total) {
  __shared__ int buf[kSequenceThreads];
  buf[threadIdx.x] = v;
  __syncthreads();
  for (unsigned o = 1; o < blockDim.x; o <<= 1) {
    int add = threadIdx.x >= o ? buf[threadIdx.x - o] : 0;
    __syncthreads();
    buf[threadIdx.x] += add;
    __syncthreads();
  }
  int result = buf[threadIdx.x];
  total = buf[blockDim.x - 1];
  __syncthreads();
  return result;
}

/// One block per sequence: the inverse of its slots. Token t's rows (e * C
/// + c within the sequence) are list[start[t], start[t + 1]), ascending.
/// `start` is [b, s + 1], `fill` [b, s], `list` [b, E * C].
__global__ void tokenListsKernel(MoeSlots sl, int *start, int *fill, int *list,
                                 int *error) {
  int64_t b = blockIdx.x, s = sl.positions, perSeq = sl.experts * sl.capacity;
  int *st = start + b * (s + 1), *fl = fill + b * s, *ls = list + b * perSeq;
  for (int64_t t = threadIdx.x; t <= s; t += blockDim.x) {
    st[t] = 0;
    if (t < s)
      fl[t] = 0;
  }
  __syncthreads();
  // Counts into st[t + 1], then their inclusive scan: st[t] is t's start.
  for (int64_t r = threadIdx.x; r < perSeq; r += blockDim.x) {
    int64_t t = slotAt(sl.data, sl.dtype, b * perSeq + r, s, error);
    if (t >= 0)
      atomicAdd(st + t + 1, 1);
  }
  __syncthreads();
  int carry = 0;
  for (int64_t t0 = 1; t0 <= s; t0 += blockDim.x) {
    int64_t t = t0 + threadIdx.x;
    int total;
    int v = blockInclusiveScan(t <= s ? st[t] : 0, total);
    if (t <= s)
      st[t] = carry + v;
    carry += total;
  }
  __syncthreads();
  for (int64_t r = threadIdx.x; r < perSeq; r += blockDim.x) {
    int64_t t = slotAt(sl.data, sl.dtype, b * perSeq + r, s, error);
    if (t >= 0)
      ls[st[t] + atomicAdd(fl + t, 1)] = static_cast<int>(r);
  }
  __syncthreads();
  // The atomics placed each list in any order: sort it (lists are short,
  // top_k rows per token for a route's slots).
  for (int64_t t = threadIdx.x; t < s; t += blockDim.x)
    for (int p = st[t] + 1; p < st[t + 1]; ++p) {
      int row = ls[p], q = p;
      for (; q > st[t] && ls[q - 1] > row; --q)
        ls[q] = ls[q - 1];
      ls[q] = row;
    }
}

/// The per-token lists of a slots tensor (tokenListsKernel).
struct TokenLists {
  explicit TokenLists(const MoeSlots &sl)
      : start(sl.batch * (sl.positions + 1) * sizeof(int)),
        fill(sl.batch * sl.positions * sizeof(int)),
        list(sl.batch * sl.experts * sl.capacity * sizeof(int)) {}
  std::string build(const MoeSlots &sl) {
    if (!start || !fill || !list)
      return "out of device memory";
    tokenListsKernel<<<static_cast<unsigned>(sl.batch), kSequenceThreads, 0,
                       computeStream()>>>(sl, start.as<int>(), fill.as<int>(),
                                          list.as<int>(), errorWord());
    return launched("moe token lists kernel");
  }
  Scratch start, fill, list;
};

/// out[b, t, i] = sum over token t's rows of weight * rows[row, i], the
/// weight gates[b, t, expert] or 1 (no gates).
__global__ void gatherSumKernel(MoeSlots sl, const int *start, const int *list,
                                int rowsDtype, const void *rows, int gatesDtype,
                                const void *gates, int outDtype, void *out) {
  int64_t s = sl.positions, h = sl.hidden, perSeq = sl.experts * sl.capacity;
  int64_t n = sl.batch * s * h;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t token = i / h, b = token / s;
    const int *st = start + b * (s + 1) + token % s;
    float y = 0;
    for (int p = st[0]; p < st[1]; ++p) {
      int64_t row = list[b * perSeq + p];
      float w = gates ? loadF(gates, gatesDtype,
                              token * sl.experts + row / sl.capacity)
                      : 1.0f;
      // No fused multiply-add: the CPU rounds the product.
      y += __fmul_rn(w, loadF(rows, rowsDtype, (b * perSeq + row) * h + i % h));
    }
    storeF(out, outDtype, i, y);
  }
}

/// dRows[row, i] = gates[b, t, expert] * dy[b, t, i], 0 for an empty slot.
__global__ void combineGradRowsKernel(MoeSlots sl, int gatesDtype,
                                      const void *gates, int dyDtype,
                                      const void *dy, int outDtype, void *out,
                                      int *error) {
  int64_t n = sl.batch * sl.experts * sl.capacity * sl.hidden;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    RowElement e = rowElement(sl, i, error);
    float v = 0;
    if (e.token >= 0) {
      int64_t expert = e.row % (sl.experts * sl.capacity) / sl.capacity;
      v = loadF(gates, gatesDtype, e.token * sl.experts + expert) *
          loadF(dy, dyDtype, e.token * sl.hidden + e.offset);
    }
    storeF(out, outDtype, i, v);
  }
}

/// One warp per row: dots[row] = rows[row] . dy[b, t] (0 for an empty slot),
/// lanes strided over the hidden dim, then a fixed shuffle tree.
__global__ void rowDotKernel(MoeSlots sl, int rowsDtype, const void *rows,
                             int dyDtype, const void *dy, float *dots,
                             int *error) {
  int64_t h = sl.hidden, perSeq = sl.experts * sl.capacity;
  int64_t numRows = sl.batch * perSeq;
  int lane = threadIdx.x & 31;
  int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t row = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
       row < numRows; row += warps) {
    int64_t t = slotAt(sl.data, sl.dtype, row, sl.positions, error);
    float dot = 0;
    if (t >= 0) {
      int64_t token = row / perSeq * sl.positions + t;
      for (int64_t i = lane; i < h; i += 32)
        dot += loadF(rows, rowsDtype, row * h + i) *
               loadF(dy, dyDtype, token * h + i);
    }
    for (int o = 16; o > 0; o >>= 1)
      dot += __shfl_xor_sync(0xffffffffu, dot, o);
    if (lane == 0)
      dots[row] = dot;
  }
}

/// dGates[b, t, x] = the sum of the dots of token t's rows in expert x.
__global__ void gatesGradKernel(MoeSlots sl, const int *start, const int *list,
                                const float *dots, int outDtype, void *out) {
  int64_t s = sl.positions, e = sl.experts, perSeq = e * sl.capacity;
  int64_t n = sl.batch * s * e;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t token = i / e, b = token / s, x = i % e;
    const int *st = start + b * (s + 1) + token % s;
    float g = 0;
    for (int p = st[0]; p < st[1]; ++p) {
      int64_t row = list[b * perSeq + p];
      if (row / sl.capacity == x)
        g += dots[b * perSeq + row];
    }
    storeF(out, outDtype, i, g);
  }
}

} // namespace

std::string moeRoute(const MoeRoute &r, int logitsDtype, const void *logits,
                     int gatesDtype, void *gates, int64_t *slots, int auxDtype,
                     void *aux, double *stats) {
  if (r.batch == 0)
    return "";
  RouteBuffers buf(r);
  if (!buf)
    return "out of device memory";
  if (std::string err =
          route(r, logitsDtype, logits, buf, slots, auxDtype, aux, stats);
      !err.empty())
    return err;
  int64_t tokens = r.batch * r.positions;
  if (tokens == 0)
    return "";
  routeGatesKernel<<<blocksFor(tokens, kTokenThreads), kTokenThreads, 0,
                     computeStream()>>>(
      r, buf.scores.as<float>(), buf.chosen.as<int>(), buf.kept.as<uint8_t>(),
      gatesDtype, gates);
  return launched("moe_route gates kernel");
}

std::string moeRouteGrad(const MoeRoute &r, int logitsDtype, const void *logits,
                         int gatesGradDtype, const void *gatesGrad,
                         int auxGradDtype, const void *auxGrad, int outDtype,
                         void *out) {
  int64_t tokens = r.batch * r.positions;
  if (tokens == 0)
    return "";
  RouteBuffers buf(r);
  if (!buf)
    return "out of device memory";
  if (std::string err =
          route(r, logitsDtype, logits, buf, nullptr, 0, nullptr, nullptr);
      !err.empty())
    return err;
  routeGradKernel<<<blocksFor(tokens, kTokenThreads), kTokenThreads, 0,
                    computeStream()>>>(
      r, buf.scores.as<float>(), buf.chosen.as<int>(), buf.kept.as<uint8_t>(),
      buf.picks.as<int>(), gatesGradDtype, gatesGrad, auxGradDtype, auxGrad,
      outDtype, out);
  return launched("moe_route_grad kernel");
}

std::string moeDispatch(const MoeSlots &sl, int xDtype, const void *x,
                        int outDtype, void *out) {
  int64_t n = sl.batch * sl.experts * sl.capacity * sl.hidden;
  if (n == 0)
    return "";
  dispatchKernel<<<blocksFor(n), 256, 0, computeStream()>>>(
      sl, xDtype, x, outDtype, out, errorWord());
  return launched("moe_dispatch kernel");
}

std::string moeGatherSum(const MoeSlots &sl, int rowsDtype, const void *rows,
                         int gatesDtype, const void *gates, int outDtype,
                         void *out) {
  if (sl.batch == 0)
    return "";
  TokenLists lists(sl);
  if (std::string err = lists.build(sl); !err.empty())
    return err;
  int64_t n = sl.batch * sl.positions * sl.hidden;
  if (n == 0)
    return "";
  gatherSumKernel<<<blocksFor(n), 256, 0, computeStream()>>>(
      sl, lists.start.as<int>(), lists.list.as<int>(), rowsDtype, rows,
      gatesDtype, gates, outDtype, out);
  return launched("moe gather-sum kernel");
}

std::string moeCombineGrad(const MoeSlots &sl, int rowsDtype, const void *rows,
                           int gatesDtype, const void *gates, int dyDtype,
                           const void *dy, int dRowsDtype, void *dRows,
                           int dGatesDtype, void *dGates) {
  if (sl.batch == 0)
    return "";
  cudaStream_t stream = computeStream();
  int64_t numRows = sl.batch * sl.experts * sl.capacity;
  if (int64_t n = numRows * sl.hidden) {
    combineGradRowsKernel<<<blocksFor(n), 256, 0, stream>>>(
        sl, gatesDtype, gates, dyDtype, dy, dRowsDtype, dRows, errorWord());
    if (std::string err = launched("moe_combine_grad rows kernel");
        !err.empty())
      return err;
  }
  Scratch dots(numRows * sizeof(float));
  if (!dots)
    return "out of device memory";
  if (numRows) {
    rowDotKernel<<<blocksFor(numRows * 32), 256, 0, stream>>>(
        sl, rowsDtype, rows, dyDtype, dy, dots.as<float>(), errorWord());
    if (std::string err = launched("moe_combine_grad dot kernel"); !err.empty())
      return err;
  }
  TokenLists lists(sl);
  if (std::string err = lists.build(sl); !err.empty())
    return err;
  int64_t n = sl.batch * sl.positions * sl.experts;
  if (n == 0)
    return "";
  gatesGradKernel<<<blocksFor(n), 256, 0, stream>>>(
      sl, lists.start.as<int>(), lists.list.as<int>(), dots.as<float>(),
      dGatesDtype, dGates);
  return launched("moe_combine_grad gates kernel");
}

} // namespace dtc::cuda
