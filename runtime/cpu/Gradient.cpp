//===- Gradient.cpp - Gradient, compare and select kernels ----------------===//
//
// The kernels of the ops the autodiff pass emits. fp32 compute (other float
// dtypes convert on load and round on store), statistics in double. Every
// output element is written by one thread in a fixed order, so results do
// not depend on the thread count: sums that several outputs share (weight
// gradients, embedding rows) are split over the outputs they produce, never
// over the terms they add up. dtc.attention_grad is with the other attention
// kernels (RingAttention.cpp).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/DataMovement.h"
#include "runtime/core/Elementwise.h"
#include "runtime/core/Embedding.h"
#include "runtime/core/LossShards.h"
#include "runtime/core/Normalization.h"
#include "runtime/core/Window.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

using llvm::ArrayRef;
using llvm::Error;
using llvm::Expected;
using llvm::Twine;

/// The flat offset into an operand with broadcast `strides` of the result's
/// flat index `index` (result shape `shape`).
inline int64_t broadcastOffset(int64_t index, ArrayRef<int64_t> shape,
                               ArrayRef<int64_t> strides) {
  int64_t offset = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    offset += (index % shape[d]) * strides[d];
    index /= shape[d];
  }
  return offset;
}

//===----------------------------------------------------------------------===//
// compare, select
//===----------------------------------------------------------------------===//

/// Reads an element exactly as double (f64 and integers up to 2^53 too).
inline double loadAsDouble(const TensorRef &t, int64_t i) {
  if (t.dtype == DType::F64)
    return t.as<double>()[i];
  if (isFloat(t.dtype))
    return loadAsFloat(t, i);
  return static_cast<double>(loadAsInt(t, i));
}

Error compareKernel(const KernelCall &call) {
  Expected<Predicate> pred = readCompare(call);
  if (!pred)
    return pred.takeError();
  const TensorRef &lhs = call.input(0), &rhs = call.input(1),
                  &out = call.output(0);
  llvm::SmallVector<int64_t> lhsStrides, rhsStrides;
  if (!broadcastStrides(lhs.shape, out.shape, lhsStrides) ||
      !broadcastStrides(rhs.shape, out.shape, rhsStrides))
    return call.error("operands " + shapeString(lhs.shape) + " and " +
                      shapeString(rhs.shape) + " do not broadcast to " +
                      shapeString(out.shape));
  int64_t n = out.numElements();
  uint8_t *dst = out.as<uint8_t>();
  bool integer = !isFloat(lhs.dtype);
  ArrayRef<int64_t> shape = out.shape;
  parallelFor(n, kWorkDivide, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t i = rangeBegin; i < rangeEnd; ++i) {
      int64_t a = broadcastOffset(i, shape, lhsStrides);
      int64_t b = broadcastOffset(i, shape, rhsStrides);
      dst[i] = integer
                   ? applyPredicate(*pred, loadAsInt(lhs, a), loadAsInt(rhs, b))
                   : applyPredicate(*pred, loadAsDouble(lhs, a),
                                    loadAsDouble(rhs, b));
    }
  });
  return Error::success();
}

Error selectKernel(const KernelCall &call) {
  if (Error err = checkSelect(call))
    return err;
  const TensorRef &cond = call.input(0), &onTrue = call.input(1),
                  &onFalse = call.input(2), &out = call.output(0);
  llvm::SmallVector<int64_t> condStrides, trueStrides, falseStrides;
  if (!broadcastStrides(cond.shape, out.shape, condStrides) ||
      !broadcastStrides(onTrue.shape, out.shape, trueStrides) ||
      !broadcastStrides(onFalse.shape, out.shape, falseStrides))
    return call.error("operands " + shapeString(cond.shape) + ", " +
                      shapeString(onTrue.shape) + ", " +
                      shapeString(onFalse.shape) + " do not broadcast to " +
                      shapeString(out.shape));
  // Values are copied bit for bit: select never converts.
  size_t size = dtypeSize(out.dtype);
  int64_t n = out.numElements();
  const uint8_t *c = cond.as<uint8_t>();
  const char *t = onTrue.as<char>(), *f = onFalse.as<char>();
  char *dst = out.as<char>();
  ArrayRef<int64_t> shape = out.shape;
  parallelFor(n, kWorkDivide, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t i = rangeBegin; i < rangeEnd; ++i) {
      const char *src =
          c[broadcastOffset(i, shape, condStrides)]
              ? t + broadcastOffset(i, shape, trueStrides) * size
              : f + broadcastOffset(i, shape, falseStrides) * size;
      std::memcpy(dst + i * size, src, size);
    }
  });
  return Error::success();
}

