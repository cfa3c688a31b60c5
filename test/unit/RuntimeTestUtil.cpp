//===- RuntimeTestUtil.cpp - Run dtc IR on the CPU runtime in tests -------===//

#include "RuntimeTestUtil.h"

#include "passes/lowering/ProgramLowering.h"
#include "runtime/core/Executor.h"
#include "runtime/cpu/CpuKernels.h"

#include "llvm/ADT/StringRef.h"

#include <cstring>
#include <fstream>

namespace dtc::test {

llvm::Expected<std::vector<runtime::Tensor>>
runOnCpu(mlir::ModuleOp module, llvm::StringRef name,
         llvm::ArrayRef<runtime::Tensor> args,
         const std::map<std::string, runtime::Tensor> &parameters) {
  auto program = lowerToRankProgram(module);
  if (!program)
    return program.takeError();
  static const runtime::KernelRegistry kernels = [] {
    runtime::KernelRegistry registry;
    runtime::cpu::registerCpuKernels(registry);
    return registry;
  }();
  auto executor = runtime::Executor::create(*program, kernels);
  if (!executor)
    return executor.takeError();
  for (const auto &[paramName, value] : parameters) {
    runtime::Tensor *var = (*executor)->variable(paramName);
    if (!var)
      continue; // folded away or unused by this function
    if (var->bytes() != value.bytes() || var->dtype() != value.dtype())
      return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                     "parameter '" + paramName +
                                         "' has the wrong shape or dtype");
    std::memcpy(var->data(), value.data(), value.bytes());
  }
  return (*executor)->run(name, args);
}

runtime::Tensor makeF32(llvm::ArrayRef<int64_t> shape,
                        llvm::ArrayRef<float> values) {
  runtime::Tensor t(runtime::DType::F32, shape);
  std::memcpy(t.data(), values.data(),
              std::min(values.size() * sizeof(float), t.bytes()));
  return t;
}

} // namespace dtc::test

std::map<std::string, std::string>
dtc::test::readKnownFailures(const std::string &path) {
  std::map<std::string, std::string> known;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    llvm::StringRef text = llvm::StringRef(line).trim();
    if (text.empty() || text.starts_with("#"))
      continue;
    auto [name, reason] = text.split(':');
    known[name.trim().str()] = reason.trim().str();
  }
  return known;
}
