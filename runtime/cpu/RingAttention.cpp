//===- RingAttention.cpp - Attention kernels ------------------------------===//
//
// The attention family on the CPU: dtc.attention and dtc.attention_grad, and
// dtc.attention_block, dtc.attention_merge and dtc.attention_block_grad, the
// steps of ring attention (context parallelism). Each is ring attention's
// math: attention is one block over the whole sequence as a single chunk
// pair, and its gradient that block's gradient. The block runs tasks over
// (batch, head, block of 64 query rows), scores and P V through sgemm, and
// also keeps each row's log-sum-exp. The gradient is flash-attention's
// backward from the merged lse, in two passes that each own the outputs
// they write: query row blocks for the query gradient, key row blocks
// (summing the group's heads in order) for the key and value gradients, so
// results do not depend on the thread count.
//
// A zigzag chunk is two halves far apart in the sequence: its blocks run as
// the four (query half, key half) blocks, each contiguous in positions, on
// packed copies of the halves, skipping those the causal mask hides whole.
// dtc.zigzag_order, the reordering of halves around the context axis's
// collectives, is here too.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/RingAttention.h"

#include "runtime/core/Attention.h"
#include "runtime/core/CollectiveKernels.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

constexpr int64_t kRowBlock = 64;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Query row `row` sees the chunk's keys [0, visibleKeys).
int64_t visibleKeys(const RingAttentionDims &dims,
                    const RingAttentionPositions &at, int64_t row) {
  if (!at.causal)
    return dims.keys;
  return std::clamp<int64_t>(at.queryStart + row - at.keyStart + 1, 0,
                             dims.keys);
}

/// Key row `key` is seen by the query rows [firstQuery, queries).
int64_t firstQuery(const RingAttentionDims &dims,
                   const RingAttentionPositions &at, int64_t key) {
  if (!at.causal)
    return 0;
  return std::clamp<int64_t>(at.keyStart + key - at.queryStart, 0,
                             dims.queries);
}

/// The score blocks one attention-gradient task works in, kept by a thread
/// across its tasks.
struct ScoreBlocks {
  std::vector<float> p, dp, sum;
  float *probabilities(int64_t size) { return sized(p, size); }
  float *gradients(int64_t size) { return sized(dp, size); }
  float *partial(int64_t size) { return sized(sum, size); }
  static float *sized(std::vector<float> &v, int64_t size) {
    v.resize(size);
    return v.data();
  }
};

inline float dot(const float *a, const float *b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i)
    s += a[i] * b[i];
  return s;
}

} // namespace

void attentionBlock(const RingAttentionDims &dims,
                    const RingAttentionPositions &at, const float *query,
                    const float *key, const float *value, float *output,
                    float *lse) {
  const int64_t B = dims.batch, H = dims.heads, G = dims.groups,
                S = dims.queries, T = dims.keys, D = dims.headDim,
                E = dims.valueDim;
  if (B * H * S == 0)
    return;
  int64_t group = H / G;
  int64_t rowBlocks = (S + kRowBlock - 1) / kRowBlock;
  int64_t tasks = B * H * rowBlocks;
  parallelForTasksWithScratch<std::vector<float>>(
      tasks, std::min(S, kRowBlock) * T * (D + E) / kMacsPerWork,
      [&](int64_t task, std::vector<float> &scratch) {
        scratch.resize(std::min(S, kRowBlock) * T);
        float *p = scratch.data();
        int64_t bh = task / rowBlocks, r0 = (task % rowBlocks) * kRowBlock;
        int64_t b = bh / H, h = bh % H, g = h / group;
        int64_t rows = std::min(kRowBlock, S - r0);
        // The block's last row sees the most keys.
        int64_t keys = visibleKeys(dims, at, r0 + rows - 1);
        const float *qh = query + ((b * H + h) * S + r0) * D;
        const float *kh = key + (b * G + g) * T * D;
        const float *vh = value + (b * G + g) * T * E;
        float *oh = output ? output + ((b * H + h) * S + r0) * E : nullptr;
        float *lh = lse + (b * H + h) * S + r0;
        if (keys == 0) {
          if (oh)
            std::fill(oh, oh + rows * E, 0.0f);
          std::fill(lh, lh + rows, kNegInf);
          return;
        }
        parallelSgemm(false, true, rows, keys, D, at.scale, qh, D, kh, D, p,
                      keys);
        for (int64_t row = 0; row < rows; ++row) {
          float *r = p + row * keys;
          int64_t visible = std::min(keys, visibleKeys(dims, at, r0 + row));
          float mx = kNegInf;
#pragma omp simd reduction(max : mx)
          for (int64_t j = 0; j < visible; ++j)
            mx = std::max(mx, r[j]);
          float sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < visible; ++j) {
            r[j] = fastExp(r[j] - mx);
            sum += r[j];
          }
          lh[row] = visible ? mx + std::log(sum) : kNegInf;
          if (!oh)
            continue;
          float inv = visible ? 1.0f / sum : 0.0f;
          for (int64_t j = 0; j < visible; ++j)
            r[j] *= inv;
          std::fill(r + visible, r + keys, 0.0f);
        }
        if (oh)
          parallelSgemm(false, false, rows, E, keys, 1.0f, p, keys, vh, E, oh,
                        E);
      });
}