//===----------------------------------------------------------------------===//
// softmax_grad
//===----------------------------------------------------------------------===//

Error softmaxGradKernel(const KernelCall &call) {
  Expected<NormalizedRows> rows = readSoftmaxGrad(call);
  if (!rows)
    return rows.takeError();
  const TensorRef &y = call.input(0), &dy = call.input(1),
                  &out = call.output(0);
  int64_t size = rows->size, inner = rows->inner, outer = rows->outer;
  F32In yv(y), dyv(dy);
  F32Out dx(out);
  const float *yp = yv.data(), *gp = dyv.data();
  float *dp = dx.data();
  parallelFor(outer * inner, 2 * size,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t task = rangeBegin; task < rangeEnd; ++task) {
                  int64_t base = task / inner * size * inner + task % inner;
                  double dot = 0;
                  for (int64_t j = 0; j < size; ++j)
                    dot += static_cast<double>(yp[base + j * inner]) *
                           gp[base + j * inner];
                  float s = static_cast<float>(dot);
                  for (int64_t j = 0; j < size; ++j) {
                    int64_t idx = base + j * inner;
                    dp[idx] = yp[idx] * (gp[idx] - s);
                  }
                }
              });
  dx.commit();
  return Error::success();
}

//===----------------------------------------------------------------------===//
// layer_norm_grad, rms_norm_grad
//===----------------------------------------------------------------------===//

/// Columns of the weight gradients each task owns: one task sums a block
/// of columns over every row, in row order.
constexpr int64_t kColumnBlock = 64;

/// Both norm gradients; `rms` selects rms_norm (no mean, no bias grad).
Error normGradKernel(const KernelCall &call, bool rms) {
  Expected<NormalizedRows> shape = readNormGrad(call, rms);
  if (!shape)
    return shape.takeError();
  const TensorRef &x = call.input(0), &w = call.input(1), &dy = call.input(2);
  double eps = shape->epsilon;
  int64_t n = shape->size, rows = shape->outer;
  F32In xv(x), wv(w), dyv(dy);
  const float *xp = xv.data(), *wp = wv.data(), *gp = dyv.data();

  // Per row: mean (0 for rms) and the reciprocal standard deviation / rms.
  std::vector<float> mean(rows), rstd(rows);
  parallelFor(rows, 2 * n, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t r = rangeBegin; r < rangeEnd; ++r) {
      const float *row = xp + r * n;
      double m = 0;
      if (!rms) {
        for (int64_t j = 0; j < n; ++j)
          m += row[j];
        m /= n;
      }
      double var = 0;
      for (int64_t j = 0; j < n; ++j)
        var += (row[j] - m) * (row[j] - m);
      var /= n;
      mean[r] = static_cast<float>(m);
      rstd[r] = static_cast<float>(1.0 / std::sqrt(var + eps));
    }
  });

  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w; rms_norm
  // drops the mean(g) term.
  F32Out dx(call.output(0));
  float *dxp = dx.data();
  parallelFor(rows, 4 * n, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t r = rangeBegin; r < rangeEnd; ++r) {
      const float *row = xp + r * n, *grow = gp + r * n;
      double sumG = 0, sumGX = 0;
      for (int64_t j = 0; j < n; ++j) {
        float g = grow[j] * wp[j];
        float xhat = (row[j] - mean[r]) * rstd[r];
        sumG += g;
        sumGX += static_cast<double>(g) * xhat;
      }
      float meanG = rms ? 0.0f : static_cast<float>(sumG / n);
      float meanGX = static_cast<float>(sumGX / n);
      for (int64_t j = 0; j < n; ++j) {
        float g = grow[j] * wp[j];
        float xhat = (row[j] - mean[r]) * rstd[r];
        dxp[r * n + j] = rstd[r] * (g - meanG - xhat * meanGX);
      }
    }
  });
  dx.commit();

  // dweight = sum_rows dy * xhat, dbias = sum_rows dy.
  F32Out dw(call.output(1));
  std::optional<F32Out> db;
  if (!rms)
    db.emplace(call.output(2));
  float *dwp = dw.data(), *dbp = rms ? nullptr : db->data();
  int64_t blocks = (n + kColumnBlock - 1) / kColumnBlock;
  parallelFor(blocks, 2 * rows * kColumnBlock,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t block = rangeBegin; block < rangeEnd; ++block) {
                  int64_t begin = block * kColumnBlock,
                          end = std::min(n, begin + kColumnBlock);
                  double sumW[kColumnBlock] = {}, sumB[kColumnBlock] = {};
                  for (int64_t r = 0; r < rows; ++r)
                    for (int64_t j = begin; j < end; ++j) {
                      float g = gp[r * n + j];
                      float xhat = (xp[r * n + j] - mean[r]) * rstd[r];
                      sumW[j - begin] += static_cast<double>(g) * xhat;
                      sumB[j - begin] += g;
                    }
                  for (int64_t j = begin; j < end; ++j) {
                    dwp[j] = static_cast<float>(sumW[j - begin]);
                    if (dbp)
                      dbp[j] = static_cast<float>(sumB[j - begin]);
                  }
                }
              });
  dw.commit();
  if (db)
    db->commit();
  return Error::success();
}

