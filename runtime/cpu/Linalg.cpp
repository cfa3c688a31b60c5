//===- Linalg.cpp - Matmul and reduction kernels --------------------------===//
//
// dtc.matmul goes through OpenBLAS sgemm: one call when the batch folds into
// m (a Linear on [b, s, k] activations), else one call per batch matrix.
// Reductions collapse the shape to [outer, reduced, inner] when the reduced
// dimensions are adjacent, and walk a general odometer otherwise; each output
// element is accumulated by one thread in a fixed order. Running sums and
// the selective scan run each line's positions in order on one thread.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/CpuKernels.h"

#include "runtime/core/Matmul.h"
#include "runtime/core/Reduce.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

//===----------------------------------------------------------------------===//
// matmul
//===----------------------------------------------------------------------===//

llvm::Error matmulKernel(const KernelCall &call) {
  llvm::Expected<MatmulShape> shape = readMatmul(call);
  if (!shape)
    return shape.takeError();
  const MatmulShape &s = *shape;
  const TensorRef &out = call.output(0);
  if (out.numElements() == 0)
    return llvm::Error::success();

  F32In a(call.input(0)), b(call.input(1));
  F32Out c(out);
  int64_t m = s.m, n = s.n, k = s.k;
  if (s.foldsIntoRows()) {
    parallelSgemm(false, s.transposeRhs, s.batches * m, n, k, 1.0f, a.data(),
                  s.lda(), b.data(), s.ldb(), c.data(), n);
  } else {
    // Many small products run one per thread; otherwise each is split into
    // tiles (parallelSgemm, nested loops run serially). Either way every
    // product is computed tile by tile the same way.
    auto product = [&](int64_t batch) {
      auto [lhsProduct, rhsProduct] = s.operandProducts(batch);
      parallelSgemm(s.transposeLhs, s.transposeRhs, m, n, k, 1.0f,
                    a.data() + lhsProduct * m * k, s.lda(),
                    b.data() + rhsProduct * k * n, s.ldb(),
                    c.data() + batch * m * n, n);
    };
    if (s.batches >= threadCount())
      parallelForTasks(s.batches, m * n * k / kMacsPerWork, product);
    else
      for (int64_t batch = 0; batch < s.batches; ++batch)
        product(batch);
  }
  c.commit();
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// reduce_sum / reduce_mean / reduce_max
//===----------------------------------------------------------------------===//

enum class ReduceKind { Sum, Mean, Max };

template <typename T, typename Acc, ReduceKind Kind> struct Reducer {
  static Acc init() {
    if constexpr (Kind == ReduceKind::Max) {
      if constexpr (std::numeric_limits<Acc>::has_infinity)
        return -std::numeric_limits<Acc>::infinity();
      else
        return std::numeric_limits<Acc>::lowest();
    } else {
      return Acc(0);
    }
  }
  static Acc combine(Acc acc, Acc v) {
    if constexpr (Kind == ReduceKind::Max) {
      // NaN propagates, as in PyTorch's amax.
      if constexpr (std::is_floating_point_v<Acc>)
        if (v != v || acc != acc)
          return v != v ? v : acc;
      return v > acc ? v : acc;
    } else {
      return acc + v;
    }
  }
  static T finish(Acc acc, int64_t count) {
    if constexpr (Kind == ReduceKind::Mean)
      return static_cast<T>(acc / static_cast<Acc>(count));
    else
      return static_cast<T>(acc);
  }
};

/// `count` contiguous values reduced through 16 interleaved partial
/// results, combined in lane order: the loop vectorizes instead of being one
/// long chain of dependent adds, and its order is fixed.
template <typename T, typename Acc, ReduceKind Kind>
Acc reduceContiguous(const T *values, int64_t count) {
  using R = Reducer<T, Acc, Kind>;
  constexpr int64_t kLanes = 16;
  Acc lanes[kLanes];
  for (Acc &lane : lanes)
    lane = R::init();
  int64_t whole = count / kLanes * kLanes;
  for (int64_t r = 0; r < whole; r += kLanes)
    for (int64_t l = 0; l < kLanes; ++l)
      lanes[l] = R::combine(lanes[l], static_cast<Acc>(values[r + l]));
  Acc acc = R::init();
  for (Acc lane : lanes)
    acc = R::combine(acc, lane);
  for (int64_t r = whole; r < count; ++r)
    acc = R::combine(acc, static_cast<Acc>(values[r]));
  return acc;
}

/// Reduces `in` over the groups `g` flags as reduced into `out` (the kept
/// groups in order).
template <typename T, typename Acc, ReduceKind Kind>
void reduceLoop(const T *in, T *out, const ReduceGroups &g) {
  using R = Reducer<T, Acc, Kind>;
  llvm::ArrayRef<int64_t> sizes = g.sizes;
  llvm::ArrayRef<bool> flags = g.reduced;
  int64_t count = g.count, outCount = 1;
  for (size_t i = 0; i < sizes.size(); ++i)
    if (!flags[i])
      outCount *= sizes[i];

  if (g.rowShaped()) {
    // [outer, count, inner].
    int64_t outer = g.outer(), inner = g.inner();
    if (inner == 1) {
      // Contiguous rows (a whole tensor to a scalar, e.g. the gradient
      // norm's sums): fixed spans reduced in parallel, each through
      // interleaved partial results, then combined in span order. The
      // arithmetic depends on the shape only, never on the thread count.
      constexpr int64_t kSpan = 1 << 15;
      int64_t spans = std::max<int64_t>(1, (count + kSpan - 1) / kSpan);
      std::vector<Acc> partial(outer * spans);
      parallelFor(outer * spans, std::min(kSpan, count),
                  [&](int64_t rangeBegin, int64_t rangeEnd) {
                    for (int64_t task = rangeBegin; task < rangeEnd; ++task) {
                      int64_t o = task / spans, begin = (task % spans) * kSpan;
                      partial[task] = reduceContiguous<T, Acc, Kind>(
                          in + o * count + begin,
                          std::min(kSpan, count - begin));
                    }
                  });
      for (int64_t o = 0; o < outer; ++o) {
        Acc acc = partial[o * spans];
        for (int64_t span = 1; span < spans; ++span)
          acc = R::combine(acc, partial[o * spans + span]);
        out[o] = R::finish(acc, count);
      }
      return;
    }
    // Accumulate whole inner rows: vectorizable, one block per task.
    constexpr int64_t kBlock = 512;
    int64_t blocks = (inner + kBlock - 1) / kBlock;
    parallelFor(outer * blocks, count * kBlock,
                [&](int64_t rangeBegin, int64_t rangeEnd) {
                  for (int64_t task = rangeBegin; task < rangeEnd; ++task) {
                    int64_t o = task / blocks, begin = (task % blocks) * kBlock;
                    int64_t end = std::min(inner, begin + kBlock);
                    Acc acc[kBlock];
                    for (int64_t i = begin; i < end; ++i)
                      acc[i - begin] = R::init();
                    for (int64_t r = 0; r < count; ++r) {
                      const T *row = in + (o * count + r) * inner;
                      for (int64_t i = begin; i < end; ++i)
                        acc[i - begin] = R::combine(acc[i - begin],
                                                    static_cast<Acc>(row[i]));
                    }
                    for (int64_t i = begin; i < end; ++i)
                      out[o * inner + i] = R::finish(acc[i - begin], count);
                  }
                });
    return;
  }

  // General: an odometer over the reduced groups for each output element.
  auto strides = stridesOf(sizes);
  llvm::SmallVector<int64_t, 6> keptSizes, keptStrides, redSizes, redStrides;
  for (size_t g = 0; g < sizes.size(); ++g) {
    (flags[g] ? redSizes : keptSizes).push_back(sizes[g]);
    (flags[g] ? redStrides : keptStrides).push_back(strides[g]);
  }
  parallelFor(outCount, count * kWorkDivide,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t o = rangeBegin; o < rangeEnd; ++o) {
                  int64_t base = 0, rest = o;
                  for (int64_t d = static_cast<int64_t>(keptSizes.size()) - 1;
                       d >= 0; --d) {
                    base += (rest % keptSizes[d]) * keptStrides[d];
                    rest /= keptSizes[d];
                  }
                  Acc acc = R::init();
                  for (int64_t r = 0; r < count; ++r) {
                    int64_t off = base, rr = r;
                    for (int64_t d = static_cast<int64_t>(redSizes.size()) - 1;
                         d >= 0; --d) {
                      off += (rr % redSizes[d]) * redStrides[d];
                      rr /= redSizes[d];
                    }
                    acc = R::combine(acc, static_cast<Acc>(in[off]));
                  }
                  out[o] = R::finish(acc, count);
                }
              });
}

