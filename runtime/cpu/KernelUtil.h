//===- KernelUtil.h - Helpers shared by the CPU kernels ---------*- C++ -*-===//
//
// Internal to runtime/cpu: strides, numpy broadcasting, dtype conversion of
// whole tensors to and from f32 work buffers, checks that return KernelCall
// errors, a vectorizable exp, and the thread-count-independent tiled sgemm
// every GEMM goes through.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CPU_KERNELUTIL_H
#define DTC_RUNTIME_CPU_KERNELUTIL_H

#include "runtime/core/Kernel.h"

#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <type_traits>
#include <vector>

namespace dtc::runtime::cpu {

// stridesOf and broadcastStrides are in runtime/core/Tensor.h.

/// Reads any tensor as f32 values into `out` (resized).
void loadF32(const TensorRef &t, std::vector<float> &out);
/// Writes f32 values into a float tensor of any float dtype (bf16/f16 round
/// to nearest even, f64 widens).
void storeF32(const float *values, const TensorRef &t);

/// The values of an integer tensor (ids, labels), each checked to lie in
/// [0, limit) unless it is `ignore`; the error names `what` ("id",
/// "label"), the value and its position.
llvm::Expected<std::vector<int64_t>>
readIndices(const KernelCall &call, const TensorRef &t, int64_t limit,
            llvm::StringRef what, std::optional<int64_t> ignore = {});

/// Indices along an axis of `size` elements read as i64 and normalized the
/// ONNX way: a negative one counts from the end; one outside [-size, size)
/// is an error.
llvm::Expected<std::vector<int64_t>>
readAxisIndices(const KernelCall &call, const TensorRef &t, int64_t size);

/// An input as a contiguous f32 array: the tensor's own memory when it is
/// f32, a converted copy otherwise.
class F32In {
public:
  explicit F32In(const TensorRef &t) {
    if (t.dtype == DType::F32) {
      ptr_ = t.f32();
    } else {
      loadF32(t, copy_);
      ptr_ = copy_.data();
    }
  }
  const float *data() const { return ptr_; }
  float operator[](int64_t i) const { return ptr_[i]; }

private:
  std::vector<float> copy_;
  const float *ptr_ = nullptr;
};

/// An output written as f32: the tensor's memory when it is f32, a scratch
/// buffer converted into the tensor by commit() otherwise.
class F32Out {
public:
  explicit F32Out(const TensorRef &t) : ref_(t) {
    if (t.dtype == DType::F32) {
      ptr_ = t.f32();
    } else {
      scratch_.assign(t.numElements(), 0.0f);
      ptr_ = scratch_.data();
    }
  }
  float *data() const { return ptr_; }
  void commit() const {
    if (ref_.dtype != DType::F32)
      storeF32(ptr_, ref_);
  }

private:
  const TensorRef &ref_;
  std::vector<float> scratch_;
  float *ptr_ = nullptr;
};

// expectFloat, expectShape, expectArity and shapeString, shared with every
// backend, are in runtime/core/Kernel.h.

/// Merges adjacent dimensions that every operand (one stride vector each,
/// all of the same rank as `shape`) traverses contiguously, so loops run
/// over as few and as long dimensions as possible. Updates all in place.
void collapseDims(llvm::SmallVectorImpl<int64_t> &shape,
                  llvm::MutableArrayRef<llvm::SmallVector<int64_t, 6>> strides);

/// Converts every element of `src` into `dst` (same element count, any
/// dtype pair): floats to integers truncate toward zero (NaN gives 0, out of
/// range values saturate), anything to i1 is `!= 0`, bf16/f16 round to
/// nearest even.
void castTensor(const TensorRef &src, const TensorRef &dst);

/// exp(x) in f32 within 2 ulp (Cephes' expf polynomial), written so that
/// loops over it vectorize (glibc's expf does not): softmax, attention and
/// cross-entropy spend most of their time here. exp(-inf) is exactly 0,
/// overflow gives +inf, NaN stays NaN.
inline float fastExp(float x) {
  const float kLog2e = 1.44269504088896341f;
  float clamped = std::min(std::max(x, -87.0f), 88.0f);
  // Round to nearest by adding and removing 1.5 * 2^23 (no branches); the
  // biased sum holds n = round(x log2(e)) in its low mantissa bits.
  float biased = clamped * kLog2e + 12582912.0f;
  float fn = biased - 12582912.0f;
  // r = x - n ln2 in two steps (ln2 = 0.693359375 - 2.12194440e-4).
  float r = clamped - fn * 0.693359375f + fn * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float e = p * r * r + r + 1.0f;
  // 2^n from those bits in unsigned arithmetic: NaN reaches here unclamped
  // (its result is discarded below), and converting it to int32_t or
  // shifting a negative int would be undefined behaviour.
  uint32_t bits;
  std::memcpy(&bits, &biased, sizeof(bits));
  bits = (bits + 127u) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  float result = e * scale;
  result = x < -87.0f ? 0.0f : result;
  result = x > 88.0f ? std::numeric_limits<float>::infinity() : result;
  return x == x ? result : x;
}

/// erfc(z) for z >= 0 with relative error below 1.2e-7 (Numerical Recipes'
/// Chebyshev fit), vectorizable through fastExp.
inline float erfcNonNegative(float z) {
  float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * fastExp(-z * z + p);
}

/// Row-major C[m, n] = alpha * op(A) op(B) (op: optional transpose) through
/// single-threaded OpenBLAS calls on tiles of C (256 columns, 128-512 rows,
/// chosen from the shape), the tiles split across threads (Parallel.h). The
/// tiling does not depend on the thread count, so neither do the results.
void parallelSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                   float alpha, const float *a, int64_t lda, const float *b,
                   int64_t ldb, float *c, int64_t ldc);

/// Calls `fn(std::integral_constant<DType, D>{})` for the runtime dtype;
/// returns false for an unknown dtype.
template <typename Fn> bool dispatchDType(DType dtype, Fn &&fn) {
  switch (dtype) {
  case DType::F32:
    fn(std::integral_constant<DType, DType::F32>{});
    return true;
  case DType::F64:
    fn(std::integral_constant<DType, DType::F64>{});
    return true;
  case DType::BF16:
    fn(std::integral_constant<DType, DType::BF16>{});
    return true;
  case DType::F16:
    fn(std::integral_constant<DType, DType::F16>{});
    return true;
  case DType::I64:
    fn(std::integral_constant<DType, DType::I64>{});
    return true;
  case DType::I32:
    fn(std::integral_constant<DType, DType::I32>{});
    return true;
  case DType::I8:
    fn(std::integral_constant<DType, DType::I8>{});
    return true;
  case DType::BOOL:
    fn(std::integral_constant<DType, DType::BOOL>{});
    return true;
  default:
    return false;
  }
}

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_KERNELUTIL_H
