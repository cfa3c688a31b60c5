//===- CudaPluginLoader.cpp - Opens the CUDA backend module ---------------===//
//
// Host code only (no CUDA headers), built with the CUDA backend: it finds
// the module, opens it and says in one line why it cannot.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaPlugin.h"
#include "runtime/support/Error.h"

#include "llvm/Support/DynamicLibrary.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <mutex>

namespace dtc::runtime::cuda {
namespace {

/// Where to look, in order.
std::vector<std::string> candidatePaths() {
  if (std::optional<std::string> env =
          llvm::sys::Process::GetEnv("DTC_CUDA_PLUGIN"))
    return {*env};
  std::vector<std::string> paths;
  static int anchor;
  std::string exe = llvm::sys::fs::getMainExecutable(nullptr, &anchor);
  if (!exe.empty()) {
    llvm::SmallString<256> path(llvm::sys::path::parent_path(exe));
    llvm::sys::path::append(path, "..", "lib", "dtc-cuda.so");
    paths.push_back(std::string(path));
  }
#ifdef DTC_CUDA_PLUGIN_BUILD_PATH
  paths.push_back(DTC_CUDA_PLUGIN_BUILD_PATH);
#endif
  return paths;
}

llvm::Expected<CudaPlugin *> open() {
  std::vector<std::string> paths = candidatePaths();
  const std::string *found = nullptr;
  for (const std::string &path : paths)
    if (llvm::sys::fs::exists(path)) {
      found = &path;
      break;
    }
  if (!found)
    return dtc::failureText(
        "this dtc has no CUDA backend (dtc-cuda.so not found" +
        std::string(paths.empty() ? "" : " at " + paths.front()) +
        "): rebuild where nvcc, cuBLASLt and NCCL are installed, or set "
        "DTC_CUDA_PLUGIN");
  std::string error;
  llvm::sys::DynamicLibrary library =
      llvm::sys::DynamicLibrary::getPermanentLibrary(found->c_str(), &error);
  if (!library.isValid())
    return dtc::failureText("cannot load the CUDA backend " + *found + ": " +
                            error);
  auto *entry = reinterpret_cast<CudaPlugin *(*)()>(
      library.getAddressOfSymbol(kCudaPluginEntry));
  if (!entry)
    return dtc::failureText(*found + " is not a dtc CUDA backend (no " +
                            kCudaPluginEntry + ")");
  return entry();
}

} // namespace

llvm::Expected<CudaPlugin *> loadCudaPlugin() {
  static std::once_flag once;
  static CudaPlugin *plugin = nullptr;
  static std::string error;
  std::call_once(once, [] {
    llvm::Expected<CudaPlugin *> opened = open();
    if (opened)
      plugin = *opened;
    else
      error = llvm::toString(opened.takeError());
  });
  if (!plugin)
    return dtc::failureText(error);
  return plugin;
}

bool nvidiaDriverPresent() {
  return llvm::sys::fs::exists("/dev/nvidiactl") ||
         llvm::sys::fs::exists("/proc/driver/nvidia/version");
}

} // namespace dtc::runtime::cuda