template <ReduceKind Kind> llvm::Error reduceKernel(const KernelCall &call) {
  llvm::Expected<ReduceGroups> groups = readReduce(call);
  if (!groups)
    return groups.takeError();
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (out.numElements() == 0)
    return llvm::Error::success();
  switch (in.dtype) {
  case DType::F64:
    reduceLoop<double, double, Kind>(in.as<double>(), out.as<double>(),
                                     *groups);
    break;
  case DType::I64:
    reduceLoop<int64_t, int64_t, Kind>(in.as<int64_t>(), out.as<int64_t>(),
                                       *groups);
    break;
  case DType::I32:
    reduceLoop<int32_t, int64_t, Kind>(in.as<int32_t>(), out.as<int32_t>(),
                                       *groups);
    break;
  case DType::I8:
    reduceLoop<int8_t, int64_t, Kind>(in.as<int8_t>(), out.as<int8_t>(),
                                      *groups);
    break;
  case DType::F32:
  case DType::BF16:
  case DType::F16: {
    F32In x(in);
    F32Out y(out);
    reduceLoop<float, float, Kind>(x.data(), y.data(), *groups);
    y.commit();
    break;
  }
  default:
    return call.error("unsupported dtype " + dtypeName(in.dtype));
  }
  return llvm::Error::success();
}

