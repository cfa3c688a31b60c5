//===- ProgramBuilder.h - The runtime program of a plan ---------*- C++ -*-===//
//
// From the imported model (bound to the plan's micro-batch) to program.pb:
// the training step (passes/training) or the forward function, lowered by
// passes/lowering. Multi-rank plans are partitioned over their device mesh
// first: SPMD ranks share one RankProgram (docs/partition.md).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_PROGRAMBUILDER_H
#define DTC_COMPILER_PROGRAMBUILDER_H

#include "passes/training/TrainingStep.h"
#include "runtime/proto/program.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace dtc {

struct ProgramBuildOptions {
  std::string mode = "train"; ///< "train" or "infer"
  std::string modelPath;      ///< absolute; initial weights come from it
  /// The step and its parallel layout: training.mesh (outermost axis
  /// first; no axes: one device) is also the program's mesh, and
  /// `module` is bound to the micro-batch of the whole mesh (dp times the
  /// per-rank micro-batch). Pipeline options apply to training only.
  TrainingStepOptions training;
};

/// For a model whose file stores no weights (a Hugging Face config.json,
/// read through modelgen): every parameter starts from its fallback draw
/// (`dtc run --init`'s) instead of the model file, on every rank alike.
void initParametersWithoutWeights(program::Program &p);

/// How program.mlir prints: constants of 64Ki elements or more are elided
/// (`dense_resource<__elided__>`), since program.pb holds their bytes and a
/// model's RoPE tables would otherwise fill gigabytes of text.
mlir::OpPrintingFlags programTextFlags();

/// Builds the program of every rank; `module` is rewritten into the
/// functions the program runs, or for a pipeline into the forward function,
/// with the stages' functions printed to `stagesText` (together they are the
/// bundle's program.mlir).
llvm::Expected<program::Program>
buildProgram(mlir::ModuleOp module, const ProgramBuildOptions &options,
             std::string *stagesText = nullptr);

/// A readable listing of a program (`dtc compile --emit program`).
void printProgram(const program::Program &program, llvm::raw_ostream &os);

} // namespace dtc

#endif // DTC_COMPILER_PROGRAMBUILDER_H
