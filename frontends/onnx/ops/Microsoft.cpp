//===- Microsoft.cpp - com.microsoft ops of ORT's optimizer ---------------===//
//
// Lowerings of the com.microsoft contrib ops onnxruntime's transformer
// optimizer writes (python -m onnxruntime.transformers.optimizer):
// SkipLayerNormalization, SkipSimplifiedLayerNormalization, FastGelu,
// BiasGelu, Gelu, the packed-QKV Attention and MoE. Registered as
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

// MoE(input [b, s, h] or [rows, h], router_probs [rows, E], fc1 [E, f, h],
// fc1_bias?, fc2 [E, h, f], fc2_bias?, fc3 [E, f, h]?, fc3_bias?) with k,
// activation_type and normalize_routing_weights: ORT softmaxes the router
// logits and runs each token's top-k experts, act(x W1^T + b1) [* (x W3^T
// + b3)] W2^T + b2, weighted by the chosen probabilities. Weights are
// [E, out, in] as ONNX Runtime 1.2x reads them (torch Linear's layout). Lowered
// to dtc.moe_route / moe_dispatch / batched matmuls / moe_combine. Training
// needs what ORT's op leaves out, from the model's metadata: the capacity
// factor (`moe_capacity_factor`, 0 or absent: dropless) and the
// load-balancing loss weight (`router_aux_loss_coef`, default 0.001).
Error ModelImporter::lowerMoE(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 5 || !ins[1] || !ins[2] || !ins[4])
    return nodeError("needs input, router_probs, fc1_experts_weights and "
                     "fc2_experts_weights");
  for (size_t i = 8; i < ins.size(); ++i)
    if (ins[i])
      return nodeError("input {0} ('{1}') is set; dtc imports MoE without "
                       "quantization scales",
                       i, node->input(i));
  if (getIntAttr(*node, "use_sparse_mixer", 0))
    return nodeError("use_sparse_mixer is not supported; export with the "
                     "softmax top-k router");
  if (getIntAttr(*node, "swiglu_fusion", 0))
    return nodeError("swiglu_fusion (gate and up projections fused in fc1) "
                     "is not supported; pass them as fc1 and fc3");
  std::string activation = getStringAttr(*node, "activation_type", "relu");
  if (activation != "relu" && activation != "gelu" && activation != "silu" &&
      activation != "identity")
    return nodeError("activation_type '{0}' is not supported (relu, gelu, "
                     "silu, identity)",
                     activation);
  llvm::ArrayRef<int64_t> in = ins[0]->shape, w1 = ins[2]->shape,
                          w2 = ins[4]->shape;
  if ((in.size() != 2 && in.size() != 3) || w1.size() != 3 || w2.size() != 3)
    return nodeError("expects input [b, s, h] or [rows, h] and expert weights "
                     "[E, in, out]");
  int64_t hidden = in.back(), experts = w1[0], ffn = w1[1];
  int64_t batch = in.size() == 3 ? in[0] : 1;
  int64_t seq = in.size() == 3 ? in[1] : in[0];
  if (w1[2] != hidden || w2[0] != experts || w2[1] != hidden || w2[2] != ffn)
    return nodeError("expert weights [{0}, {1}, {2}] and [{3}, {4}, {5}] do "
                     "not fit hidden size {6}",
                     w1[0], w1[1], w1[2], w2[0], w2[1], w2[2], hidden);
  int64_t topK = getIntAttr(*node, "k", 1);
  if (topK < 1 || topK > experts)
    return nodeError("k = {0} must be in [1, {1}]", topK, experts);
  double factor = metadataNumber("moe_capacity_factor", 0);
  int64_t capacity =
      factor > 0 ? std::min<int64_t>(seq, static_cast<int64_t>(std::ceil(
                                              factor * seq * topK / experts)))
                 : seq;
  capacity = std::max<int64_t>(capacity, 1);

  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  auto x = reshape(*input, {batch, seq, hidden});
  if (!x)
    return x.takeError();
  auto routerValue = valueOf(*ins[1]);
  if (!routerValue)
    return routerValue.takeError();
  auto logits = reshape(*routerValue, {batch, seq, experts});
  if (!logits)
    return logits.takeError();
  Type ph = placeholder();
  auto route = d::MoeRouteOp::create(
      builder, loc(), TypeRange{ph, ph, ph}, *logits, topK, capacity, "softmax",
      getIntAttr(*node, "normalize_routing_weights", 0) != 0,
      builder.getI64IntegerAttr(moeLayers++));
  route->setAttr("dtc.aux_loss_coeff", builder.getF64FloatAttr(metadataNumber(
                                           "router_aux_loss_coef", 0.001)));
  if (auto checked = finish(route); !checked)
    return checked.takeError();
  auto buffer = finish(
      d::MoeDispatchOp::create(builder, loc(), ph, *x, route.getSlots()));
  if (!buffer)
    return buffer.takeError();
  // One expert projection: buffer [b, E, C, in] x W[E, out, in]^T + bias.
  auto project = [&](Value rows, int weight) -> Expected<Value> {
    auto w = valueOf(*ins[weight]);
    if (!w)
      return w.takeError();
    auto y = finish(d::MatmulOp::create(builder, loc(), ph, rows, *w,
                                        /*transpose_lhs=*/false,
                                        /*transpose_rhs=*/true));
    Entry *bias = static_cast<size_t>(weight + 1) < ins.size() ? ins[weight + 1]
                                                               : nullptr;
    if (!y || !bias)
      return y;
    auto b = valueOf(*bias);
    if (!b)
      return b.takeError();
    int64_t out = cast<RankedTensorType>(b->getType()).getShape().back();
    auto shaped = reshape(*b, {experts, 1, out});
    if (!shaped)
      return shaped.takeError();
    return finish(d::AddOp::create(builder, loc(), ph, *y, *shaped));
  };
  auto hiddenRows = project(*buffer, 2);
  if (!hiddenRows)
    return hiddenRows.takeError();
  Value act = *hiddenRows;
  Operation *activated = nullptr;
  if (activation == "relu")
    activated = d::ReluOp::create(builder, loc(), ph, act);
  else if (activation == "gelu")
    activated = d::GeluOp::create(builder, loc(), ph, act, false);
  else if (activation == "silu")
    activated = d::SiluOp::create(builder, loc(), ph, act);
  if (activated) {
    auto a = finish(activated);
    if (!a)
      return a.takeError();
    act = *a;
  }
  if (ins.size() > 6 && ins[6]) {
    auto up = project(*buffer, 6);
    if (!up)
      return up.takeError();
    auto gated = finish(d::MulOp::create(builder, loc(), ph, act, *up));
    if (!gated)
      return gated.takeError();
    act = *gated;
  }
  auto expertOut = project(act, 4);
  if (!expertOut)
    return expertOut.takeError();
  auto combined = finish(d::MoeCombineOp::create(
      builder, loc(), ph, *expertOut, route.getSlots(), route.getGates()));
  if (!combined)
    return combined.takeError();
  auto out = reshape(*combined, in);
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
  table[ms + "MoE"] = &ModelImporter::lowerMoE;
}
