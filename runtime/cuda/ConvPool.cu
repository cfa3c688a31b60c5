//===- ConvPool.cu - Convolution and pooling, forward and backward --------===//
//
// dtc.conv, dtc.max_pool, dtc.avg_pool and their gradients; the CPU kernels
// (runtime/cpu/ConvPool.cpp, runtime/cpu/Gradient.cpp) are the reference.
// N-d windows throughout, padding reads zeros for conv and is no part of any
// pooling window. No float atomics, so results are deterministic:
// - conv: im2col into a column matrix [c * window, positions] per image,
//   then one cuBLASLt GEMM per group (or per image) with the group's filters,
//   and the bias in an epilogue. bf16/f16 operands of one dtype stay in it,
//   others go to f32.
// - conv_grad_input, max_pool_grad, avg_pool_grad: one thread per input
//   element gathers the windows that read it. Walking the window taps
//   backwards visits those windows in increasing output position, so every
//   element sums its terms in the CPU kernel's order (output channels, then
//   output positions); max_pool_grad first finds each window's maximum.
// - conv_grad_weight: one block per weight element sums the batch and the
//   output positions in double (as the CPU does), reduced in a fixed tree.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaCommon.cuh"

namespace dtc::cuda {

namespace {

constexpr int kThreads = 256;

/// Elements of the spatial extents `dims` (rank `rank`).
__host__ __device__ __forceinline__ int64_t product(const int64_t *dims,
                                                    int rank) {
  int64_t n = 1;
  for (int d = 0; d < rank; ++d)
    n *= dims[d];
  return n;
}

/// Splits the flat row-major index `flat` over `dims` into `coords`.
__device__ __forceinline__ void unflatten(int64_t flat, const int64_t *dims,
                                          int rank, int64_t *coords) {
  for (int d = rank - 1; d >= 0; --d) {
    coords[d] = flat % dims[d];
    flat /= dims[d];
  }
}

/// A window's taps, output positions and input positions (per plane).
struct WindowSizes {
  int64_t taps, positions, inPlane;
};
__host__ __device__ __forceinline__ WindowSizes sizesOf(const Window &w) {
  return {product(w.kernel, w.rank), product(w.out, w.rank),
          product(w.in, w.rank)};
}

/// The window at flat output position `p`: the input position each of its
/// taps reads.
struct WindowAt {
  __device__ __forceinline__ WindowAt(const Window &w, int64_t p) : w(w) {
    unflatten(p, w.out, w.rank, o);
  }

  /// The flat spatial input position that tap `t` reads, or -1 in the
  /// padding.
  __device__ __forceinline__ int64_t tap(int64_t t) const {
    int64_t flat = 0, scale = 1;
    bool inside = true;
    for (int d = w.rank - 1; d >= 0; --d) {
      int64_t k = t % w.kernel[d];
      t /= w.kernel[d];
      int64_t pos = o[d] * w.stride[d] + k * w.dilation[d] - w.padBegin[d];
      inside = inside && pos >= 0 && pos < w.in[d];
      flat += pos * scale;
      scale *= w.in[d];
    }
    return inside ? flat : -1;
  }

  const Window &w;
  int64_t o[kMaxRank];
};

/// Flat input position `x` of a plane: the windows that read it.
struct InputAt {
  __device__ __forceinline__ InputAt(const Window &w, int64_t x) : w(w) {
    unflatten(x, w.in, w.rank, coords);
  }

  /// The flat output position whose window reads this input position
  /// through tap `t`, or -1 when none does.
  __device__ __forceinline__ int64_t windowOf(int64_t t) const {
    int64_t flat = 0, scale = 1;
    for (int d = w.rank - 1; d >= 0; --d) {
      int64_t tap = t % w.kernel[d];
      t /= w.kernel[d];
      int64_t at = coords[d] + w.padBegin[d] - tap * w.dilation[d];
      if (at < 0 || at % w.stride[d])
        return -1;
      int64_t o = at / w.stride[d];
      if (o >= w.out[d])
        return -1;
      flat += o * scale;
      scale *= w.out[d];
    }
    return flat;
  }

