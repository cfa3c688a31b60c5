//===- NN.cpp - Softmax, normalization, losses, convolution, pooling ------===//
//
// Lowerings of Softmax, LayerNormalization, Dropout, the losses, Conv and
// the pooling ops.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/ImporterImpl.h"
#include "frontends/onnx/ops/Formula.h"

#include <cmath>
#include <tuple>

using namespace mlir;
using namespace ::dtc::onnx;
using namespace ::dtc::onnx::detail;
namespace d = mlir::dtc;

Expected<ModelImporter::SoftmaxParts>
ModelImporter::importSoftmax(llvm::ArrayRef<Entry *> ins) {
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  std::string error;
  auto axis =
      normalizeAxis(getIntAttr(*node, "axis", -1), ins[0]->shape.size(), error);
  if (!axis)
    return nodeError("{0}", error);
  auto softmax = finish(
      d::SoftmaxOp::create(builder, loc(), input->getType(), *input, *axis));
  if (!softmax)
    return softmax.takeError();
  return SoftmaxParts{*input, *axis, *softmax};
}

Error ModelImporter::lowerSoftmax(llvm::ArrayRef<Entry *> ins) {
  auto parts = importSoftmax(ins);
  if (!parts)
    return parts.takeError();
  return defineValue(0, parts->softmax);
}

