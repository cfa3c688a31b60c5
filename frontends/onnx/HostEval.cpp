//===- HostEval.cpp - Evaluating ONNX nodes on the host -------------------===//

#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/OnnxUtils.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cmath>
#include <functional>

using namespace dtc::onnx;
using llvm::ArrayRef;
using llvm::SmallVector;

// Host evaluation is for shape arithmetic and masks; anything bigger than
// this is a sign that something that should be a run-time op was folded.
static constexpr int64_t kMaxHostElements = int64_t(1) << 26;

static std::string str(int64_t v) { return std::to_string(v); }

//===----------------------------------------------------------------------===//
// Shape rules
//===----------------------------------------------------------------------===//

std::optional<int64_t> dtc::onnx::normalizeAxis(int64_t axis, int64_t rank,
                                                std::string &error) {
  if (axis < -rank || axis >= rank) {
    error = "axis " + str(axis) + " is out of range for rank " + str(rank);
    return std::nullopt;
  }
  return axis < 0 ? axis + rank : axis;
}

std::optional<SmallVector<int64_t>>
dtc::onnx::broadcastShapes(ArrayRef<int64_t> a, ArrayRef<int64_t> b,
                           std::string &error) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1) {
      error = "shapes " + shapeString(a) + " and " + shapeString(b) +
              " do not broadcast";
      return std::nullopt;
    }
    result[i] = x == 1 ? y : x;
  }
  return result;
}

std::optional<SliceDims>
dtc::onnx::resolveSlice(ArrayRef<int64_t> shape, ArrayRef<int64_t> starts,
                        ArrayRef<int64_t> ends, ArrayRef<int64_t> axes,
                        ArrayRef<int64_t> steps, std::string &error) {
  int64_t rank = shape.size();
  if (starts.size() != ends.size() ||
      (!axes.empty() && axes.size() != starts.size()) ||
      (!steps.empty() && steps.size() != starts.size())) {
    error = "starts, ends, axes and steps have different lengths";
    return std::nullopt;
  }
  SliceDims r;
  r.starts.assign(rank, 0);
  r.steps.assign(rank, 1);
  r.counts.assign(shape.begin(), shape.end());
  SmallVector<bool> seen(rank, false);
  for (size_t i = 0; i < starts.size(); ++i) {
    std::optional<int64_t> axis = normalizeAxis(
        axes.empty() ? static_cast<int64_t>(i) : axes[i], rank, error);
    if (!axis)
      return std::nullopt;
    if (seen[*axis]) {
      error = "axis " + str(*axis) + " is sliced twice";
      return std::nullopt;
    }
    seen[*axis] = true;
    int64_t dim = shape[*axis];
    int64_t step = steps.empty() ? 1 : steps[i];
    if (step == 0) {
      error = "step 0 of axis " + str(*axis);
      return std::nullopt;
    }
    int64_t start = starts[i], end = ends[i];
    if (start < 0)
      start += dim;
    if (end < 0)
      end += dim;
    // ceil(distance / |step|) without `distance + |step| - 1`, which
    // overflowed for steps near INT64_MAX into a negative count (fuzz
    // finding); |INT64_MIN| is taken in unsigned arithmetic.
    int64_t count;
    uint64_t stride = step > 0 ? static_cast<uint64_t>(step)
                               : 0 - static_cast<uint64_t>(step);
    if (step > 0) {
      start = std::clamp<int64_t>(start, 0, dim);
      end = std::clamp<int64_t>(end, 0, dim);
      count = end > start ? (end - start - 1) / stride + 1 : 0;
    } else {
      start = std::clamp<int64_t>(start, 0, dim - 1);
      end = std::clamp<int64_t>(end, -1, dim - 1);
      count = start > end ? (start - end - 1) / stride + 1 : 0;
    }
    r.starts[*axis] = start;
    r.steps[*axis] = step;
    r.counts[*axis] = count;
  }
  return r;
}

std::optional<SmallVector<int64_t>>
dtc::onnx::resolveReshape(ArrayRef<int64_t> input, ArrayRef<int64_t> target,
                          bool allowZero, std::string &error) {
  SmallVector<int64_t> out;
  int64_t inferred = -1, known = 1;
  for (auto [i, t] : llvm::enumerate(target)) {
    int64_t d = t;
    if (t == 0 && !allowZero) {
      if (i >= input.size()) {
        error = "shape entry " + str(i) + " is 0 (copy) but the input " +
                shapeString(input) + " has no such dim";
        return std::nullopt;
      }
      d = input[i];
    } else if (t == -1) {
      if (inferred >= 0) {
        error = "shape " + shapeString(target) + " has more than one -1";
        return std::nullopt;
      }
      inferred = i;
    } else if (t < 0) {
      error = "shape " + shapeString(target) + " has a negative entry";
      return std::nullopt;
    }
    out.push_back(d);
    if (d != -1)
      known *= d;
  }
  int64_t total = numElements(input);
  if (inferred >= 0) {
    if (known == 0 || total % known != 0) {
      error = "cannot infer the -1 of " + shapeString(target) + " for input " +
              shapeString(input);
      return std::nullopt;
    }
    out[inferred] = total / known;
  }
  if (numElements(out) != total) {
    error = "cannot reshape " + shapeString(input) + " to " + shapeString(out);
    return std::nullopt;
  }
  return out;
}

std::optional<SmallVector<int64_t>>
dtc::onnx::unsqueezeShape(ArrayRef<int64_t> input, ArrayRef<int64_t> axes,
                          std::string &error) {
  int64_t rank = input.size() + axes.size();
  SmallVector<bool> isNew(rank, false);
  for (int64_t a : axes) {
    std::optional<int64_t> axis = normalizeAxis(a, rank, error);
    if (!axis)
      return std::nullopt;
    if (isNew[*axis]) {
      error = "axis " + str(*axis) + " is repeated";
      return std::nullopt;
    }
    isNew[*axis] = true;
  }
  SmallVector<int64_t> out;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i)
    out.push_back(isNew[i] ? 1 : input[next++]);
  return out;
}

