//===- LoopLayout.h - Value layouts from an op's loop splits ----*- C++ -*-===//
//
// The one reading of a sharding rule: which dim of a value a split loop
// splits, and how. dtc-propagate-sharding enumerates loop splits and asks
// for the layouts they give; dtc-partition derives the loop split from the
// result layouts and asks for the operand layouts the local op reads.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_LOOPLAYOUT_H
#define DTC_PASSES_LOOPLAYOUT_H

#include "passes/AffineMatch.h"
#include "passes/Layout.h"

#include "mlir/IR/AffineMap.h"

#include <optional>

namespace mlir::dtc {

/// A mesh axis's split of an op's loops: the loop (-1: none), split in
/// runs of `block` (0: the loop's whole extent), into `pieces` parts (the
/// axis size; twice it for the zigzag halves of the context axis).
struct LoopSplit {
  int64_t loop = -1;
  int64_t block = 0;
  int64_t pieces = 1;
};

/// Each loop's extent: the smallest dim it indexes as a plain `d` (the
/// input of a slice from 0 and the result of its gradient are larger than
/// the loop); 1 for a loop no map indexes so. `shapes` are the values' dims in
/// the order of `maps` (operands, then results).
inline llvm::SmallVector<int64_t>
loopExtents(llvm::ArrayRef<AffineMap> maps,
            llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes, size_t numLoops) {
  llvm::SmallVector<int64_t> extent(numLoops, 0);
  for (auto [map, shape] : llvm::zip(maps, shapes))
    for (auto [d, expr] : llvm::enumerate(map.getResults())) {
      auto dim = dyn_cast<AffineDimExpr>(expr);
      if (!dim)
        continue;
      int64_t &e = extent[dim.getPosition()];
      e = e ? std::min(e, shape[d]) : shape[d];
    }
  for (int64_t &e : extent)
    e = e ? e : 1;
  return extent;
}

/// Why a value's dim cannot follow a loop split.
struct LoopLayoutError {
  enum Kind {
    /// A `d + c` dim whose offset or size is not a multiple of the runs,
    /// or runs that do not divide into the pieces.
    Misaligned,
    /// Grouped-query heads (`d floordiv g`) that do not divide into the
    /// pieces.
    UnevenGroups,
    /// Any other expression of the loop.
    NotPlainLoop,
  };
  size_t axis;
  int64_t dim;
  Kind kind;
};

/// The layout of a value that `map` indexes (dims `shape`) when the loops
/// (of extents `extent`) split as `splits`, one per mesh axis. A dim `d + c`
/// of a split loop d is split in the loop's runs, interleaved where a run
/// is not the whole dim (a slice reading from c); with `groupedHeads`, a
/// dim `d floordiv g` of a loop split whole is split whole (the key/value
/// heads of grouped-query attention). Axes whose loop `map` does not index
/// stay unsplit: whether a result is then a partial sum is the caller's.
inline std::optional<LoopLayoutError>
layoutForLoops(AffineMap map, llvm::ArrayRef<int64_t> shape,
               llvm::ArrayRef<LoopSplit> splits, llvm::ArrayRef<int64_t> extent,
               bool groupedHeads, Layout &layout) {
  layout = Layout::replicated(splits.size());
  for (auto [a, split] : llvm::enumerate(splits)) {
    if (split.loop < 0)
      continue;
    for (auto [d, expr] : llvm::enumerate(map.getResults())) {
      if (!expr.isFunctionOfDim(split.loop))
        continue;
      int64_t dim = static_cast<int64_t>(d), loop, offset;
      if (matchShifted(expr, loop, offset)) {
        int64_t run = split.block ? split.block : extent[split.loop];
        if (offset % run || shape[d] % run || run % split.pieces)
          return LoopLayoutError{a, dim, LoopLayoutError::Misaligned};
        layout.split(a, dim, run == shape[d] ? 0 : run);
        continue;
      }
      auto bin = dyn_cast<AffineBinaryOpExpr>(expr);
      if (groupedHeads && bin && bin.getKind() == AffineExprKind::FloorDiv &&
          isa<AffineDimExpr>(bin.getLHS()) && !split.block) {
        if (shape[d] % split.pieces)
          return LoopLayoutError{a, dim, LoopLayoutError::UnevenGroups};
        layout.split(a, dim);
        continue;
      }
      return LoopLayoutError{a, dim, LoopLayoutError::NotPlainLoop};
    }
  }
  return std::nullopt;
}

} // namespace mlir::dtc

#endif // DTC_PASSES_LOOPLAYOUT_H
