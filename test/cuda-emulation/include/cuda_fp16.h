//===- cuda_fp16.h - f16 for the CUDA host emulation ------------*- C++ -*-===//
//
// Through the compiler's _Float16, which converts with round to nearest
// even like the __float2half_rn intrinsic.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_TEST_CUDA_EMULATION_CUDA_FP16_H
#define DTC_TEST_CUDA_EMULATION_CUDA_FP16_H

#include <cstdint>
#include <cstring>

struct __half {
  uint16_t bits;
};

inline float __half2float(__half value) {
  _Float16 half;
  std::memcpy(&half, &value.bits, sizeof(half));
  return static_cast<float>(half);
}

inline __half __float2half_rn(float value) {
  _Float16 half = static_cast<_Float16>(value);
  __half result;
  std::memcpy(&result.bits, &half, sizeof(half));
  return result;
}

#endif // DTC_TEST_CUDA_EMULATION_CUDA_FP16_H