std::optional<SmallVector<int64_t>>
dtc::onnx::squeezeShape(ArrayRef<int64_t> input, ArrayRef<int64_t> axes,
                        std::string &error) {
  int64_t rank = input.size();
  SmallVector<bool> drop(rank, false);
  if (axes.empty()) {
    for (int64_t i = 0; i < rank; ++i)
      drop[i] = input[i] == 1;
  }
  for (int64_t a : axes) {
    std::optional<int64_t> axis = normalizeAxis(a, rank, error);
    if (!axis)
      return std::nullopt;
    if (input[*axis] != 1) {
      error =
          "cannot squeeze dim " + str(*axis) + " of size " + str(input[*axis]);
      return std::nullopt;
    }
    drop[*axis] = true;
  }
  SmallVector<int64_t> out;
  for (int64_t i = 0; i < rank; ++i)
    if (!drop[i])
      out.push_back(input[i]);
  return out;
}

std::optional<SmallVector<int64_t>>
dtc::onnx::resolveSplit(int64_t dimSize, std::optional<ArrayRef<int64_t>> sizes,
                        int64_t numOutputs, bool ceilChunks,
                        std::string &error) {
  if (numOutputs < 1) {
    error = "no outputs to split into";
    return std::nullopt;
  }
  SmallVector<int64_t> out;
  if (sizes) {
    if (static_cast<int64_t>(sizes->size()) != numOutputs) {
      error = "split has " + str(sizes->size()) + " sizes for " +
              str(numOutputs) + " outputs";
      return std::nullopt;
    }
    int64_t sum = 0;
    for (int64_t s : *sizes) {
      if (s < 0) {
        error = "negative split size " + str(s);
        return std::nullopt;
      }
      sum += s;
    }
    if (sum != dimSize) {
      error = "split sizes sum to " + str(sum) + ", not the dim size " +
              str(dimSize);
      return std::nullopt;
    }
    out.assign(sizes->begin(), sizes->end());
    return out;
  }
  if (ceilChunks) {
    int64_t chunk = (dimSize + numOutputs - 1) / numOutputs;
    if (chunk * (numOutputs - 1) >= dimSize) {
      error = "cannot split " + str(dimSize) + " into " + str(numOutputs) +
              " non-empty chunks";
      return std::nullopt;
    }
    out.assign(numOutputs - 1, chunk);
    out.push_back(dimSize - chunk * (numOutputs - 1));
    return out;
  }
  if (dimSize % numOutputs != 0) {
    error = "cannot split " + str(dimSize) + " into " + str(numOutputs) +
            " equal parts";
    return std::nullopt;
  }
  out.assign(numOutputs, dimSize / numOutputs);
  return out;
}

