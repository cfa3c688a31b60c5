//===- dtc-opt.cpp - mlir-opt with every dtc dialect and pass -------------===//

#include "dialects/dtc/DtcDialect.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "passes/training/TrainingStep.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "mlir/Transforms/Passes.h"

int main(int argc, char **argv) {
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::dtc::registerDtcPasses();
  dtc::registerTrainingPipeline();
  dtc::registerForwardPartitionPipeline();
  dtc::registerImportPipeline();

  mlir::DialectRegistry registry;
  registry.insert<mlir::dtc::DtcDialect, mlir::func::FuncDialect>();
  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "dtc optimizer driver: every dtc dialect and pass\n",
      registry));
}
