//===- ModelImport.h - The model of one compile, imported once per batch --===//
//
// `dtc compile` reads the model at several batches (the planner's micro-
// batches, the program's dp x micro-batch, the one-device reference): each
// is imported and simplified once, every later request gets a copy, and a
// Hugging Face config.json becomes its shape-only ONNX model once.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_MODELIMPORT_H
#define DTC_COMPILER_MODELIMPORT_H

#include "compiler/Driver.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileUtilities.h"

#include <map>
#include <optional>
#include <string>

namespace dtc {

/// The model's name where it is not the file's stem (a config.json's).
constexpr llvm::StringLiteral kModelNameAttr = "dtc.model_name";

class ModelImports {
public:
  /// Reads `options` at each request (the driver settles
  /// fixedBatchRebinds after the first import).
  ModelImports(const CompileOptions &options, mlir::MLIRContext &context);
  ~ModelImports();

  /// The model with its batch bound to `batch`, simplified
  /// (dtc-import-pipeline): a copy of the first import at that batch.
  llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> at(int64_t batch);
  /// How many times the model was imported.
  int64_t imports() const { return importCount; }

private:
  llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>> import(int64_t batch);
  /// A config.json: modelgen writes its architecture as a shape-only ONNX
  /// model (weights declared, not stored) to a temporary file, once.
  llvm::Error generateFromConfig();

  const CompileOptions &options;
  mlir::MLIRContext &context;
  std::map<std::pair<int64_t, bool>, mlir::OwningOpRef<mlir::ModuleOp>> byBatch;
  int64_t importCount = 0;
  std::string generatedPath, configName;
  std::optional<llvm::FileRemover> removeGenerated;
};

} // namespace dtc

#endif // DTC_COMPILER_MODELIMPORT_H
