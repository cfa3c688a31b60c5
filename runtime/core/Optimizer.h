//===- Optimizer.h - Optimizer update operand checks ------------*- C++ -*-===//
//
// The operands of dtc.adamw, read and checked once for every backend. The
// scalars' values (lr, step, grad_scale) are the kernels' to read: they may
// live on a device.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_OPTIMIZER_H
#define DTC_RUNTIME_CORE_OPTIMIZER_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime {

/// AdamW's hyperparameters (the op's attributes).
struct AdamWConfig {
  double beta1 = 0, beta2 = 0, epsilon = 0, weightDecay = 0;
};

/// adamw: float param, grad, exp_avg, exp_avg_sq of one shape and float
/// scalars lr, step, grad_scale -> the new param and moments, each with the
/// shape and dtype of the operand it replaces.
llvm::Expected<AdamWConfig> readAdamW(const KernelCall &call);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_OPTIMIZER_H
