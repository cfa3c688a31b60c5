//===- Run.h - dtc run: execute a plan bundle -------------------*- C++ -*-===//
//
// Loads a bundle's program.pb, initializes the variables (the model file's
// weights, or seeded random values with --init), and either runs inference
// on ONNX test-data inputs or trains: grad_accum micro-steps on windows of a
// token file, then the optimizer step, with the learning-rate schedule the
// program carries (docs/runtime.md).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_RUN_RUN_H
#define DTC_COMPILER_RUN_RUN_H

#include "runtime/core/Tensor.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>

namespace dtc {
namespace onnx {
struct HostTensor;
} // namespace onnx

struct RunOptions {
  std::string bundle;
  std::string backend; ///< empty: cuda where a GPU is present, else cpu
  std::optional<int64_t> steps;
  std::string data;
  std::string dataDtype = "uint16";
  std::string inputs, outputs;
  uint64_t seed = 0;
  bool init = false; ///< seeded random weights instead of the model's
  bool logJson = false;
  /// Show a progress line ("auto": when stdout is a terminal).
  std::optional<bool> progress;
};

/// `host` (an ONNX tensor decoded by the frontend) as a runtime tensor of
/// `dtype`: floats rounded to nearest, integers exact where they fit.
runtime::Tensor toRuntimeTensor(const onnx::HostTensor &host,
                                runtime::DType dtype);

/// Runs the bundle; progress and results go to `out`.
llvm::Error runBundle(const RunOptions &options, llvm::raw_ostream &out);

} // namespace dtc

#endif // DTC_COMPILER_RUN_RUN_H
