//===- Transformer.cpp - Attention and cross-entropy kernels --------------===//
//
// dtc.attention is ring attention's block over the whole sequence
// (RingAttention.cpp: per (batch, head, block of 64 query rows) a [64, t]
// score block through sgemm, a max-subtracted softmax, P V through sgemm).
// dtc.cross_entropy computes each position's loss in parallel and sums them in
// position order.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Attention.h"
#include "runtime/core/LossShards.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/cpu/RingAttention.h"

#include <cmath>
#include <limits>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

llvm::Error attentionKernel(const KernelCall &call) {
  auto a = readAttention(call);
  if (!a)
    return a.takeError();
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2),
                  &out = call.output(0);
  if (out.numElements() == 0)
    return llvm::Error::success();
  // The whole sequence is one chunk pair of ring attention's block, whose
  // log-sum-exp is not needed here.
  RingAttentionDims dims{a->batch, a->heads,   a->groups,  a->queries,
                         a->keys,  a->headDim, a->valueDim};
  RingAttentionPositions at;
  at.causal = a->causal;
  at.scale = static_cast<float>(a->scale);
  F32In qf(q), kf(k), vf(v);
  F32Out of(out);
  std::vector<float> lse(a->batch * a->heads * a->queries);
  attentionBlock(dims, at, qf.data(), kf.data(), vf.data(), of.data(),
                 lse.data());
  of.commit();
  return llvm::Error::success();
}

// The mean over positions whose label is not ignore_index. When every label
// is ignored this is 0/0 = NaN, exactly what PyTorch's
// F.cross_entropy(reduction="mean") returns; the loss is not silently 0.
llvm::Error crossEntropyKernel(const KernelCall &call) {
  llvm::Expected<LossShards> shape = readCrossEntropy(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &logits = call.input(0);
  const TensorRef &labels = call.input(1);
  const TensorRef &out = call.output(0);
  int64_t vocab = shape->vocab, positions = shape->rows;
  int64_t ignore = shape->ignoreIndex;
  if (auto checked = readIndices(call, labels, vocab, "label", ignore);
      !checked)
    return checked.takeError();
  F32In x(logits);
  std::vector<double> losses(positions, 0.0);
  parallelFor(
      positions, vocab * kWorkTranscendental, [&](int64_t first, int64_t last) {
        for (int64_t i = first; i < last; ++i) {
          int64_t label = loadAsInt(labels, i);
          if (label == ignore)
            continue;
          const float *row = x.data() + i * vocab;
          float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
          for (int64_t j = 0; j < vocab; ++j)
            mx = std::max(mx, row[j]);
          float sum = 0;
#pragma omp simd reduction(+ : sum)
          for (int64_t j = 0; j < vocab; ++j)
            sum += fastExp(row[j] - mx);
          losses[i] = mx + std::log(static_cast<double>(sum)) - row[label];
        }
      });
  double total = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < positions; ++i) {
    if (loadAsInt(labels, i) == ignore)
      continue;
    total += losses[i];
    ++count;
  }
  double loss = count ? total / count : std::nan("");
  float value = static_cast<float>(loss);
  storeF32(&value, out);
  return llvm::Error::success();
}

} // namespace

void registerTransformerKernels(KernelRegistry &registry) {
  registry.add("dtc.attention", attentionKernel);
  registry.add("dtc.cross_entropy", crossEntropyKernel);
}

} // namespace dtc::runtime::cpu
