//===- Reduce.h - dtc.reduce_* operand checks -------------------*- C++ -*-===//
//
// The shapes of dtc.reduce_sum, reduce_mean and reduce_max, read and checked
// once for every backend, with the input's dims collapsed into the groups
// both backends' loops run over; dtc.cumsum's scan; dtc.selective_scan's
// shapes.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_REDUCE_H
#define DTC_RUNTIME_CORE_REDUCE_H

#include "runtime/core/Kernel.h"

#include "llvm/ADT/SmallVector.h"

namespace dtc::runtime {

/// The input's dims as groups of adjacent dims that are all reduced or all
/// kept (size-1 dims dropped): group g has `sizes[g]` elements and is
/// reduced when `reduced[g]`. Each result element reduces `count` inputs.
struct ReduceGroups {
  llvm::SmallVector<int64_t, 6> sizes;
  llvm::SmallVector<bool, 6> reduced;
  int64_t count = 1;

  /// At most one reduced group: the input is [outer, count, inner].
  bool rowShaped() const;
  int64_t outer() const;
  int64_t inner() const;
};

/// Reads `dims` (negative counts from the end; repeats allowed) and checks
/// that the result has the input's dtype and its kept elements.
llvm::Expected<ReduceGroups> readReduce(const KernelCall &call);

/// dtc.cumsum over an input [outer, length, inner] (the scanned axis in the
/// middle): element (o, i, k) at (o * length + i) * inner + k.
struct Scan {
  int64_t outer = 1, length = 1, inner = 1;
  bool exclusive = false, reverse = false;
};

/// Reads `axis`, `exclusive` and `reverse` and checks that the result has
/// the input's dtype and shape.
llvm::Expected<Scan> readCumSum(const KernelCall &call);

/// dtc.selective_scan and its gradient: a and x [batch, channels, length,
/// state], c [batch, length, state], y [batch, channels, length], all
/// row-major.
struct SelectiveScan {
  int64_t batch = 0, channels = 0, length = 0, state = 0;
};

/// Checks dtc.selective_scan's (a, x, c) -> y, or with `gradient`
/// dtc.selective_scan_grad's (a, x, c, grad) -> (a_grad, x_grad, c_grad):
/// float tensors of those shapes.
llvm::Expected<SelectiveScan> readSelectiveScan(const KernelCall &call,
                                                bool gradient);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_REDUCE_H