  const Window &w;
  int64_t coords[kMaxRank];
};

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

/// col [images, c * taps, positions] (dtype colDtype) from x [n, c, in...]
/// starting at image `first`.
__global__ void im2colKernel(Window w, int64_t channels, int64_t first,
                             int64_t images, const void *x, int xDtype,
                             void *col, int colDtype) {
  auto [taps, positions, inPlane] = sizesOf(w);
  int64_t total = images * channels * taps * positions;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = i % positions, row = i / positions;
    int64_t t = row % taps, plane = first * channels + row / taps;
    int64_t pos = WindowAt(w, p).tap(t);
    float v = pos < 0 ? 0.0f : loadF(x, xDtype, plane * inPlane + pos);
    storeF(col, colDtype, i, v);
  }
}

/// out = y (+ bias per filter), y f32 [n, f, positions].
__global__ void convEpilogueKernel(const float *y, int64_t total,
                                   int64_t filters, int64_t positions,
                                   const void *bias, int biasDtype, void *out,
                                   int outDtype) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    float v = y[i];
    if (bias)
      v += loadF(bias, biasDtype, i / positions % filters);
    storeF(out, outDtype, i, v);
  }
}

/// dx [n, c, in...]: per element, the group's filters in order, each over
/// the output positions whose windows read it, in increasing order.
__global__ void convGradInputKernel(Conv c, const void *dy, int dyDtype,
                                    const void *wt, int wDtype, void *out,
                                    int outDtype) {
  const Window &w = c.window;
  auto [taps, positions, inPlane] = sizesOf(w);
  int64_t cPerGroup = c.channels / c.groups, fPerGroup = c.filters / c.groups;
  int64_t total = c.batch * c.channels * inPlane;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t plane = i / inPlane, b = plane / c.channels,
            ch = plane % c.channels;
    int64_t g = ch / cPerGroup, cg = ch % cPerGroup;
    InputAt input(w, i % inPlane);
    float acc = 0.0f;
    for (int64_t f = g * fPerGroup; f < (g + 1) * fPerGroup; ++f) {
      int64_t gradBase = (b * c.filters + f) * positions;
      int64_t kernelBase = (f * cPerGroup + cg) * taps;
      for (int64_t t = taps - 1; t >= 0; --t) {
        int64_t o = input.windowOf(t);
        if (o >= 0)
          acc += __fmul_rn(loadF(dy, dyDtype, gradBase + o),
                           loadF(wt, wDtype, kernelBase + t));
      }
    }
    storeF(out, outDtype, i, acc);
  }
}

/// dw [f, c / groups, k...]: one block per element, the batch and the output
/// positions split over its threads, summed in double.
__global__ void convGradWeightKernel(Conv c, const void *x, int xDtype,
                                     const void *dy, int dyDtype, void *out,
                                     int outDtype) {
  const Window &w = c.window;
  auto [taps, positions, inPlane] = sizesOf(w);
  int64_t cPerGroup = c.channels / c.groups, fPerGroup = c.filters / c.groups;
  int64_t total = c.filters * cPerGroup * taps;
  int64_t terms = c.batch * positions;
  // Every thread of a block runs the same iterations (blockSum syncs).
  for (int64_t e = blockIdx.x; e < total; e += gridDim.x) {
    int64_t t = e % taps, kernelIdx = e / taps;
    int64_t f = kernelIdx / cPerGroup, cg = kernelIdx % cPerGroup;
    int64_t ch = f / fPerGroup * cPerGroup + cg;
    double acc = 0.0;
    for (int64_t r = threadIdx.x; r < terms; r += blockDim.x) {
      int64_t b = r / positions, p = r % positions;
      int64_t pos = WindowAt(w, p).tap(t);
      if (pos >= 0)
        acc += static_cast<double>(
                   loadF(dy, dyDtype, (b * c.filters + f) * positions + p)) *
               loadF(x, xDtype, (b * c.channels + ch) * inPlane + pos);
    }
    acc = blockSum(acc);
    if (threadIdx.x == 0)
      storeF(out, outDtype, e, static_cast<float>(acc));
  }
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

/// One thread per output element: the maximum (a NaN wins, an all-padding
/// window is -inf) or the mean in double.
template <bool Max>
__global__ void poolKernel(Window w, int64_t planes, bool includePad,
                           const void *x, int xDtype, void *out, int outDtype) {
  auto [taps, positions, inPlane] = sizesOf(w);
  int64_t total = planes * positions;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = i / positions * inPlane;
    WindowAt window(w, i % positions);
    float best = -INFINITY;
    double sum = 0;
    int64_t inside = 0;
    for (int64_t t = 0; t < taps; ++t) {
      int64_t pos = window.tap(t);
      if (pos < 0)
        continue;
      ++inside;
      float v = loadF(x, xDtype, base + pos);
      if constexpr (Max)
        best = v > best || v != v ? v : best;
      else
        sum += v;
    }
    if constexpr (Max)
      storeF(out, outDtype, i, best);
    else
      storeF(out, outDtype, i,
             static_cast<float>(
                 sum / static_cast<double>(includePad ? taps : inside)));
  }
}

