//===- LossShards.cpp - The cross-entropy loss on the CPU -----------------===//
//
// dtc.cross_entropy, which computes each position's loss in parallel and
// sums them in position order, and its vocabulary-parallel form:
// dtc.cross_entropy_stats, dtc.cross_entropy_from_stats and
// dtc.cross_entropy_shard_grad (dialects/dtc/DtcCollectiveOps.td), the loss
// of logits whose vocabulary is split over ranks. Sums of exponentials are
// in double, rows are summed in row order, as dtc.cross_entropy's are.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/LossShards.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <cmath>
#include <limits>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

/// The labels, checked against the whole vocabulary.
llvm::Expected<std::vector<int64_t>> readLabels(const KernelCall &call,
                                                const LossShards &s) {
  return readIndices(call, call.input(1), s.wholeVocab(), "label",
                     s.ignoreIndex);
}

/// A row's log-sum-exp over every shard: M and S of exp(logit - M), from
/// its 3 * shards statistics.
struct RowNorm {
  float max;
  double sum;
};
RowNorm rowNorm(const float *stats, int64_t shards) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t k = 0; k < shards; ++k)
    max = std::max(max, stats[3 * k]);
  double sum = 0;
  for (int64_t k = 0; k < shards; ++k)
    if (stats[3 * k + 1] > 0)
      sum += stats[3 * k + 1] * std::exp(double(stats[3 * k]) - max);
  return {max, sum};
}

llvm::Error crossEntropyStatsKernel(const KernelCall &call) {
  llvm::Expected<LossShards> s = readCrossEntropyStats(call);
  if (!s)
    return s.takeError();
  auto labels = readLabels(call, *s);
  if (!labels)
    return labels.takeError();
  F32In logits(call.input(0));
  float *stats = call.output(0).as<float>();
  int64_t vocab = s->vocab, first = s->firstId();
  parallelFor(s->rows, vocab * kWorkTranscendental,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t r = rangeBegin; r < rangeEnd; ++r) {
                  const float *row = logits.data() + r * vocab;
                  float max = -std::numeric_limits<float>::infinity();
                  for (int64_t j = 0; j < vocab; ++j)
                    max = std::max(max, row[j]);
                  double sum = 0;
                  for (int64_t j = 0; j < vocab; ++j)
                    sum += std::exp(double(row[j]) - max);
                  int64_t label = (*labels)[r] - first;
                  bool here = (*labels)[r] != s->ignoreIndex && label >= 0 &&
                              label < vocab;
                  stats[3 * r] = max;
                  stats[3 * r + 1] = static_cast<float>(sum);
                  stats[3 * r + 2] = here ? row[label] : 0.0f;
                }
              });
  return llvm::Error::success();
}

// The mean over the positions whose label is not ignore_index; NaN when
// every label is ignored, as dtc.cross_entropy.
llvm::Error crossEntropyFromStatsKernel(const KernelCall &call) {
  llvm::Expected<LossShards> s = readCrossEntropyFromStats(call);
  if (!s)
    return s.takeError();
  const float *stats = call.input(0).as<float>();
  double total = 0;
  int64_t count = 0;
  for (int64_t r = 0; r < s->rows; ++r) {
    if (loadAsInt(call.input(1), r) == s->ignoreIndex)
      continue;
    const float *row = stats + r * 3 * s->shards;
    RowNorm norm = rowNorm(row, s->shards);
    double target = 0;
    for (int64_t k = 0; k < s->shards; ++k)
      target += row[3 * k + 2];
    total += norm.max + std::log(norm.sum) - target;
    ++count;
  }
  float loss = static_cast<float>(count ? total / count : std::nan(""));
  storeF32(&loss, call.output(0));
  return llvm::Error::success();
}

llvm::Error crossEntropyShardGradKernel(const KernelCall &call) {
  llvm::Expected<LossShards> s = readCrossEntropyShardGrad(call);
  if (!s)
    return s.takeError();
  auto labels = readLabels(call, *s);
  if (!labels)
    return labels.takeError();
  int64_t counted = 0;
  for (int64_t label : *labels)
    counted += label != s->ignoreIndex;
  float factor = counted ? loadAsFloat(call.input(3), 0) / float(counted) : 0;
  F32In logits(call.input(0));
  F32Out grad(call.output(0));
  const float *stats = call.input(2).as<float>();
  int64_t vocab = s->vocab, first = s->firstId();
  parallelFor(s->rows, vocab * kWorkTranscendental,
              [&](int64_t rangeBegin, int64_t rangeEnd) {
                for (int64_t r = rangeBegin; r < rangeEnd; ++r) {
                  const float *row = logits.data() + r * vocab;
                  float *out = grad.data() + r * vocab;
                  if ((*labels)[r] == s->ignoreIndex || counted == 0) {
                    std::fill(out, out + vocab, 0.0f);
                    continue;
                  }
                  RowNorm norm = rowNorm(stats + r * 3 * s->shards, s->shards);
                  float scale = static_cast<float>(factor / norm.sum);
                  for (int64_t j = 0; j < vocab; ++j)
                    out[j] = std::exp(row[j] - norm.max) * scale;
                  int64_t label = (*labels)[r] - first;
                  if (label >= 0 && label < vocab)
                    out[label] -= factor;
                }
              });
  grad.commit();
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

void registerLossShardKernels(KernelRegistry &registry) {
  registry.add("dtc.cross_entropy", crossEntropyKernel);
  registry.add("dtc.cross_entropy_stats", crossEntropyStatsKernel);
  registry.add("dtc.cross_entropy_from_stats", crossEntropyFromStatsKernel);
  registry.add("dtc.cross_entropy_shard_grad", crossEntropyShardGradKernel);
}

} // namespace dtc::runtime::cpu
