//===- Normalization.cpp - Softmax and norm operand checks ----------------===//

#include "runtime/core/Normalization.h"

namespace dtc::runtime {

namespace {

/// Rows of `shape` normalized over dim `axis`.
NormalizedRows overAxis(llvm::ArrayRef<int64_t> shape, int64_t axis) {
  NormalizedRows rows;
  rows.outer = numElements(shape.take_front(axis));
  rows.size = shape[axis];
  rows.inner = numElements(shape.drop_front(axis + 1));
  return rows;
}

/// Rows of `shape` normalized over its dims from `axis`.
NormalizedRows trailingFrom(llvm::ArrayRef<int64_t> shape, int64_t axis) {
  NormalizedRows rows;
  rows.size = numElements(shape.drop_front(axis));
  rows.outer = rows.size ? numElements(shape) / rows.size : 0;
  return rows;
}

llvm::Error expectNormalizedDims(const KernelCall &call, const TensorRef &t,
                                 const TensorRef &input, int64_t size,
                                 llvm::StringRef what) {
  if (t.numElements() == size)
    return llvm::Error::success();
  return call.error(what + " " + shapeString(t.shape) +
                    " does not match the normalized dims of " +
                    shapeString(input.shape));
}

} // namespace

llvm::Expected<NormalizedRows> readSoftmax(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return std::move(err);
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (auto err = expectFloat(call, in, "input"))
    return std::move(err);
  if (auto err = expectShape(call, out, in.shape, "result"))
    return std::move(err);
  if (in.dtype != out.dtype)
    return call.error("result dtype differs from the input's");
  llvm::Expected<int64_t> axis = readAxis(call, in.rank());
  if (!axis)
    return axis.takeError();
  return overAxis(in.shape, *axis);
}

llvm::Expected<NormalizedRows> readSoftmaxGrad(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &y = call.input(0), &dy = call.input(1),
                  &out = call.output(0);
  if (auto err = expectFloat(call, y, "output"))
    return std::move(err);
  if (auto err = expectFloat(call, dy, "grad"))
    return std::move(err);
  if (auto err = expectSameShapes(call, {&y, &dy, &out}))
    return std::move(err);
  llvm::Expected<int64_t> axis = readAxis(call, y.rank());
  if (!axis)
    return axis.takeError();
  return overAxis(y.shape, *axis);
}

llvm::Expected<NormalizedRows> readNorm(const KernelCall &call, bool rms) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &in = call.input(0), &weight = call.input(1),
                  &out = call.output(0);
  if (auto err = expectFloat(call, in, "input"))
    return std::move(err);
  if (auto err = expectShape(call, out, in.shape, "result"))
    return std::move(err);
  llvm::Expected<int64_t> axis = readAxis(call, in.rank(), /*allowRank=*/true);
  if (!axis)
    return axis.takeError();
  NormalizedRows rows = trailingFrom(in.shape, *axis);
  rows.bias = !rms && call.numInputs() > 2;
  if (auto err = expectNormalizedDims(call, weight, in, rows.size, "weight"))
    return std::move(err);
  if (rows.bias)
    if (auto err =
            expectNormalizedDims(call, call.input(2), in, rows.size, "bias"))
      return std::move(err);
  llvm::Expected<double> epsilon = call.requiredF64("epsilon");
  if (!epsilon)
    return epsilon.takeError();
  rows.epsilon = *epsilon;
  return rows;
}

llvm::Expected<NormalizedRows> readNormGrad(const KernelCall &call, bool rms) {
  size_t numOutputs = rms ? 2 : 3;
  if (auto err = expectArity(call, 3, numOutputs))
    return std::move(err);
  const TensorRef &x = call.input(0), &w = call.input(1), &dy = call.input(2);
  for (auto [t, what] : {std::pair{&x, "input"}, std::pair{&w, "weight"},
                         std::pair{&dy, "grad"}})
    if (auto err = expectFloat(call, *t, what))
      return std::move(err);
  if (auto err = expectSameShapes(call, {&x, &dy, &call.output(0)}))
    return std::move(err);
  llvm::Expected<int64_t> axis = readAxis(call, x.rank());
  if (!axis)
    return axis.takeError();
  llvm::ArrayRef<int64_t> normalized =
      llvm::ArrayRef<int64_t>(x.shape).drop_front(*axis);
  if (auto err = expectShape(call, w, normalized, "weight"))
    return std::move(err);
  for (size_t i = 1; i < numOutputs; ++i)
    if (auto err = expectShape(call, call.output(i), normalized,
                               i == 1 ? "weight gradient" : "bias gradient"))
      return std::move(err);
  NormalizedRows rows = trailingFrom(x.shape, *axis);
  rows.bias = !rms;
  llvm::Expected<double> epsilon = call.requiredF64("epsilon");
  if (!epsilon)
    return epsilon.takeError();
  rows.epsilon = *epsilon;
  return rows;
}

} // namespace dtc::runtime
