//===- ReshapeSplits.h - Which splits survive a reshape ---------*- C++ -*-===//
//
// Shared by dtc-propagate-sharding (the sharding a reshape's result takes)
// and dtc-partition (the layout it reads its input in), so the two always
// agree. A reshape keeps the row-major order: a split is a digit of the flat
// index (a stride and a count), found again in whichever result dim holds
// it whole.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_RESHAPESPLITS_H
#define DTC_PASSES_RESHAPESPLITS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

#include <cstdint>

namespace mlir::dtc {

/// One mesh axis's split of a value: the dim (-1: none) and its interleave
/// block (0: the whole dim). Several axes on one dim cut it in mesh order,
/// outermost first, each with block 0.
struct AxisSplit {
  int64_t dim = -1;
  int64_t block = 0;
};

/// The splits of a reshape's result for `input`'s (one per mesh axis, of
/// sizes `axisSizes`); an axis whose digit no result dim holds whole is -1
/// there (the input must be gathered over it first), as is every axis
/// nested inside it on its input dim.
inline llvm::SmallVector<AxisSplit>
reshapeSplits(llvm::ArrayRef<int64_t> inShape, llvm::ArrayRef<int64_t> outShape,
              llvm::ArrayRef<AxisSplit> input,
              llvm::ArrayRef<int64_t> axisSizes) {
  auto trailing = [](llvm::ArrayRef<int64_t> shape) {
    llvm::SmallVector<int64_t> t(shape.size(), 1);
    for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
      t[i] = t[i + 1] * shape[i + 1];
    return t;
  };
  llvm::SmallVector<int64_t> inT = trailing(inShape), outT = trailing(outShape);
  size_t numAxes = input.size();
  auto sharesDim = [&](llvm::ArrayRef<AxisSplit> splits, size_t a) {
    return llvm::any_of(llvm::seq<size_t>(0, numAxes), [&](size_t b) {
      return b != a && splits[b].dim == splits[a].dim;
    });
  };
  llvm::SmallVector<AxisSplit> result(numAxes);
  // The digit of each axis: its run within the dim is what the axes outside
  // it on that dim leave (or its interleave block when alone).
  for (size_t a = 0; a < numAxes; ++a) {
    if (input[a].dim < 0)
      continue;
    int64_t d = input[a].dim, n = axisSizes[a];
    bool shared = sharesDim(input, a);
    if (shared && llvm::any_of(llvm::seq<size_t>(0, numAxes), [&](size_t b) {
          return input[b].dim == d && input[b].block;
        }))
      continue;
    int64_t run = input[a].block ? input[a].block : inShape[d];
    for (size_t b = 0; b < a; ++b)
      if (input[b].dim == d)
        run /= axisSizes[b];
    int64_t stride = inT[d] * run / n;
    for (size_t j = 0; j < outShape.size(); ++j) {
      if (stride % outT[j] || stride * n > outT[j] * outShape[j] ||
          (outT[j] * outShape[j]) % (stride * n))
        continue;
      result[a] = {static_cast<int64_t>(j), stride * n / outT[j]};
      break;
    }
  }
  // In each result dim, the axes must nest in mesh order from the whole dim
  // down (a lone axis may be interleaved instead).
  for (size_t j = 0; j < outShape.size(); ++j) {
    llvm::SmallVector<size_t> on;
    for (size_t a = 0; a < numAxes; ++a)
      if (result[a].dim == static_cast<int64_t>(j))
        on.push_back(a);
    if (on.size() == 1) {
      AxisSplit &s = result[on.front()];
      s.block = s.block == outShape[j] ? 0 : s.block;
      continue;
    }
    int64_t expected = outShape[j];
    bool nested = true;
    for (size_t a : on) {
      nested = nested && result[a].block == expected;
      if (nested) {
        result[a].block = 0;
        expected /= axisSizes[a];
      } else {
        result[a] = AxisSplit{};
      }
    }
  }
  // An axis that does not survive is gathered, and with it every axis cut
  // inside it on its input dim.
  for (size_t a = 0; a < numAxes; ++a)
    if (input[a].dim >= 0 && result[a].dim < 0)
      for (size_t b = a + 1; b < numAxes; ++b)
        if (input[b].dim == input[a].dim)
          result[b] = AxisSplit{};
  return result;
}

} // namespace mlir::dtc

#endif // DTC_PASSES_RESHAPESPLITS_H