/// Running sums along the middle dim of [outer, length, inner], each line
/// in order, accumulated in `Acc`.
template <typename T, typename Acc>
void scanLoop(const T *in, T *out, const Scan &s) {
  parallelFor(s.outer * s.inner, s.length, [&](int64_t begin, int64_t end) {
    for (int64_t line = begin; line < end; ++line) {
      int64_t o = line / s.inner, k = line % s.inner;
      const T *x = in + o * s.length * s.inner + k;
      T *y = out + o * s.length * s.inner + k;
      Acc acc = 0;
      for (int64_t step = 0; step < s.length; ++step) {
        int64_t i = s.reverse ? s.length - 1 - step : step;
        Acc value = static_cast<Acc>(x[i * s.inner]);
        if (!s.exclusive)
          acc += value;
        y[i * s.inner] = static_cast<T>(acc);
        if (s.exclusive)
          acc += value;
      }
    }
  });
}

llvm::Error cumSumKernel(const KernelCall &call) {
  llvm::Expected<Scan> scan = readCumSum(call);
  if (!scan)
    return scan.takeError();
  const TensorRef &in = call.input(0), &out = call.output(0);
  switch (in.dtype) {
  case DType::F64:
    scanLoop<double, double>(in.as<double>(), out.as<double>(), *scan);
    break;
  case DType::I64:
    scanLoop<int64_t, int64_t>(in.as<int64_t>(), out.as<int64_t>(), *scan);
    break;
  case DType::I32:
    scanLoop<int32_t, int32_t>(in.as<int32_t>(), out.as<int32_t>(), *scan);
    break;
  case DType::F32:
  case DType::BF16:
  case DType::F16: {
    F32In x(in);
    F32Out y(out);
    scanLoop<float, float>(x.data(), y.data(), *scan);
    y.commit();
    break;
  }
  default:
    return call.error("unsupported dtype " + dtypeName(in.dtype));
  }
  return llvm::Error::success();
}