void attentionMerge(int64_t rows, int64_t width, const float *outputA,
                    const float *lseA, const float *outputB, const float *lseB,
                    float *output, float *lse) {
  parallelFor(rows, width, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t r = rangeBegin; r < rangeEnd; ++r) {
      // Read both lse before writing: `lse` may alias either.
      float la = lseA[r], lb = lseB[r];
      float m = std::max(la, lb);
      const float *a = outputA + r * width, *b = outputB + r * width;
      float *o = output + r * width;
      if (m == kNegInf) {
        std::fill(o, o + width, 0.0f);
        lse[r] = kNegInf;
        continue;
      }
      double wa = std::exp(double(la) - m), wb = std::exp(double(lb) - m);
      double sum = wa + wb;
      float fa = static_cast<float>(wa / sum),
            fb = static_cast<float>(wb / sum);
      for (int64_t i = 0; i < width; ++i)
        o[i] = a[i] * fa + b[i] * fb;
      lse[r] = static_cast<float>(m + std::log(sum));
    }
  });
}

void attentionBlockGrad(const RingAttentionDims &dims,
                        const RingAttentionPositions &at, const float *query,
                        const float *key, const float *value,
                        const float *output, const float *lse,
                        const float *grad, float *queryGrad, float *keyGrad,
                        float *valueGrad) {
  const int64_t B = dims.batch, H = dims.heads, G = dims.groups,
                S = dims.queries, T = dims.keys, D = dims.headDim,
                E = dims.valueDim;
  int64_t group = H / G;

  // delta_i = grad_i . output_i, the softmax backward's row term; without
  // `output`, pass 1 sums it as sum_j P_ij dP_ij instead (below).
  std::vector<float> delta(B * H * S);
  if (output) {
    parallelFor(B * H * S, E, [&](int64_t rangeBegin, int64_t rangeEnd) {
      for (int64_t row = rangeBegin; row < rangeEnd; ++row)
        delta[row] = dot(grad + row * E, output + row * E, E);
    });
  }

  // A visible score's probability P = exp(score - lse); a row with lse -inf
  // sees no key: P = 0. Then dP becomes dS = P (dP - delta).
  auto probability = [](float score, float l) {
    return l == kNegInf ? 0.0f : fastExp(score - l);
  };
  auto softmaxGrad = [&](float *p, float *dp, float l, float d) {
    float pj = probability(*p, l);
    *dp = pj * (*dp - d);
    *p = pj;
  };

  // Pass 1: the query gradient, per (batch, head, block of query rows).
  int64_t rowBlocks = (S + kRowBlock - 1) / kRowBlock;
  int64_t queryTasks = B * H * rowBlocks;
  parallelForTasksWithScratch<ScoreBlocks>(
      queryTasks, std::min(S, kRowBlock) * T * (2 * D + E) / kMacsPerWork,
      [&](int64_t task, ScoreBlocks &scratch) {
        float *p = scratch.probabilities(std::min(S, kRowBlock) * T);
        float *dp = scratch.gradients(std::min(S, kRowBlock) * T);
        int64_t bh = task / rowBlocks, r0 = (task % rowBlocks) * kRowBlock;
        int64_t b = bh / H, h = bh % H, g = h / group;
        int64_t rows = std::min(kRowBlock, S - r0);
        int64_t keys = visibleKeys(dims, at, r0 + rows - 1);
        int64_t row0 = (b * H + h) * S + r0;
        const float *kh = key + (b * G + g) * T * D;
        const float *vh = value + (b * G + g) * T * E;
        float *dq = queryGrad + row0 * D;
        if (keys == 0) {
          std::fill(dq, dq + rows * D, 0.0f);
          return;
        }
        parallelSgemm(false, true, rows, keys, D, at.scale, query + row0 * D, D,
                      kh, D, p, keys);
        parallelSgemm(false, true, rows, keys, E, 1.0f, grad + row0 * E, E, vh,
                      E, dp, keys);
        for (int64_t row = 0; row < rows; ++row) {
          int64_t visible = std::min(keys, visibleKeys(dims, at, r0 + row));
          float l = lse[row0 + row];
          float *pr = p + row * keys, *dpr = dp + row * keys;
          for (int64_t j = 0; j < visible; ++j)
            pr[j] = probability(pr[j], l);
          if (!output) {
            // From the very P and dP it is applied to, in double: the row's
            // dS then sums to zero to rounding, as the math says (a bias on
            // every key has no gradient; Adam would amplify any noise).
            double sum = 0;
            for (int64_t j = 0; j < visible; ++j)
              sum += double(pr[j]) * dpr[j];
            delta[row0 + row] = static_cast<float>(sum);
          }
          float d = delta[row0 + row];
          for (int64_t j = 0; j < visible; ++j)
            dpr[j] = pr[j] * (dpr[j] - d);
          std::fill(dpr + visible, dpr + keys, 0.0f);
        }
        parallelSgemm(false, false, rows, D, keys, at.scale, dp, keys, kh, D,
                      dq, D);
      });

  // Pass 2: the key and value gradients, per (batch, kv head, block of key
  // rows), adding the group's query heads in order.
  int64_t keyBlocks = (T + kRowBlock - 1) / kRowBlock;
  int64_t keyTasks = B * G * keyBlocks;
  parallelForTasksWithScratch<ScoreBlocks>(
      keyTasks, group * std::min(T, kRowBlock) * S * 2 * (D + E) / kMacsPerWork,
      [&](int64_t task, ScoreBlocks &scratch) {
        int64_t blockRows = std::min(T, kRowBlock);
        float *pt = scratch.probabilities(blockRows * S);
        float *dpt = scratch.gradients(blockRows * S);
        float *tmp = scratch.partial(blockRows * std::max(D, E));
        int64_t bg = task / keyBlocks, j0 = (task % keyBlocks) * kRowBlock;
        int64_t b = bg / G, g = bg % G;
        int64_t rows = std::min(kRowBlock, T - j0);
        // The block's first key is seen by the most queries.
        int64_t first = firstQuery(dims, at, j0), queries = S - first;
        const float *kb = key + ((b * G + g) * T + j0) * D;
        const float *vb = value + ((b * G + g) * T + j0) * E;
        float *dk = keyGrad + ((b * G + g) * T + j0) * D;
        float *dv = valueGrad + ((b * G + g) * T + j0) * E;
        std::fill(dk, dk + rows * D, 0.0f);
        std::fill(dv, dv + rows * E, 0.0f);
        if (queries == 0)
          return;
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          int64_t row0 = (b * H + h) * S + first;
          const float *qh = query + row0 * D, *gh = grad + row0 * E;
          // Transposed blocks: [key row, query row].
          parallelSgemm(false, true, rows, queries, D, at.scale, kb, D, qh, D,
                        pt, queries);
          parallelSgemm(false, true, rows, queries, E, 1.0f, vb, E, gh, E, dpt,
                        queries);
          for (int64_t j = 0; j < rows; ++j) {
            int64_t hidden = firstQuery(dims, at, j0 + j) - first;
            float *pr = pt + j * queries, *dpr = dpt + j * queries;
            std::fill(pr, pr + hidden, 0.0f);
            std::fill(dpr, dpr + hidden, 0.0f);
            for (int64_t i = hidden; i < queries; ++i)
              softmaxGrad(pr + i, dpr + i, lse[row0 + i], delta[row0 + i]);
          }
          parallelSgemm(false, false, rows, E, queries, 1.0f, pt, queries, gh,
                        E, tmp, E);
          for (int64_t i = 0; i < rows * E; ++i)
            dv[i] += tmp[i];
          parallelSgemm(false, false, rows, D, queries, at.scale, dpt, queries,
                        qh, D, tmp, D);
          for (int64_t i = 0; i < rows * D; ++i)
            dk[i] += tmp[i];
        }
      });
}

