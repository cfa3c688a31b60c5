//===- TrainingStep.h - The training step as dtc functions ------*- C++ -*-===//
//
// Turns the imported forward function into the two functions `dtc run`
// drives each optimizer step (docs/training.md):
//
//   @micro_step(tokens, labels, grad accumulators...)
//       -> (loss, accumulators + d loss / d parameters...)
//   @apply(lr, step, grad accumulators...)
//       -> (grad_norm, AdamW-updated parameters and moments, zeroed grads)
//
// Persistent tensors are function arguments/results tagged `dtc.state`, so
// the lowering updates them in place.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_TRAINING_TRAININGSTEP_H
#define DTC_PASSES_TRAINING_TRAININGSTEP_H

#include "passes/recompute/Recompute.h"
#include "runtime/support/Mesh.h"
#include "runtime/support/ParallelPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Error.h"

#include <string>

namespace dtc {

struct OptimizerConfig {
  double lr = 3e-4;
  double minLr = 3e-5;
  int64_t warmupSteps = 0;
  int64_t decaySteps = 0; ///< 0: constant after warmup
  std::string schedule = "cosine";
  double beta1 = 0.9, beta2 = 0.95, epsilon = 1e-8;
  double weightDecay = 0.1; ///< on matrices only, not on biases and norms
  double gradClip = 1.0;    ///< global gradient norm; 0 disables
};

/// What the training step minimizes and how the data reaches the graph's
/// inputs (`dtc compile --loss`, `--feed`; docs/training.md, "Objectives").
/// Left empty, both are chosen from what the graph is (bindLoss).
struct LossRequest {
  /// "", "next-token", "masked-lm", "seq2seq", "classify" or "model".
  std::string objective;
  /// "model": the output (its ONNX name) that holds the loss; empty: the
  /// first scalar float output.
  std::string lossOutput;
  /// `NAME=ROLE` bindings of graph inputs to data roles (kDataRoles).
  llvm::SmallVector<std::string> feeds;
  /// masked-lm from unlabelled data: the [MASK] id and the fraction of
  /// tokens masked. -1: unknown (the data must bring its labels).
  int64_t maskTokenId = -1;
  double maskProbability = 0.15;
  /// seq2seq: the decoder's first input id; -1: unknown (the data must
  /// bring the decoder's input).
  int64_t decoderStartTokenId = -1;
};

/// The data roles of the step function's arguments (program.proto,
/// Argument.feed).
inline constexpr const char *kDataRoles[] = {
    "tokens", "labels", "decoder_tokens", "attention_mask", "input"};

struct TrainingStepOptions {
  LossRequest loss;
  int64_t gradAccum = 1;
  OptimizerConfig optimizer;
  // Recompute hook (docs/recompute.md): activation recompute applied to
  // `micro_step` right after the autodiff.
  Recompute recompute = Recompute::None;
  // Multi-rank plans: the device mesh (outermost axis first; no axes for
  // one device), written into the IR as #dtc.mesh. `micro_step` is sharded and
  // partitioned over it right after the autodiff; its gradients stay partial
  // sums, accumulated locally and reduced once per step in `apply`
  // (docs/partition.md).
  runtime::Mesh mesh;
  bool sequenceParallel = false;
  /// What the sharding propagation trades replicated compute against bytes
  /// communicated with: the cluster's achievable GEMM FLOP/s per link
  /// byte/s (`Cluster::flopsPerLinkByte`); the pass's default without one.
  double flopsPerByte = 1000;
  /// ZeRO stage 0-3 over the mesh's "dp" axis (docs/partition.md).
  int zeroStage = 0;
  /// Pipeline stages over the mesh's "pp" axis (docs/partition.md) and
  /// their schedule, GPipe or 1F1B. With virtual stages (vpp > 1, 1F1B
  /// only) each stage runs that many model chunks, interleaved.
  int64_t pipelineStages = 1;
  int64_t virtualStages = 1;
  Schedule schedule = Schedule::OneFOneB;
  /// Overlap communication with compute: the data-parallel gradient
  /// all-reduce with the last micro-batch's backward pass
  /// (`micro_step_sync`, in buckets of up to gradBucketBytes), ZeRO-3
  /// parameter gathers one parameter ahead, pipeline receives posted one
  /// pass ahead (docs/partition.md, "Overlap").
  bool overlap = true;
  int64_t gradBucketBytes = 25 << 20;
  /// With overlap: row blocks each tensor-parallel GEMM and its collective
  /// are split into, so that one block communicates while the next
  /// multiplies (1: whole; the cost model's choice, docs/partition.md).
  int64_t tpCommChunks = 1;
  /// ZeRO-3 with overlap: parameter elements (this rank's whole tensors)
  /// gathered ahead of their use at most; 0: one gather ahead. The planner
  /// passes one transformer block's, the prefetch the cost model prices.
  int64_t zeroPrefetchElements = 0;
};

/// What the step functions need from the runtime.
struct TrainingStepInfo {
  int64_t microBatch = 0, seqLen = 0;
  /// The labels' range: the vocabulary, or a classifier's classes; 0 when
  /// the token range cannot be read off the graph.
  int64_t vocab = 0;
  /// Micro-batches one call of the step function trains on (a pipeline
  /// step runs all of them, its data arguments stacked: [micro, rows, ...];
  /// `micro_step` one).
  int64_t microBatchesPerCall = 1;
  bool stackedMicroBatches = false;
  /// MoE layers (dtc.moe_route ops) and experts per layer; 0 without MoE.
  int64_t moeLayers = 0, moeExperts = 0;
  /// What the step minimizes, as `dtc compile` states it: "next-token"
  /// (cross-entropy of the logits against the tokens shifted by one),
  /// "masked-lm" (cross-entropy at the masked positions of the tokens),
  /// "seq2seq" (cross-entropy of the decoder's logits against the labels
  /// its input is shifted from), "classify" (cross-entropy of [batch,
  /// classes] logits, or one label per position of [batch, ..., classes]),
  /// "model-loss" (the graph's own scalar loss).
  std::string objective;
  /// The loss is the sum over the counted labels (Training.
  /// loss_sums_counted_labels): objectives whose labels skip positions.
  bool lossSumsCountedLabels = false;
  /// LossRequest's, for the runtime's data (-1: not given).
  int64_t maskTokenId = -1;
  double maskProbability = 0.15;
  int64_t decoderStartTokenId = -1;
};

/// The training step as passes (dtc-bind-loss, sharding, dtc-step-gradient,
/// recompute, partitioning, collective chunking and scheduling,
/// dtc-micro-step, dtc-build-apply), appended to `pm` for `options`; dtc-opt
/// registers it as --dtc-training-pipeline.
void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingStepOptions &options);

