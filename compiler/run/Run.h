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
#include <vector>

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
  /// Write --outputs into a directory that is not dtc's (OutputDir.h).
  bool force = false;
  uint64_t seed = 0;
  bool init = false; ///< seeded random weights instead of the model's
  bool logJson = false;
  /// Show a progress line ("auto": when stdout is a terminal).
  std::optional<bool> progress;
  /// This command line (the dtc executable first): what each rank of a
  /// multi-rank plan runs, under mpirun.
  std::vector<std::string> command;
  /// Where each rank writes its final parameters (rank-R.pb) for `dtc
  /// verify`; empty: nowhere.
  std::string dumpState;
  /// Checkpoints (docs/checkpoints.md): saved under ckptDir every
  /// saveEvery steps (0: only after the last step) when ckptDir is set;
  /// with resume, training continues from its latest committed step.
  std::string ckptDir;
  int64_t saveEvery = 0;
  /// Sequences per optimizer step, when not the compiled one: a multiple
  /// of the plan's micro-batch (over all data-parallel ranks). More or
  /// fewer micro-steps, or micro-batches through a pipeline's schedule
  /// (re-proved deadlock-free for the new count); no recompile.
  std::optional<int64_t> globalBatch;
  bool resume = false;
  /// `--elastic MIN:MAX` (compiler/run/Elastic.h): when a rank dies, re-plan
  /// for the ranks left and resume, by itself; empty: a lost rank ends the
  /// run.
  std::string elastic;
  /// Each save is written before training goes on (bench/ckpt.sh's
  /// baseline for the asynchronous save).
  bool ckptSync = false;
  /// Each rank writes its Chrome/Perfetto trace here
  /// (docs/observability.md); empty: no trace.
  std::string traceDir;
  /// A rank whose compute time per step exceeds this factor times its
  /// peers' median is named (0: never).
  double stragglerFactor = 2.0;
};

/// `host` (an ONNX tensor decoded by the frontend) as a runtime tensor of
/// `dtype`: floats rounded to nearest, integers exact where they fit.
runtime::Tensor toRuntimeTensor(const onnx::HostTensor &host,
                                runtime::DType dtype);

namespace runtime {
class KernelRegistry;
namespace cuda {
class CudaPlugin;
} // namespace cuda
} // namespace runtime

/// The kernels and memory a rank runs on.
struct RuntimeBackend {
  const runtime::KernelRegistry *kernels = nullptr;
  runtime::MemorySpace *memory = nullptr;
  bool cuda = false;
  /// The loaded CUDA backend (runtime/cuda/CudaPlugin.h) when `cuda`.
  runtime::cuda::CudaPlugin *plugin = nullptr;
};

/// `--backend`: cpu, cuda, or (empty) cuda where this dtc has the CUDA
/// backend and the machine a GPU. Ranks on one machine take the GPU of
/// their local rank. `dtc run` and `dtc calibrate` both choose with it.
llvm::Expected<RuntimeBackend> selectRuntimeBackend(llvm::StringRef name);

/// Runs the bundle; progress and results go to `out`.
llvm::Error runBundle(const RunOptions &options, llvm::raw_ostream &out);

struct VerifyOptions {
  std::string bundle;
  std::string executable; ///< the dtc binary the ranks run
  int64_t steps = 10;
  std::string data; ///< empty: synthetic tokens from the seed
  /// Inference bundles: input_<i>.pb files; empty: synthetic inputs.
  std::string inputs;
  uint64_t seed = 0;
  bool init = false;
  /// Per-step loss, relative; final parameters, absolute. Inference
  /// outputs: relative to their largest value, 10 x lossTolerance.
  double lossTolerance = 1e-5, paramTolerance = 1e-2;
};

/// `dtc verify`: trains the plan at its rank count and the bundle's
/// single-device reference program on the same data, and compares the
/// per-step losses and the final parameters; an error past tolerance.
llvm::Error verifyBundle(const VerifyOptions &options, llvm::raw_ostream &out);

} // namespace dtc

#endif // DTC_COMPILER_RUN_RUN_H
