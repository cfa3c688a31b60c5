//===- CudaBackend.h - The CUDA backend of the runtime ----------*- C++ -*-===//
//
// Kernels for the ops of a transformer training step on one NVIDIA GPU
// (same op names, attributes and semantics as runtime/cpu), and the device
// MemorySpace an Executor runs them on:
//
//   runtime::cuda::CudaMemory memory;            // initializes device 0
//   KernelRegistry kernels; registerCudaKernels(kernels);
//   auto ex = Executor::create(program, kernels, nullptr, memory);
//
// Kernels are queued on one compute stream and never wait for the device;
// Executor::run waits once at the end (MemorySpace::synchronize), where
// faults and errors the kernels flagged (an id out of range) surface.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CUDA_CUDABACKEND_H
#define DTC_RUNTIME_CUDA_CUDABACKEND_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime::cuda {

/// Every CUDA kernel.
void registerCudaKernels(KernelRegistry &registry);

/// Selects `device` and creates the stream and library handles (once per
/// process; another device later is an error); fails without a device.
/// -1: the device already set up, else device 0.
llvm::Error initialize(int device = -1);

/// Device memory (cudaMalloc), copies on the compute stream.
class CudaMemory final : public MemorySpace {
public:
  llvm::StringRef name() const override { return "cuda"; }
  void *allocate(size_t bytes) override;
  void release(void *pointer) override;
  llvm::Error copyToDevice(void *dst, const void *src, size_t bytes) override;
  llvm::Error copyToHost(void *dst, const void *src, size_t bytes) override;
  llvm::Error copyOnDevice(void *dst, const void *src, size_t bytes) override;
  llvm::Error synchronize() override;
  /// NVTX ranges: Nsight Systems shows traced instructions by op name.
  void pushRange(const std::string &name) override;
  void popRange() override;
};

/// out = in (a contiguous device tensor of `inShape`) with its dims
/// permuted: out's dim d is in's dim perm[d]. Queued on the compute stream.
llvm::Error permuteOnDevice(const void *in, void *out, size_t elemSize,
                            llvm::ArrayRef<int64_t> inShape,
                            llvm::ArrayRef<int64_t> perm);

/// A host tensor's bytes on the device (tests, tools): allocated in
/// `memory` and copied.
llvm::Expected<Tensor> toDevice(const Tensor &host, MemorySpace &memory);
/// A device tensor's bytes back on the host.
llvm::Expected<Tensor> toHost(const Tensor &device, MemorySpace &memory);

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_CUDABACKEND_H
