//===- ConvPool.cpp - Convolution and pooling kernels ---------------------===//
//
// dtc.conv is im2col + sgemm per (image, group): the column matrix
// [c/groups * window, output positions] (1x1 unit-stride convolutions use
// the input directly) times the group's filters. Pairs are split across
// threads when there are enough of them, else rows of the column matrix and
// tiles of the product are. Pools are direct
// loops, parallel over output elements. N-d throughout; padding reads zeros
// for conv and is no part of any pooling window.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"

#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

/// Spatial geometry shared by conv and pools.
struct Window {
  int64_t spatialRank = 0;
  llvm::SmallVector<int64_t, 4> in, out, kernel, strides, dilations, padBegin;

  int64_t taps() const { return numElements(kernel); }
  int64_t outPositions() const { return numElements(out); }
};

/// Reads strides/dilations/pads (defaults 1, 1, 0) and checks that `out`
/// has the spatial extents they give.
llvm::Error readWindow(const KernelCall &call, const TensorRef &input,
                       const TensorRef &output, llvm::ArrayRef<int64_t> kernel,
                       Window &w) {
  int64_t k = input.rank() - 2;
  if (k < 1 || k > 8 || output.rank() != input.rank() ||
      static_cast<int64_t>(kernel.size()) != k)
    return call.error("input " + shapeString(input.shape) + ", kernel " +
                      shapeString(kernel) + " and result " +
                      shapeString(output.shape) + " have inconsistent ranks");
  llvm::ArrayRef<int64_t> strides = call.ints("strides");
  llvm::ArrayRef<int64_t> dilations = call.ints("dilations");
  llvm::ArrayRef<int64_t> pads = call.ints("pads");
  if ((!strides.empty() && static_cast<int64_t>(strides.size()) != k) ||
      (!dilations.empty() && static_cast<int64_t>(dilations.size()) != k) ||
      (!pads.empty() && static_cast<int64_t>(pads.size()) != 2 * k))
    return call.error("strides, dilations and pads need " + llvm::Twine(k) +
                      ", " + llvm::Twine(k) + " and " + llvm::Twine(2 * k) +
                      " entries");
  w.spatialRank = k;
  for (int64_t i = 0; i < k; ++i) {
    int64_t stride = strides.empty() ? 1 : strides[i];
    int64_t dilation = dilations.empty() ? 1 : dilations[i];
    int64_t begin = pads.empty() ? 0 : pads[i];
    int64_t end = pads.empty() ? 0 : pads[k + i];
    int64_t x = input.shape[2 + i];
    if (stride < 1 || dilation < 1)
      return call.error("strides and dilations must be positive");
    int64_t o = (x + begin + end - dilation * (kernel[i] - 1) - 1) / stride + 1;
    if (output.shape[2 + i] != o)
      return call.error("spatial dim " + llvm::Twine(i) + " of the result " +
                        shapeString(output.shape) + " should be " +
                        llvm::Twine(o));
    w.in.push_back(x);
    w.out.push_back(o);
    w.kernel.push_back(kernel[i]);
    w.strides.push_back(stride);
    w.dilations.push_back(dilation);
    w.padBegin.push_back(begin);
  }
  return llvm::Error::success();
}

