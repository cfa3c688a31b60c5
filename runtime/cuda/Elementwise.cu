//===- Elementwise.cu - Unary, binary, compare, select, cast --------------===//
//
// The semantics of runtime/cpu/Elementwise.cpp and the compare/select of
// Gradient.cpp: f32 compute for f32/bf16/f16 (rounded on store), f64 in
// double, integers in int64 (wrapped to the result's width on store).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaCommon.cuh"

namespace dtc::cuda {

namespace {

template <typename T> __device__ T applyUnary(Unary op, T x) {
  switch (op) {
  case Unary::Neg:
    return -x;
  case Unary::Abs:
    return fabs(x);
  case Unary::Exp:
    return exp(x);
  case Unary::Log:
    return log(x);
  case Unary::Sqrt:
    return sqrt(x);
  case Unary::Rsqrt:
    return T(1) / sqrt(x);
  case Unary::Reciprocal:
    return T(1) / x;
  case Unary::Tanh:
    return tanh(x);
  case Unary::Erf:
    return erf(x);
  case Unary::Sigmoid:
    return T(1) / (T(1) + exp(-x));
  case Unary::Softplus: // As the CPU kernel: stable for either sign.
    return (x < T(0) ? T(0) : x) + log1p(exp(-fabs(x)));
  case Unary::Relu:
    return x < T(0) ? T(0) : x;
  case Unary::Silu:
    return x / (T(1) + exp(-x));
  case Unary::GeluErf:
    return T(0.5) * x * erfc(-x * T(0.70710678118654752));
  case Unary::GeluTanh: {
    const T k = T(2 * 0.7978845608028654);
    return x / (T(1) + exp(-k * (x + T(0.044715) * x * x * x)));
  }
  }
  return x;
}

__global__ void unaryKernel(Unary op, int dtype, const void *in, void *out,
                            int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (dtype == kF64)
      static_cast<double *>(out)[i] =
          applyUnary<double>(op, static_cast<const double *>(in)[i]);
    else
      storeF(out, dtype, i, applyUnary<float>(op, loadF(in, dtype, i)));
  }
}

template <typename T> __device__ T applyBinary(Binary op, T a, T b) {
  switch (op) {
  case Binary::Add:
    return a + b;
  case Binary::Sub:
    return a - b;
  case Binary::Mul:
    return a * b;
  case Binary::Div:
    return a / b;
  case Binary::Max:
    return a != a ? a : (a > b ? a : b);
  case Binary::Min:
    return a != a ? a : (a < b ? a : b);
  case Binary::Pow:
    return pow(a, b);
  }
  return a;
}

__device__ int64_t applyBinaryInt(Binary op, int64_t a, int64_t b, int dtype) {
  switch (op) {
  case Binary::Add:
    return a + b;
  case Binary::Sub:
    return a - b;
  case Binary::Mul:
    return static_cast<int64_t>(static_cast<uint64_t>(a) *
                                static_cast<uint64_t>(b));
  case Binary::Div:
    // Truncating; x / 0 is 0; MIN / -1 wraps (in the result's width).
    if (b == 0)
      return 0;
    if (b == -1)
      return static_cast<int64_t>(0 - static_cast<uint64_t>(a));
    if (dtype == kBool)
      return static_cast<uint8_t>(a) / static_cast<uint8_t>(b);
    return a / b;
  case Binary::Max:
    return a > b ? a : b;
  case Binary::Min:
    return a < b ? a : b;
  case Binary::Pow: {
    double p = pow(static_cast<double>(a), static_cast<double>(b));
    // The CPU converts pow's double through the result type.
    if (p != p)
      return 0;
    if (p >= 9.2233720368547758e18)
      return INT64_MAX;
    if (p <= -9.2233720368547758e18)
      return INT64_MIN;
    return static_cast<int64_t>(p);
  }
  }
  return a;
}

/// A float as integer dtype `dtype` the way castTensor converts it: NaN to
/// 0, saturated to the dtype's range, truncated; bool is v != 0.
__device__ int64_t floatToInt(double v, int dtype) {
  if (dtype == kBool)
    return v != 0;
  if (v != v)
    return 0;
  double lo = dtype == kI32  ? -2147483648.0
              : dtype == kI8 ? -128.0
                             : -9.2233720368547758e18;
  double hi = dtype == kI32  ? 2147483647.0
              : dtype == kI8 ? 127.0
                             : 9.2233720368547758e18;
  if (v <= lo)
    return dtype == kI64 ? INT64_MIN : static_cast<int64_t>(lo);
  if (v >= hi)
    return dtype == kI64 ? INT64_MAX : static_cast<int64_t>(hi);
  return static_cast<int64_t>(v);
}

/// Operand element `i` converted to the integer result dtype.
__device__ int64_t toResultInt(const void *p, int dtype, int64_t i,
                               int outDtype) {
  if (isFloatCode(dtype))
    return floatToInt(loadD(p, dtype, i), outDtype);
  int64_t x = loadI(p, dtype, i);
  if (dtype != outDtype) {
    storeI(&x, outDtype, 0, x);
    x = loadI(&x, outDtype, 0);
  }
  return x;
}

__global__ void binaryKernel(Binary op, int outDtype, const void *a, int aDtype,
                             const void *b, int bDtype, void *out,
                             Layout layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t ia = layoutOffset(layout, 0, i), ib = layoutOffset(layout, 1, i);
    if (outDtype == kF64) {
      static_cast<double *>(out)[i] =
          applyBinary<double>(op, loadD(a, aDtype, ia), loadD(b, bDtype, ib));
    } else if (isFloatCode(outDtype)) {
      // f32 work for f32/bf16/f16 results (as the CPU kernel): operands
      // are read as f32, only the result rounds.
      storeF(
          out, outDtype, i,
          applyBinary<float>(op, loadF(a, aDtype, ia), loadF(b, bDtype, ib)));
    } else {
      // Integers: operands as the result type (integers wrap, floats
      // saturate, as castTensor converts them).
      int64_t x = toResultInt(a, aDtype, ia, outDtype),
              y = toResultInt(b, bDtype, ib, outDtype);
      storeI(out, outDtype, i, applyBinaryInt(op, x, y, outDtype));
    }
  }
}

