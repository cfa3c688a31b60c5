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
  let cppNamespace = "::mlir::dtc::traits";
}
def Dtc_SumsOverParallelLoops : NativeOpTrait<"SumsOverParallelLoops"> {
  let cppNamespace = "::mlir::dtc::traits";
}
// Every reduction loop of the op is a mean: it divides by the loop's
// extent (reduce_mean).
def Dtc_MeanReductions : NativeOpTrait<"MeanReductions"> {
  let cppNamespace = "::mlir::dtc::traits";
}

// Work per iteration of the op's loop nest, for the sharding propagation's
// node costs: a multiply and an add (contractions, attention) count two
// FLOPs, any other op one; a lookup's last loop (the table rows, a one-hot
// contraction) selects rather than iterates, so it adds no work and
// splitting it saves none.
def Dtc_MultiplyAdd : NativeOpTrait<"MultiplyAdd"> {
  let cppNamespace = "::mlir::dtc::traits";
}
def Dtc_RowLookup : NativeOpTrait<"RowLookup"> {
  let cppNamespace = "::mlir::dtc::traits";
}

// Selective activation recompute (passes/recompute) may run the op again
// in the backward pass instead of saving its result: its cost is one pass
// over its operands (elementwise ops, softmax, data movement, reductions).
def Dtc_Recomputable : NativeOpTrait<"Recomputable"> {
  let cppNamespace = "::mlir::dtc::traits";
}

def Dtc_InPlaceOpInterface : OpInterface<"InPlaceOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    An op whose kernels (CPU and CUDA) may write a result over an operand's
    buffer: each element is read before the same element of the result is
    written. The program's memory planner (passes/lowering) shares the two
    buffers when the operand is dead after the op (or is state the op
    updates) and the types match.
  }];
  let methods = [
    InterfaceMethod<[{
        (result, operand) pairs that may share a buffer. Default: result 0
        over each operand (elementwise kernels).
      }],
      "::llvm::SmallVector<std::pair<unsigned, unsigned>>",
      "getInPlaceOperands", (ins), [{}], [{
        ::llvm::SmallVector<std::pair<unsigned, unsigned>> pairs;
        for (unsigned i = 0; i < $_op->getNumOperands(); ++i)
          pairs.push_back({0, i});
        return pairs;
      }]>,
  ];
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
            ::mlir::dtc::traits::SumReductions>();
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
        Whether the op divides by the extent of loop `loop` (a mean over
        it: reduce_mean's dims, the loss's and its gradient's positions),
        so that a copy over a split of it divides by its local extent and
        the partitioner rescales its result by the parts. Default: the
        reduction loops of an op with the Dtc_MeanReductions trait.
      }],
      "bool", "isMeanLoop", (ins "int64_t":$loop), [{}], [{
        return $_op->template hasTrait<::mlir::dtc::traits::MeanReductions>()
            && $_op.getLoopIteratorTypes()[loop] ==
                   ::mlir::utils::IteratorType::reduction;
      }]>,
    InterfaceMethod<[{
        Whether a result sums over a parallel loop it does not index, so
        that splitting that loop leaves the result a partial sum. Default:
        the op's Dtc_SumsOverParallelLoops trait.
      }],
      "bool", "sumsOverParallelLoops", (ins), [{}], [{
        return $_op->template hasTrait<
            ::mlir::dtc::traits::SumsOverParallelLoops>();
      }]>,
  ];
  // Runs after the op's own verifier and shape rule, so the rule is only
  // computed for ops whose operands are known to be well formed.
  let verify = [{ return ::mlir::dtc::detail::verifyShardingRule($_op); }];
  let verifyWithRegions = 1;
}

def Dtc_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    An op the reverse-mode autodiff (passes/autodiff) can differentiate: its
    gradient rule, a vector-Jacobian product, defined next to the op's shape
    and sharding rules. The rule reads the op's operands and results (saved
    activations) and the cotangents of its results from the
    GradientBuilder, and sets the cotangents of the operands the autodiff
    wants, each with exactly its operand's type. Ops without it (leaves,
    comparisons, the gradient ops, the optimizer, what partitioning inserts
    after autodiff) stop the autodiff with "has no gradient rule" when the
    loss depends on them through a float operand.
  }];
  let methods = [
    InterfaceMethod<[{
        Emits the cotangents of the wanted operands through
        `builder.setGrad`. Failure (after an error at the op) for attributes
        the rule cannot differentiate.
      }],
      "::llvm::LogicalResult", "buildGradient",
      (ins "::mlir::dtc::GradientBuilder &":$builder)>,
  ];
}

def Dtc_LocalFormOpInterface : OpInterface<"LocalFormOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    An op whose attributes hold global positions or shapes, or a default
    that depends on a global shape, so that its per-device copy needs more
    than local operand and result types: a slice's bounds, a gradient op's
    result shape, attention's scale of 1/sqrt(head dim). The partitioner
    (passes/partition) calls `localize` on the copy it made of `global`,
    after the copy's types became local.
  }];
  let methods = [
    InterfaceMethod<[{
        Rewrites the attributes of this local copy. Failure (after an error
        at the global op) for a split the local form cannot express.
      }],
      "::llvm::LogicalResult", "localize",
      (ins "const ::mlir::dtc::LocalForm &":$form)>,
  ];
}

def Dtc_ComputedDefaultsOpInterface
    : OpInterface<"ComputedDefaultsOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    An op with an optional attribute whose default is computed from its
    operand types rather than stated in ODS (attention's scale of
    1/sqrt(head dim)). Program lowering (passes/lowering) writes these
    defaults, with ODS's DefaultValuedAttr ones, into each instruction, so
    that no runtime restates them.
  }];
  let methods = [
    InterfaceMethod<[{
        Sets each absent attribute of this kind in `attributes` (the op's
        own) to its computed default.
      }],
      "void", "addComputedDefaults",
      (ins "::mlir::NamedAttrList &":$attributes)>,
  ];
}

def Dtc_SequenceMixingOpInterface : OpInterface<"SequenceMixingOpInterface"> {
  let cppNamespace = "::mlir::dtc";
  let description = [{
    An op whose result at a query position reads its operands at other
    positions of the sequence (attention, and its gradient), where the loop
    rule does not say all of how it may be split. A causal op masks by
    query position, which a rank holding a block of the queries does not
    know: only the context axis, whose ring lowering (docs/partition.md)
    passes the positions, may split them. Over that axis the op runs as a
    ring: the operands it names (keys, values) stay split along their
    positions and travel around the ring, and the results it names (their
    gradients) come back to the ranks that hold those operands. Sharding
    propagation reads this to allow and price such splits; loss binding
    reads whether a model sees later positions.
  }];
  let methods = [
    InterfaceMethod<[{
        Whether the result at a position reads only positions up to it (a
        causal mask).
      }],
      "bool", "isCausal">,
    InterfaceMethod<
      "The loop over the query positions, those the results are at.",
      "int64_t", "getQueryPositionLoop">,
    InterfaceMethod<
      "The loop over the positions read (the keys').",
      "int64_t", "getKeyPositionLoop">,
    InterfaceMethod<[{
        The operands that travel around the context-parallel ring, split
        along their key-position loop.
      }],
      "::llvm::SmallVector<unsigned>", "getRingOperands">,
    InterfaceMethod<[{
        The results that come back around the ring to the ranks that hold
        the ring operands, split along their key-position loop.
      }],
      "::llvm::SmallVector<unsigned>", "getRingResults">,
  ];
}

#endif // DTC_INTERFACES_TD
