//===- CudaProbe.cu - what the CUDA stack on this machine can do ----------===//

#include "runtime/cuda/CudaProbe.h"

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <vector>

using namespace dtc;

static std::string cudaFailure(const char *what, cudaError_t err) {
  return std::string(what) + ": " + cudaGetErrorString(err);
}

cuda::ProbeResult cuda::probe() {
  ProbeResult result;
  if (cudaGetDeviceCount(&result.deviceCount) != cudaSuccess)
    result.deviceCount = 0;
  for (int i = 0; i < result.deviceCount; ++i) {
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) {
      result.deviceNames.push_back(prop.name);
      result.deviceMemoryBytes.push_back(
          static_cast<double>(prop.totalGlobalMem));
    }
  }
  ncclGetVersion(&result.ncclVersion);
  cudaRuntimeGetVersion(&result.cudaRuntimeVersion);
  return result;
}

std::string cuda::checkCublasLt() {
  cublasLtHandle_t handle;
  cublasStatus_t status = cublasLtCreate(&handle);
  if (status != CUBLAS_STATUS_SUCCESS)
    return std::string("cublasLtCreate: ") + cublasLtGetStatusString(status);
  cublasLtDestroy(handle);
  return "";
}

static __global__ void axpy(int n, float a, const float *x, float *y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    y[i] = a * x[i] + y[i];
}

std::string cuda::checkKernelLaunch() {
  constexpr int n = 1 << 12;
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = i;
    y[i] = 1;
  }
  float *dx = nullptr, *dy = nullptr;
  if (cudaError_t err = cudaMalloc(&dx, n * sizeof(float)))
    return cudaFailure("cudaMalloc", err);
  if (cudaError_t err = cudaMalloc(&dy, n * sizeof(float))) {
    cudaFree(dx);
    return cudaFailure("cudaMalloc", err);
  }
  cudaMemcpy(dx, x.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dy, y.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  axpy<<<(n + 255) / 256, 256>>>(n, 2.0f, dx, dy);
  cudaError_t err = cudaDeviceSynchronize();
  if (err == cudaSuccess)
    cudaMemcpy(y.data(), dy, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(dx);
  cudaFree(dy);
  if (err != cudaSuccess)
    return cudaFailure("axpy kernel", err);
  for (int i = 0; i < n; ++i)
    if (y[i] != 2.0f * i + 1)
      return "axpy kernel: wrong result at index " + std::to_string(i);
  return "";
}
