//===- Passes.h - dtc passes ------------------------------------*- C++ -*-===//

#ifndef DTC_PASSES_PASSES_H
#define DTC_PASSES_PASSES_H

#include "dialects/dtc/DtcDialect.h"
// The training passes' option defaults are TrainingStepOptions'.
#include "passes/training/TrainingStep.h"

#include "mlir/Pass/Pass.h"

namespace mlir::dtc {

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::dtc

#endif // DTC_PASSES_PASSES_H
