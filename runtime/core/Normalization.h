//===- Normalization.h - Softmax and norm operand checks --------*- C++ -*-===//
//
// The operands of dtc.softmax, dtc.layer_norm, dtc.rms_norm and their
// gradients, read and checked once for every backend (attributes
// included: the lowering writes axis and epsilon into every program).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_NORMALIZATION_H
#define DTC_RUNTIME_CORE_NORMALIZATION_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime {

/// The elements as `outer` x `size` x `inner`, normalized over `size`
/// (strided by `inner`). A norm normalizes the trailing dims from its axis:
/// `outer` rows of `size` contiguous elements, `inner` 1.
struct NormalizedRows {
  int64_t outer = 1, size = 1, inner = 1;
  double epsilon = 0; ///< Norms only.
  /// layer_norm with a bias operand (input 2); layer_norm_grad's bias
  /// gradient (output 2).
  bool bias = false;
};

/// softmax: float input -> a result of its shape and dtype, over `axis`.
llvm::Expected<NormalizedRows> readSoftmax(const KernelCall &call);
/// softmax_grad: the softmax's output y and its cotangent dy (float, one
/// shape) -> dx of that shape.
llvm::Expected<NormalizedRows> readSoftmaxGrad(const KernelCall &call);
/// layer_norm (`rms` false; weight, optional bias) and rms_norm (weight)
/// over the dims from `axis` (which may be the rank: nothing normalized).
llvm::Expected<NormalizedRows> readNorm(const KernelCall &call, bool rms);
/// layer_norm_grad (dx, dweight, dbias) and rms_norm_grad (dx, dweight) of
/// input x, weight and dy.
llvm::Expected<NormalizedRows> readNormGrad(const KernelCall &call, bool rms);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_NORMALIZATION_H
