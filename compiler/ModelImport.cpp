//===- ModelImport.cpp - The model of one compile, imported once per batch ===//

#include "compiler/ModelImport.h"

#include "frontends/hf/HfConfig.h"
#include "frontends/modelgen/ModelGen.h"
#include "frontends/onnx/OnnxImporter.h"
#include "passes/Pipelines.h"
#include "runtime/support/Error.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

using namespace dtc;

ModelImports::ModelImports(const CompileOptions &options,
                           mlir::MLIRContext &context)
    : options(options), context(context) {}

ModelImports::~ModelImports() = default;

llvm::Error ModelImports::generateFromConfig() {
  llvm::StringRef path = options.modelPath;
  auto config = hf::readConfigFile(path);
  if (!config)
    return config.takeError();
  modelgen::GenOptions genOptions;
  genOptions.shapeOnly = true;
  genOptions.externalDataFile = llvm::sys::path::stem(path).str() + ".weights";
  llvm::SmallString<128> tmp;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("dtc-hf", "onnx", tmp))
    return failure("{0}: cannot create a temporary file: {1}", path,
                   ec.message());
  removeGenerated.emplace(tmp);
  if (llvm::Error err = modelgen::generate(*config, genOptions, tmp))
    return err;
  generatedPath = tmp.str().str();
  configName = config->name;
  return llvm::Error::success();
}

/// `err` with the generated file's name replaced by the config's.
static llvm::Error naming(llvm::Error err, llvm::StringRef generated,
                          llvm::StringRef config) {
  std::string message;
  ErrorKind kind = ErrorKind::Failure;
  llvm::handleAllErrors(
      std::move(err),
      [&](const DtcError &e) {
        message = e.getMessage();
        kind = e.getKind();
      },
      [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
  for (size_t at; (at = message.find(generated.str())) != std::string::npos;)
    message.replace(at, generated.size(), config.str());
  return llvm::make_error<DtcError>(kind, message);
}

llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
ModelImports::import(int64_t batch) {
  const CompileOptions &o = options;
  if (!llvm::sys::fs::exists(o.modelPath))
    return badInput("{0}: no such file", o.modelPath);
  llvm::StringRef ext = llvm::sys::path::extension(o.modelPath);
  if (ext != ".json" && ext != ".onnx")
    return badInput("{0}: unknown model format '{1}'; pass a .onnx file or a "
                    "Hugging Face config.json",
                    o.modelPath, ext);
  onnx::ImportOptions importOptions;
  importOptions.seqLen = o.seqLen;
  for (llvm::StringRef binding : o.dims) {
    auto [name, size] = binding.split('=');
    int64_t value = 0;
    if (name.empty() || size.getAsInteger(10, value) || value < 1)
      return badInput("--dim {0}: expected NAME=SIZE with SIZE >= 1", binding);
    importOptions.dimParams[name.str()] = value;
  }
  importOptions.batch = batch;
  importOptions.requireBatch = o.fixedBatchRebinds;
  importOptions.trainable = {o.trainable, o.frozen};
  importOptions.training = o.mode == "train";
  if (ext == ".json" && generatedPath.empty())
    if (llvm::Error err = generateFromConfig())
      return std::move(err);
  llvm::StringRef file = ext == ".json" ? generatedPath : o.modelPath;
  ++importCount;
  auto module = onnx::importOnnxFile(file, importOptions, context);
  if (!module)
    return ext == ".json"
               ? naming(module.takeError(), generatedPath, o.modelPath)
               : module.takeError();
  // The config's model name, not the temporary file's or "config".
  if (ext == ".json")
    (**module)->setAttr(kModelNameAttr,
                        mlir::StringAttr::get(&context, configName));

  std::string message;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Error &&
        message.empty()) {
      llvm::raw_string_ostream os(message);
      os << diag.getLocation() << ": " << diag;
    }
    return mlir::success();
  });
  mlir::PassManager pm(&context);
  buildImportPipeline(pm);
  if (mlir::failed(pm.run(**module)))
    return failure("{0}: {1}", o.modelPath,
                   message.empty() ? std::string("unknown error") : message);
  return module;
}

llvm::Expected<mlir::OwningOpRef<mlir::ModuleOp>>
ModelImports::at(int64_t batch) {
  auto key = std::make_pair(batch, options.fixedBatchRebinds);
  auto found = byBatch.find(key);
  if (found == byBatch.end()) {
    auto module = import(batch);
    if (!module)
      return module.takeError();
    found = byBatch.emplace(key, std::move(*module)).first;
  }
  return mlir::OwningOpRef<mlir::ModuleOp>(found->second->clone());
}
