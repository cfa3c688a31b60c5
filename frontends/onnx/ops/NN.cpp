//===- NN.cpp - Softmax, normalization, dropout ---------------------------===//
//
// Lowerings of Softmax, LayerNormalization and Dropout.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/ImporterImpl.h"

using namespace mlir;
using namespace ::dtc::onnx;
using namespace ::dtc::onnx::detail;
namespace d = mlir::dtc;

Error ModelImporter::lowerSoftmax(llvm::ArrayRef<Entry *> ins) {
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  std::string error;
  auto axis =
      normalizeAxis(getIntAttr(*node, "axis", -1), ins[0]->shape.size(), error);
  if (!axis)
    return nodeError("{0}", error);
  auto result = finish(
      d::SoftmaxOp::create(builder, loc(), input->getType(), *input, *axis));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
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
  if (ins.size() > 2 && ins[2] &&
      (!ins[2]->known || ins[2]->known->getInt(0) != 0))
    return nodeError("training_mode must be a constant false; dtc imports "
                     "the inference graph and adds training itself");
  if (Error err = checkUnusedOutputs(1))
    return err;
  return alias(ins[0]);
}

// LogSoftmax(x, axis) = log(softmax(x)); the output remembers x so that a
// NegativeLogLikelihoodLoss reading it becomes one dtc.cross_entropy.
Error ModelImporter::lowerLogSoftmax(llvm::ArrayRef<Entry *> ins) {
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
  auto log = finish(d::LogOp::create(builder, loc(), placeholder(), *softmax));
  if (!log)
    return log.takeError();
  logSoftmaxInputs[node->output(0)] = {*input, *axis};
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

Error ModelImporter::lowerSoftmaxCrossEntropy(llvm::ArrayRef<Entry *> ins) {
  auto scores = valueOf(*ins[0]);
  if (!scores)
    return scores.takeError();
  return crossEntropy(*scores, 1, ins.size() > 1 ? ins[1] : nullptr);
}

Error ModelImporter::lowerNllLoss(llvm::ArrayRef<Entry *> ins) {
  auto it = logSoftmaxInputs.find(node->input(0));
  if (it == logSoftmaxInputs.end())
    return nodeError("input '{0}' is not a LogSoftmax output; dtc imports "
                     "NegativeLogLikelihoodLoss only as the second half of "
                     "a cross-entropy",
                     node->input(0));
  return crossEntropy(it->second.first, it->second.second,
                      ins.size() > 1 ? ins[1] : nullptr);
}

void ::dtc::onnx::detail::registerNNOps(LoweringTable &table) {
  table["LogSoftmax"] = &ModelImporter::lowerLogSoftmax;
  table["SoftmaxCrossEntropyLoss"] = &ModelImporter::lowerSoftmaxCrossEntropy;
  table["NegativeLogLikelihoodLoss"] = &ModelImporter::lowerNllLoss;
  table["Softmax"] = &ModelImporter::lowerSoftmax;
  table["LayerNormalization"] = &ModelImporter::lowerLayerNorm;
  table["Dropout"] = &ModelImporter::lowerDropout;
}
