//===- Reduce.cu - reductions, running sums and the selective scan --------===//
//
// reduce_sum / reduce_mean / reduce_max: [outer, count, inner] -> [outer,
// inner]. Long reductions over few outputs
// run in two passes (partials per chunk of `count`, then the partials), so
// the whole device works on them. Accumulation is f32 for f32/bf16/f16
// (like the CPU kernel), f64 for f64, int64 for integers; the order is fixed
// by the launch shape, so results repeat run to run. cumsum and
// selective_scan run each line's positions in order on one thread.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaCommon.cuh"

namespace dtc::cuda {

namespace {

template <typename Acc>
__device__ Acc loadAcc(const void *p, int dtype, int64_t i);
template <>
__device__ float loadAcc<float>(const void *p, int dtype, int64_t i) {
  return loadF(p, dtype, i);
}
template <>
__device__ double loadAcc<double>(const void *p, int dtype, int64_t i) {
  return loadD(p, dtype, i);
}
template <>
__device__ int64_t loadAcc<int64_t>(const void *p, int dtype, int64_t i) {
  return loadI(p, dtype, i);
}

template <typename Acc>
__device__ void storeAcc(void *p, int dtype, int64_t i, Acc v) {
  if constexpr (std::is_same_v<Acc, int64_t>)
    storeI(p, dtype, i, v);
  else
    storeD(p, dtype, i, static_cast<double>(v));
}

template <typename Acc> __device__ Acc initAcc(Reduce kind) {
  if (kind != Reduce::Max)
    return Acc(0);
  if constexpr (std::is_same_v<Acc, int64_t>)
    return INT64_MIN;
  else
    return -INFINITY;
}

template <typename Acc>
__device__ __forceinline__ Acc combine(Reduce kind, Acc acc, Acc v) {
  if (kind != Reduce::Max)
    return acc + v;
  if constexpr (!std::is_same_v<Acc, int64_t>)
    if (v != v || acc != acc)
      return v != v ? v : acc;
  return v > acc ? v : acc;
}

template <typename Acc>
__device__ Acc finishAcc(Reduce kind, Acc acc, bool finish, int64_t divisor) {
  if (finish && kind == Reduce::Mean)
    return acc / static_cast<Acc>(divisor);
  return acc;
}

/// inner == 1: one block per (outer, chunk) row, a tree over the block.
template <typename Acc>
__global__ void reduceRows(Reduce kind, int inDtype, const void *in,
                           int outDtype, void *out, int64_t rows, int64_t count,
                           int64_t chunks, int64_t chunkLen, bool finish,
                           int64_t divisor) {
  __shared__ Acc partial[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t o = r / chunks, c = r % chunks;
    int64_t begin = c * chunkLen;
    int64_t end = begin + chunkLen < count ? begin + chunkLen : count;
    Acc acc = initAcc<Acc>(kind);
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x)
      acc = combine(kind, acc, loadAcc<Acc>(in, inDtype, o * count + j));
    for (int s = 16; s > 0; s >>= 1)
      acc = combine(kind, acc, __shfl_xor_sync(0xffffffffu, acc, s));
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();
    if (lane == 0)
      partial[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      Acc total = initAcc<Acc>(kind);
      for (int w = 0; w < int(blockDim.x >> 5); ++w)
        total = combine(kind, total, partial[w]);
      storeAcc<Acc>(out, outDtype, r, finishAcc(kind, total, finish, divisor));
    }
  }
}

/// inner > 1: one thread per (outer, chunk, inner) output, reading
/// coalesced along inner.
template <typename Acc>
__global__ void reduceColumns(Reduce kind, int inDtype, const void *in,
                              int outDtype, void *out, int64_t outer,
                              int64_t count, int64_t inner, int64_t chunks,
                              int64_t chunkLen, bool finish, int64_t divisor) {
  int64_t n = outer * chunks * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < n;
       t += int64_t(gridDim.x) * blockDim.x) {
    int64_t i = t % inner, c = t / inner % chunks, o = t / inner / chunks;
    int64_t begin = c * chunkLen;
    int64_t end = begin + chunkLen < count ? begin + chunkLen : count;
    Acc acc = initAcc<Acc>(kind);
    for (int64_t j = begin; j < end; ++j)
      acc = combine(kind, acc,
                    loadAcc<Acc>(in, inDtype, (o * count + j) * inner + i));
    storeAcc<Acc>(out, outDtype, t, finishAcc(kind, acc, finish, divisor));
  }
}

