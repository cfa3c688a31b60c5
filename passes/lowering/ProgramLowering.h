//===- ProgramLowering.h - dtc IR -> runtime program -------------*- C++
//-*-===//
//
// Lowers a module of dtc functions to a runtime::RankProgram: one Function
// per func.func, one Instruction per dtc op (attributes converted
// generically, so a new op needs no lowering code, only a kernel), and a
// static buffer assignment: every temporary gets an offset in one arena per
// function, reusing the bytes of values that are dead (first fit over the
// live ranges), reshapes are views, and elementwise ops may write over an
// operand that dies there.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_LOWERING_PROGRAMLOWERING_H
#define DTC_PASSES_LOWERING_PROGRAMLOWERING_H

#include "runtime/proto/program.pb.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

namespace dtc {

/// Function attributes and argument/result attributes the lowering reads:
///  - `dtc.name` (arg/result): the graph input/output name;
///  - `dtc.feed` (arg): what the runtime feeds ("input", "tokens", "labels",
///    "lr", "step"); default "input" (inference inputs, and a classifier's
///    training samples);
///  - `dtc.state` (arg/result): the argument reads, the result writes, the
///    named persistent variable;
///  - `dtc.state_role`, `dtc.state_of` (arg): the variable's role and the
///    parameter it belongs to.
/// `dtc.parameter "X"` reads variable "X" (role "parameter").
llvm::Expected<program::RankProgram> lowerToRankProgram(mlir::ModuleOp module);

} // namespace dtc

#endif // DTC_PASSES_LOWERING_PROGRAMLOWERING_H
