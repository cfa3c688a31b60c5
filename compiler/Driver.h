//===- Driver.h - dtc compile: model in, plan bundle out --------*- C++ -*-===//

#ifndef DTC_COMPILER_DRIVER_H
#define DTC_COMPILER_DRIVER_H

#include "passes/training/TrainingStep.h"

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtc {

/// The options of `dtc compile` (SPEC "Commands"). Degrees left unset are
/// searched by the planner.
struct CompileOptions {
  /// This command line (the dtc executable first), recorded in plan.json
  /// so that `dtc run --elastic` can re-plan the same request for another
  /// GPU count.
  std::vector<std::string> commandLine;
  std::string modelPath;
  int64_t gpus = 0;
  std::string cluster = "h100";
  std::optional<int64_t> gpusPerNode;
  std::optional<int64_t> globalBatch;
  std::optional<int64_t> seqLen;
  /// `NAME=SIZE` bindings of named dynamic dims (ONNX dim_param).
  std::vector<std::string> dims;
  /// Full-match regular expressions choosing which float initializers are
  /// trained (default: the exporter's PARAMETERs; docs/training.md).
  std::optional<std::string> trainable, frozen;
  std::string mode = "train";
  std::string dtype = "bf16";
  std::optional<int64_t> tp, pp, dp, cp, ep, vpp, zero, microBatch;
  std::optional<std::string> recompute;
  /// --schedule: a scheduleName() (ParallelPlan.h).
  std::optional<std::string> schedule;
  std::optional<std::string> sequenceParallel; ///< "on" or "off"
  /// The mesh's axis order, outermost first ("pp,dp,cp,tp"); unset: the
  /// planner's choice.
  std::optional<std::string> meshOrder;
  bool noSearch = false;
  /// Plan only: skip building the runtime program (seconds to a minute for
  /// a 70B model; the plan itself takes well under a second).
  bool noProgram = false;
  /// Also write program.mlir, the readable program (SPEC: on request):
  /// printing it is most of a large model's bundle and a share of its
  /// compile time (issue 32).
  bool programMlir = false;
  /// Data-parallel gradient sync: overlapped with the last backward pass
  /// (default) in buckets of this many MiB, or all in `apply`.
  bool noOverlap = false;
  double gradBucketMb = 25;
  /// Row blocks of each TP GEMM and its collective; unset: the cost
  /// model's choice.
  std::optional<int64_t> tpCommChunks;
  std::string outputDir; ///< Empty: `<model>.dtc` next to the model.
  /// Write into an `outputDir` that is not dtc's (runtime/support/OutputDir.h).
  bool force = false;
  bool json = false;
  std::optional<int64_t> explain;
  std::string emit; ///< Empty, or a stage name to print and stop after.
  /// The optimizer the training program carries (AdamW, lr schedule).
  OptimizerConfig optimizer;
  /// `--loss` as given (OBJECTIVE or model:OUTPUT), parsed into `loss`.
  std::string lossSpec;
  /// The training objective and the inputs' data roles (--feed, ...).
  LossRequest loss;
  /// Set by the compiler, not a flag: the model's exported fixed batch
  /// re-binds to any micro-batch, so every import must (never falls back
  /// to the exported batch).
  bool fixedBatchRebinds = false;
  /// Set by the compiler, not a flag: the fixed batch of a graph whose
  /// batch does not re-bind; every data-parallel micro-step runs those rows,
  /// split over the data-parallel ranks (dp x micro-batch = it).
  std::optional<int64_t> fixedDataRows;
};

/// Runs the compiler; the summary (or the requested IR) goes to `out`.
llvm::Error runCompile(const CompileOptions &options, llvm::raw_ostream &out);

} // namespace dtc

#endif // DTC_COMPILER_DRIVER_H