/// Registers --dtc-training-pipeline (TrainingPasses.cpp); the passes
/// themselves register with the others (mlir::dtc::registerDtcPasses).
void registerTrainingPipeline();

/// Replaces the functions of `module` (one forward function, `main`) by
/// `micro_step` and `apply`, or with pipeline stages by one nested module
/// per stage (dtc-pipeline-split ... dtc-pipeline-assemble): runs
/// buildTrainingPipeline. Data binding (options.loss; docs/training.md,
/// "Objectives"): each graph input gets a data role, and the loss is the
/// graph's own scalar output or cross-entropy appended to its logits. A request
/// the graph cannot meet is a bad-input error naming what to pass.
llvm::Expected<TrainingStepInfo>
buildTrainingStep(mlir::ModuleOp module, const TrainingStepOptions &options);

/// Where a pipeline cuts `forward` into `stages` parts: the op index of the
/// body each stage after the first starts at and the one activation that
/// crosses into it (findSingleCrossings), balancing the ops' FLOPs
/// (OpCost.h). The planner prices the same cuts the pass builds.
struct StageCuts {
  llvm::SmallVector<unsigned> begin;    ///< begin[0] == 0
  llvm::SmallVector<mlir::Value> input; ///< input[0] is null
};
llvm::Expected<StageCuts> chooseCuts(mlir::func::FuncOp forward,
                                     int64_t stages);

} // namespace dtc

#endif // DTC_PASSES_TRAINING_TRAININGSTEP_H