Error layerNormGradKernel(const KernelCall &call) {
  return normGradKernel(call, /*rms=*/false);
}
Error rmsNormGradKernel(const KernelCall &call) {
  return normGradKernel(call, /*rms=*/true);
}

//===----------------------------------------------------------------------===//
// embedding_grad
//===----------------------------------------------------------------------===//

/// Shared by dtc.embedding_grad and dtc.embedding_shard_grad: ids outside
/// this rank's shard add nothing.
Error embeddingGradKernel(const KernelCall &call) {
  Expected<EmbeddingRows> e = readEmbeddingGrad(call);
  if (!e)
    return e.takeError();
  const TensorRef &dy = call.input(0), &out = call.output(0);
  Expected<std::vector<int64_t>> index =
      readIndices(call, call.input(1), e->wholeRows(), "id");
  if (!index)
    return index.takeError();
  int64_t count = e->count, rows = e->rows, d = e->dim;
  for (int64_t &id : *index)
    id = e->localRow(id);
  F32In gv(dy);
  F32Out table(out);
  const float *gp = gv.data();
  float *tp = table.data();
  std::fill(tp, tp + rows * d, 0.0f);
  // Each task owns a block of columns and adds the rows in index order.
  int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
  parallelFor(blocks, count * kColumnBlock,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t block = rangeBegin; block < rangeEnd; ++block) {
                  int64_t begin = block * kColumnBlock,
                          end = std::min(d, begin + kColumnBlock);
                  for (int64_t i = 0; i < count; ++i) {
                    if ((*index)[i] < 0)
                      continue;
                    float *dst = tp + (*index)[i] * d;
                    const float *src = gp + i * d;
                    for (int64_t j = begin; j < end; ++j)
                      dst[j] += src[j];
                  }
                }
              });
  table.commit();
  return Error::success();
}

//===----------------------------------------------------------------------===//
// gather_elements_grad
//===----------------------------------------------------------------------===//

/// Scatter-add in index order, serial: elements of one row along the axis
/// may land on the same data element, and a lookup's gradient is small.
Error gatherElementsGradKernel(const KernelCall &call) {
  Expected<ElementLookup> l = readGatherElementsGrad(call);
  if (!l)
    return l.takeError();
  Expected<std::vector<int64_t>> ids =
      readAxisIndices(call, call.input(1), l->size);
  if (!ids)
    return ids.takeError();
  F32In gv(call.input(0));
  F32Out data(call.output(0));
  const float *gp = gv.data();
  float *dp = data.data();
  std::fill(dp, dp + l->outer * l->size * l->inner, 0.0f);
  for (int64_t e = 0, n = l->elements(); e < n; ++e)
    dp[l->dataOffset(e, (*ids)[e])] += gp[e];
  data.commit();
  return Error::success();
}

//===----------------------------------------------------------------------===//
// cross_entropy_grad
//===----------------------------------------------------------------------===//

