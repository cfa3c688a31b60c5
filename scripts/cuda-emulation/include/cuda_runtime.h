#pragma once
#include "emu.h"
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidValue = 1,
  cudaErrorInvalidConfiguration = 9
};
typedef void *cudaStream_t;
typedef void *cudaMemPool_t;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost,
  cudaMemcpyHostToDevice,
  cudaMemcpyDeviceToHost,
  cudaMemcpyDeviceToDevice,
  cudaMemcpyDefault
};
enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 };
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
#define cudaStreamNonBlocking 1
struct cudaDeviceProp {
  char name[256];
};
const char *cudaGetErrorString(cudaError_t);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
cudaError_t cudaMalloc(void **p, size_t n);
template <typename T> cudaError_t cudaMalloc(T **p, size_t n) {
  return cudaMalloc((void **)p, n);
}
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t);
template <typename T>
cudaError_t cudaMallocAsync(T **p, size_t n, cudaStream_t s) {
  return cudaMallocAsync((void **)p, n, s);
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t);
cudaError_t cudaMemset(void *p, int v, size_t n);
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t = nullptr);
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind);
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind,
                            cudaStream_t = nullptr);
cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp,
                              size_t w, size_t h, cudaMemcpyKind,
                              cudaStream_t = nullptr);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned);
cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamSynchronize(cudaStream_t);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaSetDevice(int);
cudaError_t cudaGetDeviceCount(int *);
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *, int);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void *);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *, int);
cudaError_t cudaRuntimeGetVersion(int *);
cudaError_t emuFuncSetAttribute(const void *f, cudaFuncAttribute a, int v);
template <typename F>
cudaError_t cudaFuncSetAttribute(F f, cudaFuncAttribute a, int v) {
  return emuFuncSetAttribute((const void *)f, a, v);
}
