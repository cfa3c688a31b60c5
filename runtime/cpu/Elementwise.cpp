//===- Elementwise.cpp - Unary, binary and cast kernels -------------------===//
//
// Unary ops run on float tensors (f32 and f64 natively, bf16/f16 through
// f32). Binary ops broadcast like numpy over any dtype; operands of another
// dtype than the result are cast to it first. Loops run over the collapsed
// shape so the innermost loop is long and contiguous; rows are split across
// threads, each output written by exactly one thread.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Elementwise.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace dtc::runtime::cpu {

namespace {

//===----------------------------------------------------------------------===//
// Element access per dtype
//===----------------------------------------------------------------------===//

template <DType D> struct Elem;
template <> struct Elem<DType::F32> {
  using S = float;
  static constexpr bool kFloat = true;
  static double load(S v) { return v; }
  static S fromDouble(double v) { return static_cast<float>(v); }
  static S fromInt(int64_t v) { return static_cast<float>(v); }
};
template <> struct Elem<DType::F64> {
  using S = double;
  static constexpr bool kFloat = true;
  static double load(S v) { return v; }
  static S fromDouble(double v) { return v; }
  static S fromInt(int64_t v) { return static_cast<double>(v); }
};
template <> struct Elem<DType::BF16> {
  using S = uint16_t;
  static constexpr bool kFloat = true;
  static double load(S v) { return bf16ToFloat(v); }
  static S fromDouble(double v) { return floatToBF16(static_cast<float>(v)); }
  static S fromInt(int64_t v) { return floatToBF16(static_cast<float>(v)); }
};
template <> struct Elem<DType::F16> {
  using S = uint16_t;
  static constexpr bool kFloat = true;
  static double load(S v) { return halfToFloat(v); }
  static S fromDouble(double v) { return floatToHalf(static_cast<float>(v)); }
  static S fromInt(int64_t v) { return floatToHalf(static_cast<float>(v)); }
};
template <typename T> struct IntElem {
  using S = T;
  static constexpr bool kFloat = false;
  static int64_t load(S v) { return v; }
  static S fromDouble(double v) {
    if (std::isnan(v))
      return 0;
    if (v <= static_cast<double>(std::numeric_limits<T>::min()))
      return std::numeric_limits<T>::min();
    if (v >= static_cast<double>(std::numeric_limits<T>::max()))
      return std::numeric_limits<T>::max();
    return static_cast<T>(v); // truncates toward zero
  }
  static S fromInt(int64_t v) { return static_cast<T>(v); }
};
template <> struct Elem<DType::I64> : IntElem<int64_t> {};
template <> struct Elem<DType::I32> : IntElem<int32_t> {};
template <> struct Elem<DType::I8> : IntElem<int8_t> {};
template <> struct Elem<DType::BOOL> {
  using S = uint8_t;
  static constexpr bool kFloat = false;
  static int64_t load(S v) { return v != 0; }
  static S fromDouble(double v) { return v != 0; }
  static S fromInt(int64_t v) { return v != 0; }
};

template <DType From, DType To>
void castLoop(const TensorRef &src, const TensorRef &dst) {
  using In = Elem<From>;
  using Out = Elem<To>;
  const auto *in = src.as<typename In::S>();
  auto *out = dst.as<typename Out::S>();
  int64_t n = src.numElements();
  parallelFor(n, kWorkCopy, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if constexpr (In::kFloat)
        out[i] = Out::fromDouble(In::load(in[i]));
      else
        out[i] = Out::fromInt(In::load(in[i]));
    }
  });
}

//===----------------------------------------------------------------------===//
// Unary ops
//===----------------------------------------------------------------------===//