/// Per window, the flat spatial position of its first maximum in window
/// order (a NaN is a maximum), or -1 when it lies in the padding.
__global__ void poolArgmaxKernel(Window w, int64_t planes, const void *x,
                                 int xDtype, int64_t *argmax) {
  auto [taps, positions, inPlane] = sizesOf(w);
  int64_t total = planes * positions;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = i / positions * inPlane;
    WindowAt window(w, i % positions);
    int64_t best = -1;
    float bestValue = 0.0f;
    for (int64_t t = 0; t < taps; ++t) {
      int64_t pos = window.tap(t);
      if (pos < 0)
        continue;
      float v = loadF(x, xDtype, base + pos);
      if (best < 0 || v > bestValue || (v != v && bestValue == bestValue)) {
        best = pos;
        bestValue = v;
      }
    }
    argmax[i] = best;
  }
}

/// Per window, 1 / its divisor: all taps, or those inside the input (0 when
/// there are none).
__global__ void poolScaleKernel(Window w, bool includePad, float *scale) {
  int64_t taps = product(w.kernel, w.rank), positions = product(w.out, w.rank);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       i < positions; i += int64_t(gridDim.x) * blockDim.x) {
    WindowAt window(w, i);
    int64_t inside = 0;
    for (int64_t t = 0; t < taps; ++t)
      inside += window.tap(t) >= 0;
    int64_t divisor = includePad ? taps : inside;
    scale[i] = divisor ? 1.0f / static_cast<float>(divisor) : 0.0f;
  }
}

/// dx per input element: the gradients of the windows that read it (max:
/// those whose maximum it is; avg: scaled), in increasing window order.
template <bool Max>
__global__ void poolGradKernel(Window w, int64_t planes, const int64_t *argmax,
                               const float *scale, const void *dy, int dyDtype,
                               void *out, int outDtype) {
  auto [taps, positions, inPlane] = sizesOf(w);
  int64_t total = planes * inPlane;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = i / inPlane * positions, self = i % inPlane;
    InputAt input(w, self);
    float acc = 0.0f;
    for (int64_t t = taps - 1; t >= 0; --t) {
      int64_t o = input.windowOf(t);
      if (o < 0)
        continue;
      if constexpr (Max) {
        if (argmax[base + o] == self)
          acc += loadF(dy, dyDtype, base + o);
      } else {
        acc += __fmul_rn(loadF(dy, dyDtype, base + o), scale[o]);
      }
    }
    storeF(out, outDtype, i, acc);
  }
}

} // namespace