/// Fills `col` [channels * taps, outPositions] from `x` [channels, in...].
void im2col(const float *x, int64_t channels, const Window &w, float *col) {
  int64_t k = w.spatialRank, taps = w.taps(), positions = w.outPositions();
  int64_t inPlane = numElements(w.in);
  auto inStrides = stridesOf(w.in);
  int64_t lastOut = w.out[k - 1];
  int64_t outerPositions = positions / std::max<int64_t>(lastOut, 1);
  int64_t rows = channels * taps;
#pragma omp parallel for if (rows * positions >= kParallelElements)
  for (int64_t row = 0; row < rows; ++row) {
    int64_t c = row / taps, t = row % taps;
    int64_t tap[8];
    for (int64_t d = k - 1, rest = t; d >= 0; --d) {
      tap[d] = rest % w.kernel[d];
      rest /= w.kernel[d];
    }
    const float *plane = x + c * inPlane;
    float *dst = col + row * positions;
    for (int64_t op = 0; op < outerPositions; ++op) {
      // Offset and validity from every spatial dim but the last.
      int64_t off = 0;
      bool inside = true;
      for (int64_t d = k - 2, rest = op; d >= 0; --d) {
        int64_t o = rest % w.out[d];
        rest /= w.out[d];
        int64_t pos =
            o * w.strides[d] + tap[d] * w.dilations[d] - w.padBegin[d];
        inside = inside && pos >= 0 && pos < w.in[d];
        off += pos * inStrides[d];
      }
      float *line = dst + op * lastOut;
      if (!inside) {
        std::fill(line, line + lastOut, 0.0f);
        continue;
      }
      int64_t d = k - 1;
      int64_t start = tap[d] * w.dilations[d] - w.padBegin[d];
      for (int64_t o = 0; o < lastOut; ++o) {
        int64_t pos = start + o * w.strides[d];
        line[o] = pos >= 0 && pos < w.in[d] ? plane[off + pos] : 0.0f;
      }
    }
  }
}

llvm::Error convKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return err;
  const TensorRef &input = call.input(0);
  const TensorRef &weight = call.input(1);
  const TensorRef *bias = call.numInputs() > 2 ? &call.input(2) : nullptr;
  const TensorRef &out = call.output(0);
  for (auto [t, what] :
       {std::pair{&input, "input"}, std::pair{&weight, "weight"},
        std::pair{&out, "result"}})
    if (auto err = expectFloat(call, *t, what))
      return err;
  // Batch, channels and at least one spatial dim, read below before
  // readWindow checks the spatial ranks.
  if (input.rank() < 3 || weight.rank() != input.rank() ||
      out.rank() != input.rank())
    return call.error("input " + shapeString(input.shape) + ", weight " +
                      shapeString(weight.shape) + " and result " +
                      shapeString(out.shape) + " need one rank of at least 3");
  int64_t groups = call.i64("groups", 1);
  int64_t n = input.shape[0], c = input.shape[1];
  int64_t f = weight.shape[0], cPerGroup = weight.shape[1];
  if (groups < 1 || c % groups || f % groups || c / groups != cPerGroup ||
      out.shape[0] != n || out.shape[1] != f)
    return call.error("input " + shapeString(input.shape) + ", weight " +
                      shapeString(weight.shape) + " and result " +
                      shapeString(out.shape) +
                      " do not fit groups=" + llvm::Twine(groups));
  if (bias && bias->numElements() != f)
    return call.error("bias " + shapeString(bias->shape) + " does not have " +
                      llvm::Twine(f) + " elements");
  Window w;
  if (auto err =
          readWindow(call, input, out,
                     llvm::ArrayRef<int64_t>(weight.shape).drop_front(2), w))
    return err;
  if (out.numElements() == 0)
    return llvm::Error::success();

  int64_t fPerGroup = f / groups;
  int64_t taps = w.taps(), positions = w.outPositions();
  int64_t inPlane = numElements(w.in);
  int64_t kdim = cPerGroup * taps;
  bool direct = taps == 1 && positions == inPlane;
  for (int64_t i = 0; direct && i < w.spatialRank; ++i)
    direct = w.strides[i] == 1 && w.padBegin[i] == 0;
  F32In x(input), wt(weight);
  F32Out y(out);
  // Many (image, group) pairs run one per thread, each with its own column
  // buffer; otherwise each product is split into tiles. Either way every
  // product is computed tile by tile the same way.
  int64_t tasks = n * groups;
  bool perThread = tasks >= omp_get_max_threads() &&
                   tasks * fPerGroup * positions * kdim >= (1 << 18);
