//===- RuntimeTestUtil.h - Run dtc IR on the CPU runtime in tests -*- C++
//-*-===//

#ifndef DTC_TEST_UNIT_RUNTIMETESTUTIL_H
#define DTC_TEST_UNIT_RUNTIMETESTUTIL_H

#include "runtime/core/Tensor.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace dtc::test {

/// Lowers `module` to a runtime program, runs function `name` on `args` on
/// the CPU backend with the given parameter values (by dtc.parameter name;
/// parameters not given are zeros) and returns its results.
llvm::Expected<std::vector<runtime::Tensor>>
runOnCpu(mlir::ModuleOp module, llvm::StringRef name,
         llvm::ArrayRef<runtime::Tensor> args,
         const std::map<std::string, runtime::Tensor> &parameters = {});

/// A known-failures file: one `name: reason` per line, `#` comments. A test
/// that fails as listed is reported, not failed; a listed one that passes
/// fails until its line is removed.
std::map<std::string, std::string> readKnownFailures(const std::string &path);

/// A float32 tensor holding `values`.
runtime::Tensor makeF32(llvm::ArrayRef<int64_t> shape,
                        llvm::ArrayRef<float> values);

} // namespace dtc::test

#endif // DTC_TEST_UNIT_RUNTIMETESTUTIL_H
