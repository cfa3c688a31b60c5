//===- Microsoft.cpp - com.microsoft ops of ORT's optimizer ---------------===//
//
// Lowerings of the com.microsoft contrib ops onnxruntime's transformer
// optimizer writes (python -m onnxruntime.transformers.optimizer):
// SkipLayerNormalization, SkipSimplifiedLayerNormalization, FastGelu,
// BiasGelu, Gelu and the packed-QKV Attention. Registered as
// "com.microsoft::<op>"; any other com.microsoft op is reported as
// unsupported with its domain and opset.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/ImporterImpl.h"

#include <cmath>

using namespace mlir;
using namespace ::dtc::onnx;
using namespace ::dtc::onnx::detail;
namespace d = mlir::dtc;

namespace {
/// Output `index` of the current node is read by another node or the graph.
bool isUsed(const ::onnx::NodeProto &node, const llvm::StringMap<int> &uses,
            int index) {
  return index < node.output_size() && !node.output(index).empty() &&
         uses.lookup(node.output(index));
}
} // namespace

Expected<Value> ModelImporter::addOptional(Value x, Entry *bias) {
  if (!bias)
    return x;
  auto b = valueOf(*bias);
  if (!b)
    return b.takeError();
  return finish(d::AddOp::create(builder, loc(), placeholder(), x, *b));
}

// SkipLayerNormalization(input, skip, gamma, beta?, bias?) and
// SkipSimplifiedLayerNormalization(input, skip, gamma, bias?):
//   sum = input + skip [+ bias]; output 0 = norm(sum); output 3 = sum.
Error ModelImporter::lowerSkipLayerNorm(llvm::ArrayRef<Entry *> ins) {
  bool simplified = node->op_type() == "SkipSimplifiedLayerNormalization";
  if (ins.size() < 3 || !ins[1] || !ins[2])
    return nodeError("needs input, skip and gamma inputs");
  if (isUsed(*node, useCounts, 1) || isUsed(*node, useCounts, 2))
    return nodeError("the mean and inv_std_var outputs are used; dtc imports "
                     "only the output and the input_skip_bias_sum");
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  auto skip = valueOf(*ins[1]);
  if (!skip)
    return skip.takeError();
  auto sum =
      finish(d::AddOp::create(builder, loc(), placeholder(), *input, *skip));
  if (!sum)
    return sum.takeError();
  Entry *beta = !simplified && ins.size() > 3 ? ins[3] : nullptr;
  size_t biasIndex = simplified ? 3 : 4;
  auto withBias =
      addOptional(*sum, ins.size() > biasIndex ? ins[biasIndex] : nullptr);
  if (!withBias)
    return withBias.takeError();
  auto gamma = valueOf(*ins[2]);
  if (!gamma)
    return gamma.takeError();
  int64_t axis = cast<RankedTensorType>(withBias->getType()).getRank() - 1;
  double epsilon = getFloatAttr(*node, "epsilon", 1e-12f);
  Operation *norm;
  if (simplified) {
    norm = d::RmsNormOp::create(builder, loc(), placeholder(), *withBias,
                                *gamma, axis, llvm::APFloat(epsilon));
  } else {
    Value betaValue;
    if (beta) {
      auto b = valueOf(*beta);
      if (!b)
        return b.takeError();
      betaValue = *b;
    }
    norm =
        d::LayerNormOp::create(builder, loc(), placeholder(), *withBias, *gamma,
                               betaValue, axis, llvm::APFloat(epsilon));
  }
  auto result = finish(norm);
  if (!result)
    return result.takeError();
  if (Error err = defineValue(0, *result))
    return err;
  if (node->output_size() > 3)
    return defineValue(3, *withBias);
  return Error::success();
}

