//===- Attention.cu - Flash-style attention forward and backward ----------===//
//
// The semantics of runtime/cpu/RingAttention.cpp's dtc.attention and
// dtc.attention_grad: q [b, h, s, d], k [b, g, t, d], v [b, g, t, e] (h a
// multiple of g: grouped-query attention), scale (default 1/sqrt(d)),
// causal (key t visible to query s iff t <= s).
//
// Forward: a block of kRows query rows per (batch, head), one thread per
// row holding its q and output accumulator in registers; key/value tiles
// stream through shared memory with an online (rescaled) softmax, so no
// [s, t] matrix exists. Backward, as the CPU kernel: pass 1 per query row
// recomputes the row's statistics (log-sum-exp, delta = dy . o) and dq;
// pass 2 per key row streams query tiles and sums dk, dv. f32 compute.
//
// Ring attention (runtime/cpu/RingAttention.cpp) runs the same kernels on
// one (query chunk, key chunk) pair: rows carry global positions (a zigzag
// chunk is two halves) that the causal mask compares, tiles the mask hides
// whole are skipped, the forward also writes each row's lse, and the
// backward takes lse and delta from the given merged output and lse. The
// merge of two blocks is an elementwise pass per row.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaCommon.cuh"

namespace dtc::cuda {

namespace {

constexpr int kRows = 64; // threads (rows) per block

template <int MaxD> constexpr int tileKeys() { return 4096 / MaxD; }

struct Params {
  AttentionShape shape;
  int qDtype, kDtype, vDtype, dyDtype;
  const void *q, *k, *v, *dy;
  /// The backward's row statistics from the merged forward output and lse
  /// (dtc.attention_block_grad); null: recomputed from this key set.
  int oDtype = kF32, lseDtype = kF32;
  const void *o = nullptr, *lse = nullptr;
};

__device__ __forceinline__ int64_t positionOf(const RowPositions &p,
                                              int64_t row) {
  return row < p.half ? p.start0 + row : p.start1 + (row - p.half);
}

/// The smallest position of rows [first, last] (each half increases).
__device__ __forceinline__ int64_t firstPosition(const RowPositions &p,
                                                 int64_t first, int64_t last) {
  int64_t a = positionOf(p, first);
  if (first < p.half && last >= p.half && p.start1 < a)
    return p.start1;
  return a;
}

/// The largest position of rows [first, last].
__device__ __forceinline__ int64_t lastPosition(const RowPositions &p,
                                                int64_t first, int64_t last) {
  int64_t z = positionOf(p, last);
  if (first < p.half && last >= p.half && p.start0 + p.half - 1 > z)
    return p.start0 + p.half - 1;
  return z;
}

__device__ __forceinline__ int64_t lastRow(int64_t first, int64_t count,
                                           int64_t rows) {
  return (first + count < rows ? first + count : rows) - 1;
}

/// Whether any key of rows [k0, k1] is visible to a query at or before
/// position `lastQuery` (uniform over a block: it guards __syncthreads).
__device__ __forceinline__ bool keysVisible(const AttentionShape &sh,
                                            int64_t k0, int64_t k1,
                                            int64_t lastQuery) {
  return !sh.causal || firstPosition(sh.keyAt, k0, k1) <= lastQuery;
}

/// Loads rows [first, first + count) of a [rows, width] matrix at `base`
/// into `tile` ([kTile][MaxD], zero-filled past the end).
template <int MaxD>
__device__ void loadTile(float *tile, const void *src, int dtype, int64_t base,
                         int64_t first, int64_t limit, int64_t width,
                         int count) {
  for (int idx = threadIdx.x; idx < count * MaxD; idx += blockDim.x) {
    int r = idx / MaxD, c = idx % MaxD;
    int64_t row = first + r;
    tile[idx] = row < limit && c < width
                    ? loadF(src, dtype, base + row * width + c)
                    : 0.0f;
  }
}

/// The forward sweep for one query row at position `qPos`: o
/// (unnormalized), running max m and sum l. `qr` holds the scaled query;
/// `lastQuery` is the block's last query position.
template <int MaxD>
__device__ void forwardSweep(const Params &p, int64_t b, int64_t g,
                             int64_t qPos, int64_t lastQuery, const float *qr,
                             float *o, float &m, float &l, float *shared) {
  const AttentionShape &sh = p.shape;
  constexpr int kTile = tileKeys<MaxD>();
  float *ks = shared, *vs = ks + kTile * MaxD, *ss = vs + kTile * MaxD;
  int64_t kBase = (b * sh.groups + g) * sh.t * sh.d;
  int64_t vBase = (b * sh.groups + g) * sh.t * sh.e;
  for (int64_t t0 = 0; t0 < sh.t; t0 += kTile) {
    if (!keysVisible(sh, t0, lastRow(t0, kTile, sh.t), lastQuery))
      continue;
    __syncthreads();
    loadTile<MaxD>(ks, p.k, p.kDtype, kBase, t0, sh.t, sh.d, kTile);
    loadTile<MaxD>(vs, p.v, p.vDtype, vBase, t0, sh.t, sh.e, kTile);
    __syncthreads();
    float tileMax = -INFINITY;
    for (int j = 0; j < kTile; ++j) {
      int64_t key = t0 + j;
      float score = -INFINITY;
      if (key < sh.t && (!sh.causal || positionOf(sh.keyAt, key) <= qPos)) {
        score = 0;
#pragma unroll
        for (int d = 0; d < MaxD; ++d)
          score += qr[d] * ks[j * MaxD + d];
      }
      ss[j * kRows + threadIdx.x] = score;
      tileMax = fmaxf(tileMax, score);
    }
    if (tileMax == -INFINITY)
      continue;
    float mNew = fmaxf(m, tileMax);
    float correction = m == -INFINITY ? 0.0f : expf(m - mNew);
    l *= correction;
#pragma unroll
    for (int e = 0; e < MaxD; ++e)
      o[e] *= correction;
    for (int j = 0; j < kTile; ++j) {
      float w = expf(ss[j * kRows + threadIdx.x] - mNew);
      l += w;
#pragma unroll
      for (int e = 0; e < MaxD; ++e)
        o[e] += w * vs[j * MaxD + e];
    }
    m = mNew;
  }
}

/// `lse` (may be null) gets each row's log-sum-exp, -inf without a key.
template <int MaxD>
__global__ void __launch_bounds__(kRows)
    attentionForward(Params p, int outDtype, void *out, int lseDtype,
                     void *lse) {
  extern __shared__ float shared[];
  const AttentionShape &sh = p.shape;
  int64_t bh = blockIdx.x, b = bh / sh.heads, h = bh % sh.heads;
  int64_t g = h / (sh.heads / sh.groups);
  int64_t r0 = int64_t(blockIdx.y) * kRows, s = r0 + threadIdx.x;
  bool active = s < sh.s;
  float qr[MaxD], o[MaxD];
  int64_t qBase = (bh * sh.s + s) * sh.d;
#pragma unroll
  for (int d = 0; d < MaxD; ++d) {
    qr[d] =
        active && d < sh.d ? loadF(p.q, p.qDtype, qBase + d) * sh.scale : 0.0f;
    o[d] = 0;
  }
  float m = -INFINITY, l = 0;
  forwardSweep<MaxD>(p, b, g, positionOf(sh.queryAt, s),
                     lastPosition(sh.queryAt, r0, lastRow(r0, kRows, sh.s)), qr,
                     o, m, l, shared);
  if (!active)
    return;
  float inv = l > 0 ? 1.0f / l : 0.0f;
  int64_t oBase = (bh * sh.s + s) * sh.e;
#pragma unroll
  for (int e = 0; e < MaxD; ++e)
    if (e < sh.e)
      storeF(out, outDtype, oBase + e, o[e] * inv);
  if (lse)
    storeF(lse, lseDtype, bh * sh.s + s, l > 0 ? m + logf(l) : -INFINITY);
}

/// Pass 1: lse and delta per query row (recomputed, or from p.lse and p.o),
/// and dq. A row that sees no key gets lse +inf here: its weights are 0.
template <int MaxD>
__global__ void __launch_bounds__(kRows)
    attentionGradQuery(Params p, int dqDtype, void *dq, float *lse,
                       float *delta) {
  extern __shared__ float shared[];
  constexpr int kTile = tileKeys<MaxD>();
  const AttentionShape &sh = p.shape;
  int64_t bh = blockIdx.x, b = bh / sh.heads, h = bh % sh.heads;
  int64_t g = h / (sh.heads / sh.groups);
  int64_t r0 = int64_t(blockIdx.y) * kRows, s = r0 + threadIdx.x;
  bool active = s < sh.s;
  int64_t qPos = positionOf(sh.queryAt, s);
  int64_t lastQuery = lastPosition(sh.queryAt, r0, lastRow(r0, kRows, sh.s));
  float qr[MaxD], acc[MaxD];
  int64_t qBase = (bh * sh.s + s) * sh.d;
#pragma unroll
  for (int d = 0; d < MaxD; ++d) {
    qr[d] =
        active && d < sh.d ? loadF(p.q, p.qDtype, qBase + d) * sh.scale : 0.0f;
    acc[d] = 0;
  }
  // dy of this row in shared memory, [e][row] (conflict-free).
  float *dys = shared + 2 * kTile * MaxD + kTile * kRows;
  int64_t oBase = (bh * sh.s + s) * sh.e;
  float rowLse, dlt = 0;
  if (p.lse) {
#pragma unroll
    for (int e = 0; e < MaxD; ++e) {
      bool in = active && e < sh.e;
      float gy = in ? loadF(p.dy, p.dyDtype, oBase + e) : 0.0f;
      dys[e * kRows + threadIdx.x] = gy;
      dlt += gy * (in ? loadF(p.o, p.oDtype, oBase + e) : 0.0f);
    }
    rowLse = active ? loadF(p.lse, p.lseDtype, bh * sh.s + s) : INFINITY;
    if (rowLse == -INFINITY)
      rowLse = INFINITY;
  } else {
    float m = -INFINITY, l = 0;
    forwardSweep<MaxD>(p, b, g, qPos, lastQuery, qr, acc, m, l, shared);
    float inv = l > 0 ? 1.0f / l : 0.0f;
#pragma unroll
    for (int e = 0; e < MaxD; ++e) {
      float gy = active && e < sh.e ? loadF(p.dy, p.dyDtype, oBase + e) : 0.0f;
      dys[e * kRows + threadIdx.x] = gy;
      dlt += gy * acc[e] * inv;
    }
    rowLse = l > 0 ? m + logf(l) : INFINITY;
  }
  if (active) {
    lse[bh * sh.s + s] = rowLse;
    delta[bh * sh.s + s] = dlt;
  }
#pragma unroll
  for (int d = 0; d < MaxD; ++d)
    acc[d] = 0; // now dq
  float *ks = shared, *vs = ks + kTile * MaxD;
  int64_t kBase = (b * sh.groups + g) * sh.t * sh.d;
  int64_t vBase = (b * sh.groups + g) * sh.t * sh.e;
  for (int64_t t0 = 0; t0 < sh.t; t0 += kTile) {
    if (!keysVisible(sh, t0, lastRow(t0, kTile, sh.t), lastQuery))
      continue;
    __syncthreads();
    loadTile<MaxD>(ks, p.k, p.kDtype, kBase, t0, sh.t, sh.d, kTile);
    loadTile<MaxD>(vs, p.v, p.vDtype, vBase, t0, sh.t, sh.e, kTile);
    __syncthreads();
    for (int j = 0; j < kTile; ++j) {
      int64_t key = t0 + j;
      if (key >= sh.t || (sh.causal && positionOf(sh.keyAt, key) > qPos))
        continue;
      float score = 0, dp = 0;
#pragma unroll
      for (int d = 0; d < MaxD; ++d) {
        score += qr[d] * ks[j * MaxD + d];
        dp += dys[d * kRows + threadIdx.x] * vs[j * MaxD + d];
      }
      float w = expf(score - rowLse);
      float ds = w * (dp - dlt) * sh.scale;
#pragma unroll
      for (int d = 0; d < MaxD; ++d)
        acc[d] += ds * ks[j * MaxD + d];
    }
  }
  if (!active)
    return;
#pragma unroll
  for (int d = 0; d < MaxD; ++d)
    if (d < sh.d)
      storeF(dq, dqDtype, qBase + d, acc[d]);
}

/// Pass 2: dk and dv per key row, over every query row of the group's
/// heads.
template <int MaxD>
__global__ void __launch_bounds__(kRows)
    attentionGradKey(Params p, const float *lse, const float *delta,
                     int dkDtype, void *dk, int dvDtype, void *dv) {
  extern __shared__ float shared[];
  constexpr int kTile = tileKeys<MaxD>();
  const AttentionShape &sh = p.shape;
  int64_t bg = blockIdx.x, b = bg / sh.groups, g = bg % sh.groups;
  int64_t t0 = int64_t(blockIdx.y) * kRows, t = t0 + threadIdx.x;
  bool active = t < sh.t;
  float *kS = shared, *vS = kS + MaxD * kRows;
  float *qs = vS + MaxD * kRows, *dys = qs + kTile * MaxD;
  float *lseS = dys + kTile * MaxD, *deltaS = lseS + kTile;
  int64_t kRow = (bg * sh.t + t) * sh.d, vRow = (bg * sh.t + t) * sh.e;
  float dkr[MaxD], dvr[MaxD];
#pragma unroll
  for (int d = 0; d < MaxD; ++d) {
    kS[d * kRows + threadIdx.x] =
        active && d < sh.d ? loadF(p.k, p.kDtype, kRow + d) * sh.scale : 0.0f;
    vS[d * kRows + threadIdx.x] =
        active && d < sh.e ? loadF(p.v, p.vDtype, vRow + d) : 0.0f;
    dkr[d] = 0;
    dvr[d] = 0;
  }
  int64_t group = sh.heads / sh.groups;
  int64_t kPos = positionOf(sh.keyAt, t);
  // Under the causal mask only queries at or after the block's first key
  // see its keys.
  int64_t firstKey = firstPosition(sh.keyAt, t0, lastRow(t0, kRows, sh.t));
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    int64_t bh = b * sh.heads + h;
    for (int64_t s0 = 0; s0 < sh.s; s0 += kTile) {
      if (sh.causal &&
          lastPosition(sh.queryAt, s0, lastRow(s0, kTile, sh.s)) < firstKey)
        continue;
      __syncthreads();
      loadTile<MaxD>(qs, p.q, p.qDtype, bh * sh.s * sh.d, s0, sh.s, sh.d,
                     kTile);
      loadTile<MaxD>(dys, p.dy, p.dyDtype, bh * sh.s * sh.e, s0, sh.s, sh.e,
                     kTile);
      for (int i = threadIdx.x; i < kTile; i += blockDim.x) {
        int64_t s = s0 + i;
        lseS[i] = s < sh.s ? lse[bh * sh.s + s] : INFINITY;
        deltaS[i] = s < sh.s ? delta[bh * sh.s + s] : 0.0f;
      }
      __syncthreads();
      if (!active)
        continue;
      for (int i = 0; i < kTile; ++i) {
        int64_t s = s0 + i;
        if (s >= sh.s || (sh.causal && positionOf(sh.queryAt, s) < kPos))
          continue;
        float score = 0, dp = 0;
#pragma unroll
        for (int d = 0; d < MaxD; ++d) {
          score += qs[i * MaxD + d] * kS[d * kRows + threadIdx.x];
          dp += dys[i * MaxD + d] * vS[d * kRows + threadIdx.x];
        }
        float w = expf(score - lseS[i]);
        float ds = w * (dp - deltaS[i]) * sh.scale;
#pragma unroll
        for (int d = 0; d < MaxD; ++d) {
          dkr[d] += ds * qs[i * MaxD + d];
          dvr[d] += w * dys[i * MaxD + d];
        }
      }
    }
  }
  if (!active)
    return;
#pragma unroll
  for (int d = 0; d < MaxD; ++d) {
    if (d < sh.d)
      storeF(dk, dkDtype, kRow + d, dkr[d]);
    if (d < sh.e)
      storeF(dv, dvDtype, vRow + d, dvr[d]);
  }
}

template <int MaxD> size_t forwardShared() {
  return (2 * tileKeys<MaxD>() * MaxD + tileKeys<MaxD>() * kRows) *
         sizeof(float);
}
template <int MaxD> size_t queryShared() {
  return forwardShared<MaxD>() + MaxD * kRows * sizeof(float);
}
template <int MaxD> size_t keyShared() {
  return (2 * MaxD * kRows + 2 * tileKeys<MaxD>() * MaxD +
          2 * tileKeys<MaxD>()) *
         sizeof(float);
}

template <int MaxD> std::string enableShared() {
  static std::string error = [] {
    if (cudaFuncSetAttribute(attentionForward<MaxD>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(forwardShared<MaxD>())) ||
        cudaFuncSetAttribute(attentionGradQuery<MaxD>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(queryShared<MaxD>())) ||
        cudaFuncSetAttribute(attentionGradKey<MaxD>,
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(keyShared<MaxD>())))
      return launched("attention shared memory");
    return std::string();
  }();
  return error;
}

/// Blocks of the attention kernels: x = (batch, head) pairs, which may
/// exceed the 65535 blocks y allows; y = tiles of kRows rows (the caller
/// checks rowsFit).
dim3 tileGrid(int64_t pairs, int64_t rows) {
  return dim3(static_cast<unsigned>(pairs),
              static_cast<unsigned>((rows + kRows - 1) / kRows));
}
bool rowsFit(int64_t rows) { return (rows + kRows - 1) / kRows <= 65535; }

template <int MaxD>
std::string forwardAs(const Params &p, int outDtype, void *out, int lseDtype,
                      void *lse) {
  if (std::string e = enableShared<MaxD>(); !e.empty())
    return e;
  const AttentionShape &sh = p.shape;
  dim3 grid = tileGrid(sh.batch * sh.heads, sh.s);
  attentionForward<MaxD>
      <<<grid, kRows, forwardShared<MaxD>(), computeStream()>>>(
          p, outDtype, out, lseDtype, lse);
  return launched("attention kernel");
}

std::string forward(const Params &p, int outDtype, void *out, int lseDtype,
                    void *lse) {
  const AttentionShape &sh = p.shape;
  if (!rowsFit(sh.s))
    return "attention: more than 65535 tiles of query rows";
  int64_t widest = sh.d > sh.e ? sh.d : sh.e;
  if (widest <= 64)
    return forwardAs<64>(p, outDtype, out, lseDtype, lse);
  if (widest <= kMaxHeadDim)
    return forwardAs<128>(p, outDtype, out, lseDtype, lse);
  return "attention: head dim above 128";
}

template <int MaxD>
std::string gradAs(const Params &p, int dqDtype, void *dq, int dkDtype,
                   void *dk, int dvDtype, void *dv) {
  if (std::string e = enableShared<MaxD>(); !e.empty())
    return e;
  const AttentionShape &sh = p.shape;
  Scratch stats(2 * sh.batch * sh.heads * sh.s * sizeof(float));
  if (!stats)
    return "attention_grad: out of device memory";
  float *lse = stats.as<float>(), *delta = lse + sh.batch * sh.heads * sh.s;
  if (sh.s > 0) {
    dim3 grid = tileGrid(sh.batch * sh.heads, sh.s);
    attentionGradQuery<MaxD>
        <<<grid, kRows, queryShared<MaxD>(), computeStream()>>>(p, dqDtype, dq,
                                                                lse, delta);
    if (std::string e = launched("attention_grad query kernel"); !e.empty())
      return e;
  }
  if (sh.t > 0) {
    dim3 grid = tileGrid(sh.batch * sh.groups, sh.t);
    attentionGradKey<MaxD><<<grid, kRows, keyShared<MaxD>(), computeStream()>>>(
        p, lse, delta, dkDtype, dk, dvDtype, dv);
    return launched("attention_grad key kernel");
  }
  return "";
}

std::string grad(const Params &p, int dqDtype, void *dq, int dkDtype, void *dk,
                 int dvDtype, void *dv) {
  const AttentionShape &sh = p.shape;
  if (!rowsFit(sh.s) || !rowsFit(sh.t))
    return "attention_grad: more than 65535 tiles of query or key rows";
  int64_t widest = sh.d > sh.e ? sh.d : sh.e;
  if (widest <= 64)
    return gradAs<64>(p, dqDtype, dq, dkDtype, dk, dvDtype, dv);
  if (widest <= kMaxHeadDim)
    return gradAs<128>(p, dqDtype, dq, dkDtype, dk, dvDtype, dv);
  return "attention_grad: head dim above 128";
}

/// One warp per row: every lane reads both lse before lane 0 writes the
/// row's (the result may alias them); each element is read and written by
/// the same lane.
__global__ void attentionMergeKernel(int64_t rows, int64_t width, int aDtype,
                                     const void *a, int lseADtype,
                                     const void *lseA, int bDtype,
                                     const void *b, int lseBDtype,
                                     const void *lseB, int outDtype, void *out,
                                     int lseDtype, void *lse) {
  int lane = threadIdx.x & 31;
  int64_t warps = (int64_t(gridDim.x) * blockDim.x) >> 5;
  for (int64_t r = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) >> 5;
       r < rows; r += warps) {
    float la = loadF(lseA, lseADtype, r), lb = loadF(lseB, lseBDtype, r);
    float m = fmaxf(la, lb);
    bool none = m == -INFINITY;
    // Weights in double, as the CPU kernel.
    double wa = none ? 0.0 : exp(double(la) - m);
    double wb = none ? 0.0 : exp(double(lb) - m);
    double sum = wa + wb;
    float fa = none ? 0.0f : static_cast<float>(wa / sum);
    float fb = none ? 0.0f : static_cast<float>(wb / sum);
    for (int64_t i = lane; i < width; i += 32) {
      int64_t at = r * width + i;
      float v =
          none ? 0.0f : loadF(a, aDtype, at) * fa + loadF(b, bDtype, at) * fb;
      storeF(out, outDtype, at, v);
    }
    __syncwarp();
    if (lane == 0)
      storeF(lse, lseDtype, r,
             none ? -INFINITY : static_cast<float>(m + log(sum)));
  }
}

} // namespace

