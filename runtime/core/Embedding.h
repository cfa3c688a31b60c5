//===- Embedding.h - Embedding lookup operand checks ------------*- C++ -*-===//
//
// The operands of dtc.embedding, dtc.embedding_grad and their
// vocabulary-parallel forms dtc.embedding_shard and dtc.embedding_shard_grad
// (dialects/dtc/DtcCollectiveOps.td), and of the element lookups
// dtc.gather_elements and its gradient, read and checked once for every
// backend. Id values are the kernels' to check: they may live on a device.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_EMBEDDING_H
#define DTC_RUNTIME_CORE_EMBEDDING_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime {

/// A lookup of `count` ids into a table of `rows` rows of `dim` elements:
/// this rank's shard `position` of `shards` (table rows [firstId(),
/// firstId() + rows) of wholeRows()); a whole table is shard 0 of 1. Ids
/// must lie in [0, wholeRows()); those outside this shard read zeros and
/// add nothing to its gradient.
struct EmbeddingRows {
  int64_t rows = 0, dim = 0, count = 0, shards = 1, position = 0;
  bool ids64 = true;

  int64_t firstId() const { return position * rows; }
  int64_t wholeRows() const { return shards * rows; }
  /// The row of this shard that `id` reads, or -1.
  int64_t localRow(int64_t id) const {
    int64_t row = id - firstId();
    return row >= 0 && row < rows ? row : -1;
  }
};

/// embedding / embedding_shard: table [rows, dim], ids [...] -> [..., dim]
/// of the table's dtype.
llvm::Expected<EmbeddingRows> readEmbedding(const KernelCall &call);
/// embedding_grad / embedding_shard_grad: grad [..., dim], ids [...] ->
/// [num_rows, dim] of a float dtype.
llvm::Expected<EmbeddingRows> readEmbeddingGrad(const KernelCall &call);

/// gather_elements: indices [outer..., count, inner...] look up along a data
/// axis of `size` elements; element (o, j, i) of the indices-shaped values
/// is at (o * count + j) * inner + i, its data element at
/// (o * size + normalize(index)) * inner + i. Indices lie in [-size, size);
/// a negative one counts from the end (ONNX).
struct ElementLookup {
  int64_t outer = 1, count = 1, size = 1, inner = 1;
  bool ids64 = true;

  int64_t elements() const { return outer * count * inner; }
  /// The data offset of indices-shaped element `e` whose index is `id`
  /// (already normalized).
  int64_t dataOffset(int64_t e, int64_t id) const {
    int64_t o = e / (count * inner), i = e % inner;
    return (o * size + id) * inner + i;
  }
};

/// gather_elements: data, indices (same rank, equal off `axis`) -> the
/// indices' shape of the data's dtype.
llvm::Expected<ElementLookup> readGatherElements(const KernelCall &call);
/// gather_elements_grad: grad, indices (same shape) -> the indices' shape
/// with `dim_size` along `axis`, of a float dtype.
llvm::Expected<ElementLookup> readGatherElementsGrad(const KernelCall &call);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_EMBEDDING_H
