//===- cuda_runtime.h - The CUDA runtime API on host memory -----*- C++ -*-===//
//
// The part of the CUDA runtime API that runtime/cuda uses, for the host
// emulation (Emulator.h says what is emulated). Device memory is host
// memory and everything runs in order on the calling thread, so streams
// order nothing and synchronizing returns at once. Implemented in
// EmulatedRuntime.cpp.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_TEST_CUDA_EMULATION_CUDA_RUNTIME_H
#define DTC_TEST_CUDA_EMULATION_CUDA_RUNTIME_H

#include "Emulator.h"

#include <cstddef>

// The values of the real API.
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
};
typedef enum cudaError cudaError_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaStreamNonBlocking 0x01

typedef struct CUstream_st *cudaStream_t;
typedef struct CUmemPoolHandle_st *cudaMemPool_t;

namespace emu {
/// Keeps `error` for the next cudaGetLastError (a launch's failure).
void recordError(cudaError_t error);
} // namespace emu

const char *cudaGetErrorString(cudaError_t error);
cudaError_t cudaGetLastError();

cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceCount(int *count);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int device);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr,
                                    void *value);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);

cudaError_t cudaMalloc(void **pointer, size_t bytes);
cudaError_t cudaFree(void *pointer);
cudaError_t cudaMallocAsync(void **pointer, size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void *pointer, cudaStream_t stream);
template <typename T> cudaError_t cudaMalloc(T **pointer, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void **>(pointer), bytes);
}
template <typename T>
cudaError_t cudaMallocAsync(T **pointer, size_t bytes, cudaStream_t stream) {
  return cudaMallocAsync(reinterpret_cast<void **>(pointer), bytes, stream);
}

cudaError_t cudaMemset(void *pointer, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *pointer, int value, size_t bytes,
                            cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes,
                       cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t stream = nullptr);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dstPitch, const void *src,
                              size_t srcPitch, size_t width, size_t height,
                              cudaMemcpyKind kind,
                              cudaStream_t stream = nullptr);

/// Accepted and ignored: launches are checked against the device's maximum
/// dynamic shared memory, not a per-kernel limit.
template <typename T>
cudaError_t cudaFuncSetAttribute(T *, cudaFuncAttribute, int) {
  return cudaSuccess;
}

#endif // DTC_TEST_CUDA_EMULATION_CUDA_RUNTIME_H
