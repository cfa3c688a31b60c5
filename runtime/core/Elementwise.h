//===- Elementwise.h - Elementwise operand checks ---------------*- C++ -*-===//
//
// The operands of the unary, cast, compare, select and activation-gradient
// kernels, checked once for every backend. Broadcasting binary ops check
// their shapes where they compute the broadcast strides.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_ELEMENTWISE_H
#define DTC_RUNTIME_CORE_ELEMENTWISE_H

#include "runtime/core/Kernel.h"
#include "runtime/core/Predicate.h"

namespace dtc::runtime {

/// A float unary op (exp, tanh, gelu, ...): the result has the input's
/// dtype and element count.
llvm::Error checkUnary(const KernelCall &call);

/// dtc.cast: same element count, supported dtypes on both sides.
llvm::Error checkCast(const KernelCall &call);

/// dtc.compare: the `predicate` attribute, operands of one dtype, an i1
/// result.
llvm::Expected<Predicate> readCompare(const KernelCall &call);

/// dtc.select: an i1 condition, values of the result's dtype.
llvm::Error checkSelect(const KernelCall &call);

/// The gradient of a float activation (gelu_grad, silu_grad): input x and
/// d output -> d input, all of one shape.
llvm::Error checkActivationGrad(const KernelCall &call);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_ELEMENTWISE_H