std::optional<SmallVector<int64_t>>
dtc::onnx::resolveReduceAxes(ArrayRef<int64_t> axes, int64_t rank,
                             bool noopWithEmptyAxes, std::string &error) {
  SmallVector<int64_t> out;
  if (axes.empty()) {
    if (!noopWithEmptyAxes)
      for (int64_t i = 0; i < rank; ++i)
        out.push_back(i);
    return out;
  }
  for (int64_t a : axes) {
    std::optional<int64_t> axis = normalizeAxis(a, rank, error);
    if (!axis)
      return std::nullopt;
    out.push_back(*axis);
  }
  llvm::sort(out);
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

//===----------------------------------------------------------------------===//
// Evaluator
//===----------------------------------------------------------------------===//

namespace {
/// Maps a flat index of a broadcast result to the flat index of one operand.
class Indexer {
public:
  Indexer(ArrayRef<int64_t> in, ArrayRef<int64_t> out)
      : outShape(out), identity(in == out), scalar(numElements(in) == 1) {
    strides.assign(out.size(), 0);
    int64_t stride = 1;
    int64_t offset = out.size() - in.size();
    for (int64_t i = in.size() - 1; i >= 0; --i) {
      if (in[i] != 1)
        strides[offset + i] = stride;
      stride *= in[i];
    }
  }
  int64_t operator()(int64_t flat) const {
    if (identity)
      return flat;
    if (scalar)
      return 0;
    int64_t result = 0;
    for (int64_t d = outShape.size() - 1; d >= 0; --d) {
      int64_t size = outShape[d];
      result += (flat % size) * strides[d];
      flat /= size;
    }
    return result;
  }

private:
  SmallVector<int64_t> outShape, strides;
  bool identity, scalar;
};

using Results = std::optional<SmallVector<HostTensor>>;
using OptI = std::optional<int64_t>;

/// Evaluation of one node.
class Evaluator {
public:
  Evaluator(const ::onnx::NodeProto &node, HostInputs inputs,
            std::string &error)
      : node(node), inputs(inputs), error(error) {}

  Results run();

private:
  const HostTensor *in(size_t i) const {
    return i < inputs.size() ? inputs[i] : nullptr;
  }
  Results fail(std::string message) {
    error = std::move(message);
    return std::nullopt;
  }
  bool checkSize(ArrayRef<int64_t> shape) {
    for (int64_t d : shape)
      if (d < 0) {
        error = "negative dim in " + shapeString(shape);
        return false;
      }
    if (numElements(shape) > kMaxHostElements) {
      error = "constant of shape " + shapeString(shape) +
              " is too large to evaluate at import time";
      return false;
    }
    return true;
  }
  static Results one(HostTensor t) {
    SmallVector<HostTensor> v;
    v.push_back(std::move(t));
    return v;
  }
  static void copyElement(HostTensor &out, int64_t o, const HostTensor &src,
                          int64_t s) {
    if (out.isFloat())
      out.floats[o] = src.floats[s];
    else
      out.ints[o] = src.ints[s];
  }
  static HostTensor withShape(const HostTensor &t, ArrayRef<int64_t> shape) {
    HostTensor out = t;
    out.shape.assign(shape.begin(), shape.end());
    return out;
  }
  /// The int64 values of optional input `i` (empty if omitted).
  std::vector<int64_t> intsOf(size_t i) const {
    return in(i) ? in(i)->toInts() : std::vector<int64_t>{};
  }

  // Each op group gives its op's results, or std::nullopt for an op
  // outside the group.
  /// Add, Sub, Mul, Div, Mod, Pow, Max, Min, Sum and Mean.
  std::optional<Results> arithmetic(llvm::StringRef op);
  /// The comparisons, the logic ops and Where.
  std::optional<Results> comparisonOrLogic(llvm::StringRef op);
  /// The elementwise math of one input (Neg, Sqrt, Exp, ...).
  std::optional<Results> unaryMath(llvm::StringRef op);
  /// Casts, shape ops and data movement (Gather, Slice, ...), reductions.
  std::optional<Results> typesAndShapes(llvm::StringRef op);

  /// Dropout in inference mode: the input, and an all-true mask.
  Results dropout();
  /// Reshape by the shape input (0 copies a dim unless allowzero).
  Results reshape();
  /// Flatten to 2-D at `axis`.
  Results flatten();
  /// Squeeze or Unsqueeze by the axes input or attribute.
  Results squeezeOrUnsqueeze(llvm::StringRef op);
  /// Slice by the starts, ends, axes and steps inputs.
  Results sliceInputs();
  Results binary(int32_t resultType, std::function<double(double, double)> f,
                 std::function<std::optional<int64_t>(int64_t, int64_t)> g,
                 bool sameTypes = true);
  Results variadic(std::function<double(double, double)> f,
                   std::function<std::optional<int64_t>(int64_t, int64_t)> g);
  Results unaryFloat(std::function<double(double)> f);
  Results cast(int32_t to);
  Results gather();
  Results gatherND();
  Results gatherElements();
  Results concat();
  Results transpose();
  Results slice(const HostTensor &data, const SliceDims &dims);
  Results expand();
  Results tile();
  Results split();
  Results range();
  Results constantOfShape();
  Results trilu();
  Results cumSum();
  Results where();
  Results matmul();
  Results reduce(llvm::StringRef kind);
  Results shapeOf();

  const ::onnx::NodeProto &node;
  HostInputs inputs;
  std::string &error;
};
} // namespace

Results
Evaluator::binary(int32_t resultType, std::function<double(double, double)> f,
                  std::function<std::optional<int64_t>(int64_t, int64_t)> g,
                  bool sameTypes) {
  const HostTensor *a = in(0), *b = in(1);
  if (!a || !b)
    return fail("needs two inputs");
  if (sameTypes && a->dataType != b->dataType)
    return fail("input types differ: " + dataTypeName(a->dataType) + " and " +
                dataTypeName(b->dataType));
  auto shape = broadcastShapes(a->shape, b->shape, error);
  if (!shape || !checkSize(*shape))
    return std::nullopt;
  HostTensor out = HostTensor::zeros(resultType, *shape);
  Indexer ia(a->shape, *shape), ib(b->shape, *shape);
  bool useFloat = a->isFloat() || b->isFloat();
  for (int64_t i = 0, e = out.size(); i < e; ++i) {
    if (useFloat) {
      out.set(i, f(a->getDouble(ia(i)), b->getDouble(ib(i))));
      continue;
    }
    std::optional<int64_t> v = g(a->ints[ia(i)], b->ints[ib(i)]);
    if (!v)
      return fail("integer division by zero");
    out.setInt(i, *v);
  }
  return one(std::move(out));
}

Results
Evaluator::variadic(std::function<double(double, double)> f,
                    std::function<std::optional<int64_t>(int64_t, int64_t)> g) {
  if (inputs.empty() || !in(0))
    return fail("needs at least one input");
  HostTensor acc = *in(0);
  for (size_t i = 1; i < inputs.size(); ++i) {
    const HostTensor *pair[] = {&acc, in(i)};
    Evaluator step(node, pair, error);
    Results r = step.binary(acc.dataType, f, g);
    if (!r)
      return std::nullopt;
    acc = std::move((*r)[0]);
  }
  return one(std::move(acc));
}

Results Evaluator::unaryFloat(std::function<double(double)> f) {
  const HostTensor *x = in(0);
  if (!x)
    return fail("needs an input");
  if (!x->isFloat())
    return fail("needs a floating-point input, got " +
                dataTypeName(x->dataType));
  HostTensor out = *x;
  for (int64_t i = 0, e = out.size(); i < e; ++i)
    out.set(i, f(x->floats[i]));
  return one(std::move(out));
}

Results Evaluator::cast(int32_t to) {
  const HostTensor *x = in(0);
  if (!isFloatType(to) && !isIntegerType(to))
    return fail("cannot cast to " + dataTypeName(to));
  HostTensor out = HostTensor::zeros(to, x->shape);
  for (int64_t i = 0, e = out.size(); i < e; ++i) {
    if (!x->isFloat())
      out.setInt(i, x->ints[i]);
    else if (out.isFloat() || to == kBool)
      out.set(i, x->floats[i]);
    else
      out.setInt(i, static_cast<int64_t>(std::trunc(x->floats[i])));
  }
  return one(std::move(out));
}

Results Evaluator::gather() {
  // The ONNX checker is skipped for models it does not know (contrib
  // domains): a missing input reaches here (fuzz finding).
  if (!in(1))
    return fail("needs data and indices inputs");
  const HostTensor &data = *in(0), &indices = *in(1);
  if (indices.isFloat())
    return fail("indices must be integers");
  std::optional<int64_t> axis =
      normalizeAxis(getIntAttr(node, "axis", 0), data.rank(), error);
  if (!axis)
    return std::nullopt;
  SmallVector<int64_t> shape(data.shape.begin(), data.shape.begin() + *axis);
  llvm::append_range(shape, indices.shape);
  shape.append(data.shape.begin() + *axis + 1, data.shape.end());
  if (!checkSize(shape))
    return std::nullopt;
  HostTensor out = HostTensor::zeros(data.dataType, shape);
  int64_t n = data.shape[*axis], count = indices.size();
  int64_t outer = numElements(ArrayRef(data.shape).take_front(*axis));
  int64_t inner = numElements(ArrayRef(data.shape).drop_front(*axis + 1));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < count; ++j) {
      int64_t k = indices.ints[j];
      if (k < 0)
        k += n;
      if (k < 0 || k >= n)
        return fail("index " + str(indices.ints[j]) +
                    " is out of range for a dim of size " + str(n));
      for (int64_t i = 0; i < inner; ++i)
        copyElement(out, (o * count + j) * inner + i, data,
                    (o * n + k) * inner + i);
    }
  return one(std::move(out));
}