// Each op is a generic functor so that f32 runs in float and f64 in double.
struct Neg {
  static constexpr int64_t kWork = kWorkCopy;
  template <typename T> T operator()(T x) const { return -x; }
};
struct Abs {
  static constexpr int64_t kWork = kWorkCopy;
  template <typename T> T operator()(T x) const { return std::fabs(x); }
};
struct Exp {
  static constexpr int64_t kWork = kWorkTranscendental;
  template <typename T> T operator()(T x) const { return std::exp(x); }
};
struct Log {
  static constexpr int64_t kWork = kWorkTranscendental;
  template <typename T> T operator()(T x) const { return std::log(x); }
};
struct Sqrt {
  static constexpr int64_t kWork = kWorkDivide;
  template <typename T> T operator()(T x) const { return std::sqrt(x); }
};
struct Rsqrt {
  static constexpr int64_t kWork = kWorkDivide;
  template <typename T> T operator()(T x) const { return T(1) / std::sqrt(x); }
};
struct Reciprocal {
  static constexpr int64_t kWork = kWorkDivide;
  template <typename T> T operator()(T x) const { return T(1) / x; }
};
struct Tanh {
  static constexpr int64_t kWork = kWorkTranscendental;
  template <typename T> T operator()(T x) const { return std::tanh(x); }
};
struct Erf {
  static constexpr int64_t kWork = kWorkTranscendental;
  template <typename T> T operator()(T x) const { return std::erf(x); }
};
/// exp for the fused activations: the vectorizable fastExp in f32.
inline float activationExp(float x) { return fastExp(x); }
inline double activationExp(double x) { return std::exp(x); }

struct Sigmoid {
  static constexpr int64_t kWork = kWorkTranscendental;
  template <typename T> T operator()(T x) const {
    return T(1) / (T(1) + activationExp(-x));
  }
};
/// log(1 + e^x) as max(x, 0) + log1p(e^-|x|): no overflow for large x and
/// full precision for very negative x, where the result is e^x.
struct Softplus {
  static constexpr int64_t kWork = kWorkTranscendental;
  template <typename T> T operator()(T x) const {
    return std::max(x, T(0)) + std::log1p(std::exp(-std::abs(x)));
  }
};
struct Relu {
  static constexpr int64_t kWork = kWorkCopy;
  // NaN stays NaN, as in PyTorch.
  template <typename T> T operator()(T x) const { return x < T(0) ? T(0) : x; }
};
struct Silu {
  static constexpr int64_t kWork = kWorkTranscendental;
  template <typename T> T operator()(T x) const {
    return x / (T(1) + activationExp(-x));
  }
};

struct GeluErf {
  static constexpr int64_t kWork = kWorkTranscendental;
  // x Phi(x) = 0.5 x erfc(-x / sqrt 2): through erfc of |x| / sqrt 2 so
  // that both tails keep their relative accuracy.
  float operator()(float x) const {
    float c = erfcNonNegative(std::fabs(x) * float(M_SQRT1_2));
    return 0.5f * x * (x >= 0 ? 2.0f - c : c);
  }
  double operator()(double x) const {
    return 0.5 * x * (1 + std::erf(x * M_SQRT1_2));
  }
};
struct GeluTanh {
  static constexpr int64_t kWork = kWorkTranscendental;
  // 0.5 x (1 + tanh(u)) = x sigmoid(2u): the same function without tanh,
  // whose libm version is slow and does not vectorize.
  template <typename T> T operator()(T x) const {
    const T k = T(2 * 0.7978845608028654); // 2 sqrt(2 / pi)
    return x / (T(1) + activationExp(-k * (x + T(0.044715) * x * x * x)));
  }
};

template <typename T, typename Op>
void unaryLoop(const T *in, T *out, int64_t n, Op op) {
  parallelFor(n, Op::kWork, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i)
      out[i] = op(in[i]);
  });
}

template <typename Op> llvm::Error runUnary(const KernelCall &call, Op op) {
  if (llvm::Error err = checkUnary(call))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  int64_t n = in.numElements();
  if (in.dtype == DType::F64) {
    unaryLoop(in.as<double>(), out.as<double>(), n, op);
    return llvm::Error::success();
  }
  F32In x(in);
  F32Out y(out);
  unaryLoop(x.data(), y.data(), n, op);
  y.commit();
  return llvm::Error::success();
}

template <typename Op> llvm::Error unaryKernel(const KernelCall &call) {
  return runUnary(call, Op());
}

