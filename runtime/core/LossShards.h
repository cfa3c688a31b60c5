//===- LossShards.h - Vocabulary-parallel loss operand checks ---*- C++ -*-===//
//
// The operands of dtc.cross_entropy and dtc.cross_entropy_grad (the whole
// loss: one shard) and of dtc.cross_entropy_stats,
// dtc.cross_entropy_from_stats and dtc.cross_entropy_shard_grad (the
// vocabulary-parallel loss, dialects/dtc/DtcCollectiveOps.td), read and
// checked once for every backend. Label values are the kernels' to check: they
// may live on a device.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_LOSSSHARDS_H
#define DTC_RUNTIME_CORE_LOSSSHARDS_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime {

/// Sizes of a vocabulary-parallel loss op: `rows` positions, each with
/// `vocab` logits on this rank (its shard `position` of `shards`, ids
/// [position * vocab, (position + 1) * vocab)), statistics of 3 floats per
/// row and shard.
struct LossShards {
  int64_t rows = 0, vocab = 0, shards = 1, position = 0;
  int64_t ignoreIndex = -100;

  int64_t firstId() const { return position * vocab; }
  int64_t wholeVocab() const { return shards * vocab; }
};

/// cross_entropy: float logits [..., v], labels [...] (i64 or i32) -> a
/// float scalar; one shard.
llvm::Expected<LossShards> readCrossEntropy(const KernelCall &call);
/// cross_entropy_grad: logits [..., v], labels [...], grad_loss (a float
/// scalar) -> [..., v] float; one shard.
llvm::Expected<LossShards> readCrossEntropyGrad(const KernelCall &call);
/// cross_entropy_stats: logits [..., v], labels [...] -> stats [..., 3] f32.
llvm::Expected<LossShards> readCrossEntropyStats(const KernelCall &call);
/// cross_entropy_from_stats: stats [..., 3n] f32, labels [...] -> a float
/// scalar (vocab is 0: the op reads no logits).
llvm::Expected<LossShards> readCrossEntropyFromStats(const KernelCall &call);
/// cross_entropy_shard_grad: logits [..., v], labels [...], stats
/// [..., 3n] f32, grad_loss (a float scalar) -> [..., v] float.
llvm::Expected<LossShards> readCrossEntropyShardGrad(const KernelCall &call);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_LOSSSHARDS_H
