//===- Emulator.h - CUDA kernels run as host C++ ----------------*- C++ -*-===//
//
// The device side of the CUDA host emulation: with rewrite_launches.py's
// output, runtime/cuda/*.cu compile as plain C++ and their kernels run on
// the CPU, so that test/unit/CudaKernelTest.cpp checks the kernels' logic
// against the CPU kernels on machines without a GPU (CI).
//
// What is emulated:
// - A launch runs its blocks one after another; a block's threads are fibers
//   on the calling thread, switched only at __syncthreads, __syncwarp and
//   warp shuffles. __syncthreads must be reached by every thread of the
//   block (on the GPU the block may hang otherwise), a warp barrier by every
//   lane that has not returned; a block that breaks this or can make no
//   progress aborts the test with a message.
// - Warp shuffles exchange values between the lanes of a warp; reading a
//   lane that has returned or does not exist aborts. Masks are not checked:
//   every live lane of the warp takes part.
// - __shared__ variables are function-local statics (one block runs at a
//   time) and keep what the last block left; dynamic shared memory is one
//   buffer per launch filled with 0xa5 bytes, so that reads before writes
//   show.
// - Atomics (plain read-modify-write: one fiber runs at a time), bf16 and
//   f16 with round to nearest even, CUDA's grid, block and shared-memory
//   limits (a launch past them fails with cudaErrorInvalidConfiguration).
//
// What is NOT emulated:
// - The memory model and timing: blocks never run concurrently and threads
//   run in a fixed order, so races between blocks or between threads that
//   do not synchronize go unnoticed (compute-sanitizer on a GPU finds them).
// - Warp lockstep outside shuffles and syncs, independent thread scheduling,
//   PTX specifics (fused multiply-adds, denormal flushing, fast-math
//   intrinsics): expf, logf and the like are the host's, not CUDA's.
// - The per-kernel dynamic shared memory limit set with
//   cudaFuncSetAttribute: launches are checked against the device maximum.
//
// - cuBLASLt's own kernels: cublasLt.h is a reference GEMM. NCCL: the NCCL
//   tests are left out.
//
// EmulatedRuntime.cpp has the host side (runtime API, cuBLASLt).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_TEST_CUDA_EMULATION_EMULATOR_H
#define DTC_TEST_CUDA_EMULATION_EMULATOR_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// One block runs at a time, so a function-local static is its shared memory.
#define __shared__ static

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned x = 1, unsigned y = 1, unsigned z = 1)
      : x(x), y(y), z(z) {}
};

struct CUstream_st; // cudaStream_t points to one

// Set by the emulator for the fiber that runs.
inline dim3 threadIdx, blockIdx, blockDim, gridDim;

namespace emu {

constexpr int kWarpSize = 32;

/// Runs `thread` for every thread of every block of the grid; returns once
/// all have returned (so `stream` orders nothing). A launch past CUDA's
/// limits runs nothing and leaves cudaErrorInvalidConfiguration for
/// cudaGetLastError.
void launch(dim3 grid, dim3 block, size_t dynamicSharedBytes,
            CUstream_st *stream, const std::function<void()> &thread);

/// The running launch's dynamic shared memory (`extern __shared__`).
void *dynamicShared();

void syncThreads();
void syncWarp();

/// The running thread's lane in its warp.
int laneId();

/// Waits for every live lane of the warp to offer its value, then returns
/// the value `sourceLane` offered.
uint64_t exchange(uint64_t bits, int sourceLane);

template <typename T> T shuffle(T value, int sourceLane) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffles move 8 bytes at most");
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  bits = exchange(bits, sourceLane);
  std::memcpy(&value, &bits, sizeof(T));
  return value;
}

} // namespace emu

inline void __syncthreads() { emu::syncThreads(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::syncWarp(); }

// Only the shuffles the kernels use; a source outside the lane's `width`
// segment reads the lane's own value, as on the GPU.
template <typename T>
T __shfl_xor_sync(unsigned, T value, int laneMask, int width = emu::kWarpSize) {
  int lane = emu::laneId(), source = lane ^ laneMask;
  bool inSegment = source < (lane & ~(width - 1)) + width;
  return emu::shuffle(value, inSegment ? source : lane);
}

// One fiber runs at a time, so plain read-modify-writes are atomic.
template <typename T> T atomicAdd(T *address, T value) {
  T old = *address;
  *address = old + value;
  return old;
}
template <typename T> T atomicCAS(T *address, T compare, T value) {
  T old = *address;
  if (old == compare)
    *address = value;
  return old;
}

// A multiply nvcc never fuses with an add (x86-64 hosts have no FMA by
// default either).
inline float __fmul_rn(float a, float b) { return a * b; }

#endif // DTC_TEST_CUDA_EMULATION_EMULATOR_H
