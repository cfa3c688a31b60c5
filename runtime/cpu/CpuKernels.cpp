//===- CpuKernels.cpp - The CPU backend's kernel table --------------------===//

#include "runtime/cpu/CpuKernels.h"
#include "runtime/core/CollectiveKernels.h"
#include "runtime/cpu/Blas.h"

#include <cblas.h>

namespace dtc::runtime::cpu {

void registerCpuKernels(KernelRegistry &registry) {
  // OpenBLAS's own threads split GEMMs by the thread count, which changes
  // rounding between machines; kernels split work over fixed-size blocks
  // on dtc's own threads instead (Parallel.h), so results never depend on
  // the thread count.
  // The kernel table first (Blas.h): re-initializing OpenBLAS comes before
  // setting its thread count.
  chooseBlasKernels();
  openblas_set_num_threads(1);
  registerElementwiseKernels(registry);
  registerLinalgKernels(registry);
  registerNormKernels(registry);
  registerDataMovementKernels(registry);
  registerConvPoolKernels(registry);
  registerGradientKernels(registry);
  registerOptimizerKernels(registry);
  registerMoeKernels(registry);
  registerLossShardKernels(registry);
  registerAttentionKernels(registry);
  registerShardSliceKernel(registry);
  // The collectives work on host memory through the rank's communicator.
  runtime::registerCollectiveKernels(registry);
}

} // namespace dtc::runtime::cpu
