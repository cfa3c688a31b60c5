//===- DtcTestInterpreter.h - Reference evaluation of dtc IR ----*- C++ -*-===//
//
// TEST-ONLY. A slow, direct, double-precision evaluator of the dtc ops in a
// func.func, written from the op definitions in DtcOps.td. Until dtc has a
// runtime it is how importer tests check numerically that the imported IR
// computes what the model computes. Nothing outside test/ may use it.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_TEST_UNIT_DTCTESTINTERPRETER_H
#define DTC_TEST_UNIT_DTCTESTINTERPRETER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace dtc::test {

/// A dense row-major tensor; integer values are stored exactly as doubles.
struct RefTensor {
  llvm::SmallVector<int64_t, 4> shape;
  std::vector<double> data;
};

/// Parameter values by dtc.parameter name.
using ParameterMap = std::map<std::string, RefTensor>;

/// Runs `func` on `args` and returns its results.
llvm::Expected<std::vector<RefTensor>> interpret(mlir::func::FuncOp func,
                                                 llvm::ArrayRef<RefTensor> args,
                                                 const ParameterMap &params);

} // namespace dtc::test

#endif // DTC_TEST_UNIT_DTCTESTINTERPRETER_H