/// GatherElements: out[i] = data[i with indices[i] along axis]; the
/// indices may be smaller than the data off the axis (ONNX).
Results Evaluator::gatherElements() {
  if (!in(1))
    return fail("needs data and indices inputs");
  const HostTensor &data = *in(0), &indices = *in(1);
  if (indices.isFloat())
    return fail("indices must be integers");
  int64_t rank = data.rank();
  if (indices.rank() != rank)
    return fail("data and indices differ in rank");
  std::optional<int64_t> axis =
      normalizeAxis(getIntAttr(node, "axis", 0), rank, error);
  if (!axis)
    return std::nullopt;
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis && indices.shape[d] > data.shape[d])
      return fail("indices " + shapeString(indices.shape) +
                  " exceed the data " + shapeString(data.shape) +
                  " off the axis");
  HostTensor out = HostTensor::zeros(data.dataType, indices.shape);
  int64_t n = data.shape[*axis];
  SmallVector<int64_t> index(rank, 0);
  for (int64_t e = 0, count = indices.size(); e < count; ++e) {
    int64_t k = indices.ints[e];
    if (k < 0)
      k += n;
    if (k < 0 || k >= n)
      return fail("index " + str(indices.ints[e]) +
                  " is out of range for a dim of size " + str(n));
    int64_t offset = 0;
    for (int64_t d = 0; d < rank; ++d)
      offset = offset * data.shape[d] + (d == *axis ? k : index[d]);
    copyElement(out, e, data, offset);
    for (int64_t d = rank - 1; d >= 0 && ++index[d] == indices.shape[d]; --d)
      index[d] = 0;
  }
  return one(std::move(out));
}

Results Evaluator::gatherND() {
  if (!in(1))
    return fail("needs data and indices inputs");
  const HostTensor &data = *in(0), &indices = *in(1);
  if (indices.isFloat())
    return fail("indices must be integers");
  if (int64_t b = getIntAttr(node, "batch_dims", 0); b != 0)
    return fail("batch_dims = " + str(b) + " is not supported, only 0");
  int64_t k = indices.rank() ? indices.shape.back() : 0;
  if (k < 1 || k > data.rank())
    return fail("the last dim of indices " + shapeString(indices.shape) +
                " must be in [1, " + str(data.rank()) + "]");
  // [indices..., data[k:]...]: each index tuple picks a slice of data.
  SmallVector<int64_t> shape(indices.shape.begin(), indices.shape.end() - 1);
  shape.append(data.shape.begin() + k, data.shape.end());
  if (!checkSize(shape))
    return std::nullopt;
  HostTensor out = HostTensor::zeros(data.dataType, shape);
  int64_t inner = numElements(ArrayRef(data.shape).drop_front(k));
  for (int64_t j = 0, count = indices.size() / k; j < count; ++j) {
    int64_t offset = 0;
    for (int64_t d = 0; d < k; ++d) {
      int64_t n = data.shape[d], i = indices.ints[j * k + d];
      if (i < -n || i >= n)
        return fail("index " + str(i) + " is out of range for dim " + str(d) +
                    " of size " + str(n));
      offset = offset * n + (i < 0 ? i + n : i);
    }
    for (int64_t i = 0; i < inner; ++i)
      copyElement(out, j * inner + i, data, offset * inner + i);
  }
  return one(std::move(out));
}

Results Evaluator::concat() {
  SmallVector<const HostTensor *> parts;
  for (const HostTensor *t : inputs)
    if (t)
      parts.push_back(t);
  if (parts.empty())
    return fail("needs at least one input");
  const HostTensor &first = *parts.front();
  std::optional<int64_t> axis =
      normalizeAxis(getIntAttr(node, "axis", 0), first.rank(), error);
  if (!axis)
    return std::nullopt;
  SmallVector<int64_t> shape(first.shape.begin(), first.shape.end());
  shape[*axis] = 0;
  for (const HostTensor *t : parts) {
    if (t->rank() != first.rank() || t->dataType != first.dataType)
      return fail("inputs differ in rank or type");
    for (int64_t d = 0; d < first.rank(); ++d)
      if (d != *axis && t->shape[d] != first.shape[d])
        return fail("input shapes " + shapeString(first.shape) + " and " +
                    shapeString(t->shape) + " differ outside the axis");
    shape[*axis] += t->shape[*axis];
  }
  HostTensor out = HostTensor::zeros(first.dataType, shape);
  int64_t outer = numElements(ArrayRef(shape).take_front(*axis));
  int64_t inner = numElements(ArrayRef(shape).drop_front(*axis + 1));
  int64_t o = 0;
  for (int64_t i = 0; i < outer; ++i)
    for (const HostTensor *t : parts) {
      int64_t block = t->shape[*axis] * inner;
      for (int64_t j = 0; j < block; ++j)
        copyElement(out, o++, *t, i * block + j);
    }
  return one(std::move(out));
}

Results Evaluator::transpose() {
  const HostTensor &x = *in(0);
  int64_t rank = x.rank();
  SmallVector<int64_t> perm;
  if (auto attr = getIntsAttr(node, "perm"))
    perm = *attr;
  else
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  SmallVector<bool> seen(rank, false);
  if (static_cast<int64_t>(perm.size()) != rank)
    return fail("perm has " + str(perm.size()) + " entries for rank " +
                str(rank));
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p])
      return fail("perm is not a permutation");
    seen[p] = true;
  }
  SmallVector<int64_t> shape, inStrides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    inStrides[d] = inStrides[d + 1] * x.shape[d + 1];
  for (int64_t p : perm)
    shape.push_back(x.shape[p]);
  HostTensor out = HostTensor::zeros(x.dataType, shape);
  for (int64_t i = 0, e = out.size(); i < e; ++i) {
    int64_t flat = i, src = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      src += (flat % shape[d]) * inStrides[perm[d]];
      flat /= shape[d];
    }
    copyElement(out, i, x, src);
  }
  return one(std::move(out));
}

Results Evaluator::slice(const HostTensor &data, const SliceDims &dims) {
  int64_t rank = data.rank();
  SmallVector<int64_t> strides(rank, 1);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * data.shape[d + 1];
  HostTensor out = HostTensor::zeros(data.dataType, dims.counts);
  for (int64_t i = 0, e = out.size(); i < e; ++i) {
    int64_t flat = i, src = 0;
    for (int64_t d = rank - 1; d >= 0; --d) {
      src += (dims.starts[d] + (flat % dims.counts[d]) * dims.steps[d]) *
             strides[d];
      flat /= dims.counts[d];
    }
    copyElement(out, i, data, src);
  }
  return one(std::move(out));
}

Results Evaluator::expand() {
  const HostTensor &x = *in(0);
  std::vector<int64_t> target = intsOf(1);
  auto shape = broadcastShapes(x.shape, target, error);
  if (!shape || !checkSize(*shape))
    return std::nullopt;
  HostTensor out = HostTensor::zeros(x.dataType, *shape);
  Indexer ix(x.shape, *shape);
  for (int64_t i = 0, e = out.size(); i < e; ++i)
    copyElement(out, i, x, ix(i));
  return one(std::move(out));
}