__global__ void compareKernel(Predicate pred, int dtype, const void *a,
                              const void *b, uint8_t *out, Layout layout,
                              int64_t n) {
  bool integer = !isFloatCode(dtype);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t ia = layoutOffset(layout, 0, i), ib = layoutOffset(layout, 1, i);
    out[i] =
        integer
            ? applyPredicate(pred, loadI(a, dtype, ia), loadI(b, dtype, ib))
            : applyPredicate(pred, loadD(a, dtype, ia), loadD(b, dtype, ib));
  }
}

template <typename T>
__global__ void selectKernel(const uint8_t *cond, const T *onTrue,
                             const T *onFalse, T *out, Layout layout,
                             int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = cond[layoutOffset(layout, 2, i)]
                 ? onTrue[layoutOffset(layout, 0, i)]
                 : onFalse[layoutOffset(layout, 1, i)];
}

__global__ void castKernel(int srcDtype, const void *src, int dstDtype,
                           void *dst, int64_t n) {
  bool fromFloat = isFloatCode(srcDtype);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    if (dstDtype == kBool) {
      static_cast<uint8_t *>(dst)[i] = fromFloat ? loadD(src, srcDtype, i) != 0
                                                 : loadI(src, srcDtype, i) != 0;
    } else if (isFloatCode(dstDtype)) {
      if (fromFloat)
        storeD(dst, dstDtype, i, loadD(src, srcDtype, i));
      else if (dstDtype == kF64)
        storeD(dst, dstDtype, i, static_cast<double>(loadI(src, srcDtype, i)));
      else // int64 -> float directly, as the CPU (no double rounding)
        storeF(dst, dstDtype, i, static_cast<float>(loadI(src, srcDtype, i)));
    } else if (fromFloat) {
      storeI(dst, dstDtype, i, floatToInt(loadD(src, srcDtype, i), dstDtype));
    } else {
      storeI(dst, dstDtype, i, loadI(src, srcDtype, i));
    }
  }
}

