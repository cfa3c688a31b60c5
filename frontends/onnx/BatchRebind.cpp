//===- BatchRebind.cpp - A fixed-batch export at another batch ------------===//
//
// See BatchRebind.h. The importer calls prepare() before and
// classifyOutputs() after each node when it imports a fixed-batch export at
// another batch.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/BatchRebind.h"

#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/ImporterImpl.h"
#include "frontends/onnx/OnnxUtils.h"

#include "llvm/ADT/STLExtras.h"

#include <limits>

using namespace dtc::onnx;
using namespace dtc::onnx::detail;

namespace {

/// How a value's shape at b relates to its shape at B.
struct Classified {
  bool provable = true;
  std::optional<BatchAxis> axis; // none: batch-free
};

Classified classify(llvm::ArrayRef<int64_t> atExported,
                    llvm::ArrayRef<int64_t> atBatch, int64_t exportedBatch,
                    int64_t batch) {
  Classified c;
  if (atExported.size() != atBatch.size()) {
    c.provable = false;
    return c;
  }
  for (auto [i, sizes] : llvm::enumerate(llvm::zip(atExported, atBatch))) {
    auto [big, small] = sizes;
    if (big == small)
      continue;
    if (c.axis || big % exportedBatch || small % batch ||
        big / exportedBatch != small / batch) {
      c.provable = false;
      return c;
    }
    c.axis = BatchAxis{static_cast<int64_t>(i), big / exportedBatch};
  }
  return c;
}

/// Ops that compute each output element from the same position of their
/// (numpy-broadcast) inputs.
bool isElementwise(llvm::StringRef op) {
  static const llvm::StringSet<> kOps = {
      "Add",        "Sub",         "Mul",         "Div",
      "Pow",        "Mod",         "Max",         "Min",
      "Sum",        "Mean",        "Where",       "Equal",
      "Less",       "LessOrEqual", "Greater",     "GreaterOrEqual",
      "And",        "Or",          "Xor",         "BitShift",
      "PRelu",      "Identity",    "Cast",        "Neg",
      "Abs",        "Exp",         "Log",         "Sqrt",
      "Reciprocal", "Relu",        "LeakyRelu",   "Elu",
      "Selu",       "Sigmoid",     "HardSigmoid", "Tanh",
      "Erf",        "Gelu",        "Softplus",    "Softsign",
      "Sin",        "Cos",         "Not",         "IsNaN",
      "IsInf",      "Floor",       "Ceil",        "Round",
      "Sign",       "Clip",        "Dropout",     "Mish",
      "HardSwish"};
  return kOps.contains(op);
}

/// Elementwise ops whose inputs broadcast against each other.
bool broadcastsInputs(llvm::StringRef op) {
  return isElementwise(op) && op != "Clip" && op != "Dropout";
}

bool isReshapeLike(llvm::StringRef op) {
  return op == "Reshape" || op == "Flatten" || op == "Squeeze" ||
         op == "Unsqueeze";
}

/// The dim j of `out` that holds the batch of `in`'s dim `axis` outermost:
/// the dims before j hold exactly the elements before the batch, and
/// out[j] is a multiple of the batch.
std::optional<int64_t> reshapedBatchDim(llvm::ArrayRef<int64_t> in,
                                        int64_t axis,
                                        llvm::ArrayRef<int64_t> out,
                                        int64_t exportedBatch) {
  int64_t before = numElements(in.take_front(axis));
  int64_t product = 1;
  for (auto [j, size] : llvm::enumerate(out)) {
    if (product == before && size > 0 && size % exportedBatch == 0)
      return j;
    product *= size;
    if (product > before)
      return std::nullopt;
  }
  return std::nullopt;
}

bool isUniformKnown(const HostTensor &t, int64_t axis) {
  int64_t size = t.shape[axis];
  int64_t inner =
      numElements(llvm::ArrayRef<int64_t>(t.shape).drop_front(axis + 1));
  int64_t outer =
      numElements(llvm::ArrayRef<int64_t>(t.shape).take_front(axis));
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 1; i < size; ++i)
      for (int64_t r = 0; r < inner; ++r) {
        int64_t first = (o * size) * inner + r;
        int64_t at = (o * size + i) * inner + r;
        if (t.isFloat() ? t.floats[at] != t.floats[first]
                        : t.ints[at] != t.ints[first])
          return false;
      }
  return true;
}