Results Evaluator::tile() {
  const HostTensor &x = *in(0);
  std::vector<int64_t> repeats = intsOf(1);
  if (static_cast<int64_t>(repeats.size()) != x.rank())
    return fail("repeats has " + str(repeats.size()) + " entries for rank " +
                str(x.rank()));
  SmallVector<int64_t> shape;
  for (auto [d, r] : llvm::zip(x.shape, repeats))
    shape.push_back(d * r);
  if (!checkSize(shape))
    return std::nullopt;
  HostTensor out = HostTensor::zeros(x.dataType, shape);
  int64_t rank = x.rank();
  for (int64_t i = 0, e = out.size(); i < e; ++i) {
    int64_t flat = i, src = 0, stride = 1;
    for (int64_t d = rank - 1; d >= 0; --d) {
      src += ((flat % shape[d]) % x.shape[d]) * stride;
      flat /= shape[d];
      stride *= x.shape[d];
    }
    copyElement(out, i, x, src);
  }
  return one(std::move(out));
}

Results Evaluator::split() {
  const HostTensor &x = *in(0);
  std::optional<int64_t> axis =
      normalizeAxis(getIntAttr(node, "axis", 0), x.rank(), error);
  if (!axis)
    return std::nullopt;
  std::vector<int64_t> given;
  std::optional<ArrayRef<int64_t>> sizesArg;
  if (in(1)) {
    given = in(1)->toInts();
    sizesArg = given;
  } else if (auto attr = getIntsAttr(node, "split")) {
    given.assign(attr->begin(), attr->end());
    sizesArg = given;
  }
  auto sizes =
      resolveSplit(x.shape[*axis], sizesArg, node.output_size(),
                   findAttribute(node, "num_outputs") != nullptr, error);
  if (!sizes)
    return std::nullopt;
  SmallVector<HostTensor> outs;
  int64_t offset = 0;
  for (int64_t size : *sizes) {
    SliceDims dims;
    dims.starts.assign(x.rank(), 0);
    dims.steps.assign(x.rank(), 1);
    dims.counts.assign(x.shape.begin(), x.shape.end());
    dims.starts[*axis] = offset;
    dims.counts[*axis] = size;
    offset += size;
    outs.push_back(std::move((*slice(x, dims))[0]));
  }
  return outs;
}

Results Evaluator::range() {
  const HostTensor *start = in(0), *limit = in(1), *delta = in(2);
  if (!start || !limit || !delta || start->size() != 1 || limit->size() != 1 ||
      delta->size() != 1)
    return fail("start, limit and delta must be scalars");
  // An integer start with a float delta read delta->ints[0] out of bounds
  // (fuzz finding); ONNX requires one type.
  if (start->dataType != limit->dataType || start->dataType != delta->dataType)
    return fail("start, limit and delta have different types");
  double s = start->getDouble(0), l = limit->getDouble(0),
         d = delta->getDouble(0);
  if (d == 0)
    return fail("delta is 0");
  // Compared as a double: a count beyond int64 (or NaN) must not be cast.
  double steps = std::ceil((l - s) / d);
  if (!(steps <= static_cast<double>(kMaxHostElements)))
    return fail("Range of " + std::to_string(steps) +
                " elements is too large to evaluate at import time");
  int64_t count = std::max<int64_t>(0, static_cast<int64_t>(steps));
  if (!checkSize({count}))
    return std::nullopt;
  HostTensor out = HostTensor::zeros(start->dataType, {count});
  for (int64_t i = 0; i < count; ++i) {
    if (out.isFloat())
      out.set(i, s + i * d);
    else
      out.setInt(i, start->ints[0] + i * delta->ints[0]);
  }
  return one(std::move(out));
}

Results Evaluator::constantOfShape() {
  std::vector<int64_t> shape = intsOf(0);
  if (!checkSize(shape))
    return std::nullopt;
  HostTensor value = HostTensor::zeros(kFloat, {1});
  if (const auto *attr = findAttribute(node, "value")) {
    std::optional<HostTensor> decoded = decodeTensor(attr->t(), "", error);
    if (!decoded)
      return std::nullopt;
    if (decoded->size() != 1)
      return fail("value must have one element");
    value = std::move(*decoded);
  }
  // Filled in one pass: causal masks are [seq, seq] of these.
  return one(HostTensor::filled(value, shape));
}

Results Evaluator::trilu() {
  const HostTensor &x = *in(0);
  if (x.rank() < 2)
    return fail("input must have rank >= 2");
  if (in(1) && in(1)->size() != 1)
    return fail("k must be a scalar"); // getInt(0) read past an empty k
  int64_t k = in(1) ? in(1)->getInt(0) : 0;
  bool upper = getIntAttr(node, "upper", 1) != 0;
  HostTensor out = HostTensor::copyOf(x);
  int64_t rows = x.shape[x.rank() - 2], cols = x.shape.back();
  // Row by row: the zeroed part of row r is the columns before r + k
  // (upper) or after it (lower).
  int64_t matrices = rows * cols == 0 ? 0 : out.size() / (rows * cols);
  for (int64_t m = 0; m < matrices; ++m)
    for (int64_t r = 0; r < rows; ++r) {
      int64_t begin = (m * rows + r) * cols;
      int64_t edge = std::clamp<int64_t>(upper ? r + k : r + k + 1, 0, cols);
      int64_t from = upper ? 0 : edge, to = upper ? edge : cols;
      if (out.isFloat())
        std::fill(out.floats.begin() + begin + from,
                  out.floats.begin() + begin + to, 0.0);
      else
        std::fill(out.ints.begin() + begin + from,
                  out.ints.begin() + begin + to, 0);
    }
  return one(std::move(out));
}

