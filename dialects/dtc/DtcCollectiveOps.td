//===- DtcCollectiveOps.td - dtc collectives and async handles -*- tablegen -*-//
//
// The ops that partitioning (dtc-partition) inserts into per-rank SPMD
// functions: collectives over groups named by mesh axes, split into a start
// that returns an async handle and a `dtc.wait` that yields the result, so a
// scheduling pass can move the start early and the wait late. Included from
// DtcOps.td; verifiers and shape rules in DtcCollectiveOps.cpp.
//
// Group sizes come from the mesh of the enclosing function or module (a
// `dtc.mesh = #dtc.mesh<[dp = 2, tp = 4]>` attribute, outermost axis first),
// so one program
// text serves every rank: a group is "the ranks that differ from me only in
// these axes", never a list of rank numbers. See docs/partition.md.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COLLECTIVE_OPS_TD
#define DTC_COLLECTIVE_OPS_TD

include "dialects/dtc/DtcBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// The async handle type
//===----------------------------------------------------------------------===//

def Dtc_AsyncType : TypeDef<Dtc_Dialect, "Async"> {
  let mnemonic = "async";
  let summary = "A communication in flight; `dtc.wait` yields its result";
  let description = [{
    `!dtc.async<tensor<8x64xf32>>` is the handle of a started collective
    whose result is that tensor; `!dtc.async<none>` the handle of a send,
    which has no result. A handle is waited exactly once.
  }];
  let parameters = (ins "::mlir::Type":$valueType);
  let assemblyFormat = "`<` $valueType `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Collective starts
//===----------------------------------------------------------------------===//

// A started communication: it reads and writes memory no other op sees (the
// network), so nothing may delete, merge or reorder it across other
// collectives; every rank issues the same collectives in the same order.
class Dtc_StartOp<string mnemonic, list<Trait> traits = []>
    : Dtc_Op<mnemonic, !listconcat(traits,
                                   [MemoryEffects<[MemRead, MemWrite]>])> {
  let results = (outs Dtc_AsyncType:$handle);
  let hasVerifier = 1;
}

def Dtc_AllReduceStartOp : Dtc_StartOp<"all_reduce_start"> {
  let summary = "Start an all-reduce over the ranks of mesh axes";
  let description = [{
    Every rank of the group (the ranks that differ only in `mesh_axes`)
    receives the elementwise `reduction` (`sum`, `max` or `min`) of the
    group's inputs; the result has the input's type.

    ```mlir
    %h = dtc.all_reduce_start %x {mesh_axes = ["tp"]} : tensor<2x8x64xf32> -> !dtc.async<tensor<2x8x64xf32>>
    %y = dtc.wait %h : !dtc.async<tensor<2x8x64xf32>>
    ```
  }];
  let arguments = (ins Dtc_Tensor:$input, StrArrayAttr:$mesh_axes,
                   DefaultValuedStrAttr<StrAttr, "sum">:$reduction);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` qualified(type($handle))";
}

def Dtc_AllGatherStartOp : Dtc_StartOp<"all_gather_start"> {
  let summary = "Start an all-gather along one dimension";
  let description = [{
    Concatenates the group's inputs along `dim` in the order of the ranks'
    coordinates on `mesh_axes` (outermost first): the result's `dim` is
    `n` times the input's, `n` the group size. With `block = B` the
    dimension is interleaved (`#dtc.sharding`'s `:B`): the result's `dim` is
    read as `[size / B, B]` and each run of `B` is gathered from the runs of
    `B / n` of the inputs.
  }];
  let arguments = (ins Dtc_Tensor:$input, StrArrayAttr:$mesh_axes,
                   I64Attr:$dim, DefaultValuedAttr<I64Attr, "0">:$block);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` qualified(type($handle))";
}

def Dtc_ReduceScatterStartOp : Dtc_StartOp<"reduce_scatter_start"> {
  let summary = "Start a reduce-scatter along one dimension";
  let description = [{
    The `reduction` of the group's inputs, of which each rank keeps the
    part of `dim` at its coordinate on `mesh_axes`: the result's `dim` is
    the input's divided by the group size (`block` as for all-gather).
  }];
  let arguments = (ins Dtc_Tensor:$input, StrArrayAttr:$mesh_axes,
                   I64Attr:$dim, DefaultValuedAttr<I64Attr, "0">:$block,
                   DefaultValuedStrAttr<StrAttr, "sum">:$reduction);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` qualified(type($handle))";
}

