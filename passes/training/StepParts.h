//===- StepParts.h - Pieces of the training step builders -------*- C++ -*-===//
//
// Shared by the data/tensor-parallel step (TrainingStep.cpp) and the
// pipeline step (Pipeline.cpp): gradient bookkeeping, ZeRO layout, the
// collectives the step functions emit, and `apply`.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_TRAINING_STEPPARTS_H
#define DTC_PASSES_TRAINING_STEPPARTS_H

#include "passes/training/TrainingStep.h"

#include "dialects/dtc/DtcCollectiveOps.h"
#include "dialects/dtc/DtcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/StringSet.h"

namespace dtc::training {

namespace d = mlir::dtc;

/// Marks the op that ends the forward part of a gradient function (the loss,
/// or a pipeline chunk's objective): ZeRO-3 gathers parameters again after
/// it, and a pipeline chunk's forward pass stops there. Survives recompute
/// and partitioning.
constexpr llvm::StringLiteral kForwardEndAttr = "dtc.forward_end";

inline mlir::RankedTensorType tensorType(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType());
}

struct GradientResult {
  std::string parameter;
  mlir::RankedTensorType type; ///< local (per-rank) type
  /// Mesh axes the gradient is a partial sum over (reduced in `apply`) and
  /// those its parameter is split over (its norm is summed over them).
  llvm::SmallVector<std::string> syncAxes, splitAxes;
  /// The partitioned parameter's `dtc.shard` / `dtc.global_type`, if any.
  mlir::NamedAttrList shardAttrs;
};

/// Which parameters ZeRO shards over the data-parallel replicas, dp and the
/// cp inside it (both hold whole copies of every parameter, as Megatron's
/// distributed optimizer sees them): every one whose local element count
/// the replica count divides (the others stay replicated and are updated
/// whole on every rank).
struct ZeroLayout {
  llvm::SmallVector<std::string, 2> axes;
  int64_t parts = 1;
  llvm::StringSet<> sharded;
  bool shards(llvm::StringRef parameter) const {
    return parts > 1 && sharded.contains(parameter);
  }
};

/// Communication ops of the step functions (a start and its wait).
class Collectives {
public:
  Collectives(mlir::OpBuilder &b, mlir::Location loc) : b(b), loc(loc) {}

  mlir::Value allReduce(mlir::Value v, llvm::ArrayRef<std::string> axes) {
    return wait(d::AllReduceStartOp::create(b, loc, handle(v.getType()), v,
                                            names(axes), "sum"));
  }
  /// Started now, waited by the caller: lets independent reductions overlap.
  d::AllReduceStartOp startAllReduce(mlir::Value v,
                                     llvm::ArrayRef<std::string> axes) {
    return d::AllReduceStartOp::create(b, loc, handle(v.getType()), v,
                                       names(axes), "sum");
  }
  mlir::Value wait(mlir::Operation *start) {
    return d::WaitOp::create(b, loc, start->getResult(0)).getOutput();
  }
  /// This rank's contiguous part of a 1-d value over `axis`.
  mlir::Value slice(mlir::Value v, llvm::ArrayRef<std::string> axes,
                    int64_t parts) {
    return d::ShardSliceOp::create(b, loc, divided(v, parts), v, names(axes), 0,
                                   0);
  }
  mlir::Value reduceScatter(mlir::Value v, llvm::ArrayRef<std::string> axes,
                            int64_t parts) {
    return wait(d::ReduceScatterStartOp::create(
        b, loc, handle(divided(v, parts)), v, names(axes), 0, 0, "sum"));
  }
  /// This rank's flat part (over `axes`, `parts` parts) of the flat
  /// gradient `v`, summed over `axes`: a reduce-scatter over those of
  /// `axes` it is a partial sum over (`partialAxes`), a plain slice where it
  /// is already summed (the partitioner reduces some gradients early, e.g.
  /// to cut a slice's gradient by rows): summing those again would count
  /// every replica's contribution `parts` times.
  mlir::Value scatterSum(mlir::Value v, llvm::ArrayRef<std::string> axes,
                         int64_t parts,
                         llvm::ArrayRef<std::string> partialAxes) {
    llvm::SmallVector<std::string> partial;
    for (const std::string &axis : axes)
      if (llvm::is_contained(partialAxes, axis))
        partial.push_back(axis);
    if (partial.size() == axes.size())
      return reduceScatter(v, axes, parts);
    if (!partial.empty())
      v = allReduce(v, partial);
    return slice(v, axes, parts);
  }
  /// `v` gathered along `dim` (in interleave blocks of `block`, 0: whole)
  /// into `whole`, or this rank's part of `v`.
  mlir::Value allGather(mlir::Value v, llvm::StringRef axis, int64_t dim,
                        int64_t block, mlir::RankedTensorType whole) {
    return wait(d::AllGatherStartOp::create(b, loc, handle(whole), v,
                                            names({axis.str()}), dim, block));
  }
  mlir::Value slice(mlir::Value v, llvm::StringRef axis, int64_t dim,
                    int64_t block, mlir::RankedTensorType part) {
    return d::ShardSliceOp::create(b, loc, part, v, names({axis.str()}), dim,
                                   block);
  }
  mlir::Value allGather(mlir::Value v, llvm::ArrayRef<std::string> axes,
                        int64_t parts) {
    auto type = tensorType(v);
    auto whole = mlir::RankedTensorType::get({type.getDimSize(0) * parts},
                                             type.getElementType());
    return wait(d::AllGatherStartOp::create(b, loc, handle(whole), v,
                                            names(axes), 0, 0));
  }
  mlir::ArrayAttr names(llvm::ArrayRef<std::string> axes) {
    llvm::SmallVector<llvm::StringRef> refs(axes.begin(), axes.end());
    return b.getStrArrayAttr(refs);
  }

private:
  mlir::Type handle(mlir::Type type) {
    return d::AsyncType::get(b.getContext(), type);
  }
  static mlir::RankedTensorType divided(mlir::Value v, int64_t parts) {
    auto type = tensorType(v);
    return mlir::RankedTensorType::get({type.getDimSize(0) / parts},
                                       type.getElementType());
  }
  mlir::OpBuilder &b;
  mlir::Location loc;
};

