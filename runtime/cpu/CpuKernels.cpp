//===- CpuKernels.cpp - The CPU backend's kernel table --------------------===//

#include "runtime/cpu/CpuKernels.h"

#include <cblas.h>

namespace dtc::runtime::cpu {

void registerCpuKernels(KernelRegistry &registry) {
  // OpenBLAS's own threads split GEMMs by the thread count, which changes
  // rounding between machines; kernels split work over fixed-size blocks
  // with OpenMP instead, so results never depend on the thread count.
  openblas_set_num_threads(1);
  registerElementwiseKernels(registry);
  registerLinalgKernels(registry);
  registerNormKernels(registry);
  registerDataMovementKernels(registry);
  registerConvPoolKernels(registry);
  registerTransformerKernels(registry);
  registerGradientKernels(registry);
  registerOptimizerKernels(registry);
}

} // namespace dtc::runtime::cpu
