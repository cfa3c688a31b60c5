//===- Kernel.h - The kernel interface of the runtime -----------*- C++ -*-===//
//
// A kernel implements one dtc op (forward or gradient) for one backend. It
// receives the instruction (for attributes), views of its inputs and of its
// preallocated outputs, and returns an llvm::Error naming what went wrong.
// Kernels are registered by op name ("dtc.matmul") in a KernelRegistry.
//
// Determinism: `dtc run` is bit-for-bit repeatable, so kernels split work
// only over independent outputs (never a reduction combined across threads
// in a thread-count-dependent order).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_KERNEL_H
#define DTC_RUNTIME_CORE_KERNEL_H

#include "runtime/core/Communicator.h"
#include "runtime/core/Tensor.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Error.h"

#include <initializer_list>
#include <map>
#include <optional>

namespace dtc::runtime {

/// What kernels beyond pure compute need from the rank that runs them: its
/// communicator (null in a single-rank run) and the requests of the
/// collectives started and not yet waited, by the instructions' `request`
/// attribute.
/// What the dtc.moe_route kernels saw, per MoE layer (the op's `layer`),
/// since the runner last cleared it: each expert's choices before drops,
/// the choices dropped for want of capacity, and the load-balancing loss
/// summed over sequences. Recomputed routes do not count.
struct MoeRoutingStats {
  struct Layer {
    std::vector<double> expertChoices;
    double dropped = 0, auxSum = 0, sequences = 0;
  };
  std::map<int64_t, Layer> layers;
};

struct ExecutionContext {
  Communicator *communicator = nullptr;
  llvm::DenseMap<int64_t, Request> pending;
  /// Set by the runner to collect MoE routing figures; null: not collected.
  MoeRoutingStats *moeRouting = nullptr;
};

class KernelCall {
public:
  KernelCall(const program::Instruction &inst, llvm::ArrayRef<TensorRef> inputs,
             llvm::MutableArrayRef<TensorRef> outputs,
             ExecutionContext *context = nullptr)
      : inst_(inst), inputs_(inputs), outputs_(outputs), context_(context) {}

  llvm::StringRef op() const { return inst_.op(); }
  const program::Instruction &instruction() const { return inst_; }

  size_t numInputs() const { return inputs_.size(); }
  const TensorRef &input(size_t i) const { return inputs_[i]; }
  size_t numOutputs() const { return outputs_.size(); }
  TensorRef &output(size_t i) const { return outputs_[i]; }

  bool has(llvm::StringRef attr) const;
  /// A unit/bool attribute: present and true.
  bool flag(llvm::StringRef attr) const;
  int64_t i64(llvm::StringRef attr, int64_t defaultValue = 0) const;
  double f64(llvm::StringRef attr, double defaultValue = 0) const;
  std::optional<double> optionalF64(llvm::StringRef attr) const;
  /// An attribute the op's definition always gives (the lowering writes its
  /// defaults too, so no backend restates one); an error naming the op when
  /// the instruction lacks it.
  llvm::Expected<int64_t> requiredI64(llvm::StringRef attr) const;
  llvm::Expected<double> requiredF64(llvm::StringRef attr) const;
  llvm::ArrayRef<int64_t> ints(llvm::StringRef attr) const;
  llvm::StringRef str(llvm::StringRef attr) const;
  /// A string-array attribute (a collective's `mesh_axes`).
  std::vector<std::string> strings(llvm::StringRef attr) const;

  /// The rank's execution context, or null (kernel unit tests).
  ExecutionContext *context() const { return context_; }

  /// An error naming the op and its source location: "dtc.matmul at
  /// 'node_3': <message>".
  llvm::Error error(const llvm::Twine &message) const;

private:
  const program::Instruction &inst_;
  llvm::ArrayRef<TensorRef> inputs_;
  llvm::MutableArrayRef<TensorRef> outputs_;
  ExecutionContext *context_;
};

using KernelFn = llvm::Error (*)(const KernelCall &call);

// Operand checks every backend's kernels share (the error names the op).

/// Error unless `t` has a float dtype; `what` names the operand.
llvm::Error expectFloat(const KernelCall &call, const TensorRef &t,
                        llvm::StringRef what);
/// Error unless `t` has exactly `shape`.
llvm::Error expectShape(const KernelCall &call, const TensorRef &t,
                        llvm::ArrayRef<int64_t> shape, llvm::StringRef what);
/// expectFloat, then expectShape: a float result the kernel writes whole.
llvm::Error expectFloatShape(const KernelCall &call, const TensorRef &t,
                             llvm::ArrayRef<int64_t> shape,
                             llvm::StringRef what);
/// Error unless the call has at least `inputs` inputs and `outputs` outputs.
llvm::Error expectArity(const KernelCall &call, size_t inputs, size_t outputs);
/// Error unless every tensor in `tensors` has the shape of the first.
llvm::Error expectSameShapes(const KernelCall &call,
                             std::initializer_list<const TensorRef *> tensors);
/// The required `axis` attribute normalized against `rank` (negative counts
/// from the end), in [0, rank), or [0, rank] with `allowRank`.
llvm::Expected<int64_t> readAxis(const KernelCall &call, int64_t rank,
                                 bool allowRank = false);
/// "[2, 3, 4]".
std::string shapeString(llvm::ArrayRef<int64_t> shape);

class KernelRegistry {
public:
  void add(llvm::StringRef op, KernelFn fn) { kernels_[op] = fn; }
  KernelFn lookup(llvm::StringRef op) const {
    auto it = kernels_.find(op);
    return it == kernels_.end() ? nullptr : it->second;
  }
  std::vector<std::string> ops() const;

private:
  llvm::StringMap<KernelFn> kernels_;
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_KERNEL_H