Error crossEntropyGradKernel(const KernelCall &call) {
  Expected<LossShards> shape = readCrossEntropyGrad(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &logits = call.input(0), &labels = call.input(1),
                  &gradLoss = call.input(2);
  const TensorRef &out = call.output(0);
  int64_t ignore = shape->ignoreIndex;
  int64_t vocab = shape->vocab;
  int64_t rows = shape->rows;
  Expected<std::vector<int64_t>> readLabels =
      readIndices(call, labels, vocab, "label", ignore);
  if (!readLabels)
    return readLabels.takeError();
  const std::vector<int64_t> &label = *readLabels;
  int64_t counted = rows - llvm::count(label, ignore);
  // Every label ignored: the mean has no terms and no gradient.
  float factor =
      counted ? loadAsFloat(gradLoss, 0) / static_cast<float>(counted) : 0.0f;
  F32In lv(logits);
  F32Out dl(out);
  const float *lp = lv.data();
  float *dp = dl.data();
  parallelFor(rows, vocab * kWorkTranscendental,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t r = rangeBegin; r < rangeEnd; ++r) {
                  const float *row = lp + r * vocab;
                  float *drow = dp + r * vocab;
                  if (label[r] == ignore || counted == 0) {
                    std::fill(drow, drow + vocab, 0.0f);
                    continue;
                  }
                  // Three vectorized passes, as the forward: the max, the
                  // exponentials (kept in the result) and their sum, the scale.
                  float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
                  for (int64_t j = 0; j < vocab; ++j)
                    mx = std::max(mx, row[j]);
                  float sum = 0;
#pragma omp simd reduction(+ : sum)
                  for (int64_t j = 0; j < vocab; ++j) {
                    drow[j] = fastExp(row[j] - mx);
                    sum += drow[j];
                  }
                  float scale = factor / sum;
#pragma omp simd
                  for (int64_t j = 0; j < vocab; ++j)
                    drow[j] *= scale;
                  drow[label[r]] -= factor;
                }
              });
  dl.commit();
  return Error::success();
}

//===----------------------------------------------------------------------===//
// gelu_grad, silu_grad
//===----------------------------------------------------------------------===//

// The derivatives through fastExp and erfcNonNegative, as the forward
// activations: libm's erf, exp and tanh do not vectorize, and made
// gelu_grad a tenth of a small model's step.
struct GeluErfGrad {
  float operator()(float x) const {
    // d/dx x Phi(x) = Phi(x) + x phi(x); Phi(x) = erfc(-x / sqrt 2) / 2
    // through erfc of |x| / sqrt 2, as the forward.
    constexpr float invSqrt2Pi = 0.3989422804014327f;
    float c = erfcNonNegative(std::fabs(x) * float(M_SQRT1_2));
    float cdf = x >= 0 ? 1.0f - 0.5f * c : 0.5f * c;
    return cdf + x * invSqrt2Pi * fastExp(-0.5f * x * x);
  }
};

struct GeluTanhGrad {
  float operator()(float x) const {
    constexpr float k = 0.7978845608028654f; // sqrt(2 / pi)
    constexpr float c = 0.044715f;
    // 1 + tanh(u) and 1 - tanh(u) from e = exp(-2|u|) <= 1, without the
    // cancellation of 1 + t near t = -1 (which cost 2e-6 in the tails):
    // the one that is small is 2e / (1 + e), the other 2 / (1 + e).
    float u = k * (x + c * x * x * x);
    float e = fastExp(-2.0f * std::fabs(u));
    float large = 2.0f / (1.0f + e), small = large * e;
    float onePlusT = u >= 0 ? large : small;
    float oneMinusT = u >= 0 ? small : large;
    return 0.5f * onePlusT +
           0.5f * x * onePlusT * oneMinusT * k * (1.0f + 3.0f * c * x * x);
  }
};

struct SiluGrad {
  float operator()(float x) const {
    float s = 1.0f / (1.0f + fastExp(-x));
    return s * (1.0f + x * (1.0f - s));
  }
};

