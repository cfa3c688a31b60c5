//===- Microsoft.cpp - com.microsoft ops of ORT's optimizer ---------------===//
//
// Lowerings of the com.microsoft contrib ops onnxruntime's transformer
// optimizer writes (python -m onnxruntime.transformers.optimizer):
// SkipLayerNormalization, SkipSimplifiedLayerNormalization, FastGelu,
// BiasGelu, Gelu, the packed-QKV Attention, MultiHeadAttention,
// GroupQueryAttention, RotaryEmbedding and MoE, and the default-domain
// SimplifiedLayerNormalization that onnxruntime defines. Registered as
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

/// An error for the first of inputs [from, to) of the current node that is
/// set: "dtc imports <op> without <what>".
Error refuseSetInputs(ModelImporter &m, llvm::ArrayRef<Entry *> ins,
                      size_t from, size_t to, llvm::StringRef what) {
  for (size_t i = from; i < std::min(to, ins.size()); ++i)
    if (ins[i])
      return m.nodeError("input {0} ('{1}') is set; dtc imports {2} without "
                         "{3}",
                         i, m.node->input(i), m.node->op_type(), what);
  return Error::success();
}
/// [b, s, n * h] -> [b, n, s, h].
Expected<Value> splitHeads(ModelImporter &m, Value x, int64_t heads) {
  llvm::ArrayRef<int64_t> shape =
      cast<RankedTensorType>(x.getType()).getShape();
  auto split = m.reshape(x, {shape[0], shape[1], heads, shape[2] / heads});
  if (!split)
    return split.takeError();
  return m.finish(d::TransposeOp::create(m.builder, m.loc(), m.placeholder(),
                                         *split,
                                         llvm::ArrayRef<int64_t>{0, 2, 1, 3}));
}

/// [b, n, s, h] -> [b, s, n * h].
Expected<Value> mergeHeads(ModelImporter &m, Value x) {
  llvm::ArrayRef<int64_t> shape =
      cast<RankedTensorType>(x.getType()).getShape();
  auto merged =
      m.finish(d::TransposeOp::create(m.builder, m.loc(), m.placeholder(), x,
                                      llvm::ArrayRef<int64_t>{0, 2, 1, 3}));
  if (!merged)
    return merged.takeError();
  return m.reshape(*merged, {shape[0], shape[2], shape[1] * shape[3]});
}

Expected<Value> binary(ModelImporter &m, llvm::StringRef kind, Value a,
                       Value b) {
  Operation *op;
  if (kind == "mul")
    op = d::MulOp::create(m.builder, m.loc(), m.placeholder(), a, b);
  else if (kind == "sub")
    op = d::SubOp::create(m.builder, m.loc(), m.placeholder(), a, b);
  else
    op = d::AddOp::create(m.builder, m.loc(), m.placeholder(), a, b);
  return m.finish(op);
}

/// dtc.attention over q, k, v split into heads ([b, n, s, h]; k and v may
/// have fewer heads), at the node's `scale` (absent or 0: 1 / sqrt(h)),
/// merged back to [b, s, n * h].
Expected<Value> attendAndMerge(ModelImporter &m, Value q, Value k, Value v,
                               bool causal) {
  double scale = getFloatAttr(*m.node, "scale", 0.0f);
  if (scale == 0.0)
    scale = 1.0 / std::sqrt(static_cast<double>(
                      cast<RankedTensorType>(q.getType()).getShape().back()));
  auto attn = m.finish(
      d::AttentionOp::create(m.builder, m.loc(), m.placeholder(), q, k, v,
                             causal, m.builder.getF64FloatAttr(scale)));
  if (!attn)
    return attn.takeError();
  return mergeHeads(m, *attn);
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
  if (Error err = refuseSetInputs(*this, ins, 3, ins.size(),
                                  "mask_index, past or attention bias"))
    return err;
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
  int64_t hidden = wShape[1] / 3;
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
    auto split = splitHeads(*this, *part, heads);
    if (!split)
      return split.takeError();
    parts.push_back(*split);
  }
  auto out = attendAndMerge(*this, parts[0], parts[1], parts[2],
                            getIntAttr(*node, "unidirectional", 0) != 0);
  if (!out)
    return out.takeError();
  return defineValue(0, *out);
}

