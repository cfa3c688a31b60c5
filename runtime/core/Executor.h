//===- Executor.h - Interprets one rank's program ---------------*- C++ -*-===//
//
// Runs the functions of a RankProgram on one backend's kernels: variables
// persist across calls, the functions' temporaries live in one arena (placed
// by the compiler, sized for the largest function), constants are
// materialized once. All of them live in the executor's MemorySpace: the
// host (the CPU backend; kernels see the tensors themselves) or a device
// (arguments are copied in and results out around each call).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_EXECUTOR_H
#define DTC_RUNTIME_CORE_EXECUTOR_H

#include "runtime/core/Kernel.h"

#include "llvm/ADT/StringMap.h"

#include <chrono>
#include <map>
#include <vector>

namespace dtc::runtime {

using TraceClock = std::chrono::steady_clock;

/// One executed instruction, for traces (docs/observability.md): which one
/// (the function's index in the RankProgram, the instruction's in the
/// function), when it ran on the rank's compute stream, and for a
/// `dtc.wait`, when its communication completed (the backend's own record;
/// the wait's end when the backend keeps none).
struct InstructionEvent {
  int32_t function = 0;
  int32_t instruction = 0;
  TraceClock::time_point begin, end, completed;
  /// In a pipeline step: the micro-batch the pass serves; -1 otherwise.
  int32_t microBatch = -1;
};

/// Where a rank's time went, accumulated over calls until reset: time
/// blocked in `dtc.wait` on collectives (exposed communication) and on
/// pipeline sends/receives (waiting for a neighbouring stage: bubbles).
/// Kept whether or not a trace is recorded (two clock reads per wait).
struct WaitTimes {
  double collectiveSeconds = 0;
  double pipelineSeconds = 0;
};

class Executor {
public:
  /// Checks that every instruction has a kernel and every value a valid
  /// storage, allocates variables (zeros) and materializes constants.
  /// `communicator` serves the collective instructions; it may be null for
  /// a program without any.
  static llvm::Expected<std::unique_ptr<Executor>>
  create(const program::RankProgram &program, const KernelRegistry &kernels,
         Communicator *communicator = nullptr);
  /// The same on `memory` (which must outlive the executor); the kernels
  /// must read and write that memory.
  static llvm::Expected<std::unique_ptr<Executor>>
  create(const program::RankProgram &program, const KernelRegistry &kernels,
         Communicator *communicator, MemorySpace &memory);

  const program::RankProgram &program() const { return program_; }
  MemorySpace &memory() const { return memory_; }

  /// The variable's host tensor (written in place), or nullptr when there
  /// is no such variable or the executor's memory is not the host's.
  Tensor *variable(llvm::StringRef name);

  /// A host copy of the variable, in any memory space.
  llvm::Expected<Tensor> readVariable(llvm::StringRef name);
  /// The same into `host` (same dtype and shape): a staging buffer reused
  /// from one checkpoint to the next.
  llvm::Error readVariable(llvm::StringRef name, Tensor &host);
  /// Overwrites the variable with `host` (same dtype and shape).
  llvm::Error writeVariable(llvm::StringRef name, const Tensor &host);

  /// Runs `function` on host `args` (one per Argument, in order; dtype and
  /// shape checked) and returns its results that do not write a variable,
  /// in order, as host tensors. Results that write a variable update it.
  /// A pipeline step (Function.pipeline) runs its schedule over as many
  /// micro-batches as its arguments stack (their leading dim).
  llvm::Expected<std::vector<Tensor>> run(llvm::StringRef function,
                                          llvm::ArrayRef<Tensor> args);

  /// Appends an InstructionEvent per executed instruction to `events` from
  /// now on (null: stop). On a device, each instruction is then followed by
  /// a synchronization so that its times are its own (overlap is lost), and
  /// is wrapped in a named range for the device's profiler (NVTX).
  void recordTrace(std::vector<InstructionEvent> *events) { trace_ = events; }
  const WaitTimes &waitTimes() const { return waits_; }
  void resetWaitTimes() { waits_ = {}; }

  /// Bytes of variables, constants and the largest arena.
  int64_t variableBytes() const;
  /// Every byte the executor holds in its memory space: variables,
  /// constants, arenas and argument buffers (its peak: nothing is
  /// allocated while running).
  int64_t allocatedBytes() const;
  int64_t arenaBytes(llvm::StringRef function) const;

private:
  Executor(const program::RankProgram &program, const KernelRegistry &kernels,
           MemorySpace &memory)
      : program_(program), kernels_(kernels), memory_(memory) {}
  llvm::Error prepare();
  /// Allocates every variable, refusing sizes beyond the host's memory.
  llvm::Error allocateVariables();
  /// Checks the constants' bytes and copies them into the executor's memory.
  llvm::Error loadConstants();
  /// Allocates the arena all functions share (the largest one's).
  llvm::Error allocateArena();
  /// The variable's tensor in the executor's memory, or nullptr.
  Tensor *storage(llvm::StringRef name);
  /// The variable `name`, checked to have `host`'s dtype and shape.
  llvm::Expected<Tensor *> variableLike(llvm::StringRef name,
                                        const Tensor &host);

