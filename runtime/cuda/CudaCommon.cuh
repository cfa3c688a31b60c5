//===- CudaCommon.cuh - Helpers shared by the .cu files ---------*- C++ -*-===//
//
// Internal to runtime/cuda (nvcc only): dtype loads and stores in f32/f64,
// launch checks, the error word, stream-ordered scratch memory.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CUDA_CUDACOMMON_CUH
#define DTC_RUNTIME_CUDA_CUDACOMMON_CUH

#include "runtime/cuda/CudaOps.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

namespace dtc::cuda {

cudaStream_t computeStream();
/// The device error word (an int in device memory).
int *errorWord();

inline std::string failure(const char *what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorString(err);
}

/// "" when the last launch was accepted.
inline std::string launched(const char *what) {
  cudaError_t err = cudaGetLastError();
  return err == cudaSuccess ? std::string() : failure(what, err);
}

inline unsigned blocksFor(int64_t n, int threads = 256) {
  int64_t blocks = (n + threads - 1) / threads;
  // Grid-stride loops cover the rest.
  return static_cast<unsigned>(blocks < 65535 * 8 ? (blocks ? blocks : 1)
                                                  : 65535 * 8);
}

/// Stream-ordered scratch, freed at scope exit (stream-ordered too).
class Scratch {
public:
  explicit Scratch(size_t bytes) {
    if (cudaMallocAsync(&ptr_, bytes ? bytes : 1, computeStream()) !=
        cudaSuccess) {
      // The caller reports the failure; clear it so that the next launch
      // check does not take it for its own.
      cudaGetLastError();
      ptr_ = nullptr;
    }
  }
  ~Scratch() {
    if (ptr_)
      cudaFreeAsync(ptr_, computeStream());
  }
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  template <typename T> T *as() const { return static_cast<T *>(ptr_); }
  explicit operator bool() const { return ptr_ != nullptr; }

private:
  void *ptr_ = nullptr;
};

__device__ __forceinline__ float loadF(const void *p, int dtype, int64_t i) {
  switch (dtype) {
  case kF32:
    return static_cast<const float *>(p)[i];
  case kBF16:
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
  case kF16:
    return __half2float(static_cast<const __half *>(p)[i]);
  case kF64:
    return static_cast<float>(static_cast<const double *>(p)[i]);
  case kI64:
    return static_cast<float>(static_cast<const int64_t *>(p)[i]);
  case kI32:
    return static_cast<float>(static_cast<const int32_t *>(p)[i]);
  case kI8:
    return static_cast<float>(static_cast<const int8_t *>(p)[i]);
  default:
    return static_cast<const uint8_t *>(p)[i] != 0;
  }
}

__device__ __forceinline__ bool isFloatCode(int dtype) {
  return dtype == kF32 || dtype == kF16 || dtype == kBF16 || dtype == kF64;
}

/// Element `i` of an integer (or bool) buffer.
__device__ __forceinline__ int64_t loadInteger(const void *p, int dtype,
                                               int64_t i) {
  switch (dtype) {
  case kI64:
    return static_cast<const int64_t *>(p)[i];
  case kI32:
    return static_cast<const int32_t *>(p)[i];
  case kI8:
    return static_cast<const int8_t *>(p)[i];
  default:
    return static_cast<const uint8_t *>(p)[i] != 0;
  }
}

/// Integers read exactly (i64 rounds once), floats widened.
__device__ __forceinline__ double loadD(const void *p, int dtype, int64_t i) {
  if (dtype == kF64)
    return static_cast<const double *>(p)[i];
  if (!isFloatCode(dtype))
    return static_cast<double>(loadInteger(p, dtype, i));
  return loadF(p, dtype, i);
}

__device__ __forceinline__ int64_t loadI(const void *p, int dtype, int64_t i) {
  switch (dtype) {
  case kI64:
  case kI32:
  case kI8:
  case kBool:
    return loadInteger(p, dtype, i);
  default: {
    // Float to integer: truncate, NaN to 0, saturate (castTensor's rule).
    double v = loadD(p, dtype, i);
    if (v != v)
      return 0;
    if (v <= -9.2233720368547758e18)
      return INT64_MIN;
    if (v >= 9.2233720368547758e18)
      return INT64_MAX;
    return static_cast<int64_t>(v);
  }
  }
}

/// Float stores round to nearest even (bf16, f16).
__device__ __forceinline__ void storeF(void *p, int dtype, int64_t i, float v) {
  switch (dtype) {
  case kF32:
    static_cast<float *>(p)[i] = v;
    return;
  case kBF16:
    static_cast<__nv_bfloat16 *>(p)[i] = __float2bfloat16_rn(v);
    return;
  case kF16:
    static_cast<__half *>(p)[i] = __float2half_rn(v);
    return;
  case kF64:
    static_cast<double *>(p)[i] = v;
    return;
  default:
    return;
  }
}

__device__ __forceinline__ void storeD(void *p, int dtype, int64_t i,
                                       double v) {
  if (dtype == kF64)
    static_cast<double *>(p)[i] = v;
  else
    storeF(p, dtype, i, static_cast<float>(v));
}

/// Integer stores: saturating from double like castTensor, wrapping from
/// integers.
__device__ __forceinline__ void storeI(void *p, int dtype, int64_t i,
                                       int64_t v) {
  switch (dtype) {
  case kI64:
    static_cast<int64_t *>(p)[i] = v;
    return;
  case kI32:
    static_cast<int32_t *>(p)[i] = static_cast<int32_t>(v);
    return;
  case kI8:
    static_cast<int8_t *>(p)[i] = static_cast<int8_t>(v);
    return;
  case kBool:
    static_cast<uint8_t *>(p)[i] = v != 0;
    return;
  default:
    storeD(p, dtype, i, static_cast<double>(v));
  }
}

/// Offset into an operand of the flat output index `index`.
__device__ __forceinline__ int64_t layoutOffset(const Layout &l, int operand,
                                                int64_t index) {
  int64_t offset = 0;
  for (int d = l.rank - 1; d >= 0; --d) {
    int64_t extent = l.shape[d];
    offset += (index % extent) * l.strides[operand][d];
    index /= extent;
  }
  return offset;
}

inline int64_t layoutElements(const Layout &l) {
  int64_t n = 1;
  for (int d = 0; d < l.rank; ++d)
    n *= l.shape[d];
  return n;
}

/// Records `code` in the error word unless an earlier error is there.
__device__ __forceinline__ void flagError(int *word, int code) {
  atomicCAS(word, 0, code);
}

/// Block-wide sum (blockDim.x a multiple of 32, at most 1024); every thread
/// gets the result.
template <typename T> __device__ T blockSum(T v) {
  __shared__ T partial[32];
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  int warps = blockDim.x >> 5;
  T total = 0;
  for (int w = 0; w < warps; ++w)
    total += partial[w];
  return total;
}

__device__ __forceinline__ float blockMax(float v) {
  __shared__ float partial[32];
  for (int o = 16; o > 0; o >>= 1)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    partial[warp] = v;
  __syncthreads();
  int warps = blockDim.x >> 5;
  float m = -INFINITY;
  for (int w = 0; w < warps; ++w)
    m = fmaxf(m, partial[w]);
  return m;
}

} // namespace dtc::cuda

#endif // DTC_RUNTIME_CUDA_CUDACOMMON_CUH