// MoE(input [b, s, h] or [rows, h], router_probs [rows, E], fc1 [E, f, h],
// fc1_bias?, fc2 [E, h, f], fc2_bias?, fc3 [E, f, h]?, fc3_bias?) with k,
// activation_type and normalize_routing_weights: ORT softmaxes the router
// logits and runs each token's top-k experts, act(x W1^T + b1) [* (x W3^T
// + b3)] W2^T + b2, weighted by the chosen probabilities. With
// activation_type "swiglu" the gate g and value v come from fc1 [E, 2f, h]
// (swiglu_fusion 1: interleaved g0 v0 g1 v1..., 2: the gate half first) or
// from fc1 and fc3 (0), and act = g' sigmoid(alpha g') (v' + beta) with
// g' = min(g, limit), v' = clamp(v, -limit, limit) (swiglu_limit; no clamp
// when absent): alpha 1, beta 0 is Llama's SwiGLU, 1.702, 1, 7 GPT-OSS's.
// Weights are
// [E, out, in] as ONNX Runtime 1.2x reads them (torch Linear's layout). Lowered
// to dtc.moe_route / moe_dispatch / batched matmuls / moe_combine. Training
// needs what ORT's op leaves out, from the model's metadata: the capacity
// factor (`moe_capacity_factor`, 0 or absent: dropless) and the
// load-balancing loss weight (`router_aux_loss_coef`, default 0.001).
Expected<Value> ModelImporter::swiGlu(Value projected, int64_t fusion,
                                      Expected<Value> value) {
  if (!value)
    return value.takeError();
  auto type = cast<RankedTensorType>(projected.getType());
  int64_t axis = type.getRank() - 1;
  int64_t width = fusion ? type.getShape().back() / 2 : type.getShape().back();
  Value gate = projected, linear = *value;
  if (fusion) {
    auto g = fusion == 1 ? sliceAxis(projected, axis, 0, width, 2)
                         : sliceAxis(projected, axis, 0, width);
    if (!g)
      return g.takeError();
    auto v = fusion == 1 ? sliceAxis(projected, axis, 1, width, 2)
                         : sliceAxis(projected, axis, width, width);
    if (!v)
      return v.takeError();
    gate = *g;
    linear = *v;
  }
  auto scalar = [&](double x) {
    HostTensor t = HostTensor::zeros(dataTypeOf(type.getElementType()), {});
    t.set(0, x);
    return constant(t);
  };
  auto binary = [&](auto opTag, Value lhs, double rhs) -> Expected<Value> {
    auto c = scalar(rhs);
    if (!c)
      return c.takeError();
    using Op = decltype(opTag);
    return finish(Op::create(builder, loc(), placeholder(), lhs, *c));
  };
  if (const auto *limitAttr = findAttribute(*node, "swiglu_limit")) {
    float limit = limitAttr->f();
    auto g = binary(d::MinOp(), gate, limit);
    if (!g)
      return g.takeError();
    auto v = binary(d::MinOp(), linear, limit);
    if (!v)
      return v.takeError();
    auto lo = binary(d::MaxOp(), *v, -limit);
    if (!lo)
      return lo.takeError();
    gate = *g;
    linear = *lo;
  }
  float alpha = getFloatAttr(*node, "activation_alpha", 1.0f);
  float beta = getFloatAttr(*node, "activation_beta", 0.0f);
  // g sigmoid(alpha g): silu at alpha 1, the op the planner knows.
  Expected<Value> glu = Value();
  if (alpha == 1.0f) {
    glu = finish(d::SiluOp::create(builder, loc(), placeholder(), gate));
  } else {
    auto scaled = binary(d::MulOp(), gate, alpha);
    if (!scaled)
      return scaled.takeError();
    auto sig =
        finish(d::SigmoidOp::create(builder, loc(), placeholder(), *scaled));
    if (!sig)
      return sig.takeError();
    glu = finish(d::MulOp::create(builder, loc(), placeholder(), gate, *sig));
  }
  if (!glu)
    return glu.takeError();
  if (beta != 0.0f) {
    auto v = binary(d::AddOp(), linear, beta);
    if (!v)
      return v.takeError();
    linear = *v;
  }
  return finish(d::MulOp::create(builder, loc(), placeholder(), *glu, linear));
}