__device__ float activationDerivative(ActivationGrad op, float x) {
  switch (op) {
  case ActivationGrad::GeluErf:
    return 0.5f * (1.0f + erff(x * 0.70710678118654752f)) +
           x * 0.3989422804014327f * expf(-0.5f * x * x);
  case ActivationGrad::GeluTanh: {
    const float k = 0.7978845608028654f, c = 0.044715f;
    float t = tanhf(k * (x + c * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * k * (1.0f + 3.0f * c * x * x);
  }
  case ActivationGrad::Silu: {
    float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f + x * (1.0f - s));
  }
  }
  return 0;
}

__global__ void activationGradKernel(ActivationGrad op, int dtype,
                                     const void *x, int dyDtype, const void *dy,
                                     int outDtype, void *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    storeF(out, outDtype, i,
           loadF(dy, dyDtype, i) *
               activationDerivative(op, loadF(x, dtype, i)));
}

} // namespace

std::string unary(Unary op, int dtype, const void *in, void *out, int64_t n) {
  if (n == 0)
    return "";
  unaryKernel<<<blocksFor(n), 256, 0, computeStream()>>>(op, dtype, in, out, n);
  return launched("unary kernel");
}

std::string binary(Binary op, int outDtype, const void *a, int aDtype,
                   const void *b, int bDtype, void *out, const Layout &layout) {
  int64_t n = layoutElements(layout);
  if (n == 0)
    return "";
  binaryKernel<<<blocksFor(n), 256, 0, computeStream()>>>(
      op, outDtype, a, aDtype, b, bDtype, out, layout, n);
  return launched("binary kernel");
}

std::string compare(Predicate pred, int dtype, const void *a, const void *b,
                    uint8_t *out, const Layout &layout) {
  int64_t n = layoutElements(layout);
  if (n == 0)
    return "";
  compareKernel<<<blocksFor(n), 256, 0, computeStream()>>>(pred, dtype, a, b,
                                                           out, layout, n);
  return launched("compare kernel");
}

std::string select(const uint8_t *cond, const void *onTrue, const void *onFalse,
                   void *out, int elemSize, const Layout &layout) {
  int64_t n = layoutElements(layout);
  if (n == 0)
    return "";
  unsigned blocks = blocksFor(n);
  cudaStream_t s = computeStream();
  switch (elemSize) {
  case 1:
    selectKernel<<<blocks, 256, 0, s>>>(cond,
                                        static_cast<const uint8_t *>(onTrue),
                                        static_cast<const uint8_t *>(onFalse),
                                        static_cast<uint8_t *>(out), layout, n);
    break;
  case 2:
    selectKernel<<<blocks, 256, 0, s>>>(
        cond, static_cast<const uint16_t *>(onTrue),
        static_cast<const uint16_t *>(onFalse), static_cast<uint16_t *>(out),
        layout, n);
    break;
  case 4:
    selectKernel<<<blocks, 256, 0, s>>>(
        cond, static_cast<const uint32_t *>(onTrue),
        static_cast<const uint32_t *>(onFalse), static_cast<uint32_t *>(out),
        layout, n);
    break;
  case 8:
    selectKernel<<<blocks, 256, 0, s>>>(
        cond, static_cast<const uint64_t *>(onTrue),
        static_cast<const uint64_t *>(onFalse), static_cast<uint64_t *>(out),
        layout, n);
    break;
  default:
    return "select: unsupported element size";
  }
  return launched("select kernel");
}

std::string cast(int srcDtype, const void *src, int dstDtype, void *dst,
                 int64_t n) {
  if (n == 0)
    return "";
  if (srcDtype == dstDtype) {
    static const int sizes[] = {0, 4, 2, 2, 8, 8, 4, 1, 1};
    return copy(dst, src, n * sizes[srcDtype], 2);
  }
  castKernel<<<blocksFor(n), 256, 0, computeStream()>>>(srcDtype, src, dstDtype,
                                                        dst, n);
  return launched("cast kernel");
}

std::string activationGrad(ActivationGrad op, int dtype, const void *x,
                           int dyDtype, const void *dy, int outDtype, void *out,
                           int64_t n) {
  if (n == 0)
    return "";
  activationGradKernel<<<blocksFor(n), 256, 0, computeStream()>>>(
      op, dtype, x, dyDtype, dy, outDtype, out, n);
  return launched("activation gradient kernel");
}

} // namespace dtc::cuda
