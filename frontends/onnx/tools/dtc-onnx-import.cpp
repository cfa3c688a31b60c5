//===- dtc-onnx-import.cpp - Print a model's imported dtc IR --------------===//
//
// A test and debugging driver for the ONNX importer: imports MODEL (.onnx, or
// .onnxtxt in the ONNX text format) and prints the module. `dtc compile
// MODEL --emit imported` is the user-facing way to get the same IR.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/OnnxImporter.h"
#include "runtime/support/Error.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

namespace cl = llvm::cl;

static cl::opt<std::string> modelPath(cl::Positional, cl::Required,
                                      cl::desc("<model.onnx>"));
static cl::opt<int64_t> batch("batch", cl::desc("Bind the batch dim"),
                              cl::init(-1));
static cl::opt<int64_t> seqLen("seq-len", cl::desc("Bind the sequence dim"),
                               cl::init(-1));
static cl::list<std::string> dims("dim",
                                  cl::desc("Bind a dim by name: NAME=SIZE"));
static cl::opt<bool> noRaise("no-raise",
                             cl::desc("Do not raise GELU and attention"));
static cl::opt<bool> printLocs("print-locs", cl::desc("Print locations"));
static cl::opt<bool> printTime("time",
                               cl::desc("Print the import time to stderr"));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "dtc ONNX importer test driver\n");

  dtc::onnx::ImportOptions options;
  if (batch >= 0)
    options.batch = batch;
  if (seqLen >= 0)
    options.seqLen = seqLen;
  for (const std::string &dim : dims) {
    auto [name, size] = llvm::StringRef(dim).split('=');
    int64_t value;
    if (name.empty() || size.getAsInteger(10, value))
      return dtc::reportError(
          dtc::badInput("--dim {0}: expected NAME=SIZE", dim));
    options.dimParams[name.str()] = value;
  }
  options.raiseIdioms = !noRaise;

  mlir::MLIRContext context;
  auto start = std::chrono::steady_clock::now();
  auto module = dtc::onnx::importOnnxFile(modelPath, options, context);
  if (!module)
    return dtc::reportError(module.takeError());
  if (printTime)
    llvm::errs() << "import time: "
                 << std::chrono::duration<double, std::milli>(
                        std::chrono::steady_clock::now() - start)
                        .count()
                 << " ms\n";
  mlir::OpPrintingFlags flags;
  if (printLocs)
    flags.enableDebugInfo();
  (*module)->print(llvm::outs(), flags);
  llvm::outs() << "\n";
  return 0;
}