/// The first `count` entries of `t` along `axis`.
std::optional<HostTensor> sliceKnown(const HostTensor &t, int64_t axis,
                                     int64_t count, std::string &error) {
  ::onnx::NodeProto slice;
  slice.set_op_type("Slice");
  HostTensor starts = HostTensor::fromInts({0}),
             ends = HostTensor::fromInts({count}),
             axes = HostTensor::fromInts({axis});
  const HostTensor *args[] = {&t, &starts, &ends, &axes};
  auto sliced = evaluateNode(slice, args, error);
  if (!sliced)
    return std::nullopt;
  return std::move((*sliced)[0]);
}

std::string axisText(llvm::StringRef name, BatchAxis at) {
  return llvm::formatv("dim {0} of '{1}'", at.axis, name).str();
}

} // namespace

void BatchRebinder::addGraphInput(llvm::StringRef name) {
  batchAxes[name] = BatchAxis{0, 1};
}

std::optional<BatchAxis>
BatchRebinder::batchAxisOf(llvm::StringRef name) const {
  auto it = batchAxes.find(name);
  if (it == batchAxes.end())
    return std::nullopt;
  return it->second;
}

const ValueAtExportedBatch *
BatchRebinder::exported(llvm::StringRef name) const {
  auto it = atExported.find(name);
  return it == atExported.end() ? nullptr : &it->second;
}

bool BatchRebinder::isUniformAlong(ModelImporter &importer,
                                   llvm::StringRef name, int64_t axis) const {
  auto entry = importer.values.find(name);
  if (entry == importer.values.end())
    return false;
  if (entry->second.known)
    return isUniformKnown(*entry->second.known, axis);
  auto it = uniformAxes.find(name);
  return it != uniformAxes.end() &&
         axis < static_cast<int64_t>(it->second.size()) && it->second[axis];
}

void BatchRebinder::replaceInput(ModelImporter &importer,
                                 ::onnx::NodeProto &node, int index,
                                 llvm::StringRef suffix, HostTensor known) {
  Entry entry;
  entry.dataType = known.dataType;
  entry.shape = known.shape;
  entry.known = std::make_shared<const HostTensor>(std::move(known));
  std::string name =
      llvm::formatv("{0}@{1}{2}", node.input(index), suffix, renamed++).str();
  importer.values[name] = std::move(entry);
  node.set_input(index, name);
}

void BatchRebinder::replaceInput(ModelImporter &importer,
                                 ::onnx::NodeProto &node, int index,
                                 llvm::StringRef suffix, mlir::Value value) {
  auto type = mlir::cast<mlir::RankedTensorType>(value.getType());
  Entry entry;
  entry.value = value;
  entry.dataType = dataTypeOf(type.getElementType());
  entry.shape.assign(type.getShape().begin(), type.getShape().end());
  std::string name =
      llvm::formatv("{0}@{1}{2}", node.input(index), suffix, renamed++).str();
  importer.values[name] = std::move(entry);
  node.set_input(index, name);
}

//===----------------------------------------------------------------------===//
// Before a node: re-bind its operands
//===----------------------------------------------------------------------===//

llvm::Expected<const ::onnx::NodeProto *>
BatchRebinder::prepare(ModelImporter &importer) {
  const ::onnx::NodeProto &original = *importer.node;
  importer.nodeLoc = importer.locFor(nodeName(original));
  llvm::StringRef op = original.op_type();
  bool anyBatch = llvm::any_of(original.input(), [&](const std::string &in) {
    return !in.empty() && batchAxes.contains(in);
  });
  if (!anyBatch || !isDefaultDomain(original.domain()))
    return &original;
  // A value reduced over the batch meets the batch again: the micro-batch
  // would see its own reduction, not the exported batch's.
  for (const std::string &in : original.input())
    if (!in.empty() && batchReduced.contains(in))
      return importer.nodeError(
          "it combines '{0}', reduced over the batch, with values that carry "
          "the batch",
          in);

  // Integer initializers are decoded when first read: read them now.
  for (const std::string &in : original.input())
    if (!in.empty())
      if (auto entry = importer.lookup(in); !entry)
        llvm::consumeError(entry.takeError()); // importNode reports it

  ::onnx::NodeProto copy = original;
  bool changed = false;
  llvm::Error err = llvm::Error::success();
  if (op == "Reshape")
    err = rebindReshapeTarget(importer, copy, changed);
  else if (op == "Expand")
    err = rebindExpandTarget(importer, copy, changed);
  else if (op == "Slice")
    err = rebindSliceBounds(importer, copy, changed);
  else if (broadcastsInputs(op) || op == "MatMul" || op == "Concat")
    err = sliceMeetingOperands(importer, copy, changed);
  if (err)
    return std::move(err);
  if (!changed)
    return &original;
  rewritten.push_back(std::move(copy));
  return &rewritten.back();
}

