//===- Memory.cpp - Bytes per GPU -----------------------------------------===//

#include "compiler/costmodel/Memory.h"

#include <algorithm>

using namespace dtc;

LayerActivations dtc::layerActivationBytes(const TransformerSpec &spec,
                                           const ParallelPlan &plan) {
  double e = static_cast<double>(spec.bytes());
  double t = static_cast<double>(plan.tp);
  double a = static_cast<double>(spec.heads);
  double kv = static_cast<double>(spec.kvHeadCount());
  double hd = static_cast<double>(spec.headDim());
  double sq = static_cast<double>(spec.seqLen) / static_cast<double>(plan.cp);
  double sk = static_cast<double>(spec.seqLen);
  double b = static_cast<double>(plan.microBatch);
  double attnWidth = a * hd;
  double tokens = b * sq;
  // Outside the TP regions (norms, dropout, residual) every TP rank holds
  // the whole sequence unless sequence parallelism splits it.
  double rep = plan.sequenceParallel ? 1 / t : 1;
  double mask = spec.dropout ? 1 : 0; // Dropout masks are one byte.
  double h = static_cast<double>(spec.hidden);
  double x = tokens * h;
  // What a linear layer saves for its weight gradient is its input as the
  // GEMM reads it: one byte in fp8 training (Transformer Engine keeps the
  // fp8 cast), the storage type otherwise.
  double g = spec.dtype == DType::FP8 ? 1 : e;

  // Attention block: norm input, QKV input, Q and K, V, output-projection
  // input, dropout mask after the projection.
  double attention = (e + g) * x * rep + e * tokens * (a + kv) * hd / t +
                     e * tokens * kv * hd / t + g * tokens * attnWidth / t +
                     mask * x * rep;
  // Scores: softmax output, then dropout mask and output (Korthikanti's
  // 5as/h term); a fused kernel keeps only its log-sum-exp rows.
  double scores = 0;
  if (plan.fusedAttention) {
    attention += 4 * b * (a / t) * sq;
  } else {
    double p = b * (a / t) * sq * sk;
    scores = e * p + mask * (p + e * p);
  }
  // MLP block: norm input, first-linear input, activation input(s), second
  // linear input, dropout mask. Experts see each token top-k times (their
  // static buffer's rows for dtc's MoE ops).
  double routed = spec.moe() ? spec.expertRows() : 1;
  double f = static_cast<double>(spec.ffn());
  double mlp = (e + g) * x * rep +
               e * tokens * f / t * routed * (spec.gatedMlp ? 2 : 1) +
               g * tokens * f / t * routed + mask * x * rep;

  LayerActivations result;
  result.full = attention + scores + mlp;
  switch (plan.recompute) {
  case Recompute::None:
    result.stored = result.full;
    result.attentionStored = attention + scores;
    break;
  case Recompute::Selective:
    // Recompute the attention core: its scores, never its inputs.
    result.stored = attention + mlp;
    result.attentionStored = attention;
    result.working = scores;
    break;
  case Recompute::Full:
    result.stored = e * x * rep;
    result.attentionStored = result.stored / 2;
    result.working = result.full;
    break;
  }
  return result;
}

LayerParams dtc::layerParamCount(const TransformerSpec &spec,
                                 const ParallelPlan &plan) {
  double t = static_cast<double>(plan.tp);
  double h = static_cast<double>(spec.hidden);
  double f = static_cast<double>(spec.ffn());
  double mlpMatrices = spec.gatedMlp ? 3 : 2;
  LayerParams params = attentionParamCount(spec, plan);
  params.dense += 2 * h; // The MLP's norm.
  if (spec.moe()) {
    params.dense += h * static_cast<double>(spec.experts); // Router.
    params.expert = static_cast<double>(spec.experts) /
                    static_cast<double>(plan.ep) * mlpMatrices * h * f / t;
  } else {
    params.dense += mlpMatrices * h * f / t;
  }
  return params;
}

LayerParams dtc::attentionParamCount(const TransformerSpec &spec,
                                     const ParallelPlan &plan) {
  double t = static_cast<double>(plan.tp);
  double h = static_cast<double>(spec.hidden);
  double hd = static_cast<double>(spec.headDim());
  double a = static_cast<double>(spec.heads);
  double kv = static_cast<double>(spec.kvHeadCount());
  LayerParams params;
  // QKV and output projection, split by TP; the norm replicated.
  params.dense = h * (a + 2 * kv) * hd / t + a * hd * h / t + 2 * h;
  return params;
}

double dtc::totalParamCount(const TransformerSpec &spec) {
  ParallelPlan single;
  double perLayer = layerParamCount(spec, single).total();
  double embedding =
      static_cast<double>(spec.vocab) * static_cast<double>(spec.hidden);
  return static_cast<double>(spec.layers) * perLayer +
         embedding * (spec.tiedEmbeddings ? 1 : 2) +
         2 * static_cast<double>(spec.hidden);
}

double dtc::optimizerBytesPerParam(DType type) {
  return storageBytes(type) >= 4 ? 8 : 12;
}

StateBytes dtc::modelStateBytes(const TransformerSpec &spec,
                                const ParallelPlan &plan, double params,
                                double expertParams) {
  return modelStateBytes(spec.dtype, plan, params, expertParams,
                         spec.fp8Weights);
}

StateBytes dtc::modelStateBytes(DType type, const ParallelPlan &plan,
                                double params, double expertParams,
                                bool fp8Weights) {
  // The distributed optimizer shards over every replica: dp x cp.
  double shard = static_cast<double>(plan.dp * plan.cp);
  double expertShard = std::max(shard / static_cast<double>(plan.ep), 1.0);
  double dense = params - expertParams;
  auto sharded = [&](int stage) {
    return plan.zero >= stage ? dense / shard + expertParams / expertShard
                              : params;
  };
  double e = static_cast<double>(storageBytes(type));
  StateBytes bytes;
  bytes.params = (fp8Weights ? 1 : e) * sharded(3);
  bytes.grads = e * sharded(2);
  bytes.optimizer = optimizerBytesPerParam(type) * sharded(1);
  return bytes;
}