/// dx = dy * f'(x), elementwise.
template <typename Derivative>
Error activationGrad(const KernelCall &call, Derivative derivative) {
  if (Error err = checkActivationGrad(call))
    return err;
  const TensorRef &x = call.input(0), &dy = call.input(1);
  F32In xv(x), gv(dy);
  F32Out dx(call.output(0));
  const float *xp = xv.data(), *gp = gv.data();
  float *dp = dx.data();
  int64_t n = x.numElements();
  parallelFor(n, kWorkTranscendental,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t i = rangeBegin; i < rangeEnd; ++i)
                  dp[i] = gp[i] * derivative(xp[i]);
              });
  dx.commit();
  return Error::success();
}

Error geluGradKernel(const KernelCall &call) {
  if (call.flag("approximate_tanh"))
    return activationGrad(call, GeluTanhGrad());
  return activationGrad(call, GeluErfGrad());
}

Error siluGradKernel(const KernelCall &call) {
  return activationGrad(call, SiluGrad());
}

//===----------------------------------------------------------------------===//
// slice_grad
//===----------------------------------------------------------------------===//

Error sliceGradKernel(const KernelCall &call) {
  llvm::Expected<StridedView> view = readSliceGrad(call);
  if (!view)
    return view.takeError();
  const TensorRef &dy = call.input(0), &out = call.output(0);
  size_t size = dtypeSize(out.dtype);
  std::memset(out.data, 0, out.bytes());
  int64_t n = dy.numElements();
  const char *src = dy.as<char>();
  char *dst = out.as<char>() + view->base * size;
  if (n == 0)
    return Error::success();
  // The slice is injective (positive strides): each result element is
  // written at most once. Row by row along the last dimension: one offset
  // per row, and a row of a unit-stride slice is one copy.
  int64_t rank = view->shape.size();
  int64_t inner = rank ? view->shape.back() : 1;
  int64_t innerStride = rank ? view->strides.back() : 1;
  llvm::ArrayRef<int64_t> outerShape =
      llvm::ArrayRef(view->shape).drop_back(rank ? 1 : 0);
  llvm::ArrayRef<int64_t> outerStrides =
      llvm::ArrayRef(view->strides).drop_back(rank ? 1 : 0);
  parallelFor(n / inner, inner, [&](int64_t firstRow, int64_t endRow) {
    for (int64_t row = firstRow; row < endRow; ++row) {
      char *to = dst + broadcastOffset(row, outerShape, outerStrides) * size;
      const char *from = src + row * inner * size;
      if (innerStride == 1) {
        std::memcpy(to, from, inner * size);
        continue;
      }
      for (int64_t i = 0; i < inner; ++i)
        std::memcpy(to + i * innerStride * size, from + i * size, size);
    }
  });
  return Error::success();
}

//===----------------------------------------------------------------------===//
// conv and pool gradients
//===----------------------------------------------------------------------===//

/// Which input position each (output position, kernel tap) pair reads:
/// taps[o * numTaps + k] is the flat spatial input index, or -1 where the
/// tap falls into padding. Taps are in row-major window order.
struct WindowTaps {
  int64_t numOut = 0, numTaps = 0, numIn = 0;
  std::vector<int64_t> taps;
};

/// The taps of a window readWindow checked.
WindowTaps buildTaps(const Window &window) {
  int64_t k = window.rank();
  ArrayRef<int64_t> input = window.in, kernel = window.kernel,
                    output = window.out, stride = window.strides,
                    dilation = window.dilations, padBegin = window.padBegin;
  WindowTaps w;
  w.numOut = window.outPositions();
  w.numTaps = window.taps();
  w.numIn = window.inPositions();
  w.taps.assign(w.numOut * w.numTaps, -1);
  llvm::SmallVector<int64_t, 4> o(k, 0), t(k, 0);
  for (int64_t oi = 0; oi < w.numOut; ++oi) {
    for (int64_t d = k - 1, rem = oi; d >= 0; --d) {
      o[d] = rem % output[d];
      rem /= output[d];
    }
    for (int64_t ti = 0; ti < w.numTaps; ++ti) {
      for (int64_t d = k - 1, rem = ti; d >= 0; --d) {
        t[d] = rem % kernel[d];
        rem /= kernel[d];
      }
      int64_t flat = 0;
      bool inside = true;
      for (int64_t d = 0; d < k && inside; ++d) {
        int64_t x = o[d] * stride[d] + t[d] * dilation[d] - padBegin[d];
        inside = x >= 0 && x < input[d];
        flat = flat * input[d] + x;
      }
      if (inside)
        w.taps[oi * w.numTaps + ti] = flat;
    }
  }
  return w;
}

