// Host emulation of the parts of CUDA the dtc kernels use.
#pragma once
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1)
      : x(x_), y(y_), z(z_) {}
};
using uint3 = dim3;

inline thread_local dim3 threadIdx{0, 0, 0};
inline thread_local dim3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};

namespace emu {
struct Block {
  int threads = 0;
  std::unique_ptr<std::barrier<>> bar;
  std::unique_ptr<std::barrier<>> warpBar[32];
  int warpSize[32] = {};
  uint64_t slot[32][32];
  bool valid[32][32];
};
inline thread_local Block *block = nullptr;
inline thread_local bool exited = false;
void launch(dim3 grid, dim3 threads, size_t smem, std::function<void()> body);
void *dynamicShared();
void syncthreads();
void syncwarp();
inline int linearTid() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}
void report(const char *what);

template <typename T>
T shuffle(unsigned mask, T v, int src, bool relative, int mode, int width) {
  static_assert(sizeof(T) <= 8);
  int tid = linearTid(), warp = tid / 32, lane = tid % 32;
  Block *b = block;
  if (mask != 0xffffffffu || b->warpSize[warp] != 32) {
    if (b->warpSize[warp] != 32 && mask == 0xffffffffu)
      report("full-mask shuffle in a partial warp");
  }
  uint64_t raw = 0;
  std::memcpy(&raw, &v, sizeof(T));
  b->slot[warp][lane] = raw;
  b->valid[warp][lane] = true;
  b->warpBar[warp]->arrive_and_wait();
  int from;
  if (mode == 0)
    from = lane ^ src;
  else if (mode == 1)
    from = lane + src;
  else
    from = src;
  (void)relative;
  T result = v;
  int base = lane / width * width;
  bool inRange = mode == 1 ? (lane % width) + src < width : true;
  if (mode == 2)
    from = base + (src % width);
  if (inRange) {
    if (from >= 32 || !b->valid[warp][from]) {
      report("shuffle reads an absent lane");
    } else {
      std::memcpy(&result, &b->slot[warp][from], sizeof(T));
    }
  }
  b->warpBar[warp]->arrive_and_wait();
  return result;
}
} // namespace emu

inline void __syncthreads() { emu::syncthreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncwarp(); }
template <typename T>
T __shfl_xor_sync(unsigned mask, T v, int laneMask, int width = 32) {
  return emu::shuffle(mask, v, laneMask, false, 0, width);
}
template <typename T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  return emu::shuffle(mask, v, (int)delta, false, 1, width);
}
template <typename T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  return emu::shuffle(mask, v, src, false, 2, width);
}

template <typename T> T atomicAdd(T *p, T v) {
  return std::atomic_ref<T>(*p).fetch_add(v);
}
inline int atomicCAS(int *p, int cmp, int val) {
  std::atomic_ref<int>(*p).compare_exchange_strong(cmp, val);
  return cmp;
}

// ---- bf16 / f16 ----
struct __nv_bfloat16 {
  uint16_t x;
};
struct __half {
  uint16_t x;
};
inline float __bfloat162float(__nv_bfloat16 h) {
  uint32_t u = uint32_t(h.x) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  __nv_bfloat16 h;
  if ((u & 0x7fffffff) > 0x7f800000) {
    h.x = 0x7fc0;
    return h;
  }
  u += 0x7fff + ((u >> 16) & 1);
  h.x = uint16_t(u >> 16);
  return h;
}
inline float __half2float(__half h) {
  _Float16 f;
  std::memcpy(&f, &h.x, 2);
  return (float)f;
}
inline __half __float2half_rn(float v) {
  _Float16 f = (_Float16)v;
  __half h;
  std::memcpy(&h.x, &f, 2);
  return h;
}
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __fdividef(float a, float b) { return a / b; }
// Rounded operations that nvcc never fuses (host: plain IEEE ops).
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
