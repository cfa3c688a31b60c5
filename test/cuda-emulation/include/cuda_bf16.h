//===- cuda_bf16.h - bf16 for the CUDA host emulation -----------*- C++ -*-===//

#ifndef DTC_TEST_CUDA_EMULATION_CUDA_BF16_H
#define DTC_TEST_CUDA_EMULATION_CUDA_BF16_H

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t bits;
};

inline float __bfloat162float(__nv_bfloat16 value) {
  uint32_t bits = uint32_t(value.bits) << 16;
  float result;
  std::memcpy(&result, &bits, sizeof(result));
  return result;
}

/// Round to nearest even; every NaN becomes CUDA's canonical 0x7fff.
inline __nv_bfloat16 __float2bfloat16_rn(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return {0x7fff};
  bits += 0x7fffu + ((bits >> 16) & 1);
  return {uint16_t(bits >> 16)};
}

#endif // DTC_TEST_CUDA_EMULATION_CUDA_BF16_H
