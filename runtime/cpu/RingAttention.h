//===- RingAttention.h - Ring attention math on the CPU ---------*- C++ -*-===//
//
// The math of dtc.attention_block, dtc.attention_merge and
// dtc.attention_block_grad on f32 arrays, with the global positions of the
// query and key chunks explicit, so that every (query chunk, key chunk) pair
// can be run without a communicator. The kernels find the positions from the
// rank's place in the group of `mesh_axes`. The zigzag cut (each chunk two
// halves of the sequence) runs as the four (query half, key half) blocks,
// each contiguous in positions.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CPU_RINGATTENTION_H
#define DTC_RUNTIME_CPU_RINGATTENTION_H

#include <cstdint>

namespace dtc::runtime::cpu {

/// query [batch, heads, queries, headDim], key [batch, groups, keys,
/// headDim], value [batch, groups, keys, valueDim]; query head h reads kv
/// head h / (heads / groups).
struct RingAttentionDims {
  int64_t batch, heads, groups, queries, keys, headDim, valueDim;
};

/// Where a chunk pair sits in the sequence and how it is scored: query row i
/// has position queryStart + i, key row j position keyStart + j; `causal`
/// hides keys after the query.
struct RingAttentionPositions {
  int64_t queryStart = 0, keyStart = 0;
  bool causal = false;
  float scale = 1.0f;
};

/// output [batch, heads, queries, valueDim] = softmax(scale q k^T) v over
/// this key chunk, lse [batch, heads, queries] = each row's log softmax
/// denominator (max included). Rows that see no key: output 0, lse -inf.
/// A null `output` computes lse alone.
void attentionBlock(const RingAttentionDims &dims,
                    const RingAttentionPositions &at, const float *query,
                    const float *key, const float *value, float *output,
                    float *lse);

/// Merges two blocks' `rows` rows of `width` values and their lse (the
/// online-softmax merge); both -inf gives 0 and -inf. `output` and `lse`
/// may alias the a or b operands.
void attentionMerge(int64_t rows, int64_t width, const float *outputA,
                    const float *lseA, const float *outputB, const float *lseB,
                    float *output, float *lse);

/// This key chunk's share of the attention gradient given the merged
/// whole-sequence `output` and `lse` and the output gradient `grad` (with a
/// null `output`, this chunk must be the whole sequence: the softmax
/// backward's row term is then summed from the scores themselves):
/// queryGrad [batch, heads, queries, headDim], keyGrad and valueGrad shaped
/// as key and value (summed over the query heads of each group).
void attentionBlockGrad(const RingAttentionDims &dims,
                        const RingAttentionPositions &at, const float *query,
                        const float *key, const float *value,
                        const float *output, const float *lse,
                        const float *grad, float *queryGrad, float *keyGrad,
                        float *valueGrad);

/// A block's chunk pair in a sequence cut into `chunks` (n) chunks of
/// `queries` query rows and `keys` key rows: contiguous chunk k holds
/// positions [k * rows, (k + 1) * rows); with `zigzag`, the halves k and
/// 2n - 1 - k of rows / 2 positions each, one after the other.
struct RingAttentionChunks {
  int64_t queryChunk = 0, keyChunk = 0, chunks = 1;
  bool zigzag = false, causal = false;
  float scale = 1.0f;
};

/// attentionBlock for a chunk pair. With `zigzag`, `queries` and `keys`
/// must be even.
void ringAttentionBlock(const RingAttentionDims &dims,
                        const RingAttentionChunks &at, const float *query,
                        const float *key, const float *value, float *output,
                        float *lse);

/// attentionBlockGrad for a chunk pair. With `zigzag`, `queries` and `keys`
/// must be even.
void ringAttentionBlockGrad(const RingAttentionDims &dims,
                            const RingAttentionChunks &at, const float *query,
                            const float *key, const float *value,
                            const float *output, const float *lse,
                            const float *grad, float *queryGrad, float *keyGrad,
                            float *valueGrad);

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_RINGATTENTION_H
