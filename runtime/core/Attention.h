//===- Attention.h - Attention operand checks -------------------*- C++ -*-===//
//
// The shapes and attributes of dtc.attention, dtc.attention_grad and the
// ring attention ops (attention_block, attention_block_grad,
// attention_merge, zigzag_order), read and checked once for every backend
// (as Window.h does for convolutions): a kernel that gets past these reads
// only in bounds.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_ATTENTION_H
#define DTC_RUNTIME_CORE_ATTENTION_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime {

/// query [batch, heads, queries, headDim], key [batch, groups, keys,
/// headDim], value [batch, groups, keys, valueDim], heads a multiple of
/// groups (query head i reads key/value head i / (heads / groups)).
struct AttentionOperands {
  int64_t batch = 0, heads = 0, groups = 0, queries = 0, keys = 0, headDim = 0,
          valueDim = 0;
  bool causal = false;
  double scale = 0;
};

/// Inputs 0-2 (query, key, value) and the scale and causal attributes, as
/// every attention op (the ring blocks too) reads them.
llvm::Expected<AttentionOperands> readAttentionInputs(const KernelCall &call);

/// dtc.attention: float query, key, value -> float result [batch, heads,
/// queries, valueDim].
llvm::Expected<AttentionOperands> readAttention(const KernelCall &call);

/// dtc.attention_grad: query, key, value and d result -> float d query,
/// d key, d value, each shaped as its primal.
llvm::Expected<AttentionOperands> readAttentionGrad(const KernelCall &call);

/// The chunk pair a ring attention block scores. This rank's query chunk is
/// its place c in the group of `mesh_axes` (of size n, the number of
/// chunks), its key chunk the one it holds after `kv_shift` hops,
/// (c - kv_shift) mod n. Chunk k holds rows [k * len, (k + 1) * len) of the
/// sequence, or with `zigzag` the halves k and 2n - 1 - k. Without a
/// communicator the group is this rank alone.
struct RingChunks {
  int64_t queryChunk = 0, keyChunk = 0, chunks = 1;
  bool zigzag = false;
};

struct AttentionBlockOperands {
  AttentionOperands dims;
  RingChunks at;
};

/// dtc.attention_block: query, key, value -> float output [batch, heads,
/// queries, valueDim] and lse [batch, heads, queries].
llvm::Expected<AttentionBlockOperands>
readAttentionBlock(const KernelCall &call);

/// dtc.attention_block_grad: query, key, value, the merged output and lse,
/// and d output -> float d query, d key, d value, each shaped as its primal.
llvm::Expected<AttentionBlockOperands>
readAttentionBlockGrad(const KernelCall &call);

/// dtc.attention_merge: two (output [..., width], lse [...]) pairs -> one;
/// `rows` is the number of lse entries.
struct AttentionMergeRows {
  int64_t rows = 0, width = 0;
};
llvm::Expected<AttentionMergeRows> readAttentionMerge(const KernelCall &call);

/// dtc.zigzag_order: dim `dim` cut into 2 x `parts` pieces, reordered
/// (piece p of the zigzag order is zigzagPiece(p, parts) of the natural
/// one; `inverse` undoes it). Within one of the `outer` indices before
/// `dim` a piece is `pieceBytes` contiguous bytes; 0 for an empty tensor.
struct ZigzagPieces {
  int64_t outer = 0, parts = 0;
  size_t pieceBytes = 0;
  bool inverse = false;
};
llvm::Expected<ZigzagPieces> readZigzagOrder(const KernelCall &call);

/// Piece p of the zigzag order is piece p / 2 (p even) or 2 * parts - 1 -
/// p / 2 (p odd) of the natural order.
inline int64_t zigzagPiece(int64_t p, int64_t parts) {
  return p % 2 ? 2 * parts - 1 - p / 2 : p / 2;
}

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_ATTENTION_H