std::string attention(const AttentionShape &shape, int qDtype, const void *q,
                      int kDtype, const void *k, int vDtype, const void *v,
                      int outDtype, void *out) {
  if (shape.batch * shape.heads * shape.s * shape.e == 0)
    return "";
  Params p{shape, qDtype, kDtype, vDtype, kF32, q, k, v, nullptr};
  return forward(p, outDtype, out, kF32, nullptr);
}

std::string attentionGrad(const AttentionShape &shape, int qDtype,
                          const void *q, int kDtype, const void *k, int vDtype,
                          const void *v, int dyDtype, const void *dy,
                          int dqDtype, void *dq, int dkDtype, void *dk,
                          int dvDtype, void *dv) {
  if (shape.batch * shape.heads == 0)
    return "";
  Params p{shape, qDtype, kDtype, vDtype, dyDtype, q, k, v, dy};
  return grad(p, dqDtype, dq, dkDtype, dk, dvDtype, dv);
}

std::string attentionBlock(const AttentionShape &shape, int qDtype,
                           const void *q, int kDtype, const void *k, int vDtype,
                           const void *v, int outDtype, void *out, int lseDtype,
                           void *lse) {
  // Rows get lse even with an empty value dim or no keys.
  if (shape.batch * shape.heads * shape.s == 0)
    return "";
  Params p{shape, qDtype, kDtype, vDtype, kF32, q, k, v, nullptr};
  return forward(p, outDtype, out, lseDtype, lse);
}