namespace {

/// Copies rows [first, first + rows) of each of the `outer` [total, width]
/// slabs of `src` into the packed [outer, rows, width] `dst`.
void gatherRows(const float *src, int64_t outer, int64_t total, int64_t first,
                int64_t rows, int64_t width, float *dst) {
  parallelFor(outer, rows * width, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t o = rangeBegin; o < rangeEnd; ++o)
      std::copy_n(src + (o * total + first) * width, rows * width,
                  dst + o * rows * width);
  });
}

/// The reverse of gatherRows, adding into `dst` when `add`.
void scatterRows(const float *src, int64_t outer, int64_t total, int64_t first,
                 int64_t rows, int64_t width, float *dst, bool add) {
  parallelFor(outer, rows * width, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t o = rangeBegin; o < rangeEnd; ++o) {
      const float *s = src + o * rows * width;
      float *d = dst + (o * total + first) * width;
      if (add)
        for (int64_t i = 0; i < rows * width; ++i)
          d[i] += s[i];
      else
        std::copy_n(s, rows * width, d);
    }
  });
}

/// Contiguous chunks: chunk k starts at k * rows.
RingAttentionPositions contiguous(const RingAttentionDims &dims,
                                  const RingAttentionChunks &at) {
  RingAttentionPositions p;
  p.queryStart = at.queryChunk * dims.queries;
  p.keyStart = at.keyChunk * dims.keys;
  p.causal = at.causal;
  p.scale = at.scale;
  return p;
}

