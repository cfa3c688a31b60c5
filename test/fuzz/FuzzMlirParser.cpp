//===- FuzzMlirParser.cpp - libFuzzer target for dtc-opt's .mlir input ----===//
//
// Bytes -> MLIR source parsed with the registry dtc-opt uses (the dtc and
// func dialects; no unregistered dialects) -> verify -> print (custom and
// generic forms: the dialect's printers) -> if it verifies, one pass
// pipeline of dtc-opt's, chosen by the first byte -> verify. Any input must
// end in a module or clean diagnostics. A pipeline that succeeds but leaves
// IR that does not verify aborts (the pass manager's own verifier is off, so
// such a bug is not hidden as a pass failure).
//
// Input: one selector byte (taken modulo the table below), then the source.
// DTC_FUZZ_VERBOSE=1 prints the diagnostics (to check what a seed reaches).
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

/// dtc-opt pipelines as the lit tests run them (test/passes/*.mlir).
/// Index 0 stops after parsing, verifying and printing.
constexpr const char *kPipelines[] = {
    "",
    "dtc-simplify",
    "dtc-propagate-sharding{mesh=dp:2,tp:2}",
    "dtc-propagate-sharding{mesh=tp:2 sequence-parallel=true},"
    "dtc-partition{mesh=tp:2}",
    "dtc-autodiff,dtc-propagate-sharding{mesh=dp:2,tp:2},"
    "dtc-partition{mesh=dp:2,tp:2}",
    "dtc-test-sharding-rules",
    "dtc-autodiff{wrt-arguments=1},dtc-recompute{mode=selective}",
    "dtc-partition{mesh=dp:2,tp:2 defer-gradient-sync=true}",
    "canonicalize,cse",
};
constexpr size_t kNumPipelines = sizeof(kPipelines) / sizeof(kPipelines[0]);

bool verbose() {
  static const bool on = std::getenv("DTC_FUZZ_VERBOSE");
  return on;
}

const mlir::DialectRegistry &registry() {
  static const mlir::DialectRegistry *r = [] {
    auto *reg = new mlir::DialectRegistry();
    reg->insert<mlir::dtc::DtcDialect, mlir::func::FuncDialect>();
    return reg;
  }();
  return *r;
}

void run(llvm::StringRef source, size_t pipeline) {
  mlir::MLIRContext context(registry(), mlir::MLIRContext::Threading::DISABLED);
  std::string diagnostic;
  mlir::ScopedDiagnosticHandler handler(&context, [&](mlir::Diagnostic &d) {
    if (diagnostic.empty())
      diagnostic = d.str();
    if (verbose())
      llvm::errs() << d.getLocation() << ": " << d.str() << "\n";
    return mlir::success();
  });
  mlir::ParserConfig config(&context, /*verifyAfterParse=*/false);
  // MLIR's lexer finds the end of its input at a NUL terminator, which
  // dtc-opt's file buffers have and libFuzzer's data does not (through
  // parseSourceString it read past the end: a harness bug, not MLIR's).
  llvm::SourceMgr sourceMgr;
  sourceMgr.AddNewSourceBuffer(
      llvm::MemoryBuffer::getMemBufferCopy(source, "fuzz.mlir"), llvm::SMLoc());
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, config);
  if (!module)
    return;
  if (mlir::failed(mlir::verify(*module)))
    return;
  // The printers only see verified IR (dtc-opt prints nothing else).
  {
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    module->print(os, mlir::OpPrintingFlags().printGenericOpForm());
  }
  if (pipeline == 0)
    return;
  mlir::PassManager pm(&context);
  pm.enableVerifier(false);
  std::string errors;
  llvm::raw_string_ostream errorStream(errors);
  if (mlir::failed(
          mlir::parsePassPipeline(kPipelines[pipeline], pm, errorStream))) {
    llvm::errs() << "bad pipeline " << kPipelines[pipeline] << ": " << errors
                 << "\n";
    std::abort();
  }
  if (mlir::failed(pm.run(*module)))
    return;
  diagnostic.clear();
  if (mlir::failed(mlir::verify(*module))) {
    llvm::errs() << "'" << kPipelines[pipeline]
                 << "' succeeded but its result does not verify: " << diagnostic
                 << "\n";
    std::abort();
  }
  if (verbose())
    llvm::errs() << "'" << kPipelines[pipeline] << "' succeeded\n";
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
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
  mlir::dtc::registerDtcPasses();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  llvm::StringRef source(reinterpret_cast<const char *>(data) + 1, size - 1);
  run(source, data[0] % kNumPipelines);
  return 0;
}
