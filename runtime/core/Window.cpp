//===- Window.cpp - Conv and pool operand checks for every backend --------===//

#include "runtime/core/Window.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Twine.h"

using namespace llvm;

namespace dtc::runtime {

int64_t Window::taps() const { return numElements(kernel); }
int64_t Window::inPositions() const { return numElements(in); }
int64_t Window::outPositions() const { return numElements(out); }

Expected<Window> readWindow(const KernelCall &call, ArrayRef<int64_t> input,
                            ArrayRef<int64_t> kernel,
                            ArrayRef<int64_t> output) {
  int64_t k = input.size();
  if (k < 1 || k > kMaxWindowDims)
    return call.error("windows span 1 to " + Twine(kMaxWindowDims) +
                      " spatial dims, got " + Twine(k));
  ArrayRef<int64_t> strides = call.ints("strides");
  ArrayRef<int64_t> dilations = call.ints("dilations");
  ArrayRef<int64_t> pads = call.ints("pads");
  auto fits = [k](ArrayRef<int64_t> values, int64_t per) {
    return values.empty() || static_cast<int64_t>(values.size()) == per * k;
  };
  if (static_cast<int64_t>(kernel.size()) != k ||
      static_cast<int64_t>(output.size()) != k || !fits(strides, 1) ||
      !fits(dilations, 1) || !fits(pads, 2))
    return call.error("kernel " + shapeString(kernel) +
                      ", strides, dilations and pads do not fit " + Twine(k) +
                      " spatial dims");
  Window w;
  for (int64_t i = 0; i < k; ++i) {
    int64_t stride = strides.empty() ? 1 : strides[i];
    int64_t dilation = dilations.empty() ? 1 : dilations[i];
    int64_t begin = pads.empty() ? 0 : pads[i];
    int64_t end = pads.empty() ? 0 : pads[k + i];
    if (stride < 1 || dilation < 1 || kernel[i] < 1)
      return call.error("kernel " + shapeString(kernel) +
                        ", strides and dilations must be positive");
    int64_t window = dilation * (kernel[i] - 1) + 1;
    int64_t padded = input[i] + begin + end;
    int64_t positions = padded < window ? 0 : (padded - window) / stride + 1;
    if (output[i] != positions)
      return call.error("spatial dim " + Twine(i) + ": input " +
                        Twine(input[i]) + ", kernel " + Twine(kernel[i]) +
                        " and the attributes give " + Twine(positions) +
                        " positions, not " + Twine(output[i]));
    w.in.push_back(input[i]);
    w.out.push_back(positions);
    w.kernel.push_back(kernel[i]);
    w.strides.push_back(stride);
    w.dilations.push_back(dilation);
    w.padBegin.push_back(begin);
  }
  return w;
}

namespace {

/// Checks the shapes of a convolution's input, weight and result against
/// each other, its `groups` and its window attributes.
Expected<ConvDims> readConvDims(const KernelCall &call, ArrayRef<int64_t> input,
                                ArrayRef<int64_t> weight,
                                ArrayRef<int64_t> result) {
  auto shapes = [&] {
    return "input " + shapeString(input) + ", weight " + shapeString(weight) +
           " and result " + shapeString(result);
  };
  if (input.size() < 3 || weight.size() != input.size() ||
      result.size() != input.size())
    return call.error(shapes() + " need one rank of at least 3");
  ConvDims c;
  c.batch = input[0];
  c.channels = input[1];
  c.filters = weight[0];
  c.groups = call.i64("groups", 1);
  if (c.groups < 1 || c.channels % c.groups || c.filters % c.groups ||
      weight[1] != c.channels / c.groups || result[0] != c.batch ||
      result[1] != c.filters)
    return call.error(shapes() + " do not fit groups=" + Twine(c.groups));
  auto window = readWindow(call, input.drop_front(2), weight.drop_front(2),
                           result.drop_front(2));
  if (!window)
    return window.takeError();
  c.window = std::move(*window);
  return c;
}

/// Checks a pool's `input` [n, c, x...] and `pooled` [n, c, o...] (its
/// result or the result's gradient, which `what` names) against each other
/// and the window attributes, `kernel_shape` included.
Expected<PoolDims> readPoolDims(const KernelCall &call, ArrayRef<int64_t> input,
                                ArrayRef<int64_t> pooled, StringRef what) {
  if (input.size() < 3 || pooled.size() != input.size() ||
      pooled[0] != input[0] || pooled[1] != input[1])
    return call.error(what + " " + shapeString(pooled) +
                      " does not match input " + shapeString(input));
  auto window = readWindow(call, input.drop_front(2), call.ints("kernel_shape"),
                           pooled.drop_front(2));
  if (!window)
    return window.takeError();
  PoolDims p;
  p.planes = input[0] * input[1];
  p.window = std::move(*window);
  return p;
}

/// Errors unless the call has `names.size()` inputs and an output, and
/// these inputs (named by `names`) and the result have float dtypes (no
/// backend writes a window op's result in any other).
Error expectFloatInputs(const KernelCall &call, ArrayRef<StringRef> names) {
  if (auto err = expectArity(call, names.size(), 1))
    return err;
  for (auto [i, name] : enumerate(names))
    if (auto err = expectFloat(call, call.input(i), name))
      return err;
  return expectFloat(call, call.output(0), "result");
}

} // namespace

Expected<ConvDims> readConv(const KernelCall &call) {
  if (auto err = expectFloatInputs(call, {"input", "weight"}))
    return std::move(err);
  auto dims = readConvDims(call, call.input(0).shape, call.input(1).shape,
                           call.output(0).shape);
  if (!dims || call.numInputs() < 3)
    return dims;
  const TensorRef &bias = call.input(2);
  if (auto err = expectFloat(call, bias, "bias"))
    return std::move(err);
  if (bias.numElements() != dims->filters)
    return call.error("bias " + shapeString(bias.shape) + " does not have " +
                      Twine(dims->filters) + " elements");
  return dims;
}

Expected<ConvDims> readConvGradInput(const KernelCall &call) {
  if (auto err = expectFloatInputs(call, {"grad", "weight"}))
    return std::move(err);
  return readConvDims(call, call.output(0).shape, call.input(1).shape,
                      call.input(0).shape);
}

Expected<ConvDims> readConvGradWeight(const KernelCall &call) {
  if (auto err = expectFloatInputs(call, {"input", "grad"}))
    return std::move(err);
  return readConvDims(call, call.input(0).shape, call.output(0).shape,
                      call.input(1).shape);
}

Expected<PoolDims> readPool(const KernelCall &call) {
  if (auto err = expectFloatInputs(call, {"input"}))
    return std::move(err);
  return readPoolDims(call, call.input(0).shape, call.output(0).shape,
                      "result");
}

Expected<PoolDims> readMaxPoolGrad(const KernelCall &call) {
  if (auto err = expectFloatInputs(call, {"input", "grad"}))
    return std::move(err);
  const TensorRef &x = call.input(0);
  if (auto err = expectShape(call, call.output(0), x.shape, "result"))
    return std::move(err);
  return readPoolDims(call, x.shape, call.input(1).shape, "grad");
}

Expected<PoolDims> readAvgPoolGrad(const KernelCall &call) {
  if (auto err = expectFloatInputs(call, {"grad"}))
    return std::move(err);
  return readPoolDims(call, call.output(0).shape, call.input(0).shape, "grad");
}

} // namespace dtc::runtime
