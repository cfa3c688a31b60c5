//===- CudaPlugin.cpp - The module's side of CudaPlugin.h -----------------===//

#include "runtime/cuda/CudaPlugin.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/NcclCommunicator.h"

namespace dtc::runtime::cuda {
namespace {

class CudaPluginImpl final : public CudaPlugin {
public:
  ::dtc::cuda::ProbeResult probe() override { return ::dtc::cuda::probe(); }
  llvm::Error initialize(int device) override {
    return cuda::initialize(device);
  }
  void registerKernels(KernelRegistry &registry) override {
    registerCudaKernels(registry);
  }
  MemorySpace &memory() override { return memory_; }
  llvm::Expected<std::unique_ptr<Communicator>>
  createNcclWithMpi(Mesh mesh,
                    llvm::ArrayRef<std::string> pointToPointAxes) override {
    auto nccl =
        NcclCommunicator::createWithMpi(std::move(mesh), pointToPointAxes);
    if (!nccl)
      return nccl.takeError();
    return std::unique_ptr<Communicator>(std::move(*nccl));
  }

private:
  CudaMemory memory_;
};

} // namespace
} // namespace dtc::runtime::cuda

extern "C" __attribute__((visibility("default")))
dtc::runtime::cuda::CudaPlugin *
dtcCudaPluginInstance() {
  static dtc::runtime::cuda::CudaPluginImpl plugin;
  return &plugin;
}
