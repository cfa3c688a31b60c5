//===- DataMovement.cpp - Reshape, transpose, slice, concat checks --------===//

#include "runtime/core/DataMovement.h"

namespace dtc::runtime {

llvm::Error checkReshape(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (in.dtype != out.dtype || in.numElements() != out.numElements())
    return call.error("cannot reshape " + shapeString(in.shape) + " " +
                      dtypeName(in.dtype) + " to " + shapeString(out.shape) +
                      " " + dtypeName(out.dtype));
  return llvm::Error::success();
}

llvm::Expected<StridedView> readTranspose(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 1, 1))
    return std::move(err);
  const TensorRef &in = call.input(0), &out = call.output(0);
  llvm::ArrayRef<int64_t> perm = call.ints("permutation");
  if (static_cast<int64_t>(perm.size()) != in.rank() ||
      out.rank() != in.rank() || in.dtype != out.dtype)
    return call.error("permutation of " + llvm::Twine(perm.size()) +
                      " dims does not match " + shapeString(in.shape) + " -> " +
                      shapeString(out.shape));
  llvm::SmallVector<int64_t, 6> inStrides = stridesOf(in.shape);
  llvm::SmallVector<bool, 6> seen(in.rank(), false);
  StridedView v;
  v.shape.assign(out.shape.begin(), out.shape.end());
  for (int64_t d = 0; d < in.rank(); ++d) {
    int64_t p = perm[d];
    if (p < 0 || p >= in.rank() || seen[p] || out.shape[d] != in.shape[p])
      return call.error("permutation does not map " + shapeString(in.shape) +
                        " to " + shapeString(out.shape));
    seen[p] = true;
    v.strides.push_back(inStrides[p]);
  }
  return v;
}

llvm::Expected<StridedView> readSlice(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 1, 1))
    return std::move(err);
  const TensorRef &in = call.input(0), &out = call.output(0);
  llvm::ArrayRef<int64_t> starts = call.ints("starts"),
                          limits = call.ints("limits"),
                          steps = call.ints("strides");
  int64_t rank = in.rank();
  if (static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(limits.size()) != rank ||
      static_cast<int64_t>(steps.size()) != rank || out.rank() != rank ||
      in.dtype != out.dtype)
    return call.error("starts, limits and strides need " + llvm::Twine(rank) +
                      " entries each");
  llvm::SmallVector<int64_t, 6> inStrides = stridesOf(in.shape);
  StridedView v;
  v.shape.assign(out.shape.begin(), out.shape.end());
  for (int64_t d = 0; d < rank; ++d) {
    int64_t expected = steps[d] > 0 && starts[d] >= 0 &&
                               starts[d] <= limits[d] &&
                               limits[d] <= in.shape[d]
                           ? (limits[d] - starts[d] + steps[d] - 1) / steps[d]
                           : -1;
    if (expected != out.shape[d])
      return call.error("slice of dim " + llvm::Twine(d) + " [" +
                        llvm::Twine(starts[d]) + ", " + llvm::Twine(limits[d]) +
                        ") step " + llvm::Twine(steps[d]) + " of " +
                        shapeString(in.shape) + " does not give " +
                        shapeString(out.shape));
    v.base += starts[d] * inStrides[d];
    v.strides.push_back(inStrides[d] * steps[d]);
  }
  return v;
}

llvm::Expected<StridedView> readSliceGrad(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 1, 1))
    return std::move(err);
  const TensorRef &dy = call.input(0), &out = call.output(0);
  int64_t rank = dy.rank();
  llvm::ArrayRef<int64_t> starts = call.ints("starts"),
                          steps = call.ints("strides");
  if (dy.dtype != out.dtype)
    return call.error("grad dtype " + dtypeName(dy.dtype) +
                      " differs from the result's " + dtypeName(out.dtype));
  if (out.rank() != rank || static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(steps.size()) != rank)
    return call.error("result " + shapeString(out.shape) +
                      ", starts and strides need the grad's rank " +
                      llvm::Twine(rank));
  StridedView v;
  v.shape.assign(dy.shape.begin(), dy.shape.end());
  v.strides = stridesOf(out.shape);
  for (int64_t d = 0; d < rank; ++d) {
    int64_t extent = dy.shape[d];
    if (steps[d] < 1 || starts[d] < 0 ||
        (extent && starts[d] + (extent - 1) * steps[d] >= out.shape[d]))
      return call.error("grad " + shapeString(dy.shape) + " from starts " +
                        shapeString(starts) + " by strides " +
                        shapeString(steps) + " does not fit in " +
                        shapeString(out.shape));
    v.base += starts[d] * v.strides[d];
    v.strides[d] *= steps[d];
  }
  return v;
}

llvm::Expected<ConcatRows> readConcat(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 1, 1))
    return std::move(err);
  const TensorRef &out = call.output(0);
  int64_t axis = call.i64("axis", 0);
  if (axis < 0)
    axis += out.rank();
  if (axis < 0 || axis >= out.rank())
    return call.error("axis out of range for " + shapeString(out.shape));
  size_t innerBytes =
      numElements(llvm::ArrayRef(out.shape).drop_front(axis + 1)) *
      dtypeSize(out.dtype);
  ConcatRows c;
  c.outer = numElements(llvm::ArrayRef(out.shape).take_front(axis));
  c.rowBytes = out.shape[axis] * innerBytes;
  int64_t sum = 0;
  for (size_t i = 0; i < call.numInputs(); ++i) {
    const TensorRef &in = call.input(i);
    bool ok = in.rank() == out.rank() && in.dtype == out.dtype;
    for (int64_t d = 0; ok && d < out.rank(); ++d)
      ok = d == axis || in.shape[d] == out.shape[d];
    if (!ok)
      return call.error("input " + llvm::Twine(i) + " " +
                        shapeString(in.shape) + " " + dtypeName(in.dtype) +
                        " does not fit the result " + shapeString(out.shape));
    sum += in.shape[axis];
    c.chunkBytes.push_back(in.shape[axis] * innerBytes);
  }
  if (sum != out.shape[axis])
    return call.error("inputs along axis sum to " + llvm::Twine(sum) +
                      ", result has " + llvm::Twine(out.shape[axis]));
  return c;
}

} // namespace dtc::runtime