std::string conv(const Conv &c, int xDtype, const void *x, int wDtype,
                 const void *w, int biasDtype, const void *bias, int outDtype,
                 void *out) {
  const Window &win = c.window;
  int64_t taps = product(win.kernel, win.rank);
  int64_t positions = product(win.out, win.rank);
  int64_t cPerGroup = c.channels / c.groups, fPerGroup = c.filters / c.groups;
  int64_t kdim = cPerGroup * taps, total = c.batch * c.filters * positions;
  if (total == 0)
    return "";
  cudaStream_t stream = computeStream();
  // Operands of one half-precision dtype multiply in it (exact products,
  // f32 accumulation either way); any other mix in f32.
  int abDtype =
      xDtype == wDtype && (xDtype == kBF16 || xDtype == kF16) ? xDtype : kF32;
  size_t abSize = abDtype == kF32 ? 4 : 2;
  const void *weight = w;
  Scratch wideW(wDtype == abDtype ? 0 : c.filters * kdim * sizeof(float));
  if (wDtype != abDtype) {
    if (!wideW)
      return "conv: out of device memory";
    if (std::string e =
            cast(wDtype, w, kF32, wideW.as<void>(), c.filters * kdim);
        !e.empty())
      return e;
    weight = wideW.as<void>();
  }
  // The GEMMs write f32 straight into an f32 result.
  bool direct = outDtype == kF32;
  Scratch wideY(direct ? 0 : total * sizeof(float));
  if (!direct && !wideY)
    return "conv: out of device memory";
  float *y = direct ? static_cast<float *>(out) : wideY.as<float>();

  if (kdim == 0) {
    if (cudaError_t err = cudaMemsetAsync(y, 0, total * sizeof(float), stream))
      return failure("conv", err);
  } else {
    // 1x1 windows at unit stride without padding read the input as is.
    bool plain = taps == 1 && xDtype == abDtype;
    for (int d = 0; plain && d < win.rank; ++d)
      plain =
          win.stride[d] == 1 && win.padBegin[d] == 0 && win.out[d] == win.in[d];
    int64_t perImage = c.channels * taps * positions;
    // Column matrices of up to ~256 MiB at a time.
    int64_t chunk =
        plain ? c.batch
              : std::clamp<int64_t>((int64_t(256) << 20) /
                                        std::max<int64_t>(perImage * abSize, 1),
                                    1, c.batch);
    Scratch col(plain ? 0 : chunk * perImage * abSize);
    if (!plain && !col)
      return "conv: out of device memory";
    for (int64_t first = 0; first < c.batch; first += chunk) {
      int64_t images = std::min(chunk, c.batch - first);
      const char *colData;
      if (plain) {
        colData = static_cast<const char *>(x) + first * perImage * abSize;
      } else {
        im2colKernel<<<blocksFor(images * perImage, kThreads), kThreads, 0,
                       stream>>>(win, c.channels, first, images, x, xDtype,
                                 col.as<void>(), abDtype);
        if (std::string e = launched("conv im2col"); !e.empty())
          return e;
        colData = col.as<const char>();
      }
      Gemm g;
      g.m = fPerGroup;
      g.n = positions;
      g.k = kdim;
      g.abDtype = abDtype;
      g.cDtype = kF32;
      g.lda = kdim;
      g.ldb = positions;
      g.ldc = positions;
      // One strided-batched GEMM per group over the images, or per image
      // over the groups, whichever is fewer.
      bool perGroup = c.groups <= images;
      int64_t launches = perGroup ? c.groups : images;
      for (int64_t l = 0; l < launches; ++l) {
        int64_t group = perGroup ? l : 0, image = perGroup ? 0 : l;
        g.batch = perGroup ? images : c.groups;
        g.a = static_cast<const char *>(weight) +
              group * fPerGroup * kdim * abSize;
        g.strideA = perGroup ? 0 : fPerGroup * kdim;
        g.b = colData + (image * perImage + group * kdim * positions) * abSize;
        g.strideB = perGroup ? perImage : kdim * positions;
        g.c = y + ((first + image) * c.filters + group * fPerGroup) * positions;
        g.strideC = perGroup ? c.filters * positions : fPerGroup * positions;
        if (std::string e = gemm(g); !e.empty())
          return e;
      }
    }
  }
  if (!bias && direct)
    return "";
  convEpilogueKernel<<<blocksFor(total, kThreads), kThreads, 0, stream>>>(
      y, total, c.filters, positions, bias, biasDtype, out, outDtype);
  return launched("conv bias");
}

