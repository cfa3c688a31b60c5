//===- Executor.h - Interprets one rank's program ---------------*- C++ -*-===//
//
// Runs the functions of a RankProgram on one backend's kernels: variables
// persist across calls, each function's temporaries live in its own arena
// (placed by the compiler), constants are materialized once.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_EXECUTOR_H
#define DTC_RUNTIME_CORE_EXECUTOR_H

#include "runtime/core/Kernel.h"

#include "llvm/ADT/StringMap.h"

#include <vector>

namespace dtc::runtime {

class Executor {
public:
  /// Checks that every instruction has a kernel and every value a valid
  /// storage, allocates variables (zeros) and materializes constants.
  /// `communicator` serves the collective instructions; it may be null for
  /// a program without any.
  static llvm::Expected<std::unique_ptr<Executor>>
  create(const program::RankProgram &program, const KernelRegistry &kernels,
         Communicator *communicator = nullptr);

  const program::RankProgram &program() const { return program_; }

  /// The variable's tensor, or nullptr.
  Tensor *variable(llvm::StringRef name);

  /// Runs `function` on `args` (one per Argument, in order; dtype and shape
  /// checked) and returns its results that do not write a variable, in
  /// order. Results that write a variable update it.
  llvm::Expected<std::vector<Tensor>> run(llvm::StringRef function,
                                          llvm::ArrayRef<Tensor> args);

  /// Bytes of variables, constants and the largest arena.
  int64_t variableBytes() const;
  int64_t arenaBytes(llvm::StringRef function) const;

private:
  Executor(const program::RankProgram &program, const KernelRegistry &kernels)
      : program_(program), kernels_(kernels) {}
  llvm::Error prepare();

  struct PreparedFunction {
    const program::Function *function = nullptr;
    std::vector<KernelFn> kernels;
    std::vector<TensorRef> views; // by value id; arguments patched per call
    /// (value id, argument position) of every value stored in an argument.
    std::vector<std::pair<int, int>> argumentViews;
    Tensor arena;
  };

  const program::RankProgram &program_;
  const KernelRegistry &kernels_;
  ExecutionContext context_;
  llvm::StringMap<Tensor> variables_;
  std::vector<Tensor> constants_;
  llvm::StringMap<PreparedFunction> functions_;
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_EXECUTOR_H