  struct PreparedFunction;
  /// Prepares function `f` (number `functionIndex` in the program): its
  /// values' storage, waits, kernels, arguments and results.
  llvm::Error prepareFunction(const program::Function &f,
                              int32_t functionIndex);
  /// Gives each value of the function its view: arena, variable, constant
  /// or (bound per call) argument.
  llvm::Error placeValues(PreparedFunction &prepared);
  /// Records which instructions communicate and what each wait waits for.
  void markCommunication(PreparedFunction &prepared);
  /// Finds each instruction's kernel and checks the values it reads and
  /// writes.
  llvm::Error lookupKernels(PreparedFunction &prepared);
  /// Checks the arguments and the values that view them; allocates the
  /// device's argument buffers.
  llvm::Error prepareArguments(PreparedFunction &prepared);
  /// Checks that each result is a value and fits the variable it writes.
  llvm::Error checkResults(const PreparedFunction &prepared);
  /// Checks `args` against the function's arguments and binds them (copied
  /// to the device's argument buffers on a device). A pipeline step's
  /// arguments may stack any number of micro-batches.
  llvm::Error bindArguments(PreparedFunction &prepared,
                            llvm::ArrayRef<Tensor> args);
  /// Binds arguments already in the executor's memory (no checks beyond
  /// their count and sizes).
  llvm::Error bindViews(PreparedFunction &prepared,
                        llvm::ArrayRef<TensorRef> args);
  /// Runs the instructions on the bound arguments, then writes the results
  /// that update variables.
  llvm::Error execute(PreparedFunction &prepared);
  /// The function's results that write no variable, as host tensors.
  llvm::Expected<std::vector<Tensor>> hostResults(PreparedFunction &prepared);
  /// The same, kept in the executor's memory (from the pool). A result
  /// that is one of the call's `owned` inputs (a pass handing on what it
  /// read) takes that buffer instead of a copy.
  llvm::Error keepResults(PreparedFunction &prepared,
                          std::vector<Tensor> &results,
                          std::vector<Tensor> *owned = nullptr);
  llvm::Error checkPipeline(const PreparedFunction &step);
  llvm::Expected<std::vector<Tensor>> runPipeline(PreparedFunction &step,
                                                  llvm::ArrayRef<Tensor> args);
  /// The state and actions of one run of a pipeline step
  /// (ExecutorPipeline.cpp).
  class PipelineRun;
  /// Buffers of the executor's memory that a pipeline step keeps between
  /// its passes (kept activations, messages), reused from step to step.
  llvm::Expected<Tensor> acquire(DType dtype, llvm::ArrayRef<int64_t> shape);
  void release(Tensor tensor);

  /// What a `dtc.wait` waits for, by instruction (None for the others).
  enum class WaitKind : uint8_t { None, Collective, Pipeline };

  struct PreparedFunction {
    const program::Function *function = nullptr;
    int32_t index = 0; ///< in the RankProgram
    std::vector<WaitKind> waits;
    /// Whether each instruction starts or waits for a communication (the
    /// others compute).
    std::vector<bool> communicates;
    std::vector<KernelFn> kernels;
    std::vector<TensorRef> views; // by value id; arguments patched per call
    /// (value id, argument position) of every value stored in an argument.
    std::vector<std::pair<int, int>> argumentViews;
    /// Device memory only: where each argument is copied, by position.
    std::vector<Tensor> arguments;
    /// Whether `id` names one of the function's values.
    bool hasValue(int id) const {
      return id >= 0 && id < static_cast<int>(views.size());
    }
  };

  const program::RankProgram &program_;
  const KernelRegistry &kernels_;
  MemorySpace &memory_;
  ExecutionContext context_;

public:
  /// Where the kernels report MoE routing figures (null: nowhere).
  void collectMoeRouting(MoeRoutingStats *stats) {
    context_.moeRouting = stats;
  }
  llvm::StringMap<Tensor> variables_;
  std::vector<Tensor> constants_;
  /// Every function's temporaries (see prepare()).
  Tensor arena_;
  llvm::StringMap<PreparedFunction> functions_;
  std::vector<InstructionEvent> *trace_ = nullptr;
  WaitTimes waits_;
  /// The micro-batch the running pass serves (traces); -1 outside one.
  int32_t microBatch_ = -1;
  /// Free buffers by dtype and shape (see acquire()); every buffer the
  /// pool ever made is counted in allocatedBytes().
  std::map<std::pair<DType, std::vector<int64_t>>, std::vector<Tensor>> pool_;
  int64_t pooledBytes_ = 0;
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_EXECUTOR_H