std::string convGradInput(const Conv &c, int dyDtype, const void *dy,
                          int wDtype, const void *w, int outDtype, void *out) {
  int64_t total = c.batch * c.channels * product(c.window.in, c.window.rank);
  if (total == 0)
    return "";
  convGradInputKernel<<<blocksFor(total, kThreads), kThreads, 0,
                        computeStream()>>>(c, dy, dyDtype, w, wDtype, out,
                                           outDtype);
  return launched("conv_grad_input");
}

std::string convGradWeight(const Conv &c, int xDtype, const void *x,
                           int dyDtype, const void *dy, int outDtype,
                           void *out) {
  const Window &w = c.window;
  int64_t total =
      c.filters * (c.channels / c.groups) * product(w.kernel, w.rank);
  if (total == 0)
    return "";
  // Threads per block: enough for the terms, a multiple of the warp size.
  int64_t terms = c.batch * product(w.out, w.rank);
  int threads = static_cast<int>(std::min<int64_t>(
      kThreads, std::max<int64_t>(32, (terms + 31) / 32 * 32)));
  unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>(total, int64_t(65535) * 64));
  convGradWeightKernel<<<blocks, threads, 0, computeStream()>>>(
      c, x, xDtype, dy, dyDtype, out, outDtype);
  return launched("conv_grad_weight");
}

std::string pool(bool max, bool includePad, const Window &w, int64_t planes,
                 int xDtype, const void *x, int outDtype, void *out) {
  int64_t total = planes * product(w.out, w.rank);
  if (total == 0)
    return "";
  unsigned blocks = blocksFor(total, kThreads);
  if (max)
    poolKernel<true><<<blocks, kThreads, 0, computeStream()>>>(
        w, planes, includePad, x, xDtype, out, outDtype);
  else
    poolKernel<false><<<blocks, kThreads, 0, computeStream()>>>(
        w, planes, includePad, x, xDtype, out, outDtype);
  return launched(max ? "max_pool" : "avg_pool");
}

std::string maxPoolGrad(const Window &w, int64_t planes, int xDtype,
                        const void *x, int dyDtype, const void *dy,
                        int outDtype, void *out) {
  int64_t windows = planes * product(w.out, w.rank);
  int64_t total = planes * product(w.in, w.rank);
  if (total == 0)
    return "";
  cudaStream_t stream = computeStream();
  Scratch argmax(windows * sizeof(int64_t));
  if (!argmax)
    return "max_pool_grad: out of device memory";
  if (windows) {
    poolArgmaxKernel<<<blocksFor(windows, kThreads), kThreads, 0, stream>>>(
        w, planes, x, xDtype, argmax.as<int64_t>());
    if (std::string e = launched("max_pool_grad"); !e.empty())
      return e;
  }
  poolGradKernel<true><<<blocksFor(total, kThreads), kThreads, 0, stream>>>(
      w, planes, argmax.as<int64_t>(), nullptr, dy, dyDtype, out, outDtype);
  return launched("max_pool_grad");
}

std::string avgPoolGrad(const Window &w, int64_t planes, bool includePad,
                        int dyDtype, const void *dy, int outDtype, void *out) {
  int64_t positions = product(w.out, w.rank);
  int64_t total = planes * product(w.in, w.rank);
  if (total == 0)
    return "";
  cudaStream_t stream = computeStream();
  Scratch scale(positions * sizeof(float));
  if (!scale)
    return "avg_pool_grad: out of device memory";
  if (positions) {
    poolScaleKernel<<<blocksFor(positions, kThreads), kThreads, 0, stream>>>(
        w, includePad, scale.as<float>());
    if (std::string e = launched("avg_pool_grad"); !e.empty())
      return e;
  }
  poolGradKernel<false><<<blocksFor(total, kThreads), kThreads, 0, stream>>>(
      w, planes, nullptr, scale.as<float>(), dy, dyDtype, out, outDtype);
  return launched("avg_pool_grad");
}

} // namespace dtc::cuda
