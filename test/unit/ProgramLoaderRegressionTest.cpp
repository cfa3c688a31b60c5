//===- ProgramLoaderRegressionTest.cpp - program.pb inputs from fuzzing ---===//
//
// Programs that crashed the executor or its kernels, or that it accepted
// with sizes kernels would overrun (test/fuzz/regressions, each a .txtpb
// with its protoc-encoded .pb): each now ends in a clean error, from
// Executor::create or from the kernel. Programs the compiler writes (the
// fuzzer's seeds) must still load.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Executor.h"
#include "runtime/cpu/CpuKernels.h"

#include "llvm/Support/MemoryBuffer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

namespace {

using dtc::runtime::Executor;
using dtc::runtime::KernelRegistry;

const std::string kFuzzDir = DTC_TEST_MODELS_DIR "/../fuzz";

dtc::program::Program readProgram(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  EXPECT_TRUE(static_cast<bool>(buffer)) << path;
  dtc::program::Program program;
  if (buffer) {
    EXPECT_TRUE(program.ParseFromArray((*buffer)->getBufferStart(),
                                       (*buffer)->getBufferSize()))
        << path;
  }
  return program;
}

const KernelRegistry &cpuKernels() {
  static KernelRegistry registry = [] {
    KernelRegistry r;
    dtc::runtime::cpu::registerCpuKernels(r);
    return r;
  }();
  return registry;
}

/// The error Executor::create gives for the first rank of `name`.
std::string createError(const std::string &name) {
  dtc::program::Program program =
      readProgram(kFuzzDir + "/regressions/" + name + ".pb");
  if (program.ranks_size() != 1) {
    ADD_FAILURE() << name << " should hold one rank";
    return "";
  }
  auto executor = Executor::create(program.ranks(0), cpuKernels());
  if (executor) {
    ADD_FAILURE() << name << " was accepted";
    return "";
  }
  return llvm::toString(executor.takeError());
}

struct Regression {
  const char *file;
  const char *message;
};

class ProgramLoaderRegression : public testing::TestWithParam<Regression> {};

TEST_P(ProgramLoaderRegression, IsRejectedCleanly) {
  EXPECT_EQ(createError(GetParam().file),
            std::string("invalid program: ") + GetParam().message);
}

INSTANTIATE_TEST_SUITE_P(
    Fuzz, ProgramLoaderRegression,
    testing::Values(
        Regression{"negative-dim", "variable 'w' has an invalid shape"},
        Regression{"overflow-dims", "variable 'w' has an invalid shape"},
        Regression{"arena-offset-overflow",
                   "function 'f': value 0 lies outside the arena"},
        Regression{"no-dtype-temp", "function 'f': value 0 has no dtype"},
        Regression{"result-state-size",
                   "function 'f' writes variable 'w' with a value of another "
                   "size"},
        Regression{"argument-view-size",
                   "function 'f': value 1 views an argument of another size"}),
    [](const testing::TestParamInfo<Regression> &info) {
      std::string name = info.param.file;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

/// The error running function "f" (no arguments) of the first rank of
/// `name` gives; Executor::create must accept the program.
std::string runError(const std::string &name) {
  dtc::program::Program program =
      readProgram(kFuzzDir + "/regressions/" + name + ".pb");
  if (program.ranks_size() != 1) {
    ADD_FAILURE() << name << " should hold one rank";
    return "";
  }
  auto executor = Executor::create(program.ranks(0), cpuKernels());
  if (!executor) {
    ADD_FAILURE() << name << ": " << llvm::toString(executor.takeError());
    return "";
  }
  auto results = (*executor)->run("f", {});
  if (results) {
    ADD_FAILURE() << name << " ran";
    return "";
  }
  return llvm::toString(results.takeError());
}

// Kernels reading dims the operands do not have.
TEST(ProgramLoaderRegression, ConvOnScalarsFails) {
  EXPECT_EQ(runError("conv-scalar"),
            "dtc.conv: input [], weight [] and result [] need one rank of at "
            "least 3");
}

TEST(ProgramLoaderRegression, PoolOnScalarsFails) {
  EXPECT_EQ(runError("pool-scalar"),
            "dtc.max_pool: result [] does not match input []");
}

// A variable larger than this machine's memory is refused by name before
// anything is allocated (a [2^40, 64] variable segfaulted, issue 61).
TEST(ProgramLoaderRegression, VariableLargerThanMemoryIsRefused) {
  dtc::program::RankProgram rank;
  dtc::program::Variable *v = rank.add_variables();
  v->set_name("huge");
  v->mutable_type()->set_dtype(dtc::program::F32);
  v->mutable_type()->add_shape(int64_t(1) << 40);
  v->mutable_type()->add_shape(64);
  auto executor = Executor::create(rank, cpuKernels());
  ASSERT_FALSE(static_cast<bool>(executor));
  std::string error = llvm::toString(executor.takeError());
  EXPECT_NE(error.find("variable 'huge' needs 281474976710656 bytes, more "
                       "than this machine's"),
            std::string::npos)
      << error;
}

// The stricter checks still accept what the compiler writes.
TEST(ProgramLoaderSeeds, CompiledProgramsLoad) {
  for (const char *seed : {"gpt-train", "gpt-infer", "cnn-infer"}) {
    dtc::program::Program program =
        readProgram(kFuzzDir + "/corpus/program-loader/" + seed + ".pb");
    ASSERT_EQ(program.ranks_size(), 1) << seed;
    auto executor = Executor::create(program.ranks(0), cpuKernels());
    EXPECT_TRUE(static_cast<bool>(executor))
        << seed << ": " << llvm::toString(executor.takeError());
  }
}

} // namespace
