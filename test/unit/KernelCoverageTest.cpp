//===- KernelCoverageTest.cpp - every dtc op runs on every backend --------===//
//
// Walks the dialect's op registry, as the gradient coverage test does, so a
// new op without a CPU kernel (or, where CUDA is built, a CUDA kernel) fails
// here instead of at the first program that uses it. The exempt ops are the
// ones the executor runs itself or that never reach a program, each with
// its reason.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcDialect.h"
#include "runtime/core/Kernel.h"
#include "runtime/cpu/CpuKernels.h"
#ifdef DTC_TEST_CUDA_KERNELS
#include "runtime/cuda/CudaBackend.h"
#endif

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

using namespace dtc::runtime;

namespace {

/// Ops that need no kernel, and why.
const std::map<std::string, const char *> &exempt() {
  static const std::map<std::string, const char *> ops = {
      {"dtc.parameter", "a variable of the program, not an instruction"},
      {"dtc.constant", "a buffer written at load time"},
      {"dtc.wait", "the executor completes the collective it names"},
      {"dtc.all_reduce_start", "a collective: the communicator runs it"},
      {"dtc.all_gather_start", "a collective: the communicator runs it"},
      {"dtc.reduce_scatter_start", "a collective: the communicator runs it"},
      {"dtc.all_to_all_start", "a collective: the communicator runs it"},
      {"dtc.send_start", "a transfer: the communicator runs it"},
      {"dtc.recv_start", "a transfer: the communicator runs it"},
  };
  return ops;
}

std::vector<std::string> dtcOps() {
  mlir::MLIRContext context;
  context.loadDialect<mlir::dtc::DtcDialect>();
  std::vector<std::string> names;
  for (mlir::RegisteredOperationName op :
       context.getRegisteredOperationsByDialect("dtc"))
    names.push_back(op.getStringRef().str());
  return names;
}

void expectKernels(void (*registerKernels)(KernelRegistry &),
                   const char *backend) {
  KernelRegistry registry;
  registerKernels(registry);
  int covered = 0;
  for (const std::string &op : dtcOps()) {
    if (exempt().count(op))
      continue;
    ++covered;
    EXPECT_NE(registry.lookup(op), nullptr)
        << op << " has no " << backend << " kernel";
  }
  // The walk saw the dialect (not an empty registry).
  EXPECT_GE(covered, 60);
}

} // namespace

TEST(KernelCoverage, EveryOpHasACpuKernel) {
  expectKernels(&cpu::registerCpuKernels, "CPU");
}

#ifdef DTC_TEST_CUDA_KERNELS
TEST(KernelCoverage, EveryOpHasACudaKernel) {
  expectKernels(&cuda::registerCudaKernels, "CUDA");
}
#endif

TEST(KernelCoverage, ExemptOpsExist) {
  // A renamed or removed op leaves its exemption behind: keep the list true.
  std::vector<std::string> ops = dtcOps();
  for (const auto &[op, why] : exempt())
    EXPECT_NE(std::find(ops.begin(), ops.end(), op), ops.end())
        << op << " (" << why << ") is not a dtc op";
}