llvm::Error BatchRebinder::rebindReshapeTarget(ModelImporter &importer,
                                               ::onnx::NodeProto &node,
                                               bool &changed) {
  std::optional<BatchAxis> at = batchAxisOf(node.input(0));
  if (!at || node.input_size() < 2)
    return llvm::Error::success();
  const ValueAtExportedBatch *target = exported(node.input(1));
  const ValueAtExportedBatch *in = exported(node.input(0));
  const ValueAtExportedBatch *out = exported(node.output(0));
  auto entry = importer.values.find(node.input(1));
  if (!target || !target->known || !in || !out ||
      entry == importer.values.end() || !entry->second.known)
    return llvm::Error::success(); // the importer reports what it cannot do
  // A target computed from the shapes at b (Shape, Concat) is right as it
  // is; one that did not change is the export's constant.
  if (entry->second.known->ints != target->known->ints)
    return llvm::Error::success();
  std::optional<int64_t> dim =
      reshapedBatchDim(in->shape, at->axis, out->shape, exportedBatch);
  if (!dim)
    return importer.nodeError(
        "its target {0} does not keep the batch ({1}) as the outermost part "
        "of one dim",
        shapeString(target->known->ints), axisText(node.input(0), *at));
  llvm::SmallVector<int64_t> rebound(out->shape.begin(), out->shape.end());
  rebound[*dim] = rebound[*dim] / exportedBatch * batch;
  replaceInput(importer, node, 1, "batch", HostTensor::fromInts(rebound));
  changed = true;
  return llvm::Error::success();
}

llvm::Error BatchRebinder::rebindExpandTarget(ModelImporter &importer,
                                              ::onnx::NodeProto &node,
                                              bool &changed) {
  std::optional<BatchAxis> at = batchAxisOf(node.input(0));
  if (!at || node.input_size() < 2)
    return llvm::Error::success();
  const ValueAtExportedBatch *target = exported(node.input(1));
  const ValueAtExportedBatch *in = exported(node.input(0));
  auto entry = importer.values.find(node.input(1));
  if (!target || !target->known || !in || entry == importer.values.end() ||
      !entry->second.known || entry->second.known->ints != target->known->ints)
    return llvm::Error::success();
  std::vector<int64_t> dims = target->known->ints;
  int64_t aligned = at->axis + static_cast<int64_t>(dims.size()) -
                    static_cast<int64_t>(in->shape.size());
  if (aligned < 0 || dims[aligned] != exportedBatch * at->inner)
    return llvm::Error::success(); // 1 (kept) or shorter than the input
  dims[aligned] = batch * at->inner;
  replaceInput(importer, node, 1, "batch", HostTensor::fromInts(dims));
  changed = true;
  return llvm::Error::success();
}

llvm::Error BatchRebinder::rebindSliceBounds(ModelImporter &importer,
                                             ::onnx::NodeProto &node,
                                             bool &changed) {
  std::optional<BatchAxis> at = batchAxisOf(node.input(0));
  const ValueAtExportedBatch *in = exported(node.input(0));
  if (!at || !in)
    return llvm::Error::success();
  if (node.input_size() < 3)
    return importer.nodeError("a Slice with attribute bounds (opset < 10) "
                              "over a value that carries the batch");
  auto knownAt = [&](int index) -> const HostTensor * {
    if (index >= node.input_size() || node.input(index).empty())
      return nullptr;
    auto it = importer.values.find(node.input(index));
    return it == importer.values.end() ? nullptr : it->second.known.get();
  };
  const HostTensor *starts = knownAt(1), *ends = knownAt(2), *axes = knownAt(3),
                   *steps = knownAt(4);
  if (!starts || !ends)
    return llvm::Error::success();
  int64_t rank = in->shape.size();
  for (int64_t i = 0, n = starts->size(); i < n; ++i) {
    int64_t axis = axes ? axes->getInt(i) : i;
    if (axis < 0)
      axis += rank;
    if (axis != at->axis)
      continue;
    int64_t size = in->shape[axis];
    int64_t start = starts->getInt(i), end = ends->getInt(i);
    int64_t step = steps ? steps->getInt(i) : 1;
    if (start < 0)
      start += size;
    if (end < 0)
      end += size;
    // Only a slice that keeps the whole batch dim re-binds: to the end.
    if (start != 0 || step != 1 || end < size)
      return importer.nodeError(
          "it slices the batch ({0}: start {1}, end {2}, step {3}); only "
          "slices that keep the whole dim re-bind",
          axisText(node.input(0), *at), starts->getInt(i), ends->getInt(i),
          step);
    HostTensor wide = HostTensor::copyOf(*ends);
    wide.setInt(i, std::numeric_limits<int64_t>::max());
    replaceInput(importer, node, 2, "batch", std::move(wide));
    changed = true;
    return llvm::Error::success();
  }
  return llvm::Error::success();
}