/// CumSum along the scalar `axis` input, with `exclusive` and `reverse`:
/// position ids from an attention mask (HF's cumsum(mask) - 1).
Results Evaluator::cumSum() {
  const HostTensor &x = *in(0);
  if (!in(1) || in(1)->size() != 1)
    return fail("needs a scalar axis input");
  int64_t rank = x.rank(), axis = in(1)->getInt(0);
  if (axis < -rank || axis >= rank || rank == 0)
    return fail("axis " + std::to_string(axis) + " is out of range for rank " +
                std::to_string(rank));
  if (axis < 0)
    axis += rank;
  bool exclusive = getIntAttr(node, "exclusive", 0) != 0;
  bool reverse = getIntAttr(node, "reverse", 0) != 0;
  int64_t n = x.shape[axis], inner = 1;
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= x.shape[d];
  int64_t outer = n ? x.size() / (n * inner) : 0;
  HostTensor out = HostTensor::zeros(x.dataType, x.shape);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      double sumF = 0;
      int64_t sumI = 0;
      for (int64_t step = 0; step < n; ++step) {
        int64_t k = reverse ? n - 1 - step : step;
        int64_t at = (o * n + k) * inner + i;
        if (x.isFloat()) {
          if (!exclusive)
            sumF += x.floats[at];
          out.set(at, sumF);
          if (exclusive)
            sumF += x.floats[at];
          sumF = roundToType(sumF, x.dataType);
        } else {
          if (!exclusive)
            sumI = wrapToType(sumI + x.ints[at], x.dataType);
          out.setInt(at, sumI);
          if (exclusive)
            sumI = wrapToType(sumI + x.ints[at], x.dataType);
        }
      }
    }
  return one(std::move(out));
}

Results Evaluator::matmul() {
  const HostTensor *a = in(0), *b = in(1);
  if (!a || !b)
    return fail("needs two inputs");
  if (!a->isFloat() || a->dataType != b->dataType)
    return fail("needs floating-point inputs of one type");
  // A 1-D operand is a row (lhs) or a column (rhs); the added dim is dropped.
  SmallVector<int64_t> as(a->shape.begin(), a->shape.end());
  SmallVector<int64_t> bs(b->shape.begin(), b->shape.end());
  if (as.empty() || bs.empty())
    return fail("needs operands of rank >= 1");
  bool rowVector = as.size() == 1, columnVector = bs.size() == 1;
  if (rowVector)
    as.insert(as.begin(), 1);
  if (columnVector)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (bs[bs.size() - 2] != k)
    return fail("contraction sizes differ");
  ArrayRef<int64_t> aBatch = ArrayRef<int64_t>(as).drop_back(2);
  ArrayRef<int64_t> bBatch = ArrayRef<int64_t>(bs).drop_back(2);
  auto batch = broadcastShapes(aBatch, bBatch, error);
  if (!batch)
    return std::nullopt;
  SmallVector<int64_t> shape(batch->begin(), batch->end());
  if (!rowVector)
    shape.push_back(m);
  if (!columnVector)
    shape.push_back(n);
  if (!checkSize(shape))
    return std::nullopt;
  HostTensor out = HostTensor::zeros(a->dataType, shape);
  Indexer ia(aBatch, *batch), ib(bBatch, *batch);
  for (int64_t p = 0, e = numElements(*batch); p < e; ++p) {
    const double *x = a->floats.data() + ia(p) * m * k;
    const double *y = b->floats.data() + ib(p) * k * n;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < k; ++l)
          sum += x[i * k + l] * y[l * n + j];
        out.set((p * m + i) * n + j, sum);
      }
  }
  return one(std::move(out));
}

Results Evaluator::where() {
  const HostTensor *c = in(0), *x = in(1), *y = in(2);
  if (!c || !x || !y)
    return fail("needs three inputs");
  if (x->dataType != y->dataType)
    return fail("input types differ: " + dataTypeName(x->dataType) + " and " +
                dataTypeName(y->dataType));
  auto xy = broadcastShapes(x->shape, y->shape, error);
  if (!xy)
    return std::nullopt;
  auto shape = broadcastShapes(c->shape, *xy, error);
  if (!shape || !checkSize(*shape))
    return std::nullopt;
  HostTensor out = HostTensor::zeros(x->dataType, *shape);
  Indexer ic(c->shape, *shape), ix(x->shape, *shape), iy(y->shape, *shape);
  for (int64_t i = 0, e = out.size(); i < e; ++i) {
    if (c->getInt(ic(i)))
      copyElement(out, i, *x, ix(i));
    else
      copyElement(out, i, *y, iy(i));
  }
  return one(std::move(out));
}

Results Evaluator::reduce(llvm::StringRef kind) {
  const HostTensor &x = *in(0);
  std::vector<int64_t> axesList;
  if (in(1))
    axesList = in(1)->toInts();
  else if (auto attr = getIntsAttr(node, "axes"))
    axesList.assign(attr->begin(), attr->end());
  bool noop = getIntAttr(node, "noop_with_empty_axes", 0) != 0;
  bool keepDims = getIntAttr(node, "keepdims", 1) != 0;
  auto axes = resolveReduceAxes(axesList, x.rank(), noop, error);
  if (!axes)
    return std::nullopt;
  if (axes->empty())
    return one(x);
  SmallVector<int64_t> keptShape, outShape;
  for (int64_t d = 0; d < x.rank(); ++d) {
    bool reduced = llvm::is_contained(*axes, d);
    keptShape.push_back(reduced ? 1 : x.shape[d]);
    if (!reduced)
      outShape.push_back(x.shape[d]);
    else if (keepDims)
      outShape.push_back(1);
  }
  int64_t n = numElements(keptShape);
  std::vector<double> acc(n, kind == "ReduceProd" ? 1.0 : 0.0);
  std::vector<bool> seen(n, false);
  int64_t count = x.size() / std::max<int64_t>(n, 1);
  // Map each input element to its reduced slot (the kept shape broadcasts).
  Indexer toSlot(keptShape, x.shape);
  for (int64_t i = 0, e = x.size(); i < e; ++i) {
    int64_t slot = toSlot(i);
    double v = x.getDouble(i);
    if (kind == "ReduceSum" || kind == "ReduceMean")
      acc[slot] += v;
    else if (kind == "ReduceProd")
      acc[slot] *= v;
    else if (!seen[slot] ||
             (kind == "ReduceMax" ? v > acc[slot] : v < acc[slot]))
      acc[slot] = v;
    seen[slot] = true;
  }
  HostTensor out = HostTensor::zeros(x.dataType, outShape);
  for (int64_t i = 0; i < n; ++i)
    out.set(i, kind == "ReduceMean" ? acc[i] / count : acc[i]);
  return one(std::move(out));
}

