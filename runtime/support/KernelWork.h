//===- KernelWork.h - FLOPs and bytes of one kernel -------------*- C++ -*-===//
//
// The one definition of what a dtc op computes and moves, read from its
// name, operand and result shapes and flags alone (no MLIR, no protobuf),
// so that every reader prices an op alike: sharding propagation, the model
// summary's FLOPs, the pipeline pass's stage balancing, the IR-priced
// planner (GraphPlanner.h) over dtc IR, and `dtc plan report --trace` over
// program.pb instructions. In the bottom library so that the passes read it
// without depending on the cost model above them; the seconds a kernel takes
// on a cluster are the cost model's (compiler/costmodel/KernelTime.h).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_SUPPORT_KERNELWORK_H
#define DTC_RUNTIME_SUPPORT_KERNELWORK_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>

namespace dtc {

/// The collectives a kernel can be (Collectives.h prices them).
enum class Collective {
  AllReduce,
  AllGather,
  ReduceScatter,
  AllToAll,
  Broadcast,
  SendRecv
};

/// One operand or result: its shape and the bytes of one element as the
/// reader prices it (the planner prices float tensors in the plan's dtype).
struct TensorDesc {
  llvm::SmallVector<int64_t, 4> shape;
  int64_t elementBytes = 4;
  double elements() const;
  double bytes() const {
    return elements() * static_cast<double>(elementBytes);
  }
};

/// An op as the pricing sees it.
struct KernelDesc {
  llvm::StringRef op; ///< "dtc.matmul", "dtc.conv_grad_input", ...
  llvm::SmallVector<TensorDesc, 4> inputs, outputs;
  bool transposeLhs = false, transposeRhs = false; ///< dtc.matmul.
  bool causal = false;                             ///< dtc.attention*.
};

struct KernelWork {
  enum class Kind {
    Free,      ///< Metadata only: parameters, constants, reshapes, waits.
    Gemm,      ///< Matmuls and convolutions: `batch` GEMMs of m x n x k.
    Attention, ///< Fused attention (or its gradient, `gradient`).
    Stream,    ///< Memory-bound: moves `bytes` through HBM.
    Comm,      ///< A collective or transfer (priced by Collectives.h).
  };
  Kind kind = Kind::Free;
  /// FLOPs: matmuls 2mnk per GEMM, attention 2bhst(d_qk + d_v) in full
  /// even when causal (Megatron-LM's convention), a streaming op one per
  /// result element.
  double flops = 0;
  /// FLOPs the kernel executes: a causal fused attention skips half.
  double executedFlops = 0;
  /// Operand and result bytes the kernel reads and writes.
  double bytes = 0;
  double m = 0, n = 0, k = 0, batch = 0;     ///< Gemm.
  double queries = 0, keys = 0, headDim = 0; ///< Attention.
  bool gradient = false; ///< Attention: the backward kernel.
  /// Comm: the collective and the bytes Collectives.h prices it on (the
  /// gathered output of an all-gather, the input of the others, the
  /// message of a send or receive).
  Collective collective = Collective::AllReduce;
  double commBytes = 0;
  bool isCompute() const { return kind != Kind::Free && kind != Kind::Comm; }
  /// The FLOPs model-FLOPs figures (MFU, the summary) count: GEMMs and
  /// attention only, as the papers' formulas do.
  double modelFlops() const {
    return kind == Kind::Gemm || kind == Kind::Attention ? flops : 0;
  }
};

/// What `op` computes and moves.
KernelWork kernelWork(const KernelDesc &op);

/// The kernels (probes) `dtc calibrate` times to fit each kind's curve, built
/// here so that what is measured is what kernelWork() prices as that kind: a
/// GEMM of m x n x k (with `transposeLhs` the left operand stored [k, m],
/// the weight-gradient form X^T dY); a fused attention over q, k, v [batch,
/// heads, seq, headDim], or its gradient (operands plus the output's
/// gradient, results d q, d k, d v); an elementwise op streaming two inputs
/// of `elements` into a third.
KernelDesc gemmProbe(int64_t m, int64_t n, int64_t k, bool transposeLhs);
KernelDesc attentionProbe(int64_t batch, int64_t heads, int64_t seq,
                          int64_t headDim, bool causal, bool gradient);
KernelDesc streamProbe(int64_t elements);

/// The loss the training step binds to a model's logits (dtc-bind-loss):
/// dtc.cross_entropy over `rows` x `classes` logits of `elementBytes`
/// each and int64 labels, to one f32.
KernelDesc crossEntropyKernel(double rows, double classes,
                              int64_t elementBytes);

} // namespace dtc

#endif // DTC_RUNTIME_SUPPORT_KERNELWORK_H