/// Marks the op that computes the loss: the end of the forward pass.

/// A 0-d f32 constant.
mlir::Value scalar(mlir::OpBuilder &b, mlir::Location loc, float value);
/// `v` as a 1-d tensor.
mlir::Value flatten(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v);

/// Makes `forward` return only its training loss for `request`, binding
/// the data arguments (`dtc.feed`).
llvm::Expected<TrainingStepInfo> bindLoss(mlir::func::FuncOp forward,
                                          const LossRequest &request);
/// An integer [batch, seq] tensor (token ids).
bool isTokenTensor(mlir::Type type);
/// "[8, 3, 16, 16] f32", for error messages.
std::string describeType(mlir::Type type);

/// What one gradient result `index` of a (partitioned) gradient function
/// is: its parameter, local type and layout.
GradientResult describeGradient(mlir::func::FuncOp grad, unsigned index);

ZeroLayout zeroLayoutOf(const TrainingStepOptions &options,
                        llvm::ArrayRef<GradientResult> params);

/// ZeRO-3: stores each parameter of `step` that `layout` shards as its
/// flat part and all-gathers it before its uses (once for the forward
/// pass, once for the backward pass). With `prefetch` each gather starts
/// as early as the gathered parameters not yet read fit in
/// `prefetchElements` (at least one gather ahead).
void gatherParametersForUse(mlir::func::FuncOp step, const ZeroLayout &layout,
                            bool prefetch, int64_t prefetchElements);

/// Overlap of the partitioner's collectives (tensor, context and expert
/// parallel; it emits each right before its use) with the compute that
/// does not need them: each start moves up to right after its operands are
/// computed, each wait down to right before the first op that reads its
/// result, neither past an op marked kForwardEndAttr (a pipeline chunk's
/// two passes split there). An input gradient's all-reduce then runs while
/// the weight gradient computes, as the cost model assumes. Every rank of a
/// group runs the same program, so all still post their collectives in one
/// order.
void scheduleCollectives(mlir::func::FuncOp func);

/// Splits each tensor-parallel all-reduce or reduce-scatter of a GEMM's
/// partial sums, and each tensor-parallel all-gather a GEMM multiplies by
/// rows, into `chunks` collectives on row blocks of the GEMM, so that
/// scheduleCollectives can overlap block i's communication with block
/// i + 1's GEMM (ChunkCollectives.cpp). Collectives whose tensors do not
/// split that way stay whole. Run after partitioning, before
/// scheduleCollectives.
void chunkTensorParallelCollectives(mlir::func::FuncOp func, int64_t chunks);