Results Evaluator::shapeOf() {
  const HostTensor &x = *in(0);
  int64_t rank = x.rank();
  auto clampIndex = [&](int64_t i) {
    if (i < 0)
      i += rank;
    return std::clamp<int64_t>(i, 0, rank);
  };
  int64_t start = clampIndex(getIntAttr(node, "start", 0));
  int64_t end = clampIndex(getIntAttr(node, "end", rank));
  SmallVector<int64_t> dims;
  for (int64_t i = start; i < end; ++i)
    dims.push_back(x.shape[i]);
  return one(HostTensor::fromInts(dims));
}

static const llvm::StringSet<> &hostOps() {
  static const llvm::StringSet<> ops = {
      "Abs",
      "Add",
      "And",
      "Cast",
      "CastLike",
      "Ceil",
      "Concat",
      "ConstantOfShape",
      "CumSum",
      "Cos",
      "Div",
      "Dropout",
      "Equal",
      "Erf",
      "Exp",
      "Expand",
      "Flatten",
      "Floor",
      "Gather",
      "Greater",
      "GreaterOrEqual",
      "Identity",
      "Less",
      "LessOrEqual",
      "Log",
      "MatMul",
      "Max",
      "Mean",
      "Min",
      "Mod",
      "Mul",
      "Neg",
      "Not",
      "Or",
      "Pow",
      "Range",
      "Reciprocal",
      "ReduceMax",
      "ReduceMean",
      "ReduceMin",
      "ReduceProd",
      "ReduceSum",
      "Relu",
      "Reshape",
      "Round",
      "Shape",
      "Sigmoid",
      "Sign",
      "Sin",
      "Size",
      "Slice",
      "Split",
      "Sqrt",
      "Squeeze",
      "Sub",
      "Sum",
      "Tanh",
      "Tile",
      "Transpose",
      "Trilu",
      "Unsqueeze",
      "Where",
      "Xor",
      "GatherND",
      "GatherElements",
  };
  return ops;
}

bool dtc::onnx::canEvaluateOnHost(llvm::StringRef opType) {
  return hostOps().contains(opType);
}

Results Evaluator::run() {
  llvm::StringRef op = node.op_type();
  if (!in(0) && op != "ConstantOfShape")
    return fail("its first input is missing");
  for (auto group : {&Evaluator::arithmetic, &Evaluator::comparisonOrLogic,
                     &Evaluator::unaryMath, &Evaluator::typesAndShapes})
    if (std::optional<Results> r = (this->*group)(op))
      return std::move(*r);
  return fail("the host evaluator does not implement " + op.str());
}

std::optional<Results> Evaluator::arithmetic(llvm::StringRef op) {
  // Arithmetic.
  if (op == "Add")
    return binary(
        in(0)->dataType, [](double a, double b) { return a + b; },
        [](int64_t a, int64_t b) -> OptI { return a + b; });
  if (op == "Sub")
    return binary(
        in(0)->dataType, [](double a, double b) { return a - b; },
        [](int64_t a, int64_t b) -> OptI { return a - b; });
  if (op == "Mul")
    return binary(
        in(0)->dataType, [](double a, double b) { return a * b; },
        [](int64_t a, int64_t b) -> OptI { return a * b; });
  if (op == "Div")
    return binary(
        in(0)->dataType, [](double a, double b) { return a / b; },
        [](int64_t a, int64_t b) -> OptI {
          if (b == 0)
            return std::nullopt;
          // INT64_MIN / -1 traps (SIGFPE); wrap as the integer ops do.
          if (b == -1)
            return static_cast<int64_t>(0 - static_cast<uint64_t>(a));
          return a / b;
        });
  if (op == "Mod") {
    bool fmod = getIntAttr(node, "fmod", 0) != 0;
    return binary(
        in(0)->dataType,
        [fmod](double a, double b) {
          double r = std::fmod(a, b);
          if (!fmod && r != 0 && ((r < 0) != (b < 0)))
            r += b;
          return r;
        },
        [fmod](int64_t a, int64_t b) -> OptI {
          if (b == 0)
            return std::nullopt;
          if (b == -1)
            return 0; // INT64_MIN % -1 traps (SIGFPE)
          int64_t r = a % b;
          if (!fmod && r != 0 && ((r < 0) != (b < 0)))
            r += b;
          return r;
        });
  }
  if (op == "Pow")
    return binary(
        in(0)->dataType, [](double a, double b) { return std::pow(a, b); },
        [](int64_t a, int64_t b) -> OptI {
          return static_cast<int64_t>(std::pow(a, b));
        },
        /*sameTypes=*/false);
  if (op == "Max" || op == "Min" || op == "Sum" || op == "Mean") {
    bool isMax = op == "Max";
    std::function<double(double, double)> f;
    std::function<OptI(int64_t, int64_t)> g;
    if (op == "Max" || op == "Min") {
      f = [isMax](double a, double b) -> double {
        if (std::isnan(a) || std::isnan(b))
          return std::nan("");
        return isMax ? std::max(a, b) : std::min(a, b);
      };
      g = [isMax](int64_t a, int64_t b) -> OptI {
        return isMax ? std::max(a, b) : std::min(a, b);
      };
    } else {
      f = [](double a, double b) { return a + b; };
      g = [](int64_t a, int64_t b) -> OptI { return a + b; };
    }
    Results r = variadic(f, g);
    if (r && op == "Mean") {
      HostTensor &t = (*r)[0];
      for (int64_t i = 0, e = t.size(); i < e; ++i)
        t.set(i, t.getDouble(i) / inputs.size());
    }
    return r;
  }
  return std::nullopt;
}

std::optional<Results> Evaluator::comparisonOrLogic(llvm::StringRef op) {
  // Comparisons and logic.
  auto compare = [&](std::function<bool(double, double)> f) {
    return binary(
        kBool, [f](double a, double b) { return f(a, b) ? 1.0 : 0.0; },
        [f](int64_t a, int64_t b) -> OptI {
          // Exact for the integer sizes shape arithmetic uses.
          return f(static_cast<double>(a), static_cast<double>(b)) ? 1 : 0;
        });
  };
  if (op == "Equal")
    return compare([](double a, double b) { return a == b; });
  if (op == "Less")
    return compare([](double a, double b) { return a < b; });
  if (op == "LessOrEqual")
    return compare([](double a, double b) { return a <= b; });
  if (op == "Greater")
    return compare([](double a, double b) { return a > b; });
  if (op == "GreaterOrEqual")
    return compare([](double a, double b) { return a >= b; });
  if (op == "And")
    return compare([](double a, double b) { return a != 0 && b != 0; });
  if (op == "Or")
    return compare([](double a, double b) { return a != 0 || b != 0; });
  if (op == "Xor")
    return compare([](double a, double b) { return (a != 0) != (b != 0); });
  if (op == "Not") {
    HostTensor out = *in(0);
    for (int64_t &v : out.ints)
      v = v == 0;
    return one(std::move(out));
  }
  if (op == "Where")
    return where();
  return std::nullopt;
}

