//===- DtcInterfaces.td - dtc op interfaces ----------------*- tablegen -*-===//

#ifndef DTC_INTERFACES_TD
#define DTC_INTERFACES_TD

include "mlir/IR/OpBase.td"

// Traits the interface's default methods read (their C++ classes are in
// DtcOps.h): every reduction loop of the op is a sum (contractions, sums,
// means); the op has a result that sums over a parallel loop it does not
// index (weight gradients over the rows, key and value gradients over the
// queries).
def Dtc_SumReductions : NativeOpTrait<"SumReductions"> {
  let cppNamespace = "::mlir::dtc::sharding_traits";
}
def Dtc_SumsOverParallelLoops : NativeOpTrait<"SumsOverParallelLoops"> {
  let cppNamespace = "::mlir::dtc::sharding_traits";
}

def Dtc_ShardingRuleOpInterface : OpInterface<"ShardingRuleOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    Describes an op as a loop nest, the way upstream MLIR's structured ops and
    the `shard` dialect do: one iterator type per loop (parallel or
    reduction) and one affine indexing map per operand and result, from the
    loops to that value's dimensions. A dimension addressed by a plain loop
    may be split along that loop; splitting a reduction loop leaves partial
    sums that need a collective. Propagation, partitioning and the cost model
    read only this, so a new op needs no special case where the rule fits.
  }];
  let methods = [
    InterfaceMethod<
      "Iterator type of each loop of the op's iteration space.",
      "::llvm::SmallVector<::mlir::utils::IteratorType>",
      "getLoopIteratorTypes">,
    InterfaceMethod<
      "Indexing maps from the loops to each operand, then each result.",
      "::llvm::SmallVector<::mlir::AffineMap>", "getIndexingMaps">,
    InterfaceMethod<[{
        Whether splitting reduction loop `loop` leaves a partial *sum* (the
        group's sum is the result). Other reductions (a max, a softmax's or
        the loss's vocabulary) cannot be split without the op's own
        cross-shard statistics. Default: the op's Dtc_SumReductions trait.
      }],
      "bool", "isSumReductionLoop", (ins "int64_t":$loop), [{}], [{
        return $_op->template hasTrait<
            ::mlir::dtc::sharding_traits::SumReductions>();
      }]>,
    InterfaceMethod<[{
        Whether loop `loop` is a log-sum-exp the partitioner splits with the
        op's own statistics exchange (the loss's vocabulary,
        docs/partition.md), so that a split of it leaves no partial sum.
      }],
      "bool", "isVocabParallelLoop", (ins "int64_t":$loop), [{}], [{
        return false;
      }]>,
    InterfaceMethod<[{
        Whether a result sums over a parallel loop it does not index, so
        that splitting that loop leaves the result a partial sum. Default:
        the op's Dtc_SumsOverParallelLoops trait.
      }],
      "bool", "sumsOverParallelLoops", (ins), [{}], [{
        return $_op->template hasTrait<
            ::mlir::dtc::sharding_traits::SumsOverParallelLoops>();
      }]>,
  ];
  // Runs after the op's own verifier and shape rule, so the rule is only
  // computed for ops whose operands are known to be well formed.
  let verify = [{ return ::mlir::dtc::detail::verifyShardingRule($_op); }];
  let verifyWithRegions = 1;
}

#endif // DTC_INTERFACES_TD