#pragma omp parallel if (perThread)
  {
    std::vector<float> col(direct ? 0 : kdim * positions);
#pragma omp for schedule(dynamic)
    for (int64_t task = 0; task < tasks; ++task) {
      int64_t b = task / groups, g = task % groups;
      const float *src = x.data() + (b * c + g * cPerGroup) * inPlane;
      const float *colData = src;
      if (!direct) {
        im2col(src, cPerGroup, w, col.data());
        colData = col.data();
      }
      float *dst = y.data() + (b * f + g * fPerGroup) * positions;
      parallelSgemm(false, false, fPerGroup, positions, kdim, 1.0f,
                    wt.data() + g * fPerGroup * kdim, kdim, colData, positions,
                    dst, positions);
    }
  }
  if (bias) {
    F32In bv(*bias);
    float *dst = y.data();
#pragma omp parallel for if (out.numElements() >= kParallelElements)
    for (int64_t plane = 0; plane < n * f; ++plane) {
      float v = bv[plane % f];
      for (int64_t p = 0; p < positions; ++p)
        dst[plane * positions + p] += v;
    }
  }
  y.commit();
  return llvm::Error::success();
}

enum class PoolKind { Max, Avg };

template <PoolKind Kind> llvm::Error poolKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &input = call.input(0);
  const TensorRef &out = call.output(0);
  if (auto err = expectFloat(call, input, "input"))
    return err;
  if (input.rank() < 3 || out.rank() != input.rank() ||
      out.shape[0] != input.shape[0] || out.shape[1] != input.shape[1])
    return call.error("result " + shapeString(out.shape) +
                      " does not match input " + shapeString(input.shape));
  Window w;
  if (auto err = readWindow(call, input, out, call.ints("kernel_shape"), w))
    return err;
  if (out.numElements() == 0)
    return llvm::Error::success();
  bool includePad = call.flag("count_include_pad");
  int64_t k = w.spatialRank, taps = w.taps(), positions = w.outPositions();
  int64_t inPlane = numElements(w.in);
  auto inStrides = stridesOf(w.in);
  F32In x(input);
  F32Out y(out);
  const float *src = x.data();
  float *dst = y.data();
  int64_t total = out.numElements();
#pragma omp parallel for if (total >= kParallelElements / 8)
  for (int64_t i = 0; i < total; ++i) {
    int64_t plane = i / positions, p = i % positions;
    int64_t o[8];
    for (int64_t d = k - 1, rest = p; d >= 0; --d) {
      o[d] = rest % w.out[d];
      rest /= w.out[d];
    }
    const float *base = src + plane * inPlane;
    float best = -std::numeric_limits<float>::infinity();
    double sum = 0;
    int64_t inside = 0;
    for (int64_t t = 0; t < taps; ++t) {
      int64_t off = 0;
      bool ok = true;
      for (int64_t d = k - 1, rest = t; d >= 0; --d) {
        int64_t tap = rest % w.kernel[d];
        rest /= w.kernel[d];
        int64_t pos =
            o[d] * w.strides[d] + tap * w.dilations[d] - w.padBegin[d];
        ok = ok && pos >= 0 && pos < w.in[d];
        off += pos * inStrides[d];
      }
      if (!ok)
        continue;
      ++inside;
      float v = base[off];
      if constexpr (Kind == PoolKind::Max)
        best = v > best || v != v ? v : best;
      else
        sum += v;
    }
    if constexpr (Kind == PoolKind::Max)
      dst[i] = best;
    else
      dst[i] = static_cast<float>(sum / (includePad ? taps : inside));
  }
  y.commit();
  return llvm::Error::success();
}

} // namespace

void registerConvPoolKernels(KernelRegistry &registry) {
  registry.add("dtc.conv", convKernel);
  registry.add("dtc.max_pool", poolKernel<PoolKind::Max>);
  registry.add("dtc.avg_pool", poolKernel<PoolKind::Avg>);
}

} // namespace dtc::runtime::cpu