Error ModelImporter::lowerMoE(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 5 || !ins[1] || !ins[2] || !ins[4])
    return nodeError("needs input, router_probs, fc1_experts_weights and "
                     "fc2_experts_weights");
  if (Error err =
          refuseSetInputs(*this, ins, 8, ins.size(), "quantization scales"))
    return err;
  if (getIntAttr(*node, "use_sparse_mixer", 0))
    return nodeError("use_sparse_mixer is not supported; export with the "
                     "softmax top-k router");
  std::string activation = getStringAttr(*node, "activation_type", "relu");
  if (activation != "relu" && activation != "gelu" && activation != "silu" &&
      activation != "identity" && activation != "swiglu")
    return nodeError("activation_type '{0}' is not supported (relu, gelu, "
                     "silu, swiglu, identity)",
                     activation);
  bool hasFc3 = ins.size() > 6 && ins[6];
  int64_t fusion = getIntAttr(*node, "swiglu_fusion", 0);
  if (fusion < 0 || fusion > 2 || (fusion && activation != "swiglu"))
    return nodeError("swiglu_fusion = {0} needs activation_type 'swiglu' "
                     "and is 0, 1 (interleaved) or 2 (gate half first)",
                     fusion);
  if (activation == "swiglu" && (fusion != 0) == hasFc3)
    return nodeError("activation_type 'swiglu' takes the value projection "
                     "from fc1 (swiglu_fusion 1 or 2) or from fc3 "
                     "(swiglu_fusion 0), not both or neither");
  llvm::ArrayRef<int64_t> in = ins[0]->shape, w1 = ins[2]->shape,
                          w2 = ins[4]->shape;
  if ((in.size() != 2 && in.size() != 3) || w1.size() != 3 || w2.size() != 3)
    return nodeError("expects input [b, s, h] or [rows, h] and expert weights "
                     "[E, in, out]");
  if (fusion && w1[1] % 2)
    return nodeError("fc1 fuses gate and value but its {0} rows are odd",
                     w1[1]);
  int64_t hidden = in.back(), experts = w1[0], ffn = fusion ? w1[1] / 2 : w1[1];
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
  if (activation == "swiglu") {
    auto glu = swiGlu(*hiddenRows, fusion,
                      hasFc3 ? project(*buffer, 6) : Expected<Value>(Value()));
    if (!glu)
      return glu.takeError();
    act = *glu;
  }
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
  if (hasFc3 && activation != "swiglu") {
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

// Rotary embedding of x [b, n, s, h] as elementwise ops with constant
// tables (what the raised form of an exported rotary looks like too):
// features [0, rot) of each head are turned by the angle of the token's
// position, in halves (rotate_half) or in interleaved pairs; the rest pass.
Expected<Value> ModelImporter::applyRotary(Value x,
                                           llvm::ArrayRef<int64_t> positions,
                                           const HostTensor &cosCache,
                                           const HostTensor &sinCache,
                                           int64_t rot, bool interleaved) {
  llvm::ArrayRef<int64_t> shape =
      cast<RankedTensorType>(x.getType()).getShape();
  int64_t b = shape[0], s = shape[2], h = shape[3], half = rot / 2;
  if (cosCache.rank() != 2 || cosCache.shape != sinCache.shape ||
      cosCache.shape[1] < half || rot % 2 || rot > h || rot <= 0)
    return nodeError("cos/sin caches {0} and {1} do not fit a rotary "
                     "dimension of {2} in heads of {3}",
                     shapeString(cosCache.shape), shapeString(sinCache.shape),
                     rot, h);
  // positions: one per token of each sequence ([b * s]) or shared ([s]).
  int64_t rows = static_cast<int64_t>(positions.size()) == b * s ? b : 1;
  HostTensor tables[2] = {HostTensor::zeros(kFloat, {rows, 1, s, half}),
                          HostTensor::zeros(kFloat, {rows, 1, s, half})};
  for (int64_t i = 0; i < rows * s; ++i) {
    int64_t p = positions[i];
    if (p < 0 || p >= cosCache.shape[0])
      return nodeError("position {0} is outside the caches' {1} positions", p,
                       cosCache.shape[0]);
    for (int64_t j = 0; j < half; ++j) {
      tables[0].floats[i * half + j] =
          cosCache.floats[p * cosCache.shape[1] + j];
      tables[1].floats[i * half + j] =
          sinCache.floats[p * sinCache.shape[1] + j];
    }
  }
  auto cos = constant(tables[0]);
  if (!cos)
    return cos.takeError();
  auto sin = constant(tables[1]);
  if (!sin)
    return sin.takeError();
  Value rotated = x;
  if (rot < h) {
    auto head = sliceAxis(x, 3, 0, rot);
    if (!head)
      return head.takeError();
    rotated = *head;
  }
  // The two halves (or the even and odd features) of the rotated part.
  Value x1, x2;
  for (int k = 0; k < 2; ++k) {
    auto part = interleaved ? sliceAxis(rotated, 3, k, half, 2)
                            : sliceAxis(rotated, 3, k * half, half);
    if (!part)
      return part.takeError();
    (k ? x2 : x1) = *part;
  }
  // y1 = x1 cos - x2 sin, y2 = x2 cos + x1 sin.
  Value y[2];
  for (int k = 0; k < 2; ++k) {
    auto c = binary(*this, "mul", k ? x2 : x1, *cos);
    if (!c)
      return c.takeError();
    auto t = binary(*this, "mul", k ? x1 : x2, *sin);
    if (!t)
      return t.takeError();
    auto yk = binary(*this, k ? "add" : "sub", *c, *t);
    if (!yk)
      return yk.takeError();
    y[k] = *yk;
  }
  Value out;
  if (!interleaved) {
    auto joined = finish(d::ConcatOp::create(builder, loc(), placeholder(),
                                             ValueRange{y[0], y[1]}, 3));
    if (!joined)
      return joined.takeError();
    out = *joined;
  } else {
    // Back into pairs: [.., half, 1] twice -> [.., half, 2] -> [.., rot].
    Value pairs[2];
    for (int k = 0; k < 2; ++k) {
      auto r = reshape(y[k], {b, shape[1], s, half, 1});
      if (!r)
        return r.takeError();
      pairs[k] = *r;
    }
    auto joined = finish(d::ConcatOp::create(
        builder, loc(), placeholder(), ValueRange{pairs[0], pairs[1]}, 4));
    if (!joined)
      return joined.takeError();
    auto flat = reshape(*joined, {b, shape[1], s, rot});
    if (!flat)
      return flat.takeError();
    out = *flat;
  }
  if (rot == h)
    return out;
  auto rest = sliceAxis(x, 3, rot, h - rot);
  if (!rest)
    return rest.takeError();
  return finish(d::ConcatOp::create(builder, loc(), placeholder(),
                                    ValueRange{out, *rest}, 3));
}

/// The known int64 values of input `index` (positions, lengths), or an
/// error saying they must be known when compiling.
static Expected<std::vector<int64_t>>
knownIndexInput(ModelImporter &m, llvm::ArrayRef<Entry *> ins, size_t index,
                llvm::StringRef what) {
  if (index >= ins.size() || !ins[index])
    return m.nodeError("needs {0}", what);
  if (!ins[index]->known)
    return m.nodeError("{0} ('{1}') is computed at run time; dtc needs it "
                       "known when compiling (an initializer, or computed "
                       "from shapes)",
                       what, m.node->input(index));
  return ins[index]->known->toInts();
}

// SimplifiedLayerNormalization(X, scale) (onnxruntime's RMSNorm, in the
// default domain): dtc.rms_norm over the trailing axes from `axis`.
Error ModelImporter::lowerSimplifiedLayerNorm(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs X and scale");
  if (Error err = checkUnusedOutputs(1))
    return err;
  int64_t rank = static_cast<int64_t>(ins[0]->shape.size());
  int64_t axis = getIntAttr(*node, "axis", -1);
  if (axis < 0)
    axis += rank;
  if (axis != rank - 1)
    return nodeError("axis {0} normalizes several dims; dtc imports the last "
                     "axis only",
                     getIntAttr(*node, "axis", -1));
  auto x = valueOf(*ins[0]);
  if (!x)
    return x.takeError();
  auto scale = valueOf(*ins[1]);
  if (!scale)
    return scale.takeError();
  auto norm = finish(
      d::RmsNormOp::create(builder, loc(), placeholder(), *x, *scale, axis,
                           llvm::APFloat(static_cast<double>(
                               getFloatAttr(*node, "epsilon", 1e-5f)))));
  if (!norm)
    return norm.takeError();
  return defineValue(0, *norm);
}

// MultiHeadAttention(query [b, s, d], key [b, t, d], value [b, t, d],
// bias [3d]?) with num_heads, unidirectional (causal) and scale.
Error ModelImporter::lowerMultiHeadAttention(llvm::ArrayRef<Entry *> ins) {
  if (Error err = refuseSetInputs(*this, ins, 4, ins.size(),
                                  "masks, attention bias or past state"))
    return err;
  if (Error err = checkUnusedOutputs(1))
    return err;
  int64_t heads = getIntAttr(*node, "num_heads", 0);
  if (ins.size() < 3 || !ins[1] || !ins[2])
    return nodeError("needs separate query, key and value (packed forms are "
                     "not supported)");
  llvm::ArrayRef<int64_t> q = ins[0]->shape, k = ins[1]->shape,
                          v = ins[2]->shape;
  if (q.size() != 3 || k.size() != 3 || v.size() != 3 || heads <= 0 ||
      q[2] % heads || k[2] != q[2] || v[2] % heads || k[1] != v[1])
    return nodeError("expects query [b, s, d], key and value [b, t, d] with "
                     "num_heads dividing d");
  llvm::SmallVector<Value, 3> parts;
  int64_t d = q[2];
  for (int i = 0; i < 3; ++i) {
    auto x = valueOf(*ins[i]);
    if (!x)
      return x.takeError();
    Value biased = *x;
    if (ins.size() > 3 && ins[3]) {
      auto bias = valueOf(*ins[3]);
      if (!bias)
        return bias.takeError();
      auto part = sliceAxis(*bias, 0, i * d, i == 2 ? v[2] : d);
      if (!part)
        return part.takeError();
      auto sum = binary(*this, "add", *x, *part);
      if (!sum)
        return sum.takeError();
      biased = *sum;
    }
    auto split = splitHeads(*this, biased, heads);
    if (!split)
      return split.takeError();
    parts.push_back(*split);
  }
  auto out = attendAndMerge(*this, parts[0], parts[1], parts[2],
                            getIntAttr(*node, "unidirectional", 0) != 0);
  if (!out)
    return out.takeError();
  return defineValue(0, *out);
}

// RotaryEmbedding(input [b, s, n * h] or [b, n, s, h], position_ids [b, s]
// or [1] (an offset), cos_cache, sin_cache [max positions, rot / 2]).
// Positions and caches must be known when compiling.
Error ModelImporter::lowerRotaryEmbedding(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 4 || !ins[2] || !ins[3] || !ins[2]->known || !ins[3]->known)
    return nodeError("needs cos_cache and sin_cache known when compiling "
                     "(initializers)");
  if (getIntAttr(*node, "is_packed_batching", 0))
    return nodeError("is_packed_batching is not supported");
  if (getFloatAttr(*node, "scale", 1.0f) != 1.0f)
    return nodeError("scale {0} is not supported (1 only)",
                     getFloatAttr(*node, "scale", 1.0f));
  llvm::ArrayRef<int64_t> shape = ins[0]->shape;
  const HostTensor &cos = *ins[2]->known, &sin = *ins[3]->known;
  int64_t rot = getIntAttr(*node, "rotary_embedding_dim", 0);
  if (rot == 0 && cos.rank() == 2)
    rot = 2 * cos.shape[1];
  int64_t heads = getIntAttr(*node, "num_heads", 0);
  bool flat = shape.size() == 3;
  if (flat && heads == 0 && rot > 0)
    heads = shape[2] / rot; // the heads are all rotary
  if ((!flat && shape.size() != 4) ||
      (flat && (heads <= 0 || shape[2] % heads)))
    return nodeError("expects input [b, s, n * h] (with num_heads) or "
                     "[b, n, s, h]");
  int64_t b = shape[0], s = flat ? shape[1] : shape[2];
  auto positions = knownIndexInput(*this, ins, 1, "position_ids");
  if (!positions)
    return positions.takeError();
  std::vector<int64_t> pos = std::move(*positions);
  if (pos.size() == 1) { // an offset: positions p .. p + s - 1
    int64_t first = pos[0];
    pos.resize(s);
    for (int64_t i = 0; i < s; ++i)
      pos[i] = first + i;
  } else if (static_cast<int64_t>(pos.size()) != b * s) {
    return nodeError("position_ids has {0} values, not 1 or {1} x {2}",
                     pos.size(), b, s);
  }
  auto x = valueOf(*ins[0]);
  if (!x)
    return x.takeError();
  Value heads4 = *x;
  if (flat) {
    auto split = splitHeads(*this, *x, heads);
    if (!split)
      return split.takeError();
    heads4 = *split;
  }
  auto y = applyRotary(heads4, pos, cos, sin, rot,
                       getIntAttr(*node, "interleaved", 0) != 0);
  if (!y)
    return y.takeError();
  if (!flat)
    return defineValue(0, *y);
  auto merged = mergeHeads(*this, *y);
  if (!merged)
    return merged.takeError();
  return defineValue(0, *merged);
}