std::optional<Results> Evaluator::unaryMath(llvm::StringRef op) {
  // Unary math.
  if (op == "Neg" || op == "Abs" || op == "Sign") {
    HostTensor out = *in(0);
    auto f = [&](double v) -> double {
      if (op == "Neg")
        return -v;
      if (op == "Abs")
        return std::fabs(v);
      return (v > 0) - (v < 0);
    };
    for (int64_t i = 0, e = out.size(); i < e; ++i) {
      if (out.isFloat())
        out.set(i, f(out.floats[i]));
      else
        out.setInt(i, static_cast<int64_t>(f(out.ints[i])));
    }
    return one(std::move(out));
  }
  if (op == "Sqrt")
    return unaryFloat([](double v) { return std::sqrt(v); });
  if (op == "Exp")
    return unaryFloat([](double v) { return std::exp(v); });
  if (op == "Log")
    return unaryFloat([](double v) { return std::log(v); });
  if (op == "Reciprocal")
    return unaryFloat([](double v) { return 1.0 / v; });
  if (op == "Floor")
    return unaryFloat([](double v) { return std::floor(v); });
  if (op == "Ceil")
    return unaryFloat([](double v) { return std::ceil(v); });
  if (op == "Round")
    return unaryFloat([](double v) { return std::nearbyint(v); });
  if (op == "Relu")
    return unaryFloat([](double v) { return v > 0 ? v : 0.0; });
  if (op == "Sigmoid")
    return unaryFloat([](double v) { return 1.0 / (1.0 + std::exp(-v)); });
  if (op == "Tanh")
    return unaryFloat([](double v) { return std::tanh(v); });
  if (op == "Erf")
    return unaryFloat([](double v) { return std::erf(v); });
  if (op == "Sin")
    return unaryFloat([](double v) { return std::sin(v); });
  if (op == "Cos")
    return unaryFloat([](double v) { return std::cos(v); });
  return std::nullopt;
}

std::optional<Results> Evaluator::typesAndShapes(llvm::StringRef op) {
  // Types and shapes.
  if (op == "Cast")
    return cast(getIntAttr(node, "to", kUndefined));
  if (op == "CastLike") {
    if (!in(1))
      return fail("needs a target_type input");
    return cast(in(1)->dataType);
  }
  if (op == "Identity")
    return one(*in(0));
  if (op == "Dropout")
    return dropout();
  if (op == "Shape")
    return shapeOf();
  if (op == "Size")
    return one(HostTensor::fromInts({in(0)->size()}, ArrayRef<int64_t>{}));
  if (op == "Reshape")
    return reshape();
  if (op == "Flatten")
    return flatten();
  if (op == "Unsqueeze" || op == "Squeeze")
    return squeezeOrUnsqueeze(op);
  if (op == "MatMul")
    return matmul();
  if (op == "Transpose")
    return transpose();
  if (op == "Concat")
    return concat();
  if (op == "Gather")
    return gather();
  if (op == "GatherND")
    return gatherND();
  if (op == "GatherElements")
    return gatherElements();
  if (op == "Slice")
    return sliceInputs();
  if (op == "Split")
    return split();
  if (op == "Expand")
    return expand();
  if (op == "Tile")
    return tile();
  if (op == "Range")
    return range();
  if (op == "ConstantOfShape")
    return constantOfShape();
  if (op == "Trilu")
    return trilu();
  if (op == "CumSum")
    return cumSum();
  if (op.starts_with("Reduce"))
    return reduce(op);
  return std::nullopt;
}

Results Evaluator::dropout() {
  if (in(2) && in(2)->size() != 1)
    return fail("training_mode must be a scalar");
  if (in(2) && in(2)->getInt(0) != 0)
    return fail("training_mode is true; dtc imports inference graphs");
  SmallVector<HostTensor> outs = {*in(0)};
  if (node.output_size() > 1) {
    HostTensor mask = HostTensor::zeros(kBool, in(0)->shape);
    std::fill(mask.ints.begin(), mask.ints.end(), 1);
    outs.push_back(std::move(mask));
  }
  return outs;
}

Results Evaluator::reshape() {
  auto shape = resolveReshape(in(0)->shape, intsOf(1),
                              getIntAttr(node, "allowzero", 0) != 0, error);
  if (!shape)
    return std::nullopt;
  return one(withShape(*in(0), *shape));
}

Results Evaluator::flatten() {
  std::optional<int64_t> axis = getIntAttr(node, "axis", 1);
  if (*axis != in(0)->rank())
    axis = normalizeAxis(*axis, in(0)->rank(), error);
  if (!axis)
    return std::nullopt;
  ArrayRef<int64_t> s = in(0)->shape;
  return one(withShape(*in(0), {numElements(s.take_front(*axis)),
                                numElements(s.drop_front(*axis))}));
}

Results Evaluator::squeezeOrUnsqueeze(llvm::StringRef op) {
  std::vector<int64_t> axes = intsOf(1);
  if (!in(1))
    if (auto attr = getIntsAttr(node, "axes"))
      axes.assign(attr->begin(), attr->end());
  auto shape = op == "Unsqueeze" ? unsqueezeShape(in(0)->shape, axes, error)
                                 : squeezeShape(in(0)->shape, axes, error);
  if (!shape)
    return std::nullopt;
  return one(withShape(*in(0), *shape));
}

Results Evaluator::sliceInputs() {
  if (!in(1) || !in(2))
    return fail("needs starts and ends inputs");
  std::vector<int64_t> starts = intsOf(1), ends = intsOf(2), axes = intsOf(3),
                       steps = intsOf(4);
  auto dims = resolveSlice(in(0)->shape, starts, ends, axes, steps, error);
  if (!dims)
    return std::nullopt;
  return slice(*in(0), *dims);
}

std::optional<SmallVector<HostTensor>>
dtc::onnx::evaluateNode(const ::onnx::NodeProto &node, HostInputs inputs,
                        std::string &error) {
  Evaluator evaluator(node, inputs, error);
  return evaluator.run();
}