/// A parameter several pipeline stages read (input and output embeddings
/// tied): its gradient is the sum of the stages'. Every stage joins one
/// all-reduce over `axis` per such parameter, in the same order, those
/// without the parameter with zeros; only the first stage that holds it
/// counts it in the global norm.
struct StageSharedGradient {
  std::string parameter;
  /// The whole parameter's type; `shard` is how this stage splits it (null:
  /// whole). Split copies are gathered for the sum and sliced after it.
  mlir::RankedTensorType type;
  mlir::Attribute shard;
  std::string axis;
  bool held = false;
  bool countsInNorm = false;
};

/// Builds `apply` in `module`; `normAxes` are added to every gradient's
/// axes of the global norm (the pipeline axis: each stage holds its own
/// parameters). Gradients in `syncedInStep` were reduced by the step
/// function; with `scatteredInStep` the ZeRO-2/3 accumulators already hold
/// this rank's reduce-scattered part.
void buildApply(mlir::ModuleOp module, llvm::ArrayRef<GradientResult> params,
                const TrainingStepOptions &options,
                const ZeroLayout &zeroLayout,
                llvm::ArrayRef<std::string> normAxes = {},
                const llvm::StringSet<> &syncedInStep = {},
                bool scatteredInStep = false,
                llvm::ArrayRef<StageSharedGradient> sharedOverStages = {});

/// Module attributes one training pass leaves for a later one:
/// dtc-bind-loss's TrainingStepInfo, and dtc-micro-step's gradient table
/// (read and removed by dtc-build-apply).
constexpr llvm::StringLiteral kStepInfoAttr = "dtc.step_info";
constexpr llvm::StringLiteral kGradientTableAttr = "dtc.step_gradients";
/// Set on the module by a training pass that failed on its input (a
/// bad-input DtcError, exit code 2) rather than on its own work, so that
/// buildTrainingStep returns an error of the same kind.
constexpr llvm::StringLiteral kBadInputAttr = "dtc.bad_input";

void writeStepInfo(mlir::ModuleOp module, const TrainingStepInfo &info);
llvm::Expected<TrainingStepInfo> readStepInfo(mlir::ModuleOp module);

/// What `apply` needs of the micro-step: every gradient (in `micro_step`'s
/// accumulator order), the ZeRO layout, and which gradients
/// `micro_step_sync` already reduces.
struct StepGradients {
  runtime::Mesh mesh;
  int zeroStage = 0;
  llvm::SmallVector<GradientResult> params;
  ZeroLayout zero;
  llvm::StringSet<> syncedInStep;
};
void writeGradientTable(mlir::ModuleOp module, const StepGradients &table);
llvm::Expected<StepGradients> readGradientTable(mlir::ModuleOp module);

/// The stages of the data/tensor-parallel step, one per pass
/// (TrainingPasses.cpp): the module's one function replaced by its gradient
/// function `stepName`; gradient accumulation, ZeRO and `micro_step_sync`;
/// `apply` from the gradient table.
mlir::LogicalResult buildStepGradient(mlir::ModuleOp module,
                                      llvm::StringRef stepName);
llvm::Error buildMicroStep(mlir::ModuleOp module,
                           const TrainingStepOptions &options);
llvm::Error buildApplyFromGradientTable(mlir::ModuleOp module,
                                        const OptimizerConfig &optimizer);

/// The pipeline-parallel step, one function per pass (Pipeline.cpp,
/// docs/partition.md "Pipeline stages"): the forward function cut into one
/// nested module per model chunk (dtc-pipeline-split), each chunk's
/// objective replaced by its gradient (dtc-chunk-gradient), its boundary
/// activations laid out (dtc-chunk-boundary), and the partitioned chunks
/// grouped into one module per stage (dtc-pipeline-assemble, which reads
/// the pipeline's shape and mesh from the module and the ZeRO and optimizer
/// settings from `options`).
llvm::Error splitIntoChunks(mlir::ModuleOp module,
                            const TrainingStepOptions &options);
llvm::Error differentiateChunk(mlir::ModuleOp chunkModule);
llvm::Error setChunkBoundaries(mlir::ModuleOp chunkModule,
                               const runtime::Mesh &mesh);
llvm::Expected<TrainingStepInfo> assemblePipeline(mlir::ModuleOp module,
                                                  TrainingStepOptions options);
/// What a pipeline stage is sharded over: `mesh` without its "pp" axis.
runtime::Mesh stageMesh(const runtime::Mesh &mesh);

} // namespace dtc::training

#endif // DTC_PASSES_TRAINING_STEPPARTS_H