llvm::Error geluKernel(const KernelCall &call) {
  if (call.flag("approximate_tanh"))
    return runUnary(call, GeluTanh());
  return runUnary(call, GeluErf());
}

llvm::Error castKernel(const KernelCall &call) {
  if (llvm::Error err = checkCast(call))
    return err;
  castTensor(call.input(0), call.output(0));
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Binary ops
//===----------------------------------------------------------------------===//

struct Add {
  static constexpr int64_t kWork = kWorkCopy;
  template <typename T> T operator()(T a, T b) const { return a + b; }
};
struct Sub {
  static constexpr int64_t kWork = kWorkCopy;
  template <typename T> T operator()(T a, T b) const { return a - b; }
};
struct Mul {
  static constexpr int64_t kWork = kWorkCopy;
  template <typename T> T operator()(T a, T b) const { return a * b; }
};
struct Div {
  static constexpr int64_t kWork = kWorkDivide;
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      // Integer division truncates toward zero; x / 0 gives 0 instead of a
      // trap, and MIN / -1 wraps.
      if (b == 0)
        return 0;
      if (b == -1)
        return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
    }
    return a / b;
  }
};
struct Max {
  static constexpr int64_t kWork = kWorkCopy;
  // NaN propagates (numpy/PyTorch maximum).
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (a != a)
        return a;
    return a > b ? a : b;
  }
};
struct Min {
  static constexpr int64_t kWork = kWorkCopy;
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      if (a != a)
        return a;
    return a < b ? a : b;
  }
};
struct Pow {
  static constexpr int64_t kWork = kWorkTranscendental;
  template <typename T> T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(
          std::pow(static_cast<double>(a), static_cast<double>(b)));
    else
      return std::pow(a, b);
  }
};

/// out = op(a, b) over a collapsed broadcast iteration space: `shape` with
/// per-operand strides (the output is contiguous).
template <typename T, typename Op>
void binaryLoop(const T *a, const T *b, T *out, llvm::ArrayRef<int64_t> shape,
                llvm::ArrayRef<int64_t> sa, llvm::ArrayRef<int64_t> sb, Op op) {
  int64_t rank = shape.size();
  int64_t inner = shape[rank - 1];
  int64_t ia = sa[rank - 1], ib = sb[rank - 1];
  int64_t rows = numElements(shape) / inner;
  if (rows == 1) {
    // One long row (same-shape operands land here): split the row itself.
    parallelFor(inner, Op::kWork, [&](int64_t begin, int64_t end) {
      if (ia == 1 && ib == 1) {
        for (int64_t i = begin; i < end; ++i)
          out[i] = op(a[i], b[i]);
      } else {
        for (int64_t i = begin; i < end; ++i)
          out[i] = op(a[i * ia], b[i * ib]);
      }
    });
    return;
  }
  parallelFor(rows, inner * Op::kWork, [&](int64_t firstRow, int64_t endRow) {
    for (int64_t row = firstRow; row < endRow; ++row) {
      int64_t offA = 0, offB = 0, rest = row;
      for (int64_t d = rank - 2; d >= 0; --d) {
        int64_t idx = rest % shape[d];
        rest /= shape[d];
        offA += idx * sa[d];
        offB += idx * sb[d];
      }
      const T *pa = a + offA;
      const T *pb = b + offB;
      T *po = out + row * inner;
      if (ia == 1 && ib == 1) {
        for (int64_t i = 0; i < inner; ++i)
          po[i] = op(pa[i], pb[i]);
      } else if (ia == 0 && ib == 1) {
        T va = pa[0];
        for (int64_t i = 0; i < inner; ++i)
          po[i] = op(va, pb[i]);
      } else if (ia == 1 && ib == 0) {
        T vb = pb[0];
        for (int64_t i = 0; i < inner; ++i)
          po[i] = op(pa[i], vb);
      } else {
        for (int64_t i = 0; i < inner; ++i)
          po[i] = op(pa[i * ia], pb[i * ib]);
      }
    }
  });
}

