//===- OpCost.h - What a dtc op costs, read from the IR ---------*- C++ -*-===//
//
// The MLIR side of runtime/support/KernelWork.h: an op's name, operand
// and result types and flags as a KernelDesc, so the model summary, the
// pipeline pass's stage balancing and the IR-priced planner count FLOPs and
// bytes with the one definition `dtc plan report --trace` uses too.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_OPCOST_H
#define DTC_PASSES_OPCOST_H

#include "runtime/support/KernelWork.h"

#include "mlir/IR/Operation.h"

namespace dtc {

/// `op` as the pricing sees it. Float tensors count `floatBytes` per element
/// (the dtype a plan trains in) or, when 0, their own element size.
KernelDesc kernelDescOf(mlir::Operation *op, int64_t floatBytes = 0);

/// kernelWork(kernelDescOf(op, floatBytes)).
KernelWork opWork(mlir::Operation *op, int64_t floatBytes = 0);

} // namespace dtc

#endif // DTC_PASSES_OPCOST_H
