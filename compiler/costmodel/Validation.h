//===- Validation.h - The cost model against measured runs ------*- C++ -*-===//
//
// Prices every measured run of compiler/costmodel/data at its published
// configuration, fits the per-generation constant of the presets (the GEMM
// curve's peak per GPU generation) and cross-validates
// them leaving one source out at a time, so that the tool that chose the
// constants (bench/costmodel/corpus_error.cpp) and the test that guards them
// compute the same figures.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_VALIDATION_H
#define DTC_COMPILER_COSTMODEL_VALIDATION_H

#include "compiler/costmodel/Calibration.h"
#include "compiler/costmodel/Cluster.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace dtc {

/// The A100 calibration rows (SC'21, MLSys'23) and the corpus rows the
/// model can price, as CorpusRuns; SC'21's hardware TFLOP/s become the step
/// time that rate gives the model's executed FLOPs.
llvm::Expected<std::vector<CorpusRun>>
loadMeasuredRuns(llvm::StringRef dataDir, std::vector<std::string> *skipped);

/// The constants a fit chooses: the GEMM curve's peak per GPU generation
/// (a half size per generation as well was tried: median 6.1%, p90 18.1%
/// held out, against 5.2% and 19.5% with the shared one).
struct FittedConstants {
  std::map<std::string, double> gemmPeakEfficiency;
};

/// The preset of `run` sized to its GPUs, with `constants` (if any) in
/// place of the compiled-in ones, running Megatron-LM's software.
llvm::Expected<Cluster> clusterFor(const CorpusRun &run,
                                   const FittedConstants *constants);

/// Predicted over measured step time, or nullopt when the model refuses
/// the run's configuration (the reason goes to `why`).
std::optional<double> stepTimeRatio(const CorpusRun &run,
                                    const FittedConstants *constants,
                                    std::string *why = nullptr);

/// The memory model's verdict on a run that ran: "" when it fits, else the
/// prediction's reason ("OOM: 91.2 GB > 80.0 GB").
std::string memoryVerdict(const CorpusRun &run);

/// Predicted memory per GPU over the GPU's HBM (0 when not priced).
double memoryFraction(const CorpusRun &run);

/// The memory model on a documented out-of-memory configuration or its
/// neighbour: the bytes per GPU it predicts (fragmentation reserve and
/// runtime included) and whether that fits the case's HBM.
struct CapacityVerdict {
  bool fits = false;
  double predictedGB = 0;
  std::string breakdown; ///< "params 3.0, grads 3.0, ..." in GB.
  std::string error;     ///< Set when the model refuses the configuration.
};
CapacityVerdict capacityVerdict(const CapacityCase &c);

struct ErrorStats {
  size_t rows = 0;
  double median = 0, p90 = 0, worst = 0; ///< Of |predicted / measured - 1|.
};
ErrorStats errorStats(std::vector<double> absoluteErrors);

/// The constants minimizing the mean |log(predicted / measured)| over the
/// runs with `use[i]`, on a grid of `step` (0.01 in the tool).
FittedConstants fitConstants(const std::vector<CorpusRun> &runs,
                             const std::vector<bool> &use, double step);

struct CrossValidation {
  /// Each priced run's held-out predicted / measured step time, by index.
  std::map<size_t, double> heldOutRatio;
  std::map<std::string, ErrorStats> bySource;
  ErrorStats all;
};
/// For each source, fits on every other source and prices its runs.
CrossValidation leaveOneSourceOut(const std::vector<CorpusRun> &runs,
                                  double step);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_VALIDATION_H
