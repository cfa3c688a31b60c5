//===- ShardingRules.h - Which loop splits leave partial sums ---*- C++ -*-===//
//
// Shared by dtc-propagate-sharding (which splits it may choose) and
// dtc-partition (which loop an annotation's partial sum came from), so the
// two always agree. Each op says it itself, through ShardingRuleOpInterface
// (its Dtc_SumReductions / Dtc_SumsOverParallelLoops traits or its own
// methods): no list of ops here.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_SHARDINGRULES_H
#define DTC_PASSES_SHARDINGRULES_H

#include "dialects/dtc/DtcOps.h"

namespace mlir::dtc {

/// Reduction loops whose split leaves a partial *sum* (the group's sum is
/// the result): contractions, sums and means, the positions of the loss
/// (ShardingRuleOpInterface::isSumReductionLoop).
inline bool isSumLikeReduction(Operation *op, int64_t loop) {
  auto rule = dyn_cast<ShardingRuleOpInterface>(op);
  return rule && rule.isSumReductionLoop(loop);
}

/// The vocabulary of the loss and of its gradient: a log-sum-exp, but one
/// the partitioner splits with the loss's own statistics exchange
/// (cross_entropy_stats and one small all-gather, docs/partition.md), so
/// the loss stays whole and its gradient is split like the logits.
inline bool isVocabParallelLoop(Operation *op, int64_t loop) {
  auto rule = dyn_cast<ShardingRuleOpInterface>(op);
  return rule && rule.isVocabParallelLoop(loop);
}

/// Gradient ops with a result that sums over a parallel loop it does not
/// index (weight gradients over the rows, key and value gradients over the
/// queries): splitting that loop leaves that result a partial sum.
inline bool sumsOverParallelLoops(Operation *op) {
  auto rule = dyn_cast<ShardingRuleOpInterface>(op);
  return rule && rule.sumsOverParallelLoops();
}

/// The whole op's compute as sharding propagation prices it (split by the
/// ranks that share it): GEMMs and attention at their own price
/// (passes/OpCost.h: 2mnk, attention 2bhst(d + dv)), other ops one
/// operation per point of their loops, two with a multiply-add; a lookup's
/// table rows add none. Defined with the pass (DtcPasses).
double shardingComputeFlops(ShardingRuleOpInterface rule);

} // namespace mlir::dtc

#endif // DTC_PASSES_SHARDINGRULES_H