template <typename Acc>
std::string reduceAs(Reduce kind, int dtype, int accDtype, const void *in,
                     void *out, int64_t outer, int64_t count, int64_t inner) {
  cudaStream_t s = computeStream();
  constexpr int64_t kTargetOutputs = 1 << 16;
  int64_t outputs = outer * inner;
  // Split long reductions when there are too few outputs to fill the GPU.
  int64_t chunks = 1;
  if (outputs < kTargetOutputs && count >= 4096)
    chunks = std::min<int64_t>((count + 1023) / 1024,
                               std::max<int64_t>(1, kTargetOutputs / outputs));
  int64_t chunkLen = (count + chunks - 1) / std::max<int64_t>(chunks, 1);
  if (count > 0)
    chunks = (count + chunkLen - 1) / chunkLen;
  if (chunks <= 1) {
    if (inner == 1)
      reduceRows<Acc><<<blocksFor(outer * 256), 256, 0, s>>>(
          kind, dtype, in, dtype, out, outer, count, 1, count, true, count);
    else
      reduceColumns<Acc><<<blocksFor(outputs), 256, 0, s>>>(
          kind, dtype, in, dtype, out, outer, count, inner, 1, count, true,
          count);
    return launched("reduce kernel");
  }
  Scratch partial(outer * chunks * inner * sizeof(Acc));
  if (!partial)
    return "reduce: out of device memory";
  if (inner == 1)
    reduceRows<Acc><<<blocksFor(outer * chunks * 256), 256, 0, s>>>(
        kind, dtype, in, accDtype, partial.as<void>(), outer * chunks, count,
        chunks, chunkLen, false, count);
  else
    reduceColumns<Acc><<<blocksFor(outer * chunks * inner), 256, 0, s>>>(
        kind, dtype, in, accDtype, partial.as<void>(), outer, count, inner,
        chunks, chunkLen, false, count);
  if (std::string e = launched("reduce kernel"); !e.empty())
    return e;
  if (inner == 1)
    reduceRows<Acc><<<blocksFor(outer * 256), 256, 0, s>>>(
        kind, accDtype, partial.as<void>(), dtype, out, outer, chunks, 1,
        chunks, true, count);
  else
    reduceColumns<Acc><<<blocksFor(outputs), 256, 0, s>>>(
        kind, accDtype, partial.as<void>(), dtype, out, outer, chunks, inner, 1,
        chunks, true, count);
  return launched("reduce kernel");
}

} // namespace

std::string reduce(Reduce kind, int dtype, const void *in, void *out,
                   int64_t outer, int64_t count, int64_t inner) {
  if (outer * inner == 0)
    return "";
  switch (dtype) {
  case kF64:
    return reduceAs<double>(kind, dtype, kF64, in, out, outer, count, inner);
  case kI64:
  case kI32:
  case kI8:
    return reduceAs<int64_t>(kind, dtype, kI64, in, out, outer, count, inner);
  case kF32:
  case kBF16:
  case kF16:
    return reduceAs<float>(kind, dtype, kF32, in, out, outer, count, inner);
  default:
    return "reduce: unsupported dtype";
  }
}

namespace {

/// One thread per line of the scan: lines are independent and short (a
/// sequence of positions), so the sum runs in order, as the CPU kernel's.
template <typename Acc>
__global__ void cumSumKernel(int dtype, const void *in, void *out,
                             int64_t outer, int64_t length, int64_t inner,
                             bool exclusive, bool reverse) {
  for (int64_t line = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       line < outer * inner; line += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = (line / inner) * length * inner + line % inner;
    Acc acc = 0;
    for (int64_t step = 0; step < length; ++step) {
      int64_t at = base + (reverse ? length - 1 - step : step) * inner;
      Acc value;
      if constexpr (std::is_same_v<Acc, int64_t>)
        value = loadI(in, dtype, at);
      else
        value = static_cast<Acc>(loadD(in, dtype, at));
      if (!exclusive)
        acc += value;
      if constexpr (std::is_same_v<Acc, int64_t>)
        storeI(out, dtype, at, acc);
      else
        storeD(out, dtype, at, static_cast<double>(acc));
      if (exclusive)
        acc += value;
    }
  }
}

} // namespace

std::string cumSum(int dtype, const void *in, void *out, int64_t outer,
                   int64_t length, int64_t inner, bool exclusive,
                   bool reverse) {
  int64_t lines = outer * inner;
  if (lines == 0 || length == 0)
    return "";
  cudaStream_t s = computeStream();
  switch (dtype) {
  case kF64:
    cumSumKernel<double><<<blocksFor(lines), 256, 0, s>>>(
        dtype, in, out, outer, length, inner, exclusive, reverse);
    break;
  case kI64:
  case kI32:
    cumSumKernel<int64_t><<<blocksFor(lines), 256, 0, s>>>(
        dtype, in, out, outer, length, inner, exclusive, reverse);
    break;
  case kF32:
  case kBF16:
  case kF16:
    cumSumKernel<float><<<blocksFor(lines), 256, 0, s>>>(
        dtype, in, out, outer, length, inner, exclusive, reverse);
    break;
  default:
    return "cumsum: unsupported dtype";
  }
  return launched("cumsum kernel");
}

