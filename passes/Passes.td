//===- Passes.td - dtc passes ------------------------------*- tablegen -*-===//
//
// Every dtc pass is declared here once (name, options, docs); dtc-opt and
// the compile pipeline both register from this list.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_TD
#define DTC_PASSES_TD

include "mlir/Pass/PassBase.td"

def DtcSimplify : Pass<"dtc-simplify"> {
  let summary = "Fold and canonicalize dtc ops and drop dead ones";
  let description = [{
    Applies the dtc dialect's folders and canonicalization patterns to a
    fixed point: identities (`x + 0`, `x * 1`, identity transposes, reshapes
    and slices), constant folding of elementwise ops, merged chains of
    reshapes and transposes; then erases side-effect-free ops whose results
    are unused. The importer relies on it to clean up exported graphs.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect"];
  let options = [
    Option<"maxIterations", "max-iterations", "int64_t",
           /*default=*/"10",
           "Give up (and report an error) after this many rewrite rounds">,
  ];
}

def DtcTestShardingRules : Pass<"dtc-test-sharding-rules"> {
  let summary = "Attach each op's sharding rule as attributes (for tests)";
  let description = [{
    Sets `dtc.iterator_types` and `dtc.indexing_maps` on every op that
    implements ShardingRuleOpInterface, so lit tests can check the rules
    that propagation and the cost model will read.
  }];
  let options = [
    Option<"loopKinds", "loop-kinds", "bool", /*default=*/"false",
           "Also set `dtc.loop_kinds` (per loop: parallel, sum, "
           "vocab-parallel or max-like, what a split of it leaves) and "
           "`dtc.sums_over_parallel_loops`">,
  ];
}

def DtcPropagateSharding : Pass<"dtc-propagate-sharding"> {
  let summary = "Choose a sharding for every op over a device mesh";
  let description = [{
    Given a device mesh (`mesh=dp:2,tp:4`) and the data-parallel axis (the
    graph inputs' batch dim is split over it), chooses for every op of each
    function body a split of its loops (each loop unsplit or split over one
    mesh axis) and writes the resulting `#dtc.sharding` of each result as
    `dtc.sharding = [...]` on the op (and on the function's arguments). The
    choice minimizes the bytes moved by resharding in the forward and the
    backward pass (all-gather, all-reduce, reduce-scatter, all-to-all), plus
    compute converted to bytes and a small weight on per-device memory; a
    beam-pruned dynamic program over the ops in order, states keyed by the
    shardings of the live values. Nothing is rewritten: partitioning reads
    the annotations. See docs/sharding.md.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect"];
  let options = [
    Option<"mesh", "mesh", "std::string", /*default=*/"\"\"",
           "Device mesh as name:size pairs, outermost first (dp:2,tp:4)">,
    Option<"dataParallelAxis", "data-parallel-axis", "std::string",
           /*default=*/"\"dp\"",
           "Mesh axis the batch dim of the graph inputs is split over">,
    Option<"expertParallelAxis", "expert-parallel-axis", "std::string",
           /*default=*/"\"ep\"",
           "Mesh axis that splits the batch inside the data-parallel one "
           "and the experts of MoE layers (docs/moe.md)">,
    Option<"contextParallelAxis", "context-parallel-axis", "std::string",
           /*default=*/"\"cp\"",
           "Mesh axis the sequence dim of the graph inputs is split over; "
           "it splits sequence loops only, and attention over it reads its "
           "keys and values split too (ring attention)">,
    Option<"sequenceParallel", "sequence-parallel", "bool",
           /*default=*/"false",
           "Let axes other than the data-parallel one split token dims "
           "(batch, sequence) too: Megatron's sequence parallelism">,
    Option<"beamWidth", "beam", "int64_t", /*default=*/"64",
           "States kept after each op (larger: slower, closer to optimal)">,
    Option<"flopsPerByte", "flops-per-byte", "double", /*default=*/"1000",
           "Compute counted as one byte of communication per this many "
           "flops (accelerator flop/s over link bytes/s)">,
    Option<"memoryWeight", "memory-weight", "double", /*default=*/"0.1",
           "Cost of one byte of per-device memory, in bytes of "
           "communication (tie-breaker towards split weights)">,
  ];
}

def DtcAutodiff : Pass<"dtc-autodiff", "::mlir::ModuleOp"> {
  let summary = "Build the gradient function of every function with a loss";
  let description = [{
    For every function whose result `loss-index` is a 0-d float tensor,
    builds `@<name>_grad` next to it with buildGradientFunction
    (passes/autodiff/Autodiff.h): the forward results, then d loss / d p for
    every float `dtc.parameter` p (result attribute `dtc.grad_of`), then, with
    `wrt-arguments`, d loss / d each float argument (`dtc.grad_of_arg`). An op
    on the path to the loss without a gradient rule is an error at that op.
    See docs/autodiff.md.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"lossIndex", "loss-index", "unsigned", /*default=*/"0",
           "Index of the result that is the loss">,
    Option<"wrtArguments", "wrt-arguments", "bool", /*default=*/"false",
           "Also differentiate with respect to the float arguments">,
  ];
}

def DtcPartition : Pass<"dtc-partition", "::mlir::ModuleOp"> {
  let summary = "Rewrite sharded functions into per-rank SPMD functions";
  let description = [{
    Reads the `dtc.sharding` annotations of `dtc-propagate-sharding` over the
    mesh `mesh` and rewrites every annotated function into the program one
    rank runs: every tensor type becomes its local shape, parameters their
    local shards (same name, `dtc.shard` and `dtc.global_type` describe the
    shard), and collectives are inserted where a value's sharding changes
    between producer and consumer: all-reduce for a partial sum read whole,
    reduce-scatter for a partial sum read split, all-gather for a split read
    replicated, all-to-all for a split that moves to another dim, and a
    local `dtc.shard_slice` for a replicated value read split. Collectives
    are `dtc.*_start` + `dtc.wait` pairs, groups named by mesh axes; the
    function gets `dtc.mesh`. See docs/partition.md.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"mesh", "mesh", "std::string", /*default=*/"\"\"",
           "Device mesh as name:size pairs, outermost first (dp:2,tp:4); "
           "the same as propagation's">,
    Option<"contextParallelAxis", "context-parallel-axis", "std::string",
           /*default=*/"\"cp\"",
           "Mesh axis of context parallelism: attention with its query "
           "positions split over it runs as a ring over its key/value "
           "chunks">,
    Option<"contextZigzag", "context-zigzag", "bool", /*default=*/"true",
           "A sequence split over the context axis holds zigzag chunks "
           "(halves k and 2n-1-k of 2n), which balances causal attention "
           "over the ring">,
    Option<"deferGradientSync", "defer-gradient-sync", "bool",
           /*default=*/"false",
           "Return parameter gradients as partial sums (their dtc.sharding "
           "lists the axes) for the training step to reduce once per step">,
  ];
}

def DtcRecompute : Pass<"dtc-recompute", "::mlir::ModuleOp"> {
  let summary = "Activation recompute (checkpointing) in gradient functions";
  let description = [{
    For every function whose result `loss-index` is a 0-d float tensor, the
    ops up to the one defining the loss are the forward part and the rest
    the backward part (as buildGradientFunction emits them). `mode=full`
    keeps only checkpoints alive across the boundary (the inputs of
    `dtc.layer_norm`/`dtc.rms_norm`, arguments, parameters, constants, the
    loss op's operands);
    `mode=selective` recomputes the values of cheap ops (elementwise,
    softmax, data movement, reductions, the Q K^T score matmul of unfused
    attention) that are computable from values saved anyway; `mode=none` changes
    nothing. Backward reads of a recomputed value go to clones of the
    forward ops (attribute `dtc.recomputed`), emitted once each, right
    before their first backward use. See docs/recompute.md.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"mode", "mode", "std::string", /*default=*/"\"full\"",
           "none, selective or full">,
    Option<"lossIndex", "loss-index", "unsigned", /*default=*/"0",
           "Index of the result that is the loss (ends the forward part)">,
    Option<"report", "report", "bool", /*default=*/"false",
           "Emit a remark per function: values saved and recomputed, bytes, "
           "ops cloned">,
  ];
}

//===----------------------------------------------------------------------===//
// The training step (passes/training, docs/training.md). dtc-training-pipeline
// (TrainingPipeline.h) runs them in order; each also runs alone in dtc-opt.
//===----------------------------------------------------------------------===//

def DtcBindLoss : Pass<"dtc-bind-loss", "::mlir::ModuleOp"> {
  let summary = "Make the one forward function return its training loss";
  let description = [{
    Binds the training data to the arguments of the module's one function
    (`dtc.feed`: tokens, labels, a classifier's inputs) and makes it return
    only the loss: the model's own scalar loss, or next-token (or class)
    cross-entropy appended to its logits, plus each MoE layer's
    load-balancing loss. The result is named `loss`. What the runtime needs
    to feed the step is written on the module as `dtc.step_info` (micro
    batch, sequence length, vocabulary, MoE layers and experts). A graph
    whose inputs and outputs fit no binding is an error naming them. The
    options are dtc::LossRequest's (`dtc compile --loss`, `--feed`).
  }];
  let options = [
    Option<"objective", "objective", "std::string", /*default=*/"\"\"",
           "next-token, masked-lm, seq2seq, classify or model; empty: "
           "from the graph">,
    Option<"lossOutput", "loss-output", "std::string", /*default=*/"\"\"",
           "model: the output holding the loss">,
    ListOption<"feeds", "feeds", "std::string",
               "NAME=ROLE bindings of graph inputs to data roles">,
    Option<"maskTokenId", "mask-token-id", "int64_t", /*default=*/"-1",
           "masked-lm: the [MASK] id">,
    Option<"maskProbability", "mask-probability", "double",
           /*default=*/"0.15", "masked-lm: the fraction of tokens masked">,
    Option<"decoderStartTokenId", "decoder-start-token-id", "int64_t",
           /*default=*/"-1", "seq2seq: the decoder's first input id">
  ];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
}

def DtcStepGradient : Pass<"dtc-step-gradient", "::mlir::ModuleOp"> {
  let summary = "Replace the loss-bound forward function by its gradient";
  let description = [{
    Replaces the module's one (loss-bound) function by `@<step-name>`, its
    gradient function (buildGradientFunction): the loss, then d loss / d p
    for every float `dtc.parameter` p (result attribute `dtc.grad_of`). The
    op computing the loss is marked `dtc.forward_end`: ZeRO-3 gathers
    parameters again after it and a pipeline chunk's forward pass stops
    there.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"stepName", "step-name", "std::string", /*default=*/"\"micro_step\"",
           "Name of the gradient function">,
  ];
}

def DtcChunkTpCollectives
    : Pass<"dtc-chunk-tp-collectives", "::mlir::func::FuncOp"> {
  let summary = "Split tensor-parallel GEMM collectives into row blocks";
  let description = [{
    Splits each tensor-parallel all-reduce or reduce-scatter of a GEMM's
    partial sums, and each all-gather a GEMM multiplies by rows, into
    `chunks` collectives on row blocks of the GEMM, so that block i
    communicates while block i + 1 multiplies (after
    dtc-schedule-collectives). Collectives whose tensors do not split that
    way stay whole. Runs on partitioned functions.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect"];
  let options = [
    Option<"chunks", "chunks", "int64_t",
           /*default=*/"::dtc::TrainingStepOptions{}.tpCommChunks",
           "Row blocks per collective (1: leave them whole)">,
  ];
}

def DtcScheduleCollectives
    : Pass<"dtc-schedule-collectives", "::mlir::func::FuncOp"> {
  let summary = "Overlap collectives with the compute that does not need them";
  let description = [{
    Moves each collective start up to right after its operands are computed
    and each wait down to right before the first op that reads its result,
    neither past an op marked `dtc.forward_end`. Every rank of a group runs
    the same program, so all still post their collectives in one order.
  }];
}

def DtcMicroStep : Pass<"dtc-micro-step", "::mlir::ModuleOp"> {
  let summary = "Gradient accumulation, ZeRO and the gradient sync of the "
                "micro-step";
  let description = [{
    Turns the partitioned gradient function `micro_step` into the function
    `dtc run` calls once per micro-batch: every gradient is added to an
    accumulator (a `dtc.state` argument updated in place). With ZeRO-2/3 a
    gradient is reduce-scattered over the data-parallel axes as soon as it
    exists and only this rank's part accumulated; with ZeRO-3 parameters are
    stored as this rank's flat part and all-gathered before their uses
    (prefetched with `overlap`). With `overlap`, `micro_step_sync` (the last
    micro-batch of a step) also reduces the gradients in buckets while the
    backward pass runs. What `dtc-build-apply` needs (each gradient's
    parameter, layout and sync, the ZeRO layout) is left on the module as
    `dtc.step_gradients`. A model without trainable parameters is an error.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"mesh", "mesh", "std::string", /*default=*/"\"\"",
           "Device mesh as name:size pairs (dp:2,tp:4); the partitioner's">,
    Option<"zeroStage", "zero-stage", "int",
           /*default=*/"::dtc::TrainingStepOptions{}.zeroStage",
           "ZeRO stage 0-3 over the mesh's dp (and cp) axes">,
    Option<"overlap", "overlap", "bool",
           /*default=*/"::dtc::TrainingStepOptions{}.overlap",
           "Overlap the gradient sync and ZeRO-3 gathers with compute">,
    Option<"gradBucketBytes", "grad-bucket-bytes", "int64_t",
           /*default=*/"::dtc::TrainingStepOptions{}.gradBucketBytes",
           "Gradient bytes one overlapped all-reduce carries at most">,
    Option<"zeroPrefetchElements", "zero-prefetch-elements", "int64_t",
           /*default=*/"::dtc::TrainingStepOptions{}.zeroPrefetchElements",
           "ZeRO-3: parameter elements gathered ahead of their use at most "
           "(0: one gather ahead)">,
  ];
}

def DtcBuildApply : Pass<"dtc-build-apply", "::mlir::ModuleOp"> {
  let summary = "Build the optimizer step, `apply`";
  let description = [{
    Builds `@apply(lr, step, grad accumulators, parameters, moments)`: the
    gradients not yet reduced are reduced over their axes (reduce-scattered
    with ZeRO), the global gradient norm is taken and clipped, AdamW updates
    every parameter (weight decay on matrices only) and the accumulators are
    zeroed. Reads and removes the module's `dtc.step_gradients`
    (dtc-micro-step).
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"beta1", "beta1", "double",
           /*default=*/"::dtc::OptimizerConfig{}.beta1", "AdamW beta1">,
    Option<"beta2", "beta2", "double",
           /*default=*/"::dtc::OptimizerConfig{}.beta2", "AdamW beta2">,
    Option<"epsilon", "epsilon", "double",
           /*default=*/"::dtc::OptimizerConfig{}.epsilon",
           "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double",
           /*default=*/"::dtc::OptimizerConfig{}.weightDecay",
           "Decoupled weight decay (matrices only)">,
    Option<"gradClip", "grad-clip", "double",
           /*default=*/"::dtc::OptimizerConfig{}.gradClip",
           "Global gradient-norm clip (0: none)">,
  ];
}

def DtcPipelineSplit : Pass<"dtc-pipeline-split", "::mlir::ModuleOp"> {
  let summary = "Cut the loss-bound forward function into pipeline chunks";
  let description = [{
    The first pass of the pipeline-parallel training step (after
    `dtc-bind-loss`): the forward function is cut into `stages` x
    `virtual-stages` model chunks of balanced FLOPs at points one activation
    crosses, each a nested `builtin.module @chunk<c>` holding `@stage`, the
    chunk's objective: its loss (the last chunk) or sum(output * d output),
    whose gradient is the chunk's vector-Jacobian product. The registered
    passes then run nested on every chunk module (sharding,
    `dtc-chunk-gradient`, `dtc-recompute`, `dtc-chunk-boundary`,
    partitioning, collective chunking and scheduling: buildTrainingPipeline)
    and `dtc-pipeline-assemble` groups the chunks into stages. The schedule
    is checked deadlock-free for `micro-batches` by the code the executor
    runs it with; the forward function stays for the assembly (its data
    arguments) and the pipeline's shape is recorded on the module.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"mesh", "mesh", "std::string", /*default=*/"\"\"",
           "Device mesh as name:size pairs, with the \"pp\" axis (pp:2,tp:2)">,
    Option<"stages", "stages", "int64_t", /*default=*/"2",
           "Pipeline stages (the mesh's pp size)">,
    Option<"virtualStages", "virtual-stages", "int64_t",
           /*default=*/"::dtc::TrainingStepOptions{}.virtualStages",
           "Model chunks per stage, interleaved (1f1b only)">,
    Option<"schedule", "schedule", "std::string",
           /*default=*/
           "::dtc::scheduleName(::dtc::TrainingStepOptions{}.schedule).str()",
           "1f1b, gpipe or zb-h1">,
    Option<"microBatches", "micro-batches", "int64_t",
           /*default=*/"::dtc::TrainingStepOptions{}.gradAccum",
           "Micro-batches per optimizer step">,
    Option<"overlap", "overlap", "bool",
           /*default=*/"::dtc::TrainingStepOptions{}.overlap",
           "Overlap communication with compute">,
  ];
}

def DtcChunkGradient : Pass<"dtc-chunk-gradient", "::mlir::ModuleOp"> {
  let summary = "Replace a pipeline chunk's objective by its gradient";
  let description = [{
    Runs on a chunk module of `dtc-pipeline-split` (after its sharding):
    `@stage` becomes `@backward`, its gradient function (with respect to
    the parameters and, after the first chunk, the input activation), whose
    forward part ends at the op marked `dtc.forward_end` before the last
    chunk.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
}

def DtcChunkBoundary : Pass<"dtc-chunk-boundary", "::mlir::ModuleOp"> {
  let summary = "Give a pipeline chunk's boundary activations their layout";
  let description = [{
    Runs on a chunk module after `dtc-chunk-gradient` (and recompute): the
    gradient of the input activation and, before the last chunk, the
    chunk's output (made a result of `@backward`, marked
    `dtc.chunk_output`) get the boundary layout stages exchange: rows over
    the data axes, the sequence over "cp", the rest whole.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"mesh", "mesh", "std::string", /*default=*/"\"\"",
           "The stage's mesh (the pipeline mesh without \"pp\")">,
  ];
}

def DtcPipelineAssemble : Pass<"dtc-pipeline-assemble", "::mlir::ModuleOp"> {
  let summary = "Group partitioned pipeline chunks into stage modules";
  let description = [{
    The last pass of the pipeline-parallel step: each chunk's partitioned
    `@backward` is split into its forward and backward passes (1F1B keeps
    a micro-batch's forward values until its backward pass), and the
    module's body becomes one nested `builtin.module @stage<s>` per stage
    (the ranks whose "pp" coordinate is s run it) holding that stage's
    chunk passes, `pipeline_loss`, `pipeline_step` (the schedule as data:
    its `dtc.pipeline` dictionary and the pass order in `dtc.schedule`;
    data arguments stack the step's micro-batches) and `apply`.
  }];
  let dependentDialects = ["::mlir::dtc::DtcDialect",
                           "::mlir::func::FuncDialect"];
  let options = [
    Option<"zeroStage", "zero-stage", "int",
           /*default=*/"::dtc::TrainingStepOptions{}.zeroStage",
           "ZeRO stage 0-3 over the mesh's dp (and cp) axes">,
    Option<"zeroPrefetchElements", "zero-prefetch-elements", "int64_t",
           /*default=*/"::dtc::TrainingStepOptions{}.zeroPrefetchElements",
           "ZeRO-3: parameter elements gathered ahead of their use at most">,
    Option<"beta1", "beta1", "double",
           /*default=*/"::dtc::OptimizerConfig{}.beta1", "AdamW beta1">,
    Option<"beta2", "beta2", "double",
           /*default=*/"::dtc::OptimizerConfig{}.beta2", "AdamW beta2">,
    Option<"epsilon", "epsilon", "double",
           /*default=*/"::dtc::OptimizerConfig{}.epsilon",
           "AdamW epsilon">,
    Option<"weightDecay", "weight-decay", "double",
           /*default=*/"::dtc::OptimizerConfig{}.weightDecay",
           "Decoupled weight decay (matrices only)">,
    Option<"gradClip", "grad-clip", "double",
           /*default=*/"::dtc::OptimizerConfig{}.gradClip",
           "Global gradient-norm clip (0: none)">,
  ];
}

#endif // DTC_PASSES_TD
