//===- Pipelines.h - Pipelines of the driver and dtc-opt -------*- C++ -*-===//
//
// A pipeline the compiler runs is defined here once and registered with
// dtc-opt under the same name, so every PassManager the driver builds can be
// reproduced from the command line. The training step's pipeline lives with
// its passes (passes/training/TrainingStep.h).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_PIPELINES_H
#define DTC_PASSES_PIPELINES_H

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"

#include <string>

namespace dtc {

/// The mesh a forward function is partitioned over and what propagation
/// trades compute against (dtc-propagate-sharding's options).
struct ForwardPartitionOptions {
  std::string mesh;
  bool sequenceParallel = false;
  double flopsPerByte = mlir::dtc::DtcPropagateShardingOptions{}.flopsPerByte;
  /// Off: shard only (annotations, no local IR), for the plan report and
  /// the training step's sharded-but-global functions.
  bool partition = true;
  /// dtc-partition's defer-gradient-sync.
  bool deferGradientSync = false;
};

/// dtc-propagate-sharding then dtc-partition over one mesh: every function
/// as one rank runs it (inference programs, the graph planner's tensor-
/// parallel profiles, the training step's forward and gradient functions,
/// `--emit partitioned --mode infer`). Registered as
/// --dtc-forward-partition-pipeline.
void buildForwardPartitionPipeline(mlir::OpPassManager &pm,
                                   const ForwardPartitionOptions &options);

void registerForwardPartitionPipeline();

/// What every imported model goes through before planning (dtc-simplify:
/// the exporter's shape arithmetic folded, identities removed). Registered
/// as --dtc-import-pipeline.
void buildImportPipeline(mlir::OpPassManager &pm);

void registerImportPipeline();

/// The options every sharding pipeline takes (a pipeline's options derive
/// from this): the mesh and what propagation trades compute against.
template <typename Derived>
struct MeshPipelineOptions : mlir::PassPipelineOptions<Derived> {
  using Base = mlir::detail::PassOptions;
  Base::Option<std::string> mesh{
      *this, "mesh",
      llvm::cl::desc("Device mesh (dp:2,tp:4), outermost axis first; empty "
                     "for one device")};
  Base::Option<bool> sequenceParallel{
      *this, "sequence-parallel",
      llvm::cl::desc("Megatron's sequence parallelism"),
      llvm::cl::init(ForwardPartitionOptions{}.sequenceParallel)};
  Base::Option<double> flopsPerByte{
      *this, "flops-per-byte",
      llvm::cl::desc("Sharding propagation's compute per byte moved"),
      llvm::cl::init(ForwardPartitionOptions{}.flopsPerByte)};
};

} // namespace dtc

#endif // DTC_PASSES_PIPELINES_H