/// First position of half `half` (0 or 1) of zigzag chunk `chunk`.
int64_t halfStart(const RingAttentionChunks &at, int64_t chunk, int64_t half,
                  int64_t halfRows) {
  return (half ? 2 * at.chunks - 1 - chunk : chunk) * halfRows;
}

/// The four half blocks of a zigzag chunk pair: their dims and positions.
struct ZigzagHalves {
  RingAttentionDims dims;
  RingAttentionPositions at[2][2]; // [query half][key half]

  ZigzagHalves(const RingAttentionDims &whole, const RingAttentionChunks &c)
      : dims(whole) {
    assert(whole.queries % 2 == 0 && whole.keys % 2 == 0 &&
           "zigzag chunks are two halves");
    dims.queries /= 2;
    dims.keys /= 2;
    for (int64_t a = 0; a < 2; ++a)
      for (int64_t b = 0; b < 2; ++b) {
        RingAttentionPositions &p = at[a][b];
        p.queryStart = halfStart(c, c.queryChunk, a, dims.queries);
        p.keyStart = halfStart(c, c.keyChunk, b, dims.keys);
        p.causal = c.causal;
        p.scale = c.scale;
      }
  }

  /// The causal mask hides the whole block: its keys follow every query.
  bool hidden(int64_t a, int64_t b) const {
    const RingAttentionPositions &p = at[a][b];
    return p.causal && p.keyStart >= p.queryStart + dims.queries;
  }
};