// FastGelu(X, bias?) = tanh GELU of X + bias; BiasGelu(A, B) = erf GELU of
// A + B; Gelu(X) = erf GELU.
Error ModelImporter::lowerContribGelu(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  auto x = valueOf(*ins[0]);
  if (!x)
    return x.takeError();
  auto biased = addOptional(*x, ins.size() > 1 ? ins[1] : nullptr);
  if (!biased)
    return biased.takeError();
  auto result = finish(d::GeluOp::create(builder, loc(), placeholder(), *biased,
                                         op == "FastGelu"));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

// Attention(input [b, s, hidden], weights [hidden, 3 * hidden], bias
// [3 * hidden]?) with num_heads, unidirectional (causal) and scale: the
// packed q/k/v projection, split into heads, dtc.attention, heads merged.
Error ModelImporter::lowerContribAttention(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs input and weights");
  for (size_t i = 3; i < ins.size(); ++i)
    if (ins[i])
      return nodeError("input {0} ('{1}') is set; dtc imports Attention "
                       "without mask_index, past or attention bias",
                       i, node->input(i));
  if (Error err = checkUnusedOutputs(1))
    return err;
  if (getIntsAttr(*node, "qkv_hidden_sizes"))
    return nodeError("qkv_hidden_sizes is not supported");
  int64_t heads = getIntAttr(*node, "num_heads", 0);
  llvm::ArrayRef<int64_t> inShape = ins[0]->shape;
  llvm::ArrayRef<int64_t> wShape = ins[1]->shape;
  if (inShape.size() != 3 || wShape.size() != 2 || wShape[1] % 3 != 0 ||
      heads <= 0 || (wShape[1] / 3) % heads != 0)
    return nodeError("expects input [b, s, hidden], weights [hidden, 3 * "
                     "hidden] and num_heads dividing hidden");
  int64_t b = inShape[0], s = inShape[1], hidden = wShape[1] / 3;
  int64_t dHead = hidden / heads;
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  auto weights = valueOf(*ins[1]);
  if (!weights)
    return weights.takeError();
  auto qkv = finish(
      d::MatmulOp::create(builder, loc(), placeholder(), *input, *weights));
  if (!qkv)
    return qkv.takeError();
  auto biased = addOptional(*qkv, ins.size() > 2 ? ins[2] : nullptr);
  if (!biased)
    return biased.takeError();
  llvm::SmallVector<Value, 3> parts;
  for (int64_t i = 0; i < 3; ++i) {
    auto part = sliceAxis(*biased, 2, i * hidden, hidden);
    if (!part)
      return part.takeError();
    auto split = reshape(*part, {b, s, heads, dHead});
    if (!split)
      return split.takeError();
    auto heads4 =
        finish(d::TransposeOp::create(builder, loc(), placeholder(), *split,
                                      llvm::ArrayRef<int64_t>{0, 2, 1, 3}));
    if (!heads4)
      return heads4.takeError();
    parts.push_back(*heads4);
  }
  bool causal = getIntAttr(*node, "unidirectional", 0) != 0;
  double scale = getFloatAttr(*node, "scale", 0.0f);
  if (scale == 0.0)
    scale = 1.0 / std::sqrt(static_cast<double>(dHead));
  auto attn = finish(
      d::AttentionOp::create(builder, loc(), placeholder(), parts[0], parts[1],
                             parts[2], causal, builder.getF64FloatAttr(scale)));
  if (!attn)
    return attn.takeError();
  auto merged =
      finish(d::TransposeOp::create(builder, loc(), placeholder(), *attn,
                                    llvm::ArrayRef<int64_t>{0, 2, 1, 3}));
  if (!merged)
    return merged.takeError();
  auto out = reshape(*merged, {b, s, hidden});
  if (!out)
    return out.takeError();
  return defineValue(0, *out);
}

void ::dtc::onnx::detail::registerMicrosoftOps(LoweringTable &table) {
  const std::string ms = "com.microsoft::";
  table[ms + "SkipLayerNormalization"] = &ModelImporter::lowerSkipLayerNorm;
  table[ms + "SkipSimplifiedLayerNormalization"] =
      &ModelImporter::lowerSkipLayerNorm;
  table[ms + "FastGelu"] = &ModelImporter::lowerContribGelu;
  table[ms + "BiasGelu"] = &ModelImporter::lowerContribGelu;
  table[ms + "Gelu"] = &ModelImporter::lowerContribGelu;
  table[ms + "Attention"] = &ModelImporter::lowerContribAttention;
}