llvm::Error BatchRebinder::sliceMeetingOperands(ModelImporter &importer,
                                                ::onnx::NodeProto &node,
                                                bool &changed) {
  llvm::StringRef op = node.op_type();
  bool matmul = op == "MatMul";
  std::string error;
  std::optional<int64_t> concatAxis;
  int64_t outRank = 0;
  for (const std::string &in : node.input())
    if (auto it = importer.values.find(in);
        !in.empty() && it != importer.values.end())
      outRank = std::max<int64_t>(outRank, it->second.shape.size());
  if (op == "Concat") {
    concatAxis = normalizeAxis(getIntAttr(node, "axis", 0), outRank, error);
    if (!concatAxis)
      return llvm::Error::success(); // the importer reports it
  }
  // The aligned output dims that carry the batch, with their inner factor.
  // MatMul broadcasts only its batch dims (all but the last two).
  int64_t aligned = matmul ? outRank - 2 : outRank;
  llvm::SmallVector<std::optional<int64_t>, 4> batchAt(outRank);
  for (const std::string &in : node.input()) {
    std::optional<BatchAxis> at = batchAxisOf(in);
    if (in.empty() || !at)
      continue;
    int64_t rank = importer.values.find(in)->second.shape.size();
    int64_t o = at->axis + (matmul ? aligned - (rank - 2) : outRank - rank);
    if (concatAxis && o == *concatAxis)
      return importer.nodeError("it concatenates along the batch ({0})",
                                axisText(in, *at));
    if (o >= 0 && o < aligned)
      batchAt[o] = at->inner;
  }
  for (int index = 0; index < node.input_size(); ++index) {
    std::string in = node.input(index);
    if (in.empty() || batchAxes.contains(in) || !importer.values.count(in))
      continue;
    int64_t rank = importer.values[in].shape.size();
    int64_t offset = matmul ? aligned - (rank - 2) : outRank - rank;
    for (int64_t o = 0; o < aligned; ++o) {
      int64_t axis = o - offset;
      if (!batchAt[o] || axis < 0 || axis >= (matmul ? rank - 2 : rank))
        continue;
      Entry &entry = importer.values[in];
      int64_t inner = *batchAt[o], size = entry.shape[axis];
      if (size == 1 && !concatAxis)
        continue; // broadcast along the batch: the same at any batch
      if (size != exportedBatch * inner)
        continue; // the importer reports the mismatch
      // The export expanded it to the batch: re-bound only where every
      // sample of it is the same.
      if (!isUniformAlong(importer, in, axis))
        return importer.nodeError(
            "its operand '{0}' has the exported batch {1} in dim {2} but was "
            "not expanded from one sample; cannot re-bind it",
            in, exportedBatch, axis);
      // Broadcasting needs one sample; Concat the whole re-bound dim.
      int64_t count = concatAxis ? batch * inner : 1;
      llvm::SmallVector<int64_t, 4> shape(entry.shape);
      shape[axis] = count;
      if (entry.known) {
        auto sliced =
            sliceKnown(*entry.known, axis, count > size ? 1 : count, error);
        if (!sliced)
          return importer.nodeError("{0}", error);
        if (sliced && count > size) {
          // Uniform along the dim: its first sample, broadcast.
          ::onnx::NodeProto expand;
          expand.set_op_type("Expand");
          HostTensor target = HostTensor::fromInts(shape);
          const HostTensor *args[] = {&*sliced, &target};
          auto expanded = evaluateNode(expand, args, error);
          sliced = expanded ? std::optional<HostTensor>((*expanded)[0])
                            : std::nullopt;
        }
        replaceInput(importer, node, index, "batch", std::move(*sliced));
      } else {
        auto value = importer.valueOf(entry);
        if (!value)
          return value.takeError();
        auto sliced =
            importer.sliceAxis(*value, axis, 0, count > size ? 1 : count);
        if (sliced && count > size)
          sliced = importer.expandTo(*sliced, shape);
        if (!sliced)
          return sliced.takeError();
        replaceInput(importer, node, index, "batch", *sliced);
        uniformAxes[node.input(index)] = uniformAxes.lookup(in);
      }
      changed = true;
      in = node.input(index); // the sliced operand, for its other dims
    }
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// After a node: where its outputs carry the batch
//===----------------------------------------------------------------------===//

/// The output whose batch axis expectedOutputAxis finds, and what its op
/// rules share.
struct BatchRebinder::OutputQuery {
  ModelImporter &importer;
  const ::onnx::NodeProto &node;
  int index;
  llvm::StringRef op;
  int64_t outRank = 0;
  /// The first batch-carrying input, its batch axis and its rank.
  int first = -1;
  BatchAxis at;
  int64_t rank = 0;
  std::string error;

  /// The shape of value `name` (empty where unknown).
  llvm::ArrayRef<int64_t> shapeOf(llvm::StringRef name) const {
    auto it = importer.values.find(name);
    if (it == importer.values.end())
      return {};
    return it->second.shape;
  }
  /// The error for an op that mixes the batch with other dims.
  llvm::Error noRule(llvm::StringRef why) const {
    return importer.nodeError("the batch cannot be followed through it: {0}",
                              why);
  }
  /// The node's `axis` attribute, normalized to the first input's rank (-1
  /// where out of range).
  int64_t attrAxis(int64_t fallback) {
    return normalizeAxis(getIntAttr(node, "axis", fallback), rank, error)
        .value_or(-1);
  }
};

llvm::Expected<std::optional<BatchAxis>>
BatchRebinder::expectedOutputAxis(ModelImporter &importer,
                                  const ::onnx::NodeProto &node, int index) {
  llvm::StringRef op = node.op_type();
  OutputQuery q{importer, node, index, op};
  q.outRank = q.shapeOf(node.output(index)).size();
  // The first batch-carrying input.
  for (int i = 0; i < node.input_size(); ++i)
    if (!node.input(i).empty() && batchAxes.contains(node.input(i))) {
      q.first = i;
      break;
    }
  q.at = batchAxes.lookup(node.input(q.first));
  q.rank = q.shapeOf(node.input(q.first)).size();
  const BatchAxis &at = q.at;

  if (!isDefaultDomain(node.domain()))
    return q.noRule("dtc has no batch rule for ops outside the ONNX domain");
  if (op == "Shape" || op == "Size")
    return std::optional<BatchAxis>(); // shape arithmetic: batch-free ints
  if (op == "CastLike" && q.first == 1)
    return std::optional<BatchAxis>(); // reads only the type
  if (isElementwise(op) || op == "CastLike")
    return elementwiseOutputAxis(q);
  if (op == "Softmax" || op == "LogSoftmax" || op == "Hardmax") {
    if (q.attrAxis(-1) == at.axis)
      return q.noRule("it normalizes over the batch");
    return std::optional<BatchAxis>(at);
  }
  if (op == "LayerNormalization") {
    if (index > 0)
      return q.noRule("its mean and inverse deviation outputs are used");
    if (q.attrAxis(-1) <= at.axis)
      return q.noRule("it normalizes over the batch");
    return std::optional<BatchAxis>(at);
  }
  if (op == "CumSum")
    return cumSumOutputAxis(q);
  if (op.starts_with("Reduce"))
    return reduceOutputAxis(q);
  if (op == "SoftmaxCrossEntropyLoss" || op == "NegativeLogLikelihoodLoss") {
    if (at.axis != 0)
      return q.noRule("its batch is not dim 0");
    if (getStringAttr(node, "reduction", "mean") != "none" || index > 0)
      return std::optional<BatchAxis>();
    return std::optional<BatchAxis>(at);
  }
  if (op == "Transpose")
    return transposeOutputAxis(q);
  if (isReshapeLike(op))
    return reshapeOutputAxis(q);
  if (op == "MatMul")
    return matMulOutputAxis(q);
  if (op == "Gemm") {
    if (q.first != 0)
      return q.noRule("its weights carry the batch");
    bool transA = getIntAttr(node, "transA", 0) != 0;
    if (at.axis != (transA ? 1 : 0))
      return q.noRule("it contracts the batch");
    return std::optional<BatchAxis>(BatchAxis{0, at.inner});
  }
  if (op == "Conv" || op == "ConvTranspose" || op == "MaxPool" ||
      op == "AveragePool" || op == "GlobalAveragePool" ||
      op == "GlobalMaxPool" || op == "LpPool") {
    if (q.first != 0 || at.axis != 0)
      return q.noRule("its batch is not dim 0 of its data");
    return std::optional<BatchAxis>(at);
  }
  if (op == "Concat" || op == "Expand" || op == "Slice" || op == "Split" ||
      op == "Tile")
    return shapeOpOutputAxis(q);
  if (op == "Gather")
    return gatherOutputAxis(q);
  if (op == "SequenceAt")
    return std::optional<BatchAxis>(at);
  return q.noRule("dtc has no batch rule for this op");
}
llvm::Expected<std::optional<BatchAxis>>
BatchRebinder::elementwiseOutputAxis(OutputQuery &q) {
  // Every batch-carrying input must land on the same dim.
  std::optional<BatchAxis> result;
  for (const std::string &in : q.node.input()) {
    auto axis = batchAxisOf(in);
    if (in.empty() || !axis)
      continue;
    BatchAxis o{axis->axis + q.outRank -
                    static_cast<int64_t>(q.shapeOf(in).size()),
                axis->inner};
    if (result && !(*result == o))
      return q.noRule("its inputs carry the batch in different dims");
    result = o;
  }
  return result;
}

llvm::Expected<std::optional<BatchAxis>>
BatchRebinder::cumSumOutputAxis(OutputQuery &q) {
  auto axes = q.importer.values.find(q.node.input(1));
  if (q.first != 0 || axes == q.importer.values.end() || !axes->second.known)
    return q.noRule("its axis is not a constant");
  int64_t axis = axes->second.known->getInt(0);
  if (axis < 0)
    axis += q.rank;
  if (axis == q.at.axis)
    return q.noRule("it sums along the batch");
  return std::optional<BatchAxis>(q.at);
}

llvm::Expected<std::optional<BatchAxis>>
BatchRebinder::reduceOutputAxis(OutputQuery &q) {
  llvm::SmallVector<int64_t> axes =
      getIntsAttr(q.node, "axes").value_or(llvm::SmallVector<int64_t>());
  if (q.node.input_size() > 1 && !q.node.input(1).empty()) {
    auto it = q.importer.values.find(q.node.input(1));
    if (it == q.importer.values.end() || !it->second.known)
      return q.noRule("its axes are not a constant");
    std::vector<int64_t> known = it->second.known->toInts();
    axes.assign(known.begin(), known.end());
  }
  bool noop = getIntAttr(q.node, "noop_with_empty_axes", 0) != 0;
  auto resolved = resolveReduceAxes(axes, q.rank, noop, q.error);
  if (!resolved)
    return q.noRule(q.error);
  if (llvm::is_contained(*resolved, q.at.axis))
    return std::optional<BatchAxis>(); // the loss: reduced over the batch
  int64_t axis = q.at.axis;
  if (getIntAttr(q.node, "keepdims", 1) == 0)
    axis -= llvm::count_if(*resolved, [&](int64_t a) { return a < q.at.axis; });
  return std::optional<BatchAxis>(BatchAxis{axis, q.at.inner});
}

llvm::Expected<std::optional<BatchAxis>>
BatchRebinder::transposeOutputAxis(OutputQuery &q) {
  llvm::SmallVector<int64_t> perm =
      getIntsAttr(q.node, "perm").value_or(llvm::SmallVector<int64_t>());
  if (perm.empty())
    for (int64_t i = q.rank - 1; i >= 0; --i)
      perm.push_back(i);
  auto it = llvm::find(perm, q.at.axis);
  if (it == perm.end())
    return q.noRule("its perm does not name the batch dim");
  return std::optional<BatchAxis>(BatchAxis{it - perm.begin(), q.at.inner});
}

llvm::Expected<std::optional<BatchAxis>>
BatchRebinder::reshapeOutputAxis(OutputQuery &q) {
  const ValueAtExportedBatch *in = exported(q.node.input(0));
  const ValueAtExportedBatch *out = exported(q.node.output(q.index));
  if (!in || !out)
    return q.noRule("no shape at the exported batch");
  auto dim = reshapedBatchDim(in->shape, q.at.axis, out->shape, exportedBatch);
  if (!dim)
    return q.noRule("it does not keep the batch as the outermost part of one "
                    "dim");
  return std::optional<BatchAxis>(
      BatchAxis{*dim, out->shape[*dim] / exportedBatch});
}

llvm::Expected<std::optional<BatchAxis>>
BatchRebinder::matMulOutputAxis(OutputQuery &q) {
  int64_t rankA = q.shapeOf(q.node.input(0)).size(),
          rankB = q.shapeOf(q.node.input(1)).size();
  std::optional<BatchAxis> result;
  for (int i = 0; i < 2; ++i) {
    auto axis = batchAxisOf(q.node.input(i));
    if (!axis)
      continue;
    int64_t r = i == 0 ? rankA : rankB;
    BatchAxis o;
    if (r == 1 || axis->axis == (i == 0 ? r - 1 : r - 2))
      return q.noRule("it contracts the batch");
    if (axis->axis >= r - 2)
      o = BatchAxis{i == 0 ? q.outRank - 2 + (rankB == 1 ? 1 : 0)
                           : q.outRank - 1,
                    axis->inner};
    else
      o = BatchAxis{axis->axis + q.outRank - r, axis->inner};
    if (result && !(*result == o))
      return q.noRule("its operands carry the batch in different dims");
    result = o;
  }
  return result;
}

llvm::Expected<std::optional<BatchAxis>>
BatchRebinder::shapeOpOutputAxis(OutputQuery &q) {
  if (q.first != 0 && q.op != "Concat")
    return q.noRule("its shape operands carry the batch");
  if (q.op == "Tile") {
    auto it = q.importer.values.find(q.node.input(1));
    if (it == q.importer.values.end() || !it->second.known ||
        it->second.known->getInt(q.at.axis) != 1)
      return q.noRule("it repeats the batch");
  }
  if (q.op == "Split" && q.attrAxis(0) == q.at.axis)
    return q.noRule("it splits the batch");
  // prepare() kept the batch dim whole (or refused).
  return std::optional<BatchAxis>(
      BatchAxis{q.at.axis + q.outRank - q.rank, q.at.inner});
}

llvm::Expected<std::optional<BatchAxis>>
BatchRebinder::gatherOutputAxis(OutputQuery &q) {
  int64_t axis = q.attrAxis(0);
  auto indices = batchAxisOf(q.node.input(1));
  if (q.first == 0 && indices)
    return q.noRule("both its data and its indices carry the batch");
  if (q.first == 0) {
    if (axis == q.at.axis)
      return q.noRule("it gathers along the batch");
    int64_t indicesRank = q.shapeOf(q.node.input(1)).size();
    return std::optional<BatchAxis>(
        BatchAxis{q.at.axis < axis ? q.at.axis : q.at.axis + indicesRank - 1,
                  q.at.inner});
  }
  return std::optional<BatchAxis>(BatchAxis{axis + q.at.axis, q.at.inner});
}

void BatchRebinder::recordUniformAxes(ModelImporter &importer,
                                      const ::onnx::NodeProto &node) {
  llvm::StringRef op = node.op_type();
  if (node.output_size() == 0)
    return;
  auto out = importer.values.find(node.output(0));
  if (out == importer.values.end() || out->second.known)
    return;
  int64_t outRank = out->second.shape.size();
  llvm::SmallVector<bool, 4> uniform(outRank, false);
  auto inputShape = [&](int i) -> llvm::ArrayRef<int64_t> {
    auto it = importer.values.find(node.input(i));
    if (it == importer.values.end())
      return {};
    return it->second.shape;
  };
  if (op == "Expand") {
    llvm::ArrayRef<int64_t> in = inputShape(0);
    int64_t offset = outRank - static_cast<int64_t>(in.size());
    for (int64_t o = 0; o < outRank; ++o) {
      int64_t axis = o - offset;
      uniform[o] = axis < 0 || in[axis] == 1 ||
                   isUniformAlong(importer, node.input(0), axis);
    }
  } else if (isElementwise(op) || op == "Transpose") {
    llvm::SmallVector<int64_t> perm =
        getIntsAttr(node, "perm").value_or(llvm::SmallVector<int64_t>());
    for (int64_t o = 0; o < outRank; ++o) {
      bool all = true;
      for (int i = 0; i < node.input_size() && all; ++i) {
        if (node.input(i).empty() ||
            (i > 0 && (op == "Clip" || op == "Dropout")))
          continue;
        llvm::ArrayRef<int64_t> in = inputShape(i);
        int64_t axis = op == "Transpose"
                           ? (perm.empty() ? outRank - 1 - o : perm[o])
                           : o - (outRank - static_cast<int64_t>(in.size()));
        all = axis < 0 || in[axis] == 1 ||
              isUniformAlong(importer, node.input(i), axis);
      }
      uniform[o] = all;
    }
  } else if (isReshapeLike(op)) {
    // A dim kept whole (as many elements before it, the same size) holds
    // the same elements as before the reshape.
    llvm::ArrayRef<int64_t> in = inputShape(0);
    llvm::ArrayRef<int64_t> shape = out->second.shape;
    for (int64_t o = 0; o < outRank; ++o)
      for (int64_t k = 0, rank = in.size(); k < rank && !uniform[o]; ++k)
        uniform[o] =
            in[k] == shape[o] &&
            numElements(in.take_front(k)) == numElements(shape.take_front(o)) &&
            isUniformAlong(importer, node.input(0), k);
  } else {
    return;
  }
  if (llvm::is_contained(uniform, true))
    uniformAxes[node.output(0)] = std::move(uniform);
}

llvm::Error BatchRebinder::classifySequence(ModelImporter &importer,
                                            const ::onnx::NodeProto &node) {
  std::optional<BatchAxis> at = batchAxisOf(node.input(0));
  if (!at)
    return importer.nodeError("the batch cannot be followed through it: its "
                              "split sizes carry the batch");
  std::string error;
  auto axis = normalizeAxis(getIntAttr(node, "axis", 0),
                            importer.values[node.input(0)].shape.size(), error);
  if (!axis || *axis == at->axis)
    return importer.nodeError("it splits the batch ({0})",
                              axisText(node.input(0), *at));
  bool squeezed = node.input_size() < 2 &&
                  getIntAttr(node, "keepdims", 1) == 0 && *axis < at->axis;
  batchAxes[node.output(0)] =
      BatchAxis{at->axis - (squeezed ? 1 : 0), at->inner};
  return llvm::Error::success();
}

llvm::Error BatchRebinder::classifyOutputs(ModelImporter &importer,
                                           const ::onnx::NodeProto &node) {
  bool anyBatch = llvm::any_of(node.input(), [&](const std::string &in) {
    return !in.empty() && batchAxes.contains(in);
  });
  bool anyReduced = llvm::any_of(node.input(), [&](const std::string &in) {
    return !in.empty() && batchReduced.contains(in);
  });
  if (node.op_type() == "SplitToSequence")
    return anyBatch ? classifySequence(importer, node) : llvm::Error::success();
  for (int index = 0; index < node.output_size(); ++index) {
    const std::string &name = node.output(index);
    auto entry = importer.values.find(name);
    const ValueAtExportedBatch *ref = exported(name);
    if (name.empty() || entry == importer.values.end() || !ref)
      continue;
    Classified c =
        classify(ref->shape, entry->second.shape, exportedBatch, batch);
    if (!c.provable)
      return importer.nodeError(
          "output '{0}' is {1} at batch {2} but {3} at the exported batch "
          "{4}: not the batch scaled in one dim",
          name, shapeString(entry->second.shape), batch,
          shapeString(ref->shape), exportedBatch);
    if (anyBatch) {
      auto expected = expectedOutputAxis(importer, node, index);
      if (!expected)
        return expected.takeError();
      if (!*expected) {
        if (c.axis)
          return importer.nodeError("output '{0}' carries the batch in dim {1} "
                                    "where dtc expects none",
                                    name, c.axis->axis);
        // Shape arithmetic and a CastLike's type read no samples.
        if (node.op_type() != "Shape" && node.op_type() != "Size" &&
            node.op_type() != "CastLike")
          batchReduced.insert(name);
        continue;
      }
      if (!c.axis || !(*c.axis == **expected))
        return importer.nodeError(
            "output '{0}' is {1} at batch {2} and {3} at the exported batch "
            "{4}, not with the batch in dim {5} (times {6}) as the op puts it",
            name, shapeString(entry->second.shape), batch,
            shapeString(ref->shape), exportedBatch, (*expected)->axis,
            (*expected)->inner);
    }
    if (c.axis)
      batchAxes[name] = *c.axis; // also shape arithmetic computed at b
    else if (anyReduced)
      batchReduced.insert(name);
  }
  if (!anyBatch)
    recordUniformAxes(importer, node);
  return llvm::Error::success();
}

llvm::Error BatchRebinder::checkGraphOutputs(ModelImporter &importer) {
  for (const auto &output : importer.model.graph().output()) {
    auto entry = importer.values.find(output.name());
    if (entry == importer.values.end())
      continue;
    if (batchAxes.contains(output.name()))
      continue;
    if (numElements(entry->second.shape) == 1)
      continue; // a scalar (the loss)
    return importer.fileError(
        "graph output '{0}' ({1}) does not carry the batch at batch {2}",
        output.name(), shapeString(entry->second.shape), batch);
  }
  return llvm::Error::success();
}