/// The key and value halves of a zigzag chunk, each packed contiguous.
struct PackedKeyHalves {
  std::vector<float> key[2], value[2];

  PackedKeyHalves(const RingAttentionDims &dims, const float *keys,
                  const float *values) {
    int64_t groups = dims.batch * dims.groups, t = dims.keys / 2;
    for (int64_t b = 0; b < 2; ++b) {
      key[b].resize(groups * t * dims.headDim);
      value[b].resize(groups * t * dims.valueDim);
      gatherRows(keys, groups, dims.keys, b * t, t, dims.headDim,
                 key[b].data());
      gatherRows(values, groups, dims.keys, b * t, t, dims.valueDim,
                 value[b].data());
    }
  }
};

} // namespace

void ringAttentionBlock(const RingAttentionDims &dims,
                        const RingAttentionChunks &at, const float *query,
                        const float *key, const float *value, float *output,
                        float *lse) {
  if (!at.zigzag)
    return attentionBlock(dims, contiguous(dims, at), query, key, value, output,
                          lse);
  ZigzagHalves halves(dims, at);
  const RingAttentionDims &hd = halves.dims;
  const int64_t BH = dims.batch * dims.heads, s = hd.queries, D = dims.headDim,
                E = dims.valueDim;
  std::vector<float> q(BH * s * D), out(BH * s * E), l(BH * s),
      blockOut(out.size()), blockLse(l.size());
  PackedKeyHalves kv(dims, key, value);
  for (int64_t a = 0; a < 2; ++a) {
    gatherRows(query, BH, dims.queries, a * s, s, D, q.data());
    bool first = true;
    for (int64_t b = 0; b < 2; ++b) {
      if (halves.hidden(a, b))
        continue;
      attentionBlock(hd, halves.at[a][b], q.data(), kv.key[b].data(),
                     kv.value[b].data(), first ? out.data() : blockOut.data(),
                     first ? l.data() : blockLse.data());
      if (!first)
        attentionMerge(BH * s, E, out.data(), l.data(), blockOut.data(),
                       blockLse.data(), out.data(), l.data());
      first = false;
    }
    if (first) {
      std::fill(out.begin(), out.end(), 0.0f);
      std::fill(l.begin(), l.end(), kNegInf);
    }
    scatterRows(out.data(), BH, dims.queries, a * s, s, E, output, false);
    scatterRows(l.data(), BH, dims.queries, a * s, s, 1, lse, false);
  }
}