/// dtc.selective_scan: one (batch, channel) line at a time, its state of
/// `state` floats running over the positions in order.
llvm::Error selectiveScanKernel(const KernelCall &call) {
  llvm::Expected<SelectiveScan> shape = readSelectiveScan(call, false);
  if (!shape)
    return shape.takeError();
  const SelectiveScan s = *shape;
  F32In a(call.input(0)), x(call.input(1)), c(call.input(2));
  F32Out y(call.output(0));
  float *out = y.data();
  parallelFor(s.batch * s.channels, 4 * s.length * s.state,
              [&](int64_t begin, int64_t end) {
                std::vector<float> h(s.state);
                for (int64_t line = begin; line < end; ++line) {
                  int64_t b = line / s.channels;
                  std::fill(h.begin(), h.end(), 0.0f);
                  for (int64_t t = 0; t < s.length; ++t) {
                    int64_t at = (line * s.length + t) * s.state;
                    const float *ct = c.data() + (b * s.length + t) * s.state;
                    float acc = 0;
                    for (int64_t n = 0; n < s.state; ++n) {
                      h[n] = a[at + n] * h[n] + x[at + n];
                      acc += h[n] * ct[n];
                    }
                    out[line * s.length + t] = acc;
                  }
                }
              });
  y.commit();
  return llvm::Error::success();
}

/// dtc.selective_scan_grad: the states forward into a_grad's buffer, c_grad
/// from them (a sum over the channels in order, per batch row and
/// position), then the recurrence backwards in time, each a_grad_t written
/// after h_t and h_{t-1} were read.
llvm::Error selectiveScanGradKernel(const KernelCall &call) {
  llvm::Expected<SelectiveScan> shape = readSelectiveScan(call, true);
  if (!shape)
    return shape.takeError();
  const SelectiveScan s = *shape;
  F32In a(call.input(0)), x(call.input(1)), c(call.input(2)), dy(call.input(3));
  F32Out da(call.output(0)), dx(call.output(1)), dc(call.output(2));
  float *hs = da.data();
  int64_t lines = s.batch * s.channels, lineWork = 4 * s.length * s.state;
  parallelFor(lines, lineWork, [&](int64_t begin, int64_t end) {
    for (int64_t line = begin; line < end; ++line)
      for (int64_t t = 0; t < s.length; ++t) {
        int64_t at = (line * s.length + t) * s.state;
        for (int64_t n = 0; n < s.state; ++n)
          hs[at + n] =
              a[at + n] * (t ? hs[at - s.state + n] : 0.0f) + x[at + n];
      }
  });
  parallelFor(s.batch * s.length, 2 * s.channels * s.state,
              [&](int64_t begin, int64_t end) {
                for (int64_t row = begin; row < end; ++row) {
                  int64_t b = row / s.length, t = row % s.length;
                  float *out = dc.data() + row * s.state;
                  std::fill(out, out + s.state, 0.0f);
                  for (int64_t d = 0; d < s.channels; ++d) {
                    int64_t line = b * s.channels + d;
                    float g = dy[line * s.length + t];
                    const float *h = hs + (line * s.length + t) * s.state;
                    for (int64_t n = 0; n < s.state; ++n)
                      out[n] += g * h[n];
                  }
                }
              });
  parallelFor(lines, lineWork, [&](int64_t begin, int64_t end) {
    std::vector<float> carry(s.state);
    for (int64_t line = begin; line < end; ++line) {
      int64_t b = line / s.channels;
      std::fill(carry.begin(), carry.end(), 0.0f);
      for (int64_t t = s.length - 1; t >= 0; --t) {
        int64_t at = (line * s.length + t) * s.state;
        const float *ct = c.data() + (b * s.length + t) * s.state;
        float g = dy[line * s.length + t];
        for (int64_t n = 0; n < s.state; ++n) {
          float total = g * ct[n] + carry[n];
          dx.data()[at + n] = total;
          hs[at + n] = total * (t ? hs[at - s.state + n] : 0.0f);
          carry[n] = a[at + n] * total;
        }
      }
    }
  });
  da.commit();
  dx.commit();
  dc.commit();
  return llvm::Error::success();
}

} // namespace

void registerLinalgKernels(KernelRegistry &registry) {
  registry.add("dtc.cumsum", cumSumKernel);
  registry.add("dtc.matmul", matmulKernel);
  registry.add("dtc.reduce_sum", reduceKernel<ReduceKind::Sum>);
  registry.add("dtc.reduce_mean", reduceKernel<ReduceKind::Mean>);
  registry.add("dtc.reduce_max", reduceKernel<ReduceKind::Max>);
  registry.add("dtc.selective_scan", selectiveScanKernel);
  registry.add("dtc.selective_scan_grad", selectiveScanGradKernel);
}

} // namespace dtc::runtime::cpu
