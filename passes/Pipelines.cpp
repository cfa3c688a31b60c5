//===- Pipelines.cpp - Pipelines of the driver and dtc-opt ---------------===//

#include "passes/Pipelines.h"

#include "mlir/Pass/PassRegistry.h"

void dtc::buildForwardPartitionPipeline(
    mlir::OpPassManager &pm, const ForwardPartitionOptions &options) {
  mlir::dtc::DtcPropagateShardingOptions propagate;
  propagate.mesh = options.mesh;
  propagate.sequenceParallel = options.sequenceParallel;
  propagate.flopsPerByte = options.flopsPerByte;
  pm.addPass(mlir::dtc::createDtcPropagateSharding(propagate));
  if (!options.partition)
    return;
  mlir::dtc::DtcPartitionOptions partition;
  partition.mesh = options.mesh;
  partition.deferGradientSync = options.deferGradientSync;
  pm.addPass(mlir::dtc::createDtcPartition(partition));
}

namespace {
struct ForwardPartitionPipelineOptions
    : dtc::MeshPipelineOptions<ForwardPartitionPipelineOptions> {};
} // namespace

void dtc::registerForwardPartitionPipeline() {
  mlir::PassPipelineRegistration<ForwardPartitionPipelineOptions>(
      "dtc-forward-partition-pipeline",
      "Shard and partition every function over one mesh, as inference "
      "programs and `dtc compile --emit partitioned --mode infer` do",
      [](mlir::OpPassManager &pm,
         const ForwardPartitionPipelineOptions &options) {
        ForwardPartitionOptions o;
        o.mesh = options.mesh;
        o.sequenceParallel = options.sequenceParallel;
        o.flopsPerByte = options.flopsPerByte;
        buildForwardPartitionPipeline(pm, o);
      });
}

void dtc::buildImportPipeline(mlir::OpPassManager &pm) {
  pm.addPass(mlir::dtc::createDtcSimplify());
}

void dtc::registerImportPipeline() {
  mlir::PassPipelineRegistration<>(
      "dtc-import-pipeline",
      "What `dtc compile` runs on every imported model before planning",
      [](mlir::OpPassManager &pm) { buildImportPipeline(pm); });
}