void ringAttentionBlockGrad(const RingAttentionDims &dims,
                            const RingAttentionChunks &at, const float *query,
                            const float *key, const float *value,
                            const float *output, const float *lse,
                            const float *grad, float *queryGrad, float *keyGrad,
                            float *valueGrad) {
  if (!at.zigzag)
    return attentionBlockGrad(dims, contiguous(dims, at), query, key, value,
                              output, lse, grad, queryGrad, keyGrad, valueGrad);
  ZigzagHalves halves(dims, at);
  const RingAttentionDims &hd = halves.dims;
  const int64_t BH = dims.batch * dims.heads, BG = dims.batch * dims.groups,
                s = hd.queries, t = hd.keys, D = dims.headDim,
                E = dims.valueDim;
  // Every half block adds its share; hidden ones add nothing.
  std::fill(queryGrad, queryGrad + BH * dims.queries * D, 0.0f);
  std::fill(keyGrad, keyGrad + BG * dims.keys * D, 0.0f);
  std::fill(valueGrad, valueGrad + BG * dims.keys * E, 0.0f);
  std::vector<float> q(BH * s * D), o(BH * s * E), l(BH * s), dy(BH * s * E),
      dq(q.size()), dk(BG * t * D), dv(BG * t * E);
  PackedKeyHalves kv(dims, key, value);
  for (int64_t a = 0; a < 2; ++a) {
    if (halves.hidden(a, 0) && halves.hidden(a, 1))
      continue;
    gatherRows(query, BH, dims.queries, a * s, s, D, q.data());
    gatherRows(output, BH, dims.queries, a * s, s, E, o.data());
    gatherRows(lse, BH, dims.queries, a * s, s, 1, l.data());
    gatherRows(grad, BH, dims.queries, a * s, s, E, dy.data());
    for (int64_t b = 0; b < 2; ++b) {
      if (halves.hidden(a, b))
        continue;
      attentionBlockGrad(hd, halves.at[a][b], q.data(), kv.key[b].data(),
                         kv.value[b].data(), o.data(), l.data(), dy.data(),
                         dq.data(), dk.data(), dv.data());
      scatterRows(dq.data(), BH, dims.queries, a * s, s, D, queryGrad, true);
      scatterRows(dk.data(), BG, dims.keys, b * t, t, D, keyGrad, true);
      scatterRows(dv.data(), BG, dims.keys, b * t, t, E, valueGrad, true);
    }
  }
}

namespace {

/// The CPU math's form of the operands runtime/core/Attention.cpp read.
RingAttentionDims dimsOf(const AttentionOperands &a) {
  return {a.batch, a.heads, a.groups, a.queries, a.keys, a.headDim, a.valueDim};
}

RingAttentionChunks chunksOf(const AttentionBlockOperands &block) {
  RingAttentionChunks at;
  at.queryChunk = block.at.queryChunk;
  at.keyChunk = block.at.keyChunk;
  at.chunks = block.at.chunks;
  at.zigzag = block.at.zigzag;
  at.causal = block.dims.causal;
  at.scale = static_cast<float>(block.dims.scale);
  return at;
}

llvm::Error attentionKernel(const KernelCall &call) {
  auto a = readAttention(call);
  if (!a)
    return a.takeError();
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2),
                  &out = call.output(0);
  if (out.numElements() == 0)
    return llvm::Error::success();
  // The whole sequence is one chunk pair of ring attention's block, whose
  // log-sum-exp is not needed here.
  RingAttentionDims dims = dimsOf(*a);
  RingAttentionPositions at;
  at.causal = a->causal;
  at.scale = static_cast<float>(a->scale);
  F32In qf(q), kf(k), vf(v);
  F32Out of(out);
  std::vector<float> lse(a->batch * a->heads * a->queries);
  attentionBlock(dims, at, qf.data(), kf.data(), vf.data(), of.data(),
                 lse.data());
  of.commit();
  return llvm::Error::success();
}

/// Flash-attention's backward: the forward block is recomputed for its
/// log-sum-exp (a forward costs a third of the backward), then ring
/// attention's blocked gradient runs over the whole sequence as one chunk
/// pair.
llvm::Error attentionGradKernel(const KernelCall &call) {
  auto a = readAttentionGrad(call);
  if (!a)
    return a.takeError();
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2),
                  &dy = call.input(3);
  F32In qv(q), kv(k), vv(v), dyv(dy);
  F32Out dq(call.output(0)), dk(call.output(1)), dv(call.output(2));
  RingAttentionDims dims = dimsOf(*a);
  RingAttentionPositions at;
  at.causal = a->causal;
  at.scale = static_cast<float>(a->scale);
  std::vector<float> lse(a->batch * a->heads * a->queries);
  attentionBlock(dims, at, qv.data(), kv.data(), vv.data(), /*output=*/nullptr,
                 lse.data());
  attentionBlockGrad(dims, at, qv.data(), kv.data(), vv.data(),
                     /*output=*/nullptr, lse.data(), dyv.data(), dq.data(),
                     dk.data(), dv.data());
  dq.commit();
  dk.commit();
  dv.commit();
  return llvm::Error::success();
}

