//===- DataMovement.h - Reshape, transpose, slice, concat checks -*- C++
//-*-===//
//
// The shapes and attributes of dtc.reshape, dtc.transpose, dtc.slice,
// dtc.slice_grad and dtc.concat, read and checked once for every backend:
// a kernel that gets past these reads and writes only in bounds.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_DATAMOVEMENT_H
#define DTC_RUNTIME_CORE_DATAMOVEMENT_H

#include "runtime/core/Kernel.h"

#include "llvm/ADT/SmallVector.h"

namespace dtc::runtime {

/// Element `index` of a dense row-major `shape` sits at element `base` +
/// sum(index[d] * strides[d]) of the strided side (strides in elements).
struct StridedView {
  llvm::SmallVector<int64_t, 6> shape, strides;
  int64_t base = 0;
};

/// dtc.reshape: same dtype and element count.
llvm::Error checkReshape(const KernelCall &call);

/// dtc.transpose: the result (dense) read from the input; result dim d is
/// input dim permutation[d].
llvm::Expected<StridedView> readTranspose(const KernelCall &call);

/// dtc.slice: the result (dense) read from the input at starts + index *
/// strides, within limits.
llvm::Expected<StridedView> readSlice(const KernelCall &call);

/// dtc.slice_grad: the grad (dense) written into the zeroed result at
/// starts + index * strides. Positive strides make it injective.
llvm::Expected<StridedView> readSliceGrad(const KernelCall &call);

/// dtc.concat along `axis`: for each of `outer` rows of `rowBytes`, input
/// i supplies `chunkBytes[i]` contiguous bytes, in input order.
struct ConcatRows {
  int64_t outer = 0;
  size_t rowBytes = 0;
  llvm::SmallVector<size_t, 4> chunkBytes;
};
llvm::Expected<ConcatRows> readConcat(const KernelCall &call);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_DATAMOVEMENT_H
