//===- FuzzProgramLoader.cpp - libFuzzer target for program.pb ------------===//
//
// Bytes -> dtc.program/1 protobuf -> an Executor per rank on the CPU kernels
// -> every function run once on zero-filled arguments. A program the
// executor accepts must run to a result or a clean llvm::Error: kernels
// trust the shapes the executor lets through, so any crash here is a missing
// check in Executor::prepare (or a kernel bug).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Executor.h"
#include "runtime/cpu/CpuKernels.h"

#include "llvm/Support/Error.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <vector>

namespace {

namespace program = dtc::program;
namespace runtime = dtc::runtime;

/// Programs whose tensors together exceed this are skipped: the fuzzer looks
/// for crashes, not for out-of-memory on sizes the executor would allocate.
constexpr int64_t kMaxBytes = int64_t(64) << 20;

/// Adds the bytes of `type` to `total`, saturating at kMaxBytes + 1.
/// Negative dimensions count as 0: rejecting them is the executor's job.
void addBytes(const program::TensorType &type, int64_t &total) {
  int64_t bytes = 8;
  for (int64_t d : type.shape()) {
    if (d <= 0)
      return;
    if (d > kMaxBytes || bytes > kMaxBytes / d) {
      total = kMaxBytes + 1;
      return;
    }
    bytes *= d;
  }
  total = std::min(total + bytes, kMaxBytes + 1);
}

bool tooLarge(const program::RankProgram &rank) {
  int64_t total = 0;
  for (const program::Variable &v : rank.variables())
    addBytes(v.type(), total);
  for (const program::Constant &c : rank.constants())
    addBytes(c.type(), total);
  for (const program::Function &f : rank.functions()) {
    if (f.arena_bytes() > kMaxBytes)
      return true;
    total =
        std::min(total + std::max<int64_t>(f.arena_bytes(), 0), kMaxBytes + 1);
    for (const program::Value &v : f.values())
      addBytes(v.type(), total);
  }
  return total > kMaxBytes;
}

const runtime::KernelRegistry &cpuKernels() {
  static const runtime::KernelRegistry *registry = [] {
    auto *r = new runtime::KernelRegistry();
    runtime::cpu::registerCpuKernels(*r);
    return r;
  }();
  return *registry;
}

void runRank(const program::RankProgram &rank) {
  auto executor = runtime::Executor::create(rank, cpuKernels());
  if (!executor) {
    llvm::consumeError(executor.takeError());
    return;
  }
  for (const program::Function &f : rank.functions()) {
    std::vector<runtime::Tensor> args;
    bool usable = true;
    for (const program::Argument &a : f.arguments()) {
      if (a.value() < 0 || a.value() >= f.values_size()) {
        usable = false;
        break;
      }
      const program::TensorType &type = f.values(a.value()).type();
      for (int64_t d : type.shape())
        usable &= d >= 0;
      if (!usable || runtime::dtypeSize(type.dtype()) == 0) {
        usable = false;
        break;
      }
      args.emplace_back(
          type.dtype(),
          llvm::ArrayRef<int64_t>(type.shape().data(), type.shape_size()));
    }
    if (!usable)
      continue;
    auto results = (*executor)->run(f.name(), args);
    if (!results)
      llvm::consumeError(results.takeError());
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Mutated strings are rarely UTF-8; protobuf would log each one.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  program::Program prog;
  if (!prog.ParseFromArray(data, static_cast<int>(size)))
    return 0;
  for (const program::RankProgram &rank : prog.ranks())
    if (!tooLarge(rank))
      runRank(rank);
  return 0;
}
