//===- bench_import.cpp - modelgen + ONNX import + dtc-simplify at scale --===//
//
// Times the front of `dtc compile` on large shape-only models: generating
// the ONNX model (modelgen, written to a temp file), importing it, and
// running dtc-simplify; and reports each case's peak RSS. Every case runs in
// its own forked process so that ru_maxrss is that case's own peak.
//
//   bench-import [--concat-repeat-kv] [--seq N] [CASE...]
//
// CASE is a preset (llama-70b, gpt-1t, ...) or PRESET:LAYERS (llama-70b:8).
// Without cases: llama-70b, gpt-1t, and llama-70b at 8/16/32/80 layers.
// Issue targets: 70B under 2 s and 1 GB, 1T under 10 s.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcDialect.h"
#include "frontends/modelgen/ModelGen.h"
#include "frontends/onnx/OnnxImporter.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <string>
#include <vector>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Options {
  bool concatRepeatKv = false;
  std::optional<int64_t> seq;
};

/// Runs one case in this process; prints one table row. Returns 0 on
/// success.
int runCase(const std::string &spec, const Options &opts) {
  llvm::StringRef name = spec, layers;
  std::tie(name, layers) = llvm::StringRef(spec).split(':');
  std::optional<dtc::modelgen::ModelConfig> config =
      dtc::modelgen::preset(name);
  if (!config) {
    llvm::errs() << "bench-import: unknown preset '" << name << "'\n";
    return 2;
  }
  if (!layers.empty() && layers.getAsInteger(10, config->layers)) {
    llvm::errs() << "bench-import: bad layer count in '" << spec << "'\n";
    return 2;
  }
  int64_t seq = opts.seq ? *opts.seq : config->maxPositions;

  auto start = Clock::now();
  llvm::SmallString<128> path;
  if (llvm::sys::fs::createTemporaryFile("bench-import", "onnx", path)) {
    llvm::errs() << "bench-import: cannot create a temporary file\n";
    return 1;
  }
  llvm::FileRemover remover(path);
  dtc::modelgen::GenOptions genOptions;
  genOptions.shapeOnly = true;
  genOptions.repeatKvWithConcat = opts.concatRepeatKv;
  if (llvm::Error err = dtc::modelgen::generate(*config, genOptions, path)) {
    llvm::errs() << "bench-import: " << llvm::toString(std::move(err)) << "\n";
    return 1;
  }
  double genS = since(start);

  auto importStart = Clock::now();
  mlir::MLIRContext context;
  context.loadDialect<mlir::dtc::DtcDialect, mlir::func::FuncDialect>();
  dtc::onnx::ImportOptions importOptions;
  importOptions.batch = 1;
  importOptions.seqLen = seq;
  auto module = dtc::onnx::importOnnxFile(path, importOptions, context);
  if (!module) {
    llvm::errs() << "bench-import: " << llvm::toString(module.takeError())
                 << "\n";
    return 1;
  }
  double importS = since(importStart);

  auto simplifyStart = Clock::now();
  mlir::PassManager pm(&context);
  dtc::buildImportPipeline(pm);
  if (mlir::failed(pm.run(**module))) {
    llvm::errs() << "bench-import: dtc-simplify failed\n";
    return 1;
  }
  double simplifyS = since(simplifyStart);
  double totalS = since(start);

  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  double peakMiB = usage.ru_maxrss / 1024.0; // ru_maxrss is in KiB
  llvm::outs() << llvm::format(
      "%-16s %6lld %6lld %14lld %8.2f %8.2f %8.2f "
      "%8.2f %9.0f\n",
      spec.c_str(), (long long)config->layers, (long long)seq,
      (long long)dtc::modelgen::parameterCount(*config), genS, importS,
      simplifyS, totalS, peakMiB);
  llvm::outs().flush();
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options opts;
  std::vector<std::string> cases;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--concat-repeat-kv") {
      opts.concatRepeatKv = true;
    } else if (arg == "--seq" && i + 1 < argc) {
      int64_t seq;
      if (llvm::StringRef(argv[++i]).getAsInteger(10, seq) || seq < 1) {
        llvm::errs() << "bench-import: --seq needs a positive integer\n";
        return 2;
      }
      opts.seq = seq;
    } else if (arg.starts_with("-")) {
      llvm::errs() << "usage: bench-import [--concat-repeat-kv] [--seq N] "
                      "[PRESET[:LAYERS]...]\n";
      return 2;
    } else {
      cases.push_back(arg.str());
    }
  }
  if (cases.empty())
    cases = {"llama-70b",    "gpt-1t",       "llama-70b:8",
             "llama-70b:16", "llama-70b:32", "llama-70b:80"};

  llvm::outs() << "repeat_kv as "
               << (opts.concatRepeatKv ? "Concat" : "Expand (HF)") << "\n";
  llvm::outs() << llvm::format("%-16s %6s %6s %14s %8s %8s %8s %8s %9s\n",
                               "case", "layers", "seq", "params", "gen_s",
                               "import_s", "simpl_s", "total_s", "peak_MiB");
  llvm::outs().flush();
  int status = 0;
  for (const std::string &c : cases) {
    // Its own process: ru_maxrss is per process.
    pid_t pid = fork();
    if (pid < 0)
      return runCase(c, opts);
    if (pid == 0)
      _exit(runCase(c, opts));
    int wstatus = 0;
    waitpid(pid, &wstatus, 0);
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0)
      status = 1;
  }
  return status;
}