def Dtc_AllToAllStartOp : Dtc_StartOp<"all_to_all_start"> {
  let summary = "Start an all-to-all: move a split from one dim to another";
  let description = [{
    Each rank splits its input along `split_dim` into `n` parts, sends part
    `i` to the rank at coordinate `i` and concatenates what it receives
    along `concat_dim`: `split_dim` shrinks by `n`, `concat_dim` grows by
    `n`.
  }];
  let arguments = (ins Dtc_Tensor:$input, StrArrayAttr:$mesh_axes,
                   I64Attr:$split_dim, I64Attr:$concat_dim);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` qualified(type($handle))";
}

def Dtc_SendStartOp : Dtc_StartOp<"send_start"> {
  let summary = "Start sending a tensor to a peer along one mesh axis";
  let description = [{
    The peer is the rank whose coordinate on the single axis of
    `mesh_axes` is this rank's plus `peer_offset`, all other coordinates
    equal (a pipeline neighbour). The handle is `!dtc.async<none>`: its wait
    says the buffer may be reused. Only ranks that have such a peer may run
    it (pipeline stages are separate functions), unless `cyclic`: then the
    coordinate wraps around the axis (the ring of context parallelism,
    where every rank sends and receives).
  }];
  let arguments = (ins Dtc_Tensor:$input, StrArrayAttr:$mesh_axes,
                   I64Attr:$peer_offset, UnitAttr:$cyclic);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` qualified(type($handle))";
}

def Dtc_RecvStartOp : Dtc_StartOp<"recv_start"> {
  let summary = "Start receiving a tensor from a peer along one mesh axis";
  let description = [{
    The matching half of `dtc.send_start`: receives the tensor of the
    handle's type from the rank at `peer_offset` along the axis (wrapping
    around it when `cyclic`).
  }];
  let arguments = (ins StrArrayAttr:$mesh_axes, I64Attr:$peer_offset,
                   UnitAttr:$cyclic);
  let assemblyFormat = "attr-dict `:` qualified(type($handle))";
}

//===----------------------------------------------------------------------===//
// Wait and local slicing
//===----------------------------------------------------------------------===//

def Dtc_WaitOp : Dtc_Op<"wait", [MemoryEffects<[MemRead, MemWrite]>,
                                 InferTypeOpAdaptor]> {
  let summary = "Wait for a started communication; yields its result";
  let description = [{
    Blocks until the communication of `handle` (the result of a
    `dtc.*_start` in the same block) is complete and yields its tensor
    (nothing for a send).
  }];
  let arguments = (ins Dtc_AsyncType:$handle);
  let results = (outs Optional<Dtc_Tensor>:$output);
  let assemblyFormat = "$handle attr-dict `:` qualified(type($handle))";
  let hasVerifier = 1;
}

