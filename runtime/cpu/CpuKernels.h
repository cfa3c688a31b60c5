//===- CpuKernels.h - The CPU backend's kernels -----------------*- C++ -*-===//
//
// The reference kernels: one per dtc op, fp32 compute (bf16/f16 tensors are
// converted on load and rounded on store), GEMMs through OpenBLAS, threads
// (Parallel.h) over independent outputs. Every other backend is checked
// against these.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CPU_CPUKERNELS_H
#define DTC_RUNTIME_CPU_CPUKERNELS_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime::cpu {

/// Every CPU kernel.
void registerCpuKernels(KernelRegistry &registry);

// One per kernel family (runtime/cpu/*.cpp); registerCpuKernels calls all.
void registerElementwiseKernels(KernelRegistry &registry);
void registerLinalgKernels(KernelRegistry &registry);
void registerNormKernels(KernelRegistry &registry);
void registerDataMovementKernels(KernelRegistry &registry);
void registerConvPoolKernels(KernelRegistry &registry);
void registerGradientKernels(KernelRegistry &registry);
void registerOptimizerKernels(KernelRegistry &registry);
void registerMoeKernels(KernelRegistry &registry);
void registerLossShardKernels(KernelRegistry &registry);
/// dtc.attention, dtc.attention_grad and the ring attention steps
/// (runtime/cpu/RingAttention.cpp).
void registerAttentionKernels(KernelRegistry &registry);
/// dtc.shard_slice (runtime/cpu/Collective.cpp).
void registerShardSliceKernel(KernelRegistry &registry);

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_CPUKERNELS_H
