//===- ProgramBuilder.h - The runtime program of a plan ---------*- C++ -*-===//
//
// From the imported model (bound to the plan's micro-batch) to program.pb:
// the training step (passes/training) or the forward function, lowered by
// passes/lowering. One rank for now; per-rank partitioning is issue 7.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_PROGRAMBUILDER_H
#define DTC_COMPILER_PROGRAMBUILDER_H

#include "passes/training/TrainingStep.h"
#include "runtime/proto/program.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace dtc {

struct ProgramBuildOptions {
  std::string mode = "train"; ///< "train" or "infer"
  std::string modelPath;      ///< absolute; initial weights come from it
  TrainingStepOptions training;
};

/// Builds the one-rank program; `module` is rewritten into the functions the
/// program runs (print it as the bundle's program.mlir).
llvm::Expected<program::Program>
buildSingleRankProgram(mlir::ModuleOp module,
                       const ProgramBuildOptions &options);

/// A readable listing of a program (`dtc compile --emit program`).
void printProgram(const program::Program &program, llvm::raw_ostream &os);

} // namespace dtc

#endif // DTC_COMPILER_PROGRAMBUILDER_H
