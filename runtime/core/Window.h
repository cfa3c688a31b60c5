//===- Window.h - Per-op conv and pool operand checks -----------*- C++ -*-===//
//
// The shapes and attributes of dtc.conv, dtc.max_pool, dtc.avg_pool and
// their gradients, read and checked once for every backend: a kernel that
// gets past these reads only in bounds.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_WINDOW_H
#define DTC_RUNTIME_CORE_WINDOW_H

#include "runtime/core/Kernel.h"

#include "llvm/ADT/SmallVector.h"

namespace dtc::runtime {

/// Most spatial dims a window may have (the CUDA kernels keep them in
/// fixed arrays).
constexpr int64_t kMaxWindowDims = 8;

/// A window over the spatial dims: input and output extents, kernel,
/// strides, dilations and begin pads (end pads only shape the output).
/// Output position o reads input position o * stride + tap * dilation -
/// padBegin of each dim, or zero padding outside [0, in).
struct Window {
  llvm::SmallVector<int64_t, 4> in, out, kernel, strides, dilations, padBegin;

  int64_t rank() const { return static_cast<int64_t>(in.size()); }
  int64_t taps() const;
  int64_t inPositions() const;
  int64_t outPositions() const;
};

/// Reads the call's strides, dilations and pads (defaults 1, 1 and 0) for
/// a window `kernel` over the spatial extents `input`, and checks that
/// `output` holds the extents they give: (in + pads - window) / stride + 1,
/// or 0 where the window does not fit. Pads may be negative (crops).
llvm::Expected<Window> readWindow(const KernelCall &call,
                                  llvm::ArrayRef<int64_t> input,
                                  llvm::ArrayRef<int64_t> kernel,
                                  llvm::ArrayRef<int64_t> output);

/// The dims of a convolution: input [batch, channels, x...], weight
/// [filters, channels / groups, k...], result [batch, filters, o...].
struct ConvDims {
  int64_t batch = 0, channels = 0, filters = 0, groups = 1;
  Window window;

  int64_t channelsPerGroup() const { return channels / groups; }
  int64_t filtersPerGroup() const { return filters / groups; }
};

/// The dims of a pool: `planes` (batch times channels) [x...] planes of
/// input pooled into as many [o...] planes.
struct PoolDims {
  int64_t planes = 0;
  Window window;
};

// One reader per op: the arity, the float operands and result, and the
// shapes against each other and the attributes.

/// dtc.conv: float input, weight and an optional float bias of `filters`
/// elements -> a float result.
llvm::Expected<ConvDims> readConv(const KernelCall &call);
/// dtc.conv_grad_input: float grad [batch, filters, o...] and weight -> the
/// input's gradient [batch, channels, x...].
llvm::Expected<ConvDims> readConvGradInput(const KernelCall &call);
/// dtc.conv_grad_weight: float input and grad -> the weight's gradient.
llvm::Expected<ConvDims> readConvGradWeight(const KernelCall &call);

/// dtc.max_pool and dtc.avg_pool: a float input [n, c, x...] -> the
/// result [n, c, o...] (window `kernel_shape`).
llvm::Expected<PoolDims> readPool(const KernelCall &call);
/// dtc.max_pool_grad: float input and grad [n, c, o...] -> the input's
/// gradient, shaped as the input.
llvm::Expected<PoolDims> readMaxPoolGrad(const KernelCall &call);
/// dtc.avg_pool_grad: a float grad [n, c, o...] -> the input's gradient.
llvm::Expected<PoolDims> readAvgPoolGrad(const KernelCall &call);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_WINDOW_H