template <typename Op> llvm::Error binaryKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return err;
  const TensorRef &out = call.output(0);
  llvm::SmallVector<int64_t, 6> shape(out.shape.begin(), out.shape.end());
  llvm::SmallVector<int64_t, 6> strides[2];
  for (int i = 0; i < 2; ++i)
    if (!broadcastStrides(call.input(i).shape, shape, strides[i]))
      return call.error("operand " + llvm::Twine(i) + " of shape " +
                        shapeString(call.input(i).shape) +
                        " does not broadcast to the result " +
                        shapeString(shape));
  if (out.numElements() == 0)
    return llvm::Error::success();
  if (dtypeSize(out.dtype) == 0)
    return call.error("unsupported dtype " + dtypeName(out.dtype));

  // Operands of another dtype (or bf16/f16, computed in f32) are converted.
  DType work = out.dtype == DType::BF16 || out.dtype == DType::F16 ? DType::F32
                                                                   : out.dtype;
  Tensor converted[2];
  const void *data[2];
  for (int i = 0; i < 2; ++i) {
    const TensorRef &in = call.input(i);
    data[i] = in.data;
    if (in.dtype != work) {
      converted[i] = Tensor(work, in.shape);
      castTensor(in, converted[i].ref());
      data[i] = converted[i].data();
    }
  }
  Tensor scratch;
  void *result = out.data;
  if (work != out.dtype) {
    scratch = Tensor(work, out.shape);
    result = scratch.data();
  }
  collapseDims(shape, strides);
  dispatchDType(work, [&](auto dtype) {
    using T = typename Elem<decltype(dtype)::value>::S;
    binaryLoop(static_cast<const T *>(data[0]), static_cast<const T *>(data[1]),
               static_cast<T *>(result), shape, strides[0], strides[1], Op());
  });
  if (work == DType::BOOL) {
    uint8_t *bits = out.as<uint8_t>();
    for (int64_t i = 0, e = out.numElements(); i < e; ++i)
      bits[i] = bits[i] != 0;
  }
  if (work != out.dtype)
    castTensor(scratch.ref(), out);
  return llvm::Error::success();
}

} // namespace

void castTensor(const TensorRef &src, const TensorRef &dst) {
  if (src.dtype == dst.dtype) {
    if (src.data != dst.data)
      std::memcpy(dst.data, src.data, src.bytes());
    return;
  }
  dispatchDType(src.dtype, [&](auto from) {
    dispatchDType(dst.dtype, [&](auto to) {
      castLoop<decltype(from)::value, decltype(to)::value>(src, dst);
    });
  });
}

void registerElementwiseKernels(KernelRegistry &registry) {
  registry.add("dtc.neg", unaryKernel<Neg>);
  registry.add("dtc.abs", unaryKernel<Abs>);
  registry.add("dtc.exp", unaryKernel<Exp>);
  registry.add("dtc.log", unaryKernel<Log>);
  registry.add("dtc.sqrt", unaryKernel<Sqrt>);
  registry.add("dtc.rsqrt", unaryKernel<Rsqrt>);
  registry.add("dtc.reciprocal", unaryKernel<Reciprocal>);
  registry.add("dtc.tanh", unaryKernel<Tanh>);
  registry.add("dtc.erf", unaryKernel<Erf>);
  registry.add("dtc.sigmoid", unaryKernel<Sigmoid>);
  registry.add("dtc.softplus", unaryKernel<Softplus>);
  registry.add("dtc.relu", unaryKernel<Relu>);
  registry.add("dtc.silu", unaryKernel<Silu>);
  registry.add("dtc.gelu", geluKernel);
  registry.add("dtc.cast", castKernel);
  registry.add("dtc.add", binaryKernel<Add>);
  registry.add("dtc.sub", binaryKernel<Sub>);
  registry.add("dtc.mul", binaryKernel<Mul>);
  registry.add("dtc.div", binaryKernel<Div>);
  registry.add("dtc.max", binaryKernel<Max>);
  registry.add("dtc.min", binaryKernel<Min>);
  registry.add("dtc.pow", binaryKernel<Pow>);
}

} // namespace dtc::runtime::cpu