namespace {

/// One thread per (batch, channel) line: its state (at most
/// kMaxScanState floats) runs over the positions in order, summed against
/// c into y at each, as the CPU kernel's.
constexpr int64_t kMaxScanState = 256;

__global__ void selectiveScanKernel(int dtype, const void *a, const void *x,
                                    const void *c, void *y, int64_t lines,
                                    int64_t channels, int64_t length,
                                    int64_t state) {
  float h[kMaxScanState];
  for (int64_t line = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       line < lines; line += int64_t(gridDim.x) * blockDim.x) {
    int64_t b = line / channels;
    for (int64_t n = 0; n < state; ++n)
      h[n] = 0;
    for (int64_t t = 0; t < length; ++t) {
      int64_t at = (line * length + t) * state, ct = (b * length + t) * state;
      float acc = 0;
      for (int64_t n = 0; n < state; ++n) {
        h[n] = loadF(a, dtype, at + n) * h[n] + loadF(x, dtype, at + n);
        acc += h[n] * loadF(c, dtype, ct + n);
      }
      storeF(y, dtype, line * length + t, acc);
    }
  }
}

/// The gradient's first pass: one thread per (line, state) element writes
/// its states h_t into `hs` (a_grad's buffer).
__global__ void scanStatesKernel(int dtype, const void *a, const void *x,
                                 void *hs, int64_t elements, int64_t length,
                                 int64_t state) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t line = i / state, n = i % state;
    float h = 0;
    for (int64_t t = 0; t < length; ++t) {
      int64_t at = (line * length + t) * state + n;
      h = loadF(a, dtype, at) * h + loadF(x, dtype, at);
      storeF(hs, dtype, at, h);
    }
  }
}

/// c_grad[b, t, n] = sum over the channels of grad[b, d, t] * h[b, d, t, n],
/// in channel order: one thread per (b, t, n).
__global__ void scanCGradKernel(int dtype, const void *hs, const void *dy,
                                void *dc, int64_t elements, int64_t channels,
                                int64_t length, int64_t state) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t n = i % state, t = (i / state) % length, b = i / (state * length);
    float acc = 0;
    for (int64_t d = 0; d < channels; ++d) {
      int64_t line = b * channels + d;
      acc += loadF(dy, dtype, line * length + t) *
             loadF(hs, dtype, (line * length + t) * state + n);
    }
    storeF(dc, dtype, i, acc);
  }
}

/// The recurrence backwards in time, one thread per (line, state) element:
/// x_grad_t = grad_t * c_t + a_{t+1} * x_grad_{t+1}, a_grad_t = x_grad_t *
/// h_{t-1}, written over h_t after h_{t-1} is read.
__global__ void scanReverseKernel(int dtype, const void *a, const void *c,
                                  const void *dy, void *hs, void *dx,
                                  int64_t elements, int64_t channels,
                                  int64_t length, int64_t state) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < elements;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t line = i / state, n = i % state, b = line / channels;
    float carry = 0;
    for (int64_t t = length - 1; t >= 0; --t) {
      int64_t at = (line * length + t) * state + n;
      float total = loadF(dy, dtype, line * length + t) *
                        loadF(c, dtype, (b * length + t) * state + n) +
                    carry;
      storeF(dx, dtype, at, total);
      float previous = t ? loadF(hs, dtype, at - state) : 0.0f;
      storeF(hs, dtype, at, total * previous);
      carry = loadF(a, dtype, at) * total;
    }
  }
}

} // namespace

std::string selectiveScan(int dtype, const void *a, const void *x,
                          const void *c, void *y, int64_t batch,
                          int64_t channels, int64_t length, int64_t state) {
  int64_t lines = batch * channels;
  if (lines == 0 || length == 0)
    return "";
  if (state > kMaxScanState)
    return "selective_scan: state size above 256";
  selectiveScanKernel<<<blocksFor(lines, 128), 128, 0, computeStream()>>>(
      dtype, a, x, c, y, lines, channels, length, state);
  return launched("selective_scan kernel");
}

std::string selectiveScanGrad(int dtype, const void *a, const void *x,
                              const void *c, const void *dy, void *da, void *dx,
                              void *dc, int64_t batch, int64_t channels,
                              int64_t length, int64_t state) {
  int64_t elements = batch * channels * state;
  if (elements == 0 || length == 0)
    return "";
  cudaStream_t s = computeStream();
  scanStatesKernel<<<blocksFor(elements), 256, 0, s>>>(dtype, a, x, da,
                                                       elements, length, state);
  int64_t cElements = batch * length * state;
  scanCGradKernel<<<blocksFor(cElements), 256, 0, s>>>(
      dtype, da, dy, dc, cElements, channels, length, state);
  scanReverseKernel<<<blocksFor(elements), 256, 0, s>>>(
      dtype, a, c, dy, da, dx, elements, channels, length, state);
  return launched("selective_scan_grad kernels");
}

} // namespace dtc::cuda
