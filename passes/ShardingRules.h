//===- ShardingRules.h - Which loop splits leave partial sums ---*- C++ -*-===//
//
// Shared by dtc-propagate-sharding (which splits it may choose) and
// dtc-partition (which loop an annotation's partial sum came from), so the
// two always agree.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_SHARDINGRULES_H
#define DTC_PASSES_SHARDINGRULES_H

#include "dialects/dtc/DtcOps.h"

namespace mlir::dtc {

/// Reduction loops whose split leaves a partial *sum* (the group's sum is
/// the result): contractions, sums and means, the positions of the loss.
/// Other reductions (max, a softmax's or the loss's vocabulary) cannot be
/// split without the op's own cross-shard statistics.
inline bool isSumLikeReduction(Operation *op, int64_t loop, int64_t numLoops) {
  if (isa<MatmulOp, ConvOp, EmbeddingOp, ReduceSumOp, ReduceMeanOp,
          EmbeddingGradOp, ConvGradInputOp, ConvGradWeightOp>(op))
    return true;
  // Positions of the loss average linearly; the vocabulary is a log-sum-exp.
  if (isa<CrossEntropyOp>(op))
    return loop != numLoops - 1;
  // MoE loops (b, s, e, c, h): the experts and slots of a token add up.
  if (isa<MoeCombineOp, MoeDispatchGradOp>(op))
    return loop == 2 || loop == 3;
  return false;
}

/// The vocabulary of the loss and of its gradient: a log-sum-exp, but one
/// the partitioner splits with the loss's own statistics exchange
/// (cross_entropy_stats and one small all-gather, docs/partition.md), so
/// the loss stays whole and its gradient is split like the logits.
inline bool isVocabParallelLoop(Operation *op, int64_t loop, int64_t numLoops) {
  return isa<CrossEntropyOp, CrossEntropyGradOp>(op) && loop == numLoops - 1;
}

/// Gradient ops with a result that sums over a parallel loop it does not
/// index (weight gradients over the rows, key and value gradients over the
/// queries): splitting that loop leaves that result a partial sum.
inline bool sumsOverParallelLoops(Operation *op) {
  return isa<LayerNormGradOp, RmsNormGradOp, AttentionGradOp, MoeCombineGradOp>(
      op);
}

} // namespace mlir::dtc

#endif // DTC_PASSES_SHARDINGRULES_H
