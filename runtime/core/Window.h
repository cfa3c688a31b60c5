//===- Window.h - Conv and pool operand checks for every backend -*- C++
//-*-===//
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

/// Checks the shapes of a convolution's input, weight and result against
/// each other, its `groups` and its window attributes.
llvm::Expected<ConvDims> readConvDims(const KernelCall &call,
                                      llvm::ArrayRef<int64_t> input,
                                      llvm::ArrayRef<int64_t> weight,
                                      llvm::ArrayRef<int64_t> result);

/// Checks a pool's `input` [n, c, x...] and `pooled` [n, c, o...] (its
/// result or the result's gradient, which `what` names) against each other
/// and the window attributes, `kernel_shape` included.
llvm::Expected<Window> readPoolWindow(const KernelCall &call,
                                      llvm::ArrayRef<int64_t> input,
                                      llvm::ArrayRef<int64_t> pooled,
                                      llvm::StringRef what);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_WINDOW_H
