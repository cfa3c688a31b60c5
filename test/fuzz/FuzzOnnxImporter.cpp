//===- FuzzOnnxImporter.cpp - libFuzzer target for the ONNX importer ------===//
//
// Bytes -> a model file -> dtc::onnx::importOnnxFile (parse, opset/op checks,
// dim binding, the ONNX checker and shape inference, host evaluation of the
// shape arithmetic, lowering to dtc ops, idiom raising, the verifier) ->
// dtc-simplify (the folding `dtc compile` runs next) -> verify. Any input
// must end in a module or a clean bad-input error. A Failure-kind error
// ("the imported module does not verify", "raising idioms did not
// converge") is the importer's own invariant breaking, so it aborts, as does
// a simplified module that no longer verifies.
//
// Input: one flags byte, then the model.
//   bit 0: ImportOptions::raiseIdioms = false (dtc-onnx-import --no-raise)
//   bit 1: batch = 3 (else unset: the importer binds 1)
//   bit 2: seqLen = 5 (else unset: deduced from the model, or an error)
//   bit 3: the model is in the ONNX text format (written as .onnxtxt)
// The model goes to a new directory under /dev/shm (or $TMPDIR) per input,
// removed after it. Its external data can only name files in that directory
// (the importer refuses absolute and `..` locations), where the model file
// itself is the only one: the fuzzer reads and writes nothing else.
// DTC_FUZZ_VERBOSE=1 prints every error (to check what a seed reaches).
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcDialect.h"
#include "frontends/onnx/OnnxImporter.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "runtime/support/Error.h"
#include "test/fuzz/Scratch.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <google/protobuf/stubs/logging.h>

#include <cstdint>
#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <unistd.h>

namespace {

bool verbose() {
  static const bool on = std::getenv("DTC_FUZZ_VERBOSE");
  return on;
}

/// Bad-input errors are expected; anything else is a finding.
void consume(llvm::Error err) {
  bool internal = false;
  std::string message;
  llvm::handleAllErrors(
      std::move(err),
      [&](const dtc::DtcError &e) {
        internal = e.getKind() != dtc::ErrorKind::BadInput;
        message = e.getMessage();
      },
      [&](const llvm::ErrorInfoBase &e) {
        internal = true;
        message = e.message();
      });
  if (verbose() || internal)
    llvm::errs() << "error: " << message << "\n";
  if (internal)
    std::abort();
}

void import(const std::string &path, uint8_t flags) {
  dtc::onnx::ImportOptions options;
  options.raiseIdioms = !(flags & 1);
  if (flags & 2)
    options.batch = 3;
  if (flags & 4)
    options.seqLen = 5;

  mlir::MLIRContext context(mlir::MLIRContext::Threading::DISABLED);
  context.getOrLoadDialect<mlir::dtc::DtcDialect>();
  context.getOrLoadDialect<mlir::func::FuncDialect>();
  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    if (diagnostic.empty())
      diagnostic = d.str();
    return mlir::success();
  });
  auto module = dtc::onnx::importOnnxFile(path, options, context);
  if (!module) {
    consume(module.takeError());
    return;
  }
  if (mlir::failed(mlir::verify(**module))) {
    llvm::errs() << "the imported module does not verify: " << diagnostic
                 << "\n";
    std::abort();
  }
  // What `dtc compile` runs next. The pass manager's own verifier is off:
  // a pass that succeeds with invalid IR must be caught here, not reported
  // as a pass failure.
  mlir::PassManager pm(&context);
  pm.enableVerifier(false);
  dtc::buildImportPipeline(pm);
  if (mlir::failed(pm.run(**module))) {
    if (verbose())
      llvm::errs() << "dtc-simplify: " << diagnostic << "\n";
    return;
  }
  if (mlir::failed(mlir::verify(**module))) {
    llvm::errs() << "dtc-simplify's result does not verify: " << diagnostic
                 << "\n";
    std::abort();
  }
  if (verbose())
    llvm::errs() << "imported\n";
}

} // namespace

/// MLIR's uniquers share BumpPtrAllocators between this binary's inlined
/// (ASan-instrumented) allocator code, which poisons a slab's free space,
/// and the uninstrumented libMLIR.so, whose code allocates from that slab
/// without unpoisoning it: every such write would be a false
/// use-after-poison report. Manual poisoning is therefore ignored; ASan's
/// own redzones (heap, stack, globals) still catch real errors.
extern "C" const char *__asan_default_options() {
  return "allow_user_poisoning=0";
}

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // Mutated strings are rarely UTF-8; protobuf would log each one.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  uint8_t flags = data[0];
  llvm::StringRef model(reinterpret_cast<const char *>(data) + 1, size - 1);
  std::string dir = dtc::fuzz::makeScratchDir("onnx");
  std::string path = dir + ((flags & 8) ? "/model.onnxtxt" : "/model.onnx");
  dtc::fuzz::writeScratchFile(path, model);
  import(path, flags);
  ::unlink(path.c_str());
  ::rmdir(dir.c_str());
  return 0;
}