llvm::Error attentionBlockKernel(const KernelCall &call) {
  llvm::Expected<AttentionBlockOperands> block = readAttentionBlock(call);
  if (!block)
    return block.takeError();
  F32In q(call.input(0)), k(call.input(1)), v(call.input(2));
  F32Out o(call.output(0)), l(call.output(1));
  ringAttentionBlock(dimsOf(block->dims), chunksOf(*block), q.data(), k.data(),
                     v.data(), o.data(), l.data());
  o.commit();
  l.commit();
  return llvm::Error::success();
}

llvm::Error attentionMergeKernel(const KernelCall &call) {
  llvm::Expected<AttentionMergeRows> merge = readAttentionMerge(call);
  if (!merge)
    return merge.takeError();
  F32In a(call.input(0)), la(call.input(1)), b(call.input(2)),
      lb(call.input(3));
  F32Out o(call.output(0)), l(call.output(1));
  attentionMerge(merge->rows, merge->width, a.data(), la.data(), b.data(),
                 lb.data(), o.data(), l.data());
  o.commit();
  l.commit();
  return llvm::Error::success();
}

llvm::Error attentionBlockGradKernel(const KernelCall &call) {
  llvm::Expected<AttentionBlockOperands> block = readAttentionBlockGrad(call);
  if (!block)
    return block.takeError();
  F32In q(call.input(0)), k(call.input(1)), v(call.input(2)), o(call.input(3)),
      l(call.input(4)), g(call.input(5));
  F32Out dq(call.output(0)), dk(call.output(1)), dv(call.output(2));
  ringAttentionBlockGrad(dimsOf(block->dims), chunksOf(*block), q.data(),
                         k.data(), v.data(), o.data(), l.data(), g.data(),
                         dq.data(), dk.data(), dv.data());
  dq.commit();
  dk.commit();
  dv.commit();
  return llvm::Error::success();
}

llvm::Error zigzagOrderKernel(const KernelCall &call) {
  llvm::Expected<ZigzagPieces> z = readZigzagOrder(call);
  if (!z)
    return z.takeError();
  if (z->pieceBytes == 0)
    return llvm::Error::success();
  const TensorRef &in = call.input(0), &out = call.output(0);
  bool inverse = z->inverse;
  int64_t outer = z->outer, parts = z->parts, pieces = 2 * parts;
  size_t piece = z->pieceBytes;
  const char *src = static_cast<const char *>(in.data);
  // Pieces move, so the output cannot be the input's memory.
  std::vector<char> copy;
  if (in.data == out.data) {
    copy.assign(src, src + in.bytes());
    src = copy.data();
  }
  char *dst = static_cast<char *>(out.data);
  parallelFor(outer * pieces, static_cast<int64_t>(piece) / 4 + 1,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t task = rangeBegin; task < rangeEnd; ++task) {
                  int64_t o = task / pieces, p = task % pieces;
                  int64_t from = inverse ? p : zigzagPiece(p, parts);
                  int64_t to = inverse ? zigzagPiece(p, parts) : p;
                  std::memcpy(dst + (o * pieces + to) * piece,
                              src + (o * pieces + from) * piece, piece);
                }
              });
  return llvm::Error::success();
}

} // namespace

void registerAttentionKernels(KernelRegistry &registry) {
  registry.add("dtc.attention", attentionKernel);
  registry.add("dtc.attention_grad", attentionGradKernel);
  registry.add("dtc.attention_block", attentionBlockKernel);
  registry.add("dtc.attention_merge", attentionMergeKernel);
  registry.add("dtc.attention_block_grad", attentionBlockGradKernel);
  registry.add("dtc.zigzag_order", zigzagOrderKernel);
}

} // namespace dtc::runtime::cpu
