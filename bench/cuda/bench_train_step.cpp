//===- bench_train_step.cpp - A training step on the CUDA backend ---------===//
//
// Loads BUNDLE/program.pb (dtc compile --gpus 1), runs micro_step (every
// micro-batch) and apply on one GPU with random tokens and prints one JSON
// line per step: {"step", "loss", "grad_norm", "step_time_s"}. Variables
// start as the program's init says (the model's weights are not read: a
// benchmark needs only their shapes).
// Usage: bench-cuda-train-step BUNDLE [STEPS] [--cpu]
//   --cpu: the CPU kernels behind a host memory space that the executor
//          treats as a device (every copy made): checks the device path of
//          the executor, and gives reference losses, without a GPU.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Executor.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cuda/CudaBackend.h"

#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <random>

using namespace dtc;
namespace rt = dtc::runtime;

static int fail(const llvm::Twine &message) {
  llvm::errs() << "bench-cuda-train-step: " << message << "\n";
  return 1;
}

/// Host memory the executor must copy to and from, like a device's.
class HostAsDevice final : public rt::MemorySpace {
public:
  llvm::StringRef name() const override { return "host-as-device"; }
  void *allocate(size_t bytes) override {
    return rt::hostMemory().allocate(bytes);
  }
  void release(void *p) override { rt::hostMemory().release(p); }
  llvm::Error copyToDevice(void *d, const void *s, size_t n) override {
    return rt::hostMemory().copyToDevice(d, s, n);
  }
  llvm::Error copyToHost(void *d, const void *s, size_t n) override {
    return rt::hostMemory().copyToHost(d, s, n);
  }
  llvm::Error copyOnDevice(void *d, const void *s, size_t n) override {
    return rt::hostMemory().copyOnDevice(d, s, n);
  }
};

static rt::Tensor scalar(float value) {
  rt::Tensor t(rt::DType::F32, {});
  t.as<float>()[0] = value;
  return t;
}

int main(int argc, char **argv) {
  if (argc < 2)
    return fail("usage: bench-cuda-train-step BUNDLE [STEPS] [--cpu]");
  std::string path = std::string(argv[1]) + "/program.pb";
  int steps = argc > 2 ? std::atoi(argv[2]) : 10;
  bool cpu = argc > 3 && std::string(argv[3]) == "--cpu";
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return fail(path + ": " + buffer.getError().message());
  program::Program p;
  if (!p.ParseFromArray((*buffer)->getBufferStart(),
                        static_cast<int>((*buffer)->getBufferSize())) ||
      p.ranks_size() == 0 || p.mode() != "train")
    return fail(path + ": not a training program of dtc");
  if (!cpu)
    if (llvm::Error e = rt::cuda::initialize(0))
      return fail(llvm::toString(std::move(e)));

  rt::KernelRegistry kernels;
  static rt::cuda::CudaMemory cudaMemory;
  static HostAsDevice hostAsDevice;
  rt::MemorySpace *memory = &cudaMemory;
  if (cpu) {
    rt::cpu::registerCpuKernels(kernels);
    memory = &hostAsDevice;
  } else {
    rt::cuda::registerCudaKernels(kernels);
  }
  auto executor = rt::Executor::create(p.ranks(0), kernels, nullptr, *memory);
  if (!executor)
    return fail(llvm::toString(executor.takeError()));
  rt::Executor &ex = **executor;

  std::mt19937 gen(1234);
  for (const program::Variable &v : p.ranks(0).variables()) {
    std::string how = v.init() == "model" ? v.fallback_init() : v.init();
    if (how != "normal" && how != "ones")
      continue; // allocated as zeros
    rt::Tensor host(v.type().dtype(),
                    llvm::ArrayRef<int64_t>(v.type().shape().data(),
                                            v.type().shape_size()));
    std::normal_distribution<float> normal(
        0.0f, static_cast<float>(v.init_std() > 0 ? v.init_std() : 0.02));
    for (int64_t i = 0; i < host.numElements(); ++i) {
      float value = how == "ones" ? 1.0f : normal(gen);
      switch (host.dtype()) {
      case rt::DType::F32:
        host.as<float>()[i] = value;
        break;
      case rt::DType::BF16:
        host.as<uint16_t>()[i] = rt::floatToBF16(value);
        break;
      case rt::DType::F16:
        host.as<uint16_t>()[i] = rt::floatToHalf(value);
        break;
      default:
        break;
      }
    }
    if (llvm::Error e = ex.writeVariable(v.name(), host))
      return fail(llvm::toString(std::move(e)));
  }

  const program::Training &train = p.training();
  int64_t mb = train.micro_batch(), seq = train.seq_len();
  std::uniform_int_distribution<int64_t> token(0, train.vocab() - 1);
  llvm::outs() << "{\"device_variable_bytes\": " << ex.variableBytes()
               << ", \"micro_step_arena_bytes\": "
               << ex.arenaBytes(train.micro_step())
               << ", \"tokens_per_step\": " << train.grad_accum() * mb * seq
               << "}\n";
  for (int step = 1; step <= steps; ++step) {
    auto start = std::chrono::steady_clock::now();
    double loss = 0;
    for (int64_t micro = 0; micro < train.grad_accum(); ++micro) {
      rt::Tensor tokens(rt::DType::I64, {mb, seq}),
          labels(rt::DType::I64, {mb, seq});
      for (int64_t i = 0; i < mb * seq; ++i) {
        tokens.as<int64_t>()[i] = token(gen);
        labels.as<int64_t>()[i] = token(gen);
      }
      auto result = ex.run(train.micro_step(), {tokens, labels});
      if (!result)
        return fail("step " + llvm::Twine(step) + ": " +
                    llvm::toString(result.takeError()));
      loss += (*result)[0].as<float>()[0];
    }
    auto applied = ex.run(train.apply(), {scalar(1e-4f), scalar(step)});
    if (!applied)
      return fail("step " + llvm::Twine(step) +
                  " apply: " + llvm::toString(applied.takeError()));
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    double gradNorm = applied->empty() ? 0.0 : (*applied)[0].as<float>()[0];
    loss /= static_cast<double>(train.grad_accum());
    llvm::outs() << "{\"step\": " << step << ", \"loss\": " << loss
                 << ", \"grad_norm\": " << gradNorm
                 << ", \"step_time_s\": " << seconds << "}\n";
    llvm::outs().flush();
    if (!std::isfinite(loss))
      return fail("the loss is not finite at step " + llvm::Twine(step));
  }
  return 0;
}