Error convGradInputKernel(const KernelCall &call) {
  auto dims = readConvGradInput(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &dy = call.input(0), &w = call.input(1);
  const TensorRef &out = call.output(0);
  const ConvDims &d = *dims;
  int64_t cPerGroup = d.channelsPerGroup(), fPerGroup = d.filtersPerGroup();
  WindowTaps wt = buildTaps(dims->window);
  F32In gv(dy), wv(w);
  F32Out dx(out);
  const float *gp = gv.data(), *wp = wv.data();
  float *dp = dx.data();
  // One task per (batch, input channel) plane, summing over the group's
  // output channels and the window in a fixed order.
  parallelFor(
      d.batch * d.channels, fPerGroup * wt.numOut * wt.numTaps,
      [&](int64_t rangeBegin, int64_t rangeEnd) {
        for (int64_t plane = rangeBegin; plane < rangeEnd; ++plane) {
          int64_t b = plane / d.channels, c = plane % d.channels;
          int64_t g = c / cPerGroup, cg = c % cPerGroup;
          float *dst = dp + plane * wt.numIn;
          std::fill(dst, dst + wt.numIn, 0.0f);
          for (int64_t f = g * fPerGroup; f < (g + 1) * fPerGroup; ++f) {
            const float *grad = gp + (b * d.filters + f) * wt.numOut;
            const float *kernel = wp + (f * cPerGroup + cg) * wt.numTaps;
            for (int64_t o = 0; o < wt.numOut; ++o) {
              const int64_t *tap = wt.taps.data() + o * wt.numTaps;
              for (int64_t t = 0; t < wt.numTaps; ++t)
                if (tap[t] >= 0)
                  dst[tap[t]] += grad[o] * kernel[t];
            }
          }
        }
      });
  dx.commit();
  return Error::success();
}

Error convGradWeightKernel(const KernelCall &call) {
  auto dims = readConvGradWeight(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &x = call.input(0), &dy = call.input(1);
  const TensorRef &out = call.output(0);
  const ConvDims &d = *dims;
  int64_t cPerGroup = d.channelsPerGroup(), fPerGroup = d.filtersPerGroup();
  WindowTaps wt = buildTaps(dims->window);
  F32In xv(x), gv(dy);
  F32Out dw(out);
  const float *xp = xv.data(), *gp = gv.data();
  float *dp = dw.data();
  // One task per (output channel, input channel of its group) kernel,
  // summing over the batch and output positions in a fixed order.
  parallelFor(d.filters * cPerGroup, d.batch * wt.numOut * wt.numTaps,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t kernelIdx = rangeBegin; kernelIdx < rangeEnd;
                     ++kernelIdx) {
                  int64_t f = kernelIdx / cPerGroup, cg = kernelIdx % cPerGroup;
                  int64_t c = f / fPerGroup * cPerGroup + cg;
                  std::vector<double> acc(wt.numTaps, 0.0);
                  for (int64_t b = 0; b < d.batch; ++b) {
                    const float *input = xp + (b * d.channels + c) * wt.numIn;
                    const float *grad = gp + (b * d.filters + f) * wt.numOut;
                    for (int64_t o = 0; o < wt.numOut; ++o) {
                      const int64_t *tap = wt.taps.data() + o * wt.numTaps;
                      for (int64_t t = 0; t < wt.numTaps; ++t)
                        if (tap[t] >= 0)
                          acc[t] +=
                              static_cast<double>(grad[o]) * input[tap[t]];
                    }
                  }
                  for (int64_t t = 0; t < wt.numTaps; ++t)
                    dp[kernelIdx * wt.numTaps + t] = static_cast<float>(acc[t]);
                }
              });
  dw.commit();
  return Error::success();
}

