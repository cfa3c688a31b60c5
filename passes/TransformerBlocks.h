//===- TransformerBlocks.h - Layer boundaries of a model -------*- C++ -*-===//
//
// Where one layer of a model ends and the next begins, read from the data
// flow of a dtc function: the points where exactly one activation (the
// residual stream) flows from the ops before to the ops after. Pipeline
// stages are cut there; the transformer blocks are the spans between the
// points that precede consecutive attention ops, and blocks with the same
// structure are recognized as copies of one another. What the transformer
// fast path (compiler/ModelSummary.h) reads of an attention is read here too.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_TRANSFORMERBLOCKS_H
#define DTC_PASSES_TRANSFORMERBLOCKS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"

#include <optional>
#include <vector>

namespace dtc {

/// Parameters and constants: values that exist without computing (stages
/// and blocks take their own copies; they never cross a cut).
bool isFree(mlir::Operation *op);

/// The point before op `index` of a body, where `value` is the only
/// activation (a floating-point tensor of rank >= 2 that is not a parameter
/// or a constant) defined before and read after.
struct SingleCrossing {
  unsigned index;
  mlir::Value value;
};

/// The single-crossing points of `ops` (a body without its terminator, in
/// order), in order, excluding the very start and end.
llvm::SmallVector<SingleCrossing>
findSingleCrossings(llvm::ArrayRef<mlir::Operation *> ops);

/// One transformer block: ops [begin, end) of the function body, and the
/// first block with the same structure (ops, attributes, types and the way
/// they connect; parameters compared by type, not name).
struct TransformerBlock {
  unsigned begin = 0, end = 0;
  unsigned sameAs = 0;
};

/// What the transformer fast path reads of an attention op (the op the
/// blocks are found around): query heads, sequence length, key/value heads
/// and whether it is causal.
struct AttentionShape {
  int64_t heads = 0, seqLen = 0, kvHeads = 0;
  bool causal = false;
};

/// The shape of `op` when it is an attention, else none.
std::optional<AttentionShape> attentionShape(mlir::Operation *op);

/// The transformer blocks of `func`: block i starts at the last
/// single-crossing point before its attention op, and the last block spans
/// as many such points as the one before it. Empty when the function has no
/// attention, or its attentions are not separated by such points.
std::vector<TransformerBlock> findTransformerBlocks(mlir::func::FuncOp func);

} // namespace dtc

#endif // DTC_PASSES_TRANSFORMERBLOCKS_H