Error ModelImporter::lowerLayerNorm(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs a scale input");
  if (Error err = checkUnusedOutputs(1))
    return err;
  std::string error;
  int64_t rank = ins[0]->shape.size();
  auto axis = normalizeAxis(getIntAttr(*node, "axis", -1), rank, error);
  if (!axis)
    return nodeError("{0}", error);
  llvm::ArrayRef<int64_t> normalized =
      llvm::ArrayRef<int64_t>(ins[0]->shape).drop_front(*axis);
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  // dtc wants scale and bias in the normalized shape; ONNX lets them
  // broadcast. Same element count: reshape; a real broadcast: expand.
  auto affine = [&](Entry *e) -> Expected<Value> {
    auto v = valueOf(*e);
    if (!v)
      return v;
    return expandTo(*v, normalized);
  };
  auto scale = affine(ins[1]);
  if (!scale)
    return scale.takeError();
  Value bias;
  if (ins.size() > 2 && ins[2]) {
    auto b = affine(ins[2]);
    if (!b)
      return b.takeError();
    bias = *b;
  }
  double epsilon = getFloatAttr(*node, "epsilon", 1e-5f);
  auto result = finish(d::LayerNormOp::create(builder, loc(), placeholder(),
                                              *input, *scale, bias, *axis,
                                              llvm::APFloat(epsilon)));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerDropout(llvm::ArrayRef<Entry *> ins) {
  // The size check: getInt(0) read past an empty training_mode.
  if (ins.size() > 2 && ins[2] &&
      (!ins[2]->known || ins[2]->known->size() != 1 ||
       ins[2]->known->getInt(0) != 0))
    return nodeError("training_mode must be a constant false; dtc imports "
                     "the inference graph and adds training itself");
  if (Error err = checkUnusedOutputs(1))
    return err;
  return alias(ins[0]);
}

// LogSoftmax(x, axis) = log(softmax(x)); the output remembers x so that a
// NegativeLogLikelihoodLoss reading it becomes one dtc.cross_entropy.
Error ModelImporter::lowerLogSoftmax(llvm::ArrayRef<Entry *> ins) {
  auto parts = importSoftmax(ins);
  if (!parts)
    return parts.takeError();
  auto log =
      finish(d::LogOp::create(builder, loc(), placeholder(), parts->softmax));
  if (!log)
    return log.takeError();
  logSoftmaxInputs[node->output(0)] = {parts->input, parts->axis};
  return defineValue(0, *log);
}

// Mean softmax cross-entropy of scores [N, C, d...] (class dim 1) against
// labels [N, d...]: dtc.cross_entropy wants the classes last.
Error ModelImporter::crossEntropy(Value scores, int64_t classAxis,
                                  Entry *labels) {
  if (!labels)
    return nodeError("needs a labels input");
  if (node->input_size() > 2 && !node->input(2).empty())
    return nodeError("class weights are not supported");
  std::string reduction = getStringAttr(*node, "reduction", "mean");
  if (reduction != "mean")
    return nodeError("reduction '{0}' is not supported; dtc trains with the "
                     "mean loss",
                     reduction);
  if (Error err = checkUnusedOutputs(1))
    return err;
  int64_t rank = cast<RankedTensorType>(scores.getType()).getRank();
  if (rank < 2 || classAxis != 1)
    return nodeError("expects scores [N, C, ...] with the classes in dim 1");
  Value logits = scores;
  if (rank > 2) {
    llvm::SmallVector<int64_t> perm = {0};
    for (int64_t i = 2; i < rank; ++i)
      perm.push_back(i);
    perm.push_back(1);
    auto moved = finish(
        d::TransposeOp::create(builder, loc(), placeholder(), scores, perm));
    if (!moved)
      return moved.takeError();
    logits = *moved;
  }
  auto labelValue = valueOf(*labels);
  if (!labelValue)
    return labelValue.takeError();
  // Without ignore_index every label counts; labels are in [0, C), so
  // dtc's default -100 never matches one.
  int64_t ignoreIndex = getIntAttr(*node, "ignore_index", -100);
  auto loss = finish(d::CrossEntropyOp::create(
      builder, loc(), placeholder(), logits, *labelValue, ignoreIndex));
  if (!loss)
    return loss.takeError();
  return defineValue(0, *loss);
}

/// Whether a loss node is what dtc.cross_entropy computes: the mean over
/// the counted labels, no class weights, no log-probability output.
static bool isPlainCrossEntropy(const ::onnx::NodeProto &node,
                                llvm::function_ref<bool(int)> outputUsed) {
  return getStringAttr(node, "reduction", "mean") == "mean" &&
         (node.input_size() < 3 || node.input(2).empty()) && !outputUsed(1);
}

Error ModelImporter::lowerSoftmaxCrossEntropy(llvm::ArrayRef<Entry *> ins) {
  auto used = [&](int i) {
    return i < node->output_size() && !node->output(i).empty() &&
           useCounts.lookup(node->output(i));
  };
  Entry *labels = ins.size() > 1 ? ins[1] : nullptr;
  if (isPlainCrossEntropy(*node, used)) {
    auto scores = valueOf(*ins[0]);
    if (!scores)
      return scores.takeError();
    return crossEntropy(*scores, 1, labels);
  }
  // Weights, another reduction or the log-probabilities: log(softmax) and
  // the negative log-likelihood written out.
  if (ins[0]->shape.size() < 2)
    return nodeError("expects scores [N, C, ...]");
  auto scores = valueOf(*ins[0]);
  if (!scores)
    return scores.takeError();
  Formula f(*this, ins[0]->dataType);
  Value logProbs = f.unary<d::LogOp>(f.take(finish(
      d::SoftmaxOp::create(builder, loc(), scores->getType(), *scores, 1))));
  auto value = f.result(logProbs);
  if (!value)
    return value.takeError();
  if (used(1))
    if (Error err = defineValue(1, *value))
      return err;
  return nllLoss(*value, labels, ins.size() > 2 ? ins[2] : nullptr);
}

Error ModelImporter::lowerNllLoss(llvm::ArrayRef<Entry *> ins) {
  Entry *labels = ins.size() > 1 ? ins[1] : nullptr;
  auto it = logSoftmaxInputs.find(node->input(0));
  if (it != logSoftmaxInputs.end() &&
      isPlainCrossEntropy(*node, [](int) { return false; }))
    return crossEntropy(it->second.first, it->second.second, labels);
  auto logProbs = valueOf(*ins[0]);
  if (!logProbs)
    return logProbs.takeError();
  return nllLoss(*logProbs, labels, ins.size() > 2 ? ins[2] : nullptr);
}

// ONNX's NegativeLogLikelihoodLoss of log-probabilities [N, C, d...] and
// labels [N, d...]: loss = -w[label] * logp[label] per element (0 where the
// label is ignore_index), reduced by `reduction` ("mean" divides by the sum
// of the weights counted).
Error ModelImporter::nllLoss(Value logProbs, Entry *labels, Entry *weight) {
  if (!labels)
    return nodeError("needs a labels input");
  auto shape = cast<RankedTensorType>(logProbs.getType()).getShape();
  if (shape.size() < 2)
    return nodeError("expects inputs [N, C, ...]");
  std::string reduction = getStringAttr(*node, "reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    return nodeError("unknown reduction '{0}'", reduction);
  int32_t type =
      dataTypeOf(cast<RankedTensorType>(logProbs.getType()).getElementType());
  auto labelValue = indexValue(*labels);
  if (!labelValue)
    return labelValue.takeError();
  Formula f(*this, type);
  llvm::SmallVector<int64_t> picked(shape);
  picked[1] = 1;
  llvm::SmallVector<int64_t> perLabel(shape);
  perLabel.erase(perLabel.begin() + 1);
  Value label = *labelValue;
  Value counted; // 1 where the label counts, 0 where it is ignored
  if (findAttribute(*node, "ignore_index")) {
    int32_t labelType = labels->dataType == kInt32 ? kInt32 : kInt64;
    Value ignore = f.take(
        scalarConstant(labelType, getIntAttr(*node, "ignore_index", -100)));
    Value isIgnored = f.cmp(label, ignore, "eq");
    // An ignored label may be out of range: gather class 0 instead.
    label = f.sel(isIgnored, f.take(scalarConstant(labelType, 0)), label);
    counted = f.sel(isIgnored, f.c(0), f.c(1));
  }
  auto gather = [&](Value table, Value ids) -> Value {
    if (!table || !ids)
      return Value();
    return f.take(finish(d::GatherElementsOp::create(
        builder, loc(), placeholder(), table, ids, 1)));
  };
  Value ids = label ? f.take(reshape(label, picked)) : Value();
  Value loss = f.unary<d::NegOp>(gather(logProbs, ids));
  loss = loss ? f.take(reshape(loss, perLabel)) : loss;
  Value weights = counted;
  if (weight) {
    if (weight->shape.size() != 1 || weight->shape[0] != shape[1])
      return nodeError("expects class weights [C]");
    auto w = valueOf(*weight);
    if (!w)
      return w.takeError();
    llvm::SmallVector<int64_t> column(shape.size(), 1);
    column[1] = shape[1];
    Value table = f.take(reshape(*w, column));
    table = table ? f.take(expandTo(table, shape)) : table;
    Value perElement = gather(table, ids);
    perElement =
        perElement ? f.take(reshape(perElement, perLabel)) : perElement;
    weights = counted ? f.mul(perElement, counted) : perElement;
  }
  if (weights)
    loss = f.mul(loss, weights);
  llvm::SmallVector<int64_t> all;
  for (size_t i = 0; i < perLabel.size(); ++i)
    all.push_back(i);
  if (reduction == "sum")
    loss = f.reduceSum(loss, all, false);
  else if (reduction == "mean")
    loss = weights ? f.div(f.reduceSum(loss, all, false),
                           f.reduceSum(weights, all, false))
                   : f.reduceMean(loss, all, false);
  return f.define(0, loss);
}

// BatchNormalization (inference: running statistics) and
// InstanceNormalization (statistics of each sample and channel over the
// spatial dims): (x - mean) / sqrt(var + epsilon) * scale + bias, with the
// per-channel operands [C] broadcast over [N, C, spatial...].
Error ModelImporter::lowerNormalization(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  if (op == "MeanVarianceNormalization") {
    // (x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9), ONNX's function body.
    if (!isFloatType(ins[0]->dataType))
      return nodeError("needs a floating-point input, got {0}",
                       dataTypeName(ins[0]->dataType));
    llvm::SmallVector<int64_t> axesList = {0, 2, 3};
    if (auto attr = getIntsAttr(*node, "axes"))
      axesList = *attr;
    std::string error;
    auto axes = resolveReduceAxes(axesList, ins[0]->shape.size(), false, error);
    if (!axes)
      return nodeError("{0}", error);
    auto input = valueOf(*ins[0]);
    if (!input)
      return input.takeError();
    Formula f(*this, ins[0]->dataType);
    Value x = *input, mean = f.reduceMean(x, *axes, true);
    Value var =
        f.sub(f.reduceMean(f.mul(x, x), *axes, true), f.mul(mean, mean));
    return f.define(
        0, f.div(f.sub(x, mean), f.add(f.unary<d::SqrtOp>(var), f.c(1e-9))));
  }
  bool batch = op == "BatchNormalization";
  if (ins.size() < (batch ? 5u : 3u))
    return nodeError("missing inputs");
  for (Entry *e : ins)
    if (!e)
      return nodeError("missing inputs");
  // Training mode normalizes by the batch's statistics and returns the
  // updated running ones (outputs 1 and 2).
  bool training = batch && getIntAttr(*node, "training_mode", 0) != 0;
  if (!training)
    if (Error err = checkUnusedOutputs(1))
      return err;
  int32_t type = ins[0]->dataType;
  if (!isFloatType(type))
    return nodeError("needs a floating-point input, got {0}",
                     dataTypeName(type));
  llvm::ArrayRef<int64_t> shape = ins[0]->shape;
  if (shape.size() < 2)
    return nodeError("expects X [N, C, ...], got {0}", shapeString(shape));
  Formula f(*this, type);
  llvm::SmallVector<int64_t> column(shape.size(), 1);
  column[1] = shape[1];
  auto perChannel = [&](Entry *e) -> Value {
    if (e->shape.size() != 1 || e->shape[0] != shape[1]) {
      f.take(nodeError("expects per-channel operands [{0}]", shape[1]));
      return Value();
    }
    auto v = valueOf(*e);
    return v ? f.take(reshape(*v, column)) : f.take(v.takeError());
  };
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  Value x = *input, mean, var;
  if (batch && !training) {
    mean = perChannel(ins[3]);
    var = perChannel(ins[4]);
  } else {
    // Per sample and channel (instance) or per channel (batch training).
    llvm::SmallVector<int64_t> dims;
    for (size_t i = batch ? 0 : 2; i < shape.size(); ++i)
      if (i != 1)
        dims.push_back(i);
    mean = f.reduceMean(x, dims, true);
    Value centered = f.sub(x, mean);
    var = f.reduceMean(f.mul(centered, centered), dims, true);
  }
  if (training) {
    double momentum = getFloatAttr(*node, "momentum", 0.9f);
    auto running = [&](Entry *old, Value current) -> Value {
      auto v = valueOf(*old);
      Value now = current ? f.take(reshape(current, {shape[1]})) : current;
      return f.add(f.mul(v ? *v : f.take(v.takeError()), f.c(momentum)),
                   f.mul(now, f.c(1 - momentum)));
    };
    for (auto [index, old, current] :
         {std::tuple{1, ins[3], mean}, std::tuple{2, ins[4], var}})
      if (index < node->output_size() && !node->output(index).empty())
        if (Error err = f.define(index, running(old, current)))
          return err;
  }
  double epsilon = getFloatAttr(*node, "epsilon", 1e-5f);
  Value normalized =
      f.div(f.sub(x, mean), f.unary<d::SqrtOp>(f.add(var, f.c(epsilon))));
  return f.define(
      0, f.add(f.mul(normalized, perChannel(ins[1])), perChannel(ins[2])));
}

/// The ints attribute `name` with `count` entries (`fill` each when absent),
/// or nullopt when it has another length.
static std::optional<llvm::SmallVector<int64_t>>
spatialInts(const ::onnx::NodeProto &node, llvm::StringRef name, size_t count,
            int64_t fill) {
  if (auto attr = getIntsAttr(node, name))
    return attr->size() == count ? attr : std::nullopt;
  return llvm::SmallVector<int64_t>(count, fill);
}

/// Explicit pads for `auto_pad` (ONNX Conv and pooling): VALID is none;
/// SAME_* pads to an output of ceil(in / stride), the odd pad at the end
/// (UPPER) or the beginning (LOWER). False for an unknown auto_pad.
static bool applyAutoPad(const ::onnx::NodeProto &node,
                         llvm::ArrayRef<int64_t> x,
                         llvm::ArrayRef<int64_t> kernel,
                         llvm::ArrayRef<int64_t> strides,
                         llvm::ArrayRef<int64_t> dilations,
                         llvm::SmallVectorImpl<int64_t> &pads) {
  size_t k = kernel.size();
  std::string autoPad = getStringAttr(node, "auto_pad", "NOTSET");
  if (autoPad == "VALID") {
    pads.assign(2 * k, 0);
  } else if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
    for (size_t i = 0; i < k; ++i) {
      int64_t in = x[2 + i], s = strides[i];
      int64_t out = llvm::divideCeil(in, s);
      int64_t total = std::max<int64_t>(
          0, (out - 1) * s + (kernel[i] - 1) * dilations[i] + 1 - in);
      int64_t small = total / 2, large = total - small;
      pads[i] = autoPad == "SAME_UPPER" ? small : large;
      pads[k + i] = autoPad == "SAME_UPPER" ? large : small;
    }
  } else if (autoPad != "NOTSET") {
    return false;
  }
  return true;
}

// Conv: explicit pads or auto_pad, lowered to one dtc.conv.
Error ModelImporter::lowerConv(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs inputs X and W");
  if (!isFloatType(ins[0]->dataType))
    return nodeError("needs floating-point inputs, got {0}",
                     dataTypeName(ins[0]->dataType));
  llvm::ArrayRef<int64_t> x = ins[0]->shape, w = ins[1]->shape;
  if (x.size() < 3 || w.size() != x.size())
    return nodeError("expects X [N, C, spatial...] and W of the same rank, "
                     "got {0} and {1}",
                     shapeString(x), shapeString(w));
  size_t k = x.size() - 2;
  auto strides = spatialInts(*node, "strides", k, 1),
       dilations = spatialInts(*node, "dilations", k, 1),
       pads = spatialInts(*node, "pads", 2 * k, 0);
  if (!strides || !dilations || !pads)
    return nodeError("strides and dilations need {0} entries and pads {1}", k,
                     2 * k);
  if (auto kernel = getIntsAttr(*node, "kernel_shape"))
    if (llvm::ArrayRef<int64_t>(*kernel) != w.drop_front(2))
      return nodeError("kernel_shape {0} differs from the weight's {1}",
                       shapeString(*kernel), shapeString(w.drop_front(2)));
  if (!applyAutoPad(*node, x, w.drop_front(2), *strides, *dilations, *pads))
    return nodeError("unknown auto_pad '{0}'",
                     getStringAttr(*node, "auto_pad", ""));
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  auto weight = valueOf(*ins[1]);
  if (!weight)
    return weight.takeError();
  Value bias;
  if (ins.size() > 2 && ins[2]) {
    auto b = valueOf(*ins[2]);
    if (!b)
      return b.takeError();
    bias = *b;
  }
  auto result = finish(d::ConvOp::create(builder, loc(), placeholder(), *input,
                                         *weight, bias, *strides, *dilations,
                                         *pads, getIntAttr(*node, "group", 1)));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

// GlobalAveragePool: a mean over the spatial dims, kept as size 1.
Error ModelImporter::lowerGlobalAveragePool(llvm::ArrayRef<Entry *> ins) {
  int64_t rank = ins[0]->shape.size();
  if (rank < 3)
    return nodeError("expects X [N, C, spatial...], got {0}",
                     shapeString(ins[0]->shape));
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  llvm::SmallVector<int64_t> dims;
  for (int64_t i = 2; i < rank; ++i)
    dims.push_back(i);
  auto result = node->op_type() == "GlobalMaxPool"
                    ? finish(d::ReduceMaxOp::create(
                          builder, loc(), placeholder(), *input, dims, true))
                    : finish(d::ReduceMeanOp::create(
                          builder, loc(), placeholder(), *input, dims, true));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

// MaxPool, AveragePool: dtc.max_pool / dtc.avg_pool. ceil_mode becomes extra
// end padding (padding is never part of a window).
Error ModelImporter::lowerPool(llvm::ArrayRef<Entry *> ins) {
  bool isMax = node->op_type() == "MaxPool";
  if (Error err = checkUnusedOutputs(1))
    return err;
  if (!isFloatType(ins[0]->dataType))
    return nodeError("needs a floating-point input, got {0}",
                     dataTypeName(ins[0]->dataType));
  llvm::ArrayRef<int64_t> x = ins[0]->shape;
  if (x.size() < 3)
    return nodeError("expects X [N, C, spatial...], got {0}", shapeString(x));
  size_t k = x.size() - 2;
  auto kernel = getIntsAttr(*node, "kernel_shape");
  if (!kernel || kernel->size() != k)
    return nodeError("needs kernel_shape with {0} entries", k);
  auto strides = spatialInts(*node, "strides", k, 1),
       dilations = spatialInts(*node, "dilations", k, 1),
       pads = spatialInts(*node, "pads", 2 * k, 0);
  if (!strides || !dilations || !pads)
    return nodeError("strides and dilations need {0} entries and pads {1}", k,
                     2 * k);
  if (!applyAutoPad(*node, x, *kernel, *strides, *dilations, *pads))
    return nodeError("unknown auto_pad '{0}'",
                     getStringAttr(*node, "auto_pad", ""));
  bool countIncludePad =
      !isMax && getIntAttr(*node, "count_include_pad", 0) != 0;
  if (getIntAttr(*node, "ceil_mode", 0) != 0) {
    for (size_t i = 0; i < k; ++i) {
      int64_t in = x[2 + i] + (*pads)[i] + (*pads)[k + i];
      int64_t window = (*dilations)[i] * ((*kernel)[i] - 1) + 1;
      if (window > in)
        continue; // the shape rule reports it
      int64_t s = (*strides)[i];
      int64_t out = llvm::divideCeil(in - window, s) + 1;
      // The last window must start inside the input or its begin padding.
      if ((out - 1) * s >= x[2 + i] + (*pads)[i])
        --out;
      int64_t extra = (out - 1) * s + window - in;
      if (extra > 0 && countIncludePad)
        return nodeError("ceil_mode with count_include_pad is not supported");
      (*pads)[k + i] += std::max<int64_t>(extra, 0);
    }
  }
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  Operation *created;
  if (isMax)
    created = d::MaxPoolOp::create(builder, loc(), placeholder(), *input,
                                   *kernel, *strides, *dilations, *pads);
  else
    created =
        d::AvgPoolOp::create(builder, loc(), placeholder(), *input, *kernel,
                             *strides, *dilations, *pads, countIncludePad);
  auto result = finish(created);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

// Attention (opset 23: what torch.onnx writes for scaled_dot_product_attention
// at opset 23): Q [b, hq, s, d], K [b, hkv, t, d], V [b, hkv, t, dv], or
// their 3-D forms [b, s, heads * d] with q_num_heads and kv_num_heads; its
// is_causal mask is aligned at the start (upper-left), as dtc.attention's.
// A mask, past state, soft-capping or the extra outputs are refused.
Error ModelImporter::lowerAttention(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 3 || !ins[0] || !ins[1] || !ins[2])
    return nodeError("needs query, key and value");
  for (size_t i = 3; i < ins.size(); ++i)
    if (ins[i])
      return nodeError("input {0} ('{1}') is set; dtc imports Attention "
                       "without an attention mask or past key/value (use "
                       "is_causal for a causal mask)",
                       i, node->input(i));
  if (Error err = checkUnusedOutputs(1))
    return err;
  if (getFloatAttr(*node, "softcap", 0.0f) != 0.0f)
    return nodeError("softcap is not supported");
  bool threeD = ins[0]->shape.size() == 3;
  int64_t qHeads = getIntAttr(*node, "q_num_heads", 0),
          kvHeads = getIntAttr(*node, "kv_num_heads", 0);
  llvm::SmallVector<Value, 3> qkv;
  for (int i = 0; i < 3; ++i) {
    llvm::ArrayRef<int64_t> shape = ins[i]->shape;
    if (shape.size() != (threeD ? 3u : 4u))
      return nodeError("expects query, key and value all 4-D [b, heads, "
                       "seq, d] or all 3-D [b, seq, heads * d]");
    auto x = valueOf(*ins[i]);
    if (!x)
      return x.takeError();
    Value v = *x;
    if (threeD) {
      int64_t heads = i == 0 ? qHeads : kvHeads;
      if (heads <= 0 || shape[2] % heads)
        return nodeError("3-D inputs need q_num_heads and kv_num_heads "
                         "dividing their last dim");
      auto split = reshape(v, {shape[0], shape[1], heads, shape[2] / heads});
      if (!split)
        return split.takeError();
      auto t =
          finish(d::TransposeOp::create(builder, loc(), placeholder(), *split,
                                        llvm::ArrayRef<int64_t>{0, 2, 1, 3}));
      if (!t)
        return t.takeError();
      v = *t;
    }
    qkv.push_back(v);
  }
  auto q = cast<RankedTensorType>(qkv[0].getType()).getShape(),
       k = cast<RankedTensorType>(qkv[1].getType()).getShape(),
       v = cast<RankedTensorType>(qkv[2].getType()).getShape();
  if (q[0] != k[0] || k[0] != v[0] || k[1] != v[1] || k[2] != v[2] ||
      q[3] != k[3] || k[1] <= 0 || q[1] % k[1])
    return nodeError("query [b, hq, s, d], key [b, hkv, t, d] and value "
                     "[b, hkv, t, dv] do not agree (hkv must divide hq)");
  double scale = getFloatAttr(*node, "scale", 0.0f);
  if (scale == 0.0)
    scale = 1.0 / std::sqrt(static_cast<double>(q[3]));
  auto attention = finish(d::AttentionOp::create(
      builder, loc(), placeholder(), qkv[0], qkv[1], qkv[2],
      getIntAttr(*node, "is_causal", 0) != 0, builder.getF64FloatAttr(scale)));
  if (!attention)
    return attention.takeError();
  Value y = *attention;
  if (threeD) {
    auto merged = finish(d::TransposeOp::create(
        builder, loc(), placeholder(), y, llvm::ArrayRef<int64_t>{0, 2, 1, 3}));
    if (!merged)
      return merged.takeError();
    auto flat = reshape(*merged, {q[0], q[2], q[1] * v[3]});
    if (!flat)
      return flat.takeError();
    y = *flat;
  }
  return defineValue(0, y);
}

void ::dtc::onnx::detail::registerNNOps(LoweringTable &table) {
  table["Attention"] = &ModelImporter::lowerAttention;
  table["LogSoftmax"] = &ModelImporter::lowerLogSoftmax;
  table["SoftmaxCrossEntropyLoss"] = &ModelImporter::lowerSoftmaxCrossEntropy;
  table["NegativeLogLikelihoodLoss"] = &ModelImporter::lowerNllLoss;
  table["Softmax"] = &ModelImporter::lowerSoftmax;
  table["LayerNormalization"] = &ModelImporter::lowerLayerNorm;
  table["Dropout"] = &ModelImporter::lowerDropout;
  table["Conv"] = &ModelImporter::lowerConv;
  table["GlobalAveragePool"] = &ModelImporter::lowerGlobalAveragePool;
  table["GlobalMaxPool"] = &ModelImporter::lowerGlobalAveragePool;
  table["BatchNormalization"] = &ModelImporter::lowerNormalization;
  table["InstanceNormalization"] = &ModelImporter::lowerNormalization;
  table["MeanVarianceNormalization"] = &ModelImporter::lowerNormalization;
  table["MaxPool"] = &ModelImporter::lowerPool;
  table["AveragePool"] = &ModelImporter::lowerPool;
}