Error maxPoolGradKernel(const KernelCall &call) {
  auto dims = readMaxPoolGrad(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &x = call.input(0), &dy = call.input(1);
  const TensorRef &out = call.output(0);
  WindowTaps wt = buildTaps(dims->window);
  F32In xv(x), gv(dy);
  F32Out dx(out);
  const float *xp = xv.data(), *gp = gv.data();
  float *dp = dx.data();
  int64_t planes = dims->planes;
  parallelFor(planes, wt.numOut * wt.numTaps,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t plane = rangeBegin; plane < rangeEnd; ++plane) {
                  const float *input = xp + plane * wt.numIn;
                  const float *grad = gp + plane * wt.numOut;
                  float *dst = dp + plane * wt.numIn;
                  std::fill(dst, dst + wt.numIn, 0.0f);
                  for (int64_t o = 0; o < wt.numOut; ++o) {
                    // The first maximum in window order takes the gradient
                    // (PyTorch); a NaN is a maximum, as it is for the forward
                    // op's result.
                    const int64_t *tap = wt.taps.data() + o * wt.numTaps;
                    int64_t best = -1;
                    for (int64_t t = 0; t < wt.numTaps; ++t) {
                      if (tap[t] < 0)
                        continue;
                      float value = input[tap[t]];
                      if (best < 0 || value > input[best] ||
                          (std::isnan(value) && !std::isnan(input[best])))
                        best = tap[t];
                    }
                    if (best >= 0)
                      dst[best] += grad[o];
                  }
                }
              });
  dx.commit();
  return Error::success();
}

Error avgPoolGradKernel(const KernelCall &call) {
  auto dims = readAvgPoolGrad(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &dy = call.input(0);
  const TensorRef &out = call.output(0);
  WindowTaps wt = buildTaps(dims->window);
  bool includePad = call.flag("count_include_pad");
  // The divisor of each window: its taps inside the input, or all of them.
  std::vector<float> scale(wt.numOut);
  for (int64_t o = 0; o < wt.numOut; ++o) {
    int64_t inside = 0;
    for (int64_t t = 0; t < wt.numTaps; ++t)
      inside += wt.taps[o * wt.numTaps + t] >= 0;
    int64_t divisor = includePad ? wt.numTaps : inside;
    scale[o] = divisor ? 1.0f / static_cast<float>(divisor) : 0.0f;
  }
  F32In gv(dy);
  F32Out dx(out);
  const float *gp = gv.data();
  float *dp = dx.data();
  int64_t planes = dims->planes;
  parallelFor(planes, wt.numOut * wt.numTaps,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t plane = rangeBegin; plane < rangeEnd; ++plane) {
                  const float *grad = gp + plane * wt.numOut;
                  float *dst = dp + plane * wt.numIn;
                  std::fill(dst, dst + wt.numIn, 0.0f);
                  for (int64_t o = 0; o < wt.numOut; ++o) {
                    const int64_t *tap = wt.taps.data() + o * wt.numTaps;
                    float share = grad[o] * scale[o];
                    for (int64_t t = 0; t < wt.numTaps; ++t)
                      if (tap[t] >= 0)
                        dst[tap[t]] += share;
                  }
                }
              });
  dx.commit();
  return Error::success();
}

} // namespace

void registerGradientKernels(KernelRegistry &registry) {
  registry.add("dtc.compare", compareKernel);
  registry.add("dtc.select", selectKernel);
  registry.add("dtc.softmax_grad", softmaxGradKernel);
  registry.add("dtc.layer_norm_grad", layerNormGradKernel);
  registry.add("dtc.rms_norm_grad", rmsNormGradKernel);
  registry.add("dtc.embedding_grad", embeddingGradKernel);
  registry.add("dtc.embedding_shard_grad", embeddingGradKernel);
  registry.add("dtc.cross_entropy_grad", crossEntropyGradKernel);
  registry.add("dtc.gelu_grad", geluGradKernel);
  registry.add("dtc.silu_grad", siluGradKernel);
  registry.add("dtc.slice_grad", sliceGradKernel);
  registry.add("dtc.gather_elements_grad", gatherElementsGradKernel);
  registry.add("dtc.conv_grad_input", convGradInputKernel);
  registry.add("dtc.conv_grad_weight", convGradWeightKernel);
  registry.add("dtc.max_pool_grad", maxPoolGradKernel);
  registry.add("dtc.avg_pool_grad", avgPoolGradKernel);
}

} // namespace dtc::runtime::cpu
