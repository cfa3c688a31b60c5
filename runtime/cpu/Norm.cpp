//===- Norm.cpp - Softmax and normalization kernels -----------------------===//
//
// All three work on [outer, size, inner] views of their input: rows (inner
// == 1, the usual case) are split across threads, one row per thread at a
// time, so every output is computed by one thread in a fixed order.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"

#include "runtime/core/Normalization.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

/// Softmax of `size` values spaced `stride` apart, max-subtracted. The
/// contiguous case vectorizes (the lane order of the sums is fixed at compile
/// time, so results do not depend on the thread count).
inline void softmaxRow(const float *in, float *out, int64_t size,
                       int64_t stride) {
  float mx = -std::numeric_limits<float>::infinity();
  float sum = 0;
  if (stride == 1) {
#pragma omp simd reduction(max : mx)
    for (int64_t i = 0; i < size; ++i)
      mx = std::max(mx, in[i]);
#pragma omp simd reduction(+ : sum)
    for (int64_t i = 0; i < size; ++i) {
      float e = fastExp(in[i] - mx);
      out[i] = e;
      sum += e;
    }
  } else {
    for (int64_t i = 0; i < size; ++i)
      mx = std::max(mx, in[i * stride]);
    for (int64_t i = 0; i < size; ++i) {
      float e = fastExp(in[i * stride] - mx);
      out[i * stride] = e;
      sum += e;
    }
  }
  float inv = 1.0f / sum;
  for (int64_t i = 0; i < size; ++i)
    out[i * stride] *= inv;
}

llvm::Error softmaxKernel(const KernelCall &call) {
  llvm::Expected<NormalizedRows> rows = readSoftmax(call);
  if (!rows)
    return rows.takeError();
  const TensorRef &in = call.input(0), &out = call.output(0);
  int64_t size = rows->size, inner = rows->inner, outer = rows->outer;
  int64_t total = in.numElements();
  if (total == 0)
    return llvm::Error::success();
  F32In x(in);
  F32Out y(out);
  const float *src = x.data();
  float *dst = y.data();
  parallelFor(outer * inner, size * kWorkTranscendental,
              [&](int64_t begin, int64_t end) {
                for (int64_t task = begin; task < end; ++task) {
                  int64_t o = task / inner, i = task % inner;
                  softmaxRow(src + o * size * inner + i,
                             dst + o * size * inner + i, size, inner);
                }
              });
  y.commit();
  return llvm::Error::success();
}

/// layer_norm (rms == false) and rms_norm over the trailing dims from axis.
llvm::Error normKernel(const KernelCall &call, bool rms) {
  llvm::Expected<NormalizedRows> shape = readNorm(call, rms);
  if (!shape)
    return shape.takeError();
  const TensorRef &in = call.input(0), &weight = call.input(1),
                  &out = call.output(0);
  const TensorRef *bias = shape->bias ? &call.input(2) : nullptr;
  int64_t inner = shape->size;
  double eps = shape->epsilon;
  int64_t total = in.numElements();
  if (total == 0)
    return llvm::Error::success();
  int64_t rows = total / inner;
  F32In x(in), w(weight);
  std::vector<float> zeros;
  std::optional<F32In> b;
  if (bias)
    b.emplace(*bias);
  else
    zeros.assign(inner, 0.0f);
  const float *bp = bias ? b->data() : zeros.data();
  F32Out y(out);
  const float *src = x.data();
  const float *wp = w.data();
  float *dst = y.data();
  // Two reduction passes and the scaling: about four operations an element.
  parallelFor(rows, inner * 4, [&](int64_t firstRow, int64_t endRow) {
    for (int64_t r = firstRow; r < endRow; ++r) {
      const float *row = src + r * inner;
      float *o = dst + r * inner;
      // Two passes in f32 with vectorized (fixed lane order) sums.
      float mean = 0;
      if (!rms) {
#pragma omp simd reduction(+ : mean)
        for (int64_t i = 0; i < inner; ++i)
          mean += row[i];
        mean /= static_cast<float>(inner);
      }
      float var = 0;
#pragma omp simd reduction(+ : var)
      for (int64_t i = 0; i < inner; ++i) {
        float c = row[i] - mean;
        var += c * c;
      }
      var /= static_cast<float>(inner);
      float inv = static_cast<float>(1.0 / std::sqrt(double(var) + eps));
      float m = mean;
      for (int64_t i = 0; i < inner; ++i)
        o[i] = (row[i] - m) * inv * wp[i] + bp[i];
    }
  });
  y.commit();
  return llvm::Error::success();
}

llvm::Error layerNormKernel(const KernelCall &call) {
  return normKernel(call, /*rms=*/false);
}
llvm::Error rmsNormKernel(const KernelCall &call) {
  return normKernel(call, /*rms=*/true);
}

} // namespace

void registerNormKernels(KernelRegistry &registry) {
  registry.add("dtc.softmax", softmaxKernel);
  registry.add("dtc.layer_norm", layerNormKernel);
  registry.add("dtc.rms_norm", rmsNormKernel);
}

} // namespace dtc::runtime::cpu
