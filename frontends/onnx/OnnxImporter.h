//===- OnnxImporter.h - ONNX -> dtc dialect ---------------------*- C++ -*-===//

#ifndef DTC_FRONTENDS_ONNX_ONNXIMPORTER_H
#define DTC_FRONTENDS_ONNX_ONNXIMPORTER_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace dtc::onnx {

/// The user's choice of what trains: full-match regular expressions over
/// initializer names (`--trainable`, `--frozen`; TrainableSet.h).
struct TrainableOverrides {
  std::optional<std::string> trainable, frozen;
};

/// How the dynamic dimensions of a model's inputs are bound.
struct ImportOptions {
  /// Binds the dynamic batch dimension (dim 0 of each graph input).
  std::optional<int64_t> batch;
  /// A batch B the export fixed (every graph input's dim 0 the number B) is
  /// re-bound to `batch` where the batch provably flows (BatchRebind.h).
  /// Where it does not, the graph is imported at B and the module attribute
  /// `dtc.fixed_batch_reason` says why; with `requireBatch` the import fails
  /// instead (the driver, once it knows the model re-binds).
  bool rebindFixedBatch = true;
  bool requireBatch = false;
  /// Binds the dynamic sequence dimension (dim 1 of token inputs).
  std::optional<int64_t> seqLen;
  /// Binds dims by their ONNX `dim_param` name; wins over the two above.
  std::map<std::string, int64_t> dimParams;
  /// Raises exported idioms to dtc ops: the erf GELU expansion to dtc.gelu
  /// and the decomposed scaled-dot-product attention to dtc.attention.
  bool raiseIdioms = true;
  /// Which float initializers are trained (TrainableSet.h); the others
  /// import as frozen `dtc.parameter`s.
  TrainableOverrides trainable;
  /// The model is imported to be trained: an export whose weights the ONNX
  /// optimizer folded is refused rather than trained.
  bool training = false;
};

/// Imports an ONNX model file into a module with one `func.func @main` of
/// static-shaped dtc ops. Errors are dtc::DtcError (bad input) naming the
/// file, node and op.
llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
importOnnxFile(llvm::StringRef path, const ImportOptions &options,
               mlir::MLIRContext &context);

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_ONNXIMPORTER_H
