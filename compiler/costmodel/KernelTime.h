//===- KernelTime.h - Seconds of one kernel on a cluster --------*- C++ -*-===//
//
// What a kernel (runtime/support/KernelWork.h: its FLOPs and bytes) takes on
// one GPU of a cluster, from the cost model's fitted curves (Compute.h).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_KERNELTIME_H
#define DTC_COMPILER_COSTMODEL_KERNELTIME_H

#include "compiler/costmodel/Cluster.h"
#include "runtime/support/KernelWork.h"

namespace dtc {

/// Seconds of the kernel on one GPU, GEMMs in `type` (Compute.h's curves).
double kernelSeconds(const KernelWork &work, DType type,
                     const Cluster &cluster);

/// Seconds of the kernels autodiff emits for the forward kernel `work`: a
/// GEMM's input- and weight-gradient GEMMs (linearTimes), the attention
/// gradient kernel (attentionBackwardRatio times the forward), and for a
/// streaming op twice its bytes (it reads the result's gradient and the
/// operands, and writes the operands' gradients).
double backwardKernelSeconds(const KernelWork &work, DType type,
                             const Cluster &cluster);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_KERNELTIME_H