std::string attentionBlockGrad(const AttentionShape &shape, int qDtype,
                               const void *q, int kDtype, const void *k,
                               int vDtype, const void *v, int oDtype,
                               const void *o, int lseDtype, const void *lse,
                               int dyDtype, const void *dy, int dqDtype,
                               void *dq, int dkDtype, void *dk, int dvDtype,
                               void *dv) {
  if (shape.batch * shape.heads == 0)
    return "";
  Params p{shape, qDtype, kDtype, vDtype, dyDtype, q, k, v, dy};
  p.oDtype = oDtype;
  p.o = o;
  p.lseDtype = lseDtype;
  p.lse = lse;
  return grad(p, dqDtype, dq, dkDtype, dk, dvDtype, dv);
}

std::string attentionMerge(int64_t rows, int64_t width, int aDtype,
                           const void *a, int lseADtype, const void *lseA,
                           int bDtype, const void *b, int lseBDtype,
                           const void *lseB, int outDtype, void *out,
                           int lseDtype, void *lse) {
  if (rows == 0)
    return "";
  attentionMergeKernel<<<blocksFor(rows * 32), 256, 0, computeStream()>>>(
      rows, width, aDtype, a, lseADtype, lseA, bDtype, b, lseBDtype, lseB,
      outDtype, out, lseDtype, lse);
  return launched("attention_merge kernel");
}

} // namespace dtc::cuda