def Dtc_ShardSliceOp : Dtc_Op<"shard_slice", [Pure]> {
  let summary = "This rank's part of a replicated value (no communication)";
  let description = [{
    Keeps the part of `dim` at this rank's coordinate on `mesh_axes`
    (outermost first): the result's `dim` is the input's divided by the
    group size (`block` as for all-gather). Turns a replicated value into a
    split one without moving data.
  }];
  let arguments = (ins Dtc_Tensor:$input, StrArrayAttr:$mesh_axes,
                   I64Attr:$dim, DefaultValuedAttr<I64Attr, "0">:$block);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Zigzag order (context parallelism, docs/partition.md)
//===----------------------------------------------------------------------===//

// The zigzag cut of a sequence is ring attention's (DtcOps.td).
def Dtc_ZigzagOrderOp : Dtc_Op<"zigzag_order", [Pure,
    AllTypesMatch<["input", "output"]>]> {
  let summary = "Reorders the halves of a zigzag context-parallel cut";
  let description = [{
    `dim` is read as `2 * parts` equal pieces. The zigzag order of a cut
    over `parts` ranks puts rank r's two pieces, r and 2 * parts - 1 - r,
    next to each other: piece p of the result is piece `p / 2` (p even) or
    `2 * parts - 1 - p / 2` (p odd) of the input. `inverse` undoes it. The
    partitioner puts it around the collectives that split or gather a
    sequence dim over the context axis, so that the contiguous parts they
    move are the zigzag chunks.
  }];
  let arguments = (ins Dtc_Tensor:$input, I64Attr:$dim, I64Attr:$parts,
                   UnitAttr:$inverse);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat =
      "$input attr-dict `:` type($input) `->` type($output)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy (docs/partition.md)
//===----------------------------------------------------------------------===//

// The logits' vocabulary split over `mesh_axes` (n the group size): a rank
// holds entries [c * v, (c + 1) * v) of every row, c its position in the
// group. The loss needs each row's log-sum-exp and label logit over the
// whole vocabulary: every rank computes three numbers per row over its
// shard (cross_entropy_stats), one all-gather of those gives every rank
// all of them, and the loss and its gradient follow without moving the
// logits (Megatron's vocab-parallel cross-entropy, in one exchange).

def Dtc_CrossEntropyStatsOp : Dtc_Op<"cross_entropy_stats", [Pure]> {
  let summary = "Per-row statistics of this rank's vocabulary shard";
  let description = [{
    `logits [..., v]` (this rank's shard), `labels [...]` (whole-vocabulary
    ids) -> `stats [..., 3]` (f32): the shard's largest logit m, the sum of
    exp(logit - m) over the shard, and the label's logit when the label
    falls in the shard (else 0; 0 too where the label is `ignore_index`).
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, Dtc_IndexTensor:$labels,
                   StrArrayAttr:$mesh_axes,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Dtc_FloatTensor:$stats);
  let assemblyFormat =
      "$logits `,` $labels attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Dtc_CrossEntropyFromStatsOp : Dtc_Op<"cross_entropy_from_stats", [Pure]> {
  let summary = "Mean cross-entropy from every shard's statistics";
  let description = [{
    `stats [..., 3n]` (the n shards' `cross_entropy_stats`, gathered along
    the last dim in group order), `labels [...]` -> the mean over the
    positions whose label is not `ignore_index` of M + log(sum_k s_k
    exp(m_k - M)) - sum_k t_k, M = max_k m_k: `dtc.cross_entropy` of the
    whole logits.
  }];
  let arguments = (ins Dtc_FloatTensor:$stats, Dtc_IndexTensor:$labels,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs 0DTensorOf<[F32]>:$loss);
  let assemblyFormat =
      "$stats `,` $labels attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Dtc_CrossEntropyShardGradOp : Dtc_Op<"cross_entropy_shard_grad", [Pure]> {
  let summary = "This rank's vocabulary shard of the cross-entropy gradient";
  let description = [{
    `logits [..., v]` (this rank's shard), `labels [...]`, `stats [..., 3n]`
    (gathered as for `cross_entropy_from_stats`), `grad_loss` (0-d f32) ->
    this shard of `dtc.cross_entropy_grad`'s result: (exp(logit - M) / S -
    onehot(label)) * grad_loss / count, S = sum_k s_k exp(m_k - M), count
    the positions whose label is not `ignore_index` (those rows are 0).
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, Dtc_IndexTensor:$labels,
                   Dtc_FloatTensor:$stats, 0DTensorOf<[F32]>:$grad_loss,
                   StrArrayAttr:$mesh_axes,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Dtc_FloatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $labels `,` $stats `,` $grad_loss attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel embedding (docs/partition.md)
//===----------------------------------------------------------------------===//

// The table's rows split over `mesh_axes` (n the group size): a rank holds
// rows [c * v, (c + 1) * v), c its position in the group. Its lookup gives
// the rows of the ids it holds and zeros for the others, so the sum over
// the group is the whole lookup (Megatron's VocabParallelEmbedding); its
// gradient is the table gradient's rows that it holds.

def Dtc_EmbeddingShardOp : Dtc_Op<"embedding_shard", [Pure]> {
  let summary = "Lookup into this rank's rows of the table, zero elsewhere";
  let description = [{
    `table [v, d]` (this rank's rows), `ids [...]` (whole-table ids, in
    `[0, n * v)`) -> `[..., d]`: row `ids[i] - c * v` of the shard where that
    falls in `[0, v)`, zeros elsewhere; a partial sum over `mesh_axes`.
  }];
  let arguments = (ins Dtc_FloatTensor:$table, Dtc_IndexTensor:$ids,
                   StrArrayAttr:$mesh_axes);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat =
      "$table `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

def Dtc_EmbeddingShardGradOp : Dtc_Op<"embedding_shard_grad", [Pure]> {
  let summary = "This rank's rows of the embedding's table gradient";
  let description = [{
    `grad [..., d]`, `ids [...]` (whole-table ids) -> `[v, d]`: row `r` the
    sum, in index order, of the gradient rows whose id is `c * v + r`
    (`dtc.embedding_grad`'s rows `[c * v, (c + 1) * v)`). `num_rows` is v.
  }];
  let arguments = (ins Dtc_FloatTensor:$grad, Dtc_IndexTensor:$ids,
                   I64Attr:$num_rows, StrArrayAttr:$mesh_axes);
  let results = (outs Dtc_FloatTensor:$table_grad);
  let assemblyFormat =
      "$grad `,` $ids attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
}

#endif // DTC_COLLECTIVE_OPS_TD