// GroupQueryAttention(query [b, s, n * h], key, value [b, s, kv * h],
// past_key?, past_value?, seqlens_k [b], total_sequence_length, cos_cache?,
// sin_cache?) with num_heads, kv_num_heads, scale, do_rotary: causal
// attention over kv heads shared by groups of query heads. dtc imports the
// whole-sequence (prefill, training) form: no past state, every sequence
// full length (seqlens_k = s - 1, total_sequence_length = s).
Error ModelImporter::lowerGroupQueryAttention(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 7 || !ins[1] || !ins[2])
    return nodeError("needs separate query, key and value (packed QKV is not "
                     "supported)");
  if (Error err = refuseSetInputs(*this, ins, 3, 5,
                                  "past state (training and prefill)"))
    return err;
  if (Error err = refuseSetInputs(
          *this, ins, 9, ins.size(),
          "position_ids, attention bias, head sink, quantization or q/k "
          "norms"))
    return err;
  if (Error err = checkUnusedOutputs(1))
    return err;
  for (const char *attr : {"softcap", "smooth_softmax", "qk_output"})
    if (getFloatAttr(*node, attr, 0.0f) != 0.0f ||
        getIntAttr(*node, attr, 0) != 0)
      return nodeError("{0} is not supported", attr);
  if (getIntAttr(*node, "local_window_size", -1) != -1)
    return nodeError("local_window_size (sliding window attention) is not "
                     "supported");
  int64_t heads = getIntAttr(*node, "num_heads", 0);
  int64_t kvHeads = getIntAttr(*node, "kv_num_heads", 0);
  llvm::ArrayRef<int64_t> q = ins[0]->shape, k = ins[1]->shape,
                          v = ins[2]->shape;
  if (q.size() != 3 || k.size() != 3 || v.size() != 3 || heads <= 0 ||
      kvHeads <= 0 || heads % kvHeads || q[2] % heads ||
      k[2] != q[2] / heads * kvHeads || v[2] != k[2] || k[1] != q[1])
    return nodeError("expects query [b, s, n * h] and key, value [b, s, kv * "
                     "h] with kv_num_heads dividing num_heads");
  int64_t s = q[1];
  auto lengths = knownIndexInput(*this, ins, 5, "seqlens_k");
  if (!lengths)
    return lengths.takeError();
  auto total = knownIndexInput(*this, ins, 6, "total_sequence_length");
  if (!total)
    return total.takeError();
  if (total->size() != 1 || (*total)[0] != s ||
      llvm::any_of(*lengths, [&](int64_t n) { return n != s - 1; }))
    return nodeError("seqlens_k and total_sequence_length describe padded "
                     "or cached sequences; dtc imports full sequences of "
                     "{0} tokens (seqlens_k = {1}, total_sequence_length = "
                     "{0})",
                     s, s - 1);
  Value parts[3];
  for (int i = 0; i < 3; ++i) {
    auto x = valueOf(*ins[i]);
    if (!x)
      return x.takeError();
    auto split = splitHeads(*this, *x, i ? kvHeads : heads);
    if (!split)
      return split.takeError();
    parts[i] = *split;
  }
  if (getIntAttr(*node, "do_rotary", 0)) {
    if (ins.size() < 9 || !ins[7] || !ins[8] || !ins[7]->known ||
        !ins[8]->known)
      return nodeError("do_rotary needs cos_cache and sin_cache known when "
                       "compiling");
    std::vector<int64_t> pos(s);
    for (int64_t i = 0; i < s; ++i)
      pos[i] = i;
    const HostTensor &cos = *ins[7]->known, &sin = *ins[8]->known;
    int64_t rot = cos.rank() == 2 ? 2 * cos.shape[1] : 0;
    bool interleaved = getIntAttr(*node, "rotary_interleaved", 0) != 0;
    for (int i = 0; i < 2; ++i) {
      auto turned = applyRotary(parts[i], pos, cos, sin, rot, interleaved);
      if (!turned)
        return turned.takeError();
      parts[i] = *turned;
    }
  }
  auto out = attendAndMerge(*this, parts[0], parts[1], parts[2],
                            /*causal=*/true);
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
  table[ms + "MultiHeadAttention"] = &ModelImporter::lowerMultiHeadAttention;
  table[ms + "GroupQueryAttention"] = &ModelImporter::lowerGroupQueryAttention;
  table[ms + "RotaryEmbedding"] = &ModelImporter::lowerRotaryEmbedding;
  // onnxruntime defines its RMSNorm in the default domain.
  table["SimplifiedLayerNormalization"] =
      &ModelImporter::lowerSimplifiedLayerNorm;
}
