//===- DtcInterfaces.td - dtc op interfaces ----------------*- tablegen -*-===//

#ifndef DTC_INTERFACES_TD
#define DTC_INTERFACES_TD

include "mlir/IR/OpBase.td"

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
  ];
  // Runs after the op's own verifier and shape rule, so the rule is only
  // computed for ops whose operands are known to be well formed.
  let verify = [{ return ::mlir::dtc::detail::verifyShardingRule($_op); }];
  let verifyWithRegions = 1;
}

#endif // DTC_INTERFACES_TD
