//===- CudaProbe.h - what the CUDA stack on this machine can do -*- C++ -*-===//
//
// The first piece of the CUDA backend: finds the devices and checks that the
// three libraries the backend is built on (CUDA runtime, cuBLASLt, NCCL)
// load and initialize. It builds wherever the toolkit is installed and
// reports "no device" cleanly where there is no GPU.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CUDA_CUDAPROBE_H
#define DTC_RUNTIME_CUDA_CUDAPROBE_H

#include <string>
#include <vector>

namespace dtc::cuda {

struct ProbeResult {
  int deviceCount = 0;
  std::vector<std::string> deviceNames;
  /// Each device's memory (cudaDeviceProp::totalGlobalMem).
  std::vector<double> deviceMemoryBytes;
  int ncclVersion = 0;
  int cudaRuntimeVersion = 0;
};

/// Queries the devices and library versions. Never fails: zero devices is a
/// valid answer.
ProbeResult probe();

// The checks return an empty string on success, else what failed. (This file
// is compiled by nvcc, which is kept away from LLVM's headers.)

/// Creates and destroys a cuBLASLt handle on device 0.
std::string checkCublasLt();

/// Runs a small axpy kernel on device 0 and checks the result on the host.
std::string checkKernelLaunch();

} // namespace dtc::cuda

#endif // DTC_RUNTIME_CUDA_CUDAPROBE_H
