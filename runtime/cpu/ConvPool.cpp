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

#include "runtime/core/Window.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <cmath>
#include <limits>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

/// Fills `col` [channels * taps, outPositions] from `x` [channels, in...].
void im2col(const float *x, int64_t channels, const Window &w, float *col) {
  int64_t k = w.rank(), taps = w.taps(), positions = w.outPositions();
  int64_t inPlane = w.inPositions();
  auto inStrides = stridesOf(w.in);
  int64_t lastOut = w.out[k - 1];
  int64_t outerPositions = positions / std::max<int64_t>(lastOut, 1);
  int64_t rows = channels * taps;
  parallelFor(rows, positions, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t row = rangeBegin; row < rangeEnd; ++row) {
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
  });
}

llvm::Error convKernel(const KernelCall &call) {
  auto dims = readConv(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &input = call.input(0);
  const TensorRef &weight = call.input(1);
  const TensorRef *bias = call.numInputs() > 2 ? &call.input(2) : nullptr;
  const TensorRef &out = call.output(0);
  int64_t n = dims->batch, c = dims->channels, f = dims->filters;
  int64_t groups = dims->groups, cPerGroup = dims->channelsPerGroup();
  const Window &w = dims->window;
  if (out.numElements() == 0)
    return llvm::Error::success();

  int64_t fPerGroup = dims->filtersPerGroup();
  int64_t taps = w.taps(), positions = w.outPositions();
  int64_t inPlane = w.inPositions();
  int64_t kdim = cPerGroup * taps;
  // Each extent must match, not just their product: end pads of opposite
  // signs (+2 on one dim, -2 on another) keep the count but move rows.
  bool direct = taps == 1;
  for (int64_t i = 0; direct && i < w.rank(); ++i)
    direct = w.strides[i] == 1 && w.padBegin[i] == 0 && w.out[i] == w.in[i];
  F32In x(input), wt(weight);
  F32Out y(out);
  // Many (image, group) pairs run one per thread, each with its own column
  // buffer; otherwise each product is split into tiles. Either way every
  // product is computed tile by tile the same way.
  int64_t tasks = n * groups;
  auto product = [&](int64_t task, std::vector<float> &col) {
    int64_t b = task / groups, g = task % groups;
    const float *src = x.data() + (b * c + g * cPerGroup) * inPlane;
    const float *colData = src;
    if (!direct) {
      col.resize(kdim * positions);
      im2col(src, cPerGroup, w, col.data());
      colData = col.data();
    }
    float *dst = y.data() + (b * f + g * fPerGroup) * positions;
    parallelSgemm(false, false, fPerGroup, positions, kdim, 1.0f,
                  wt.data() + g * fPerGroup * kdim, kdim, colData, positions,
                  dst, positions);
  };
  if (tasks >= threadCount()) {
    parallelForTasksWithScratch<std::vector<float>>(
        tasks, fPerGroup * positions * kdim / kMacsPerWork, product);
  } else {
    std::vector<float> col;
    for (int64_t task = 0; task < tasks; ++task)
      product(task, col);
  }
  if (bias) {
    F32In bv(*bias);
    float *dst = y.data();
    parallelFor(n * f, positions, [&](int64_t rangeBegin, int64_t rangeEnd) {
      for (int64_t plane = rangeBegin; plane < rangeEnd; ++plane) {
        float v = bv[plane % f];
        for (int64_t p = 0; p < positions; ++p)
          dst[plane * positions + p] += v;
      }
    });
  }
  y.commit();
  return llvm::Error::success();
}

enum class PoolKind { Max, Avg };

template <PoolKind Kind> llvm::Error poolKernel(const KernelCall &call) {
  auto dims = readPool(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &input = call.input(0);
  const TensorRef &out = call.output(0);
  const Window &w = dims->window;
  if (out.numElements() == 0)
    return llvm::Error::success();
  bool includePad = call.flag("count_include_pad");
  int64_t k = w.rank(), taps = w.taps(), positions = w.outPositions();
  int64_t inPlane = w.inPositions();
  auto inStrides = stridesOf(w.in);
  F32In x(input);
  F32Out y(out);
  const float *src = x.data();
  float *dst = y.data();
  int64_t total = out.numElements();
  parallelFor(total, taps, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t i = rangeBegin; i < rangeEnd; ++i) {
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
  });
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
