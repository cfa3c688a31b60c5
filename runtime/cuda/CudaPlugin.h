//===- CudaPlugin.h - The CUDA backend as a loadable module -----*- C++ -*-===//
//
// dtc links no CUDA library. Loading cuBLASLt, NCCL, the CUDA runtime and
// the kernels' fat binaries costs about 0.15 s per process, which every
// `dtc compile` and every test would pay for a backend only `--backend
// cuda` uses. The backend is built as a module (dtc-cuda.so, beside the
// executables' lib/ directory) that is opened on first use; it reaches the
// runtime core (Tensor, KernelRegistry, Communicator, the program's
// protobuf classes) through the symbols the executable exports, so one copy
// of them exists in the process.
//
//   auto plugin = runtime::cuda::loadCudaPlugin();   // once per process
//   (*plugin)->probe().deviceCount ...
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CUDA_CUDAPLUGIN_H
#define DTC_RUNTIME_CUDA_CUDAPLUGIN_H

#include "runtime/core/Communicator.h"
#include "runtime/core/Kernel.h"
#include "runtime/cuda/CudaProbe.h"

#include "llvm/Support/Error.h"

#include <memory>
#include <string>

namespace dtc::runtime::cuda {

/// What the module provides: CudaBackend.h, CudaProbe.h and
/// NcclCommunicator.h behind virtual calls.
class CudaPlugin {
public:
  virtual ~CudaPlugin() = default;
  /// The devices, the CUDA runtime and NCCL versions (no device: zero).
  virtual ::dtc::cuda::ProbeResult probe() = 0;
  /// As cuda::initialize: selects `device` and creates the library handles.
  virtual llvm::Error initialize(int device) = 0;
  /// Every CUDA kernel.
  virtual void registerKernels(KernelRegistry &registry) = 0;
  /// Device memory; one per process.
  virtual MemorySpace &memory() = 0;
  /// NCCL over the mesh, its id broadcast over MPI_COMM_WORLD.
  virtual llvm::Expected<std::unique_ptr<Communicator>>
  createNcclWithMpi(Mesh mesh,
                    llvm::ArrayRef<std::string> pointToPointAxes) = 0;
};

/// The module's entry point: returns its one CudaPlugin.
inline constexpr const char *kCudaPluginEntry = "dtcCudaPluginInstance";

/// Opens the module once per process (later calls return the same plugin
/// or the same error): `$DTC_CUDA_PLUGIN` when set, else dtc-cuda.so in
/// the lib/ directory beside the executable's bin/, else where this build
/// put it.
llvm::Expected<CudaPlugin *> loadCudaPlugin();

/// Whether this machine shows an NVIDIA driver (its device nodes): where
/// it does not, choosing a backend automatically need not load the module.
bool nvidiaDriverPresent();

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_CUDAPLUGIN_H
