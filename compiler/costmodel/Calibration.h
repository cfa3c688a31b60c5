//===- Calibration.h - Published runs to check the model against -*- C++
//-*-===//
//
// Reads data/published_runs_calibration.csv (and the SC'21 launch settings
// in data/sc21_table1_launch.csv) into model specs and plans, so the
// calibration test and the constant-fitting tool price exactly the same runs.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_CALIBRATION_H
#define DTC_COMPILER_COSTMODEL_CALIBRATION_H

#include "compiler/costmodel/Spec.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace dtc {

enum class CalibrationSet { SC21, MLSys23 };

struct CalibrationRun {
  CalibrationSet set;
  std::string model;
  TransformerSpec spec;
  ParallelPlan plan;
  int64_t gpus = 0;
  /// SC'21: hardware TFLOP/s per GPU (recompute counted). MLSys'23: 0.
  double measuredHwTflops = 0;
  /// MLSys'23: seconds per iteration. SC'21: 0.
  double measuredStepTimeS = 0;
  std::string label() const;
};

/// Splits one CSV record (RFC 4180 quoting).
llvm::SmallVector<std::string> splitCsvRecord(llvm::StringRef line);

/// A CSV file as records keyed by header name.
struct CsvTable {
  llvm::SmallVector<std::string> header;
  std::vector<llvm::SmallVector<std::string>> rows;

  /// The index of column `name`, or -1.
  int column(llvm::StringRef name) const;
  /// `row`'s cell of column `name`, trimmed; "" when absent.
  llvm::StringRef cell(const llvm::SmallVector<std::string> &row,
                       llvm::StringRef name) const;
};

/// Reads a CSV file whose first record is the header (quoted fields may
/// span lines); a bad-input error names the file.
llvm::Expected<CsvTable> readCsv(llvm::StringRef path);

/// A CSV cell as a number: false when empty or not one. A trailing '?'
/// (a value the source marks uncertain) is dropped.
bool parseCsvNumber(llvm::StringRef cell, double &out);

/// The SC'21 Table 1 rows and the MLSys'23 rows that state a step time.
llvm::Expected<std::vector<CalibrationRun>>
loadCalibrationRuns(llvm::StringRef dataDir);

/// One measured run of data/corpus/runs.csv that the cost model can price:
/// its model, published configuration and measured seconds per step.
struct CorpusRun {
  /// The publication the row came from ("MLPerf Training v4.1",
  /// "Megatron-MoE-ModelZoo"): the unit left out by cross-validation.
  std::string source;
  std::string label; ///< The row's own `source` cell (submitter, system).
  std::string model;
  std::string clusterPreset; ///< lookupClusterPreset() name of its GPU.
  TransformerSpec spec;
  ParallelPlan plan;
  int64_t gpus = 0;
  double measuredStepTimeS = 0;
};

/// The rows of `dataDir`/corpus/runs.csv that state a step time and that
/// the model can price; each row it leaves out is appended to `skipped` as
/// "label: why" (LoRA, a GPU without a preset, fp4, an unstated dtype, ...).
llvm::Expected<std::vector<CorpusRun>>
loadCorpusRuns(llvm::StringRef dataDir, std::vector<std::string> *skipped);

/// One row of data/corpus/oom_configs.csv: a configuration a public source
/// reports as out of memory, or its neighbour that ran, on a GPU of
/// `hbmGB`. The memory model judges it with capacity alone, so GPUs
/// without a cluster preset (V100, Titan RTX) count too.
struct CapacityCase {
  std::string label; ///< Its source and locator.
  std::string model;
  std::string framework;
  std::string gpu; ///< As the source names it ("V100-32GB", "H100-80GB").
  bool ranOutOfMemory = false; ///< Else it ran ("fits" or "boundary").
  /// What the source blames an OOM on: "capacity" (the bytes the model
  /// counts), "fragmentation" (the same configuration ran with
  /// expandable_segments) or "framework" (a layout dtc's runtime does not
  /// have, such as weights left gathered under pipeline parallelism).
  std::string oomCause;
  double hbmGB = 0;
  double statedGB = 0; ///< The source's peak or allocated GiB; 0 if none.
  TransformerSpec spec;
  ParallelPlan plan;
};

/// The rows of `dataDir`/corpus/oom_configs.csv the memory model can
/// describe; each row it leaves out is appended to `skipped` with why.
llvm::Expected<std::vector<CapacityCase>>
loadCapacityCases(llvm::StringRef dataDir, std::vector<std::string> *skipped);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_CALIBRATION_H
