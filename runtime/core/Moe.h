//===- Moe.h - Mixture-of-experts operand checks ----------------*- C++ -*-===//
//
// The operands of dtc.moe_route, dtc.moe_dispatch, dtc.moe_combine and
// their gradients (docs/moe.md), read and checked once for every backend.
// Slot values are the kernels' to check: they may live on a device.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_MOE_H
#define DTC_RUNTIME_CORE_MOE_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime {

/// moe_route's sizes and attributes: logits [batch, positions, experts].
struct MoeRouting {
  int64_t batch = 0, positions = 0, experts = 0, topK = 0, capacity = 0;
  bool sigmoid = false, normalize = false;
};

/// moe_route: logits [b, s, E] -> gates [b, s, E] (float), slots [b, E, C]
/// (i64), aux [b] (float).
llvm::Expected<MoeRouting> readMoeRoute(const KernelCall &call);
/// moe_route_grad: logits, the gates' and aux's cotangents -> the logits'.
llvm::Expected<MoeRouting> readMoeRouteGrad(const KernelCall &call);

/// The expert buffer's sizes: [batch, experts, capacity, hidden] rows of
/// `positions` tokens, addressed by slots [batch, experts, capacity]
/// (i64 or i32, -1 for an empty slot).
struct MoeSlots {
  int64_t batch = 0, positions = 0, experts = 0, capacity = 0, hidden = 0;
};

/// moe_dispatch: x [b, s, h], slots -> [b, E, C, h] (float).
llvm::Expected<MoeSlots> readMoeDispatch(const KernelCall &call);
/// moe_dispatch_grad: gradient [b, E, C, h], slots -> [b, seq_len, h].
llvm::Expected<MoeSlots> readMoeDispatchGrad(const KernelCall &call);
/// moe_combine: experts [b, E, C, h], slots, gates [b, s, E] -> [b, s, h].
llvm::Expected<MoeSlots> readMoeCombine(const KernelCall &call);
/// moe_combine_grad: experts, slots, gates, gradient [b, s, h] -> the
/// experts' and the gates' cotangents.
llvm::Expected<MoeSlots> readMoeCombineGrad(const KernelCall &call);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_MOE_H
