//===- Telemetry.h - Traces, per-step figures and guard rails ---*- C++ -*-===//
//
// What `dtc run` tells about a run beyond the loss (docs/observability.md):
// one Chrome/Perfetto trace per rank (`--trace DIR`), the per-rank figures
// of each step gathered on every rank (exposed communication, pipeline
// waits, peak memory, compute time: the metrics line and the straggler
// check), and the search for the tensor that holds a NaN or Inf when
// training diverges.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_RUN_TELEMETRY_H
#define DTC_COMPILER_RUN_TELEMETRY_H

#include "runtime/core/Communicator.h"
#include "runtime/core/Executor.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtc {

/// One rank's `dtc.trace/1` file. Written as DIR/rank-R.trace.json.partial
/// step by step and renamed to rank-R.trace.json by close(), so that a file
/// under its final name is complete JSON.
class TraceWriter {
public:
  struct Identity {
    int rank = 0;
    const runtime::Mesh *mesh = nullptr;
    std::string bundle, backend;
  };
  /// `zero`: the run's time zero on this rank's clock (the earliest rank's
  /// start, agreed by all ranks: agreeOnTimeZero).
  static llvm::Expected<std::unique_ptr<TraceWriter>>
  open(llvm::StringRef dir, const program::RankProgram &program,
       const Identity &identity, runtime::TraceClock::time_point zero);
  ~TraceWriter();

  /// One call of a function within a step: its events are
  /// [firstEvent, endEvent) of the step's, one per instruction in order.
  struct Call {
    size_t firstEvent = 0, endEvent = 0;
    int64_t call = 0;             ///< of this function within the step
    int64_t firstMicroBatch = -1; ///< of the step; -1: none (optimizer)
  };
  /// Appends one optimizer step.
  llvm::Error writeStep(int64_t step, runtime::TraceClock::time_point begin,
                        runtime::TraceClock::time_point end, double loss,
                        llvm::ArrayRef<runtime::InstructionEvent> events,
                        llvm::ArrayRef<Call> calls);
  /// Finishes the JSON with `status` ("complete", or what failed) and
  /// renames the file into place.
  llvm::Error close(llvm::StringRef status);

private:
  struct Impl;
  explicit TraceWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The same instant on every rank: each rank's steady clock reading at the
/// moment the earliest rank's wall clock read when it called this (ranks
/// of one machine share the clock exactly; across machines as well as
/// their wall clocks agree). Collective over every rank; `communicator`
/// null: now.
llvm::Expected<runtime::TraceClock::time_point>
agreeOnTimeZero(runtime::Communicator *communicator,
                runtime::MemorySpace &memory);

/// Every rank's `values` (the same count on each), in rank order: one
/// all-gather over the whole mesh in `memory`. `communicator` null: just
/// `values`.
llvm::Expected<std::vector<double>>
gatherFromRanks(runtime::Communicator *communicator,
                runtime::MemorySpace &memory, llvm::ArrayRef<double> values);

/// One step's MoE routing figures over the whole job (docs/observability.md).
struct MoeStepFigures {
  /// Per MoE layer, each expert's tokens (choices before drops): a layer's
  /// counts sum to the step's tokens times top-k.
  std::vector<std::vector<double>> expertTokens;
  double dropRate = 0; ///< Choices dropped for want of capacity, over all.
  double auxLoss = 0;  ///< Load-balancing loss, mean over layers/sequences.
  /// The worst layer's busiest expert over its mean load, minus 1.
  double imbalance = 0;
  llvm::json::Object toJson() const;
};

/// This rank's routing figures laid out for gatherFromRanks: per layer,
/// [each expert's choices, dropped, load-balancing loss sum, sequences];
/// zeros when `counts` is false (a replica of another rank's tokens).
std::vector<double> flattenMoeRouting(const runtime::MoeRoutingStats &stats,
                                      int64_t layers, int64_t experts,
                                      bool counts);
/// The job's figures from every rank's flattenMoeRouting, concatenated.
MoeStepFigures summarizeMoeRouting(llvm::ArrayRef<double> allRanks,
                                   int64_t layers, int64_t experts);

/// This process's peak resident memory in bytes (the host backend's peak
/// memory: every buffer a rank allocates is host memory).
int64_t peakResidentBytes();

/// A variable element that is NaN or Inf.
struct NonFinite {
  int variable = 0; ///< index in the rank program's variables
  int64_t element = 0;
  double value = 0;
};
/// The first NaN/Inf among the rank's variables of `role` ("parameter",
/// "grad"), in program order. Host memory reads in place; a device's
/// variables are copied to the host.
llvm::Expected<std::optional<NonFinite>>
findNonFinite(runtime::Executor &executor, llvm::StringRef role);

/// Names ranks whose compute time per step exceeds `factor` times the
/// median of the ranks that run the same program (SPMD peers). Figures
/// accumulate from the second step on (the first warms caches); a rank is
/// named once.
class StragglerWatch {
public:
  /// `peers[r]`: the ranks running rank r's program (r included).
  StragglerWatch(double factor, std::vector<std::vector<int>> peers);
  /// Adds one step's compute seconds per rank; returns a warning for each
  /// rank newly found slow.
  std::vector<std::string> addStep(int64_t step,
                                   llvm::ArrayRef<double> computeSeconds);

private:
  double factor_;
  std::vector<std::vector<int>> peers_;
  std::vector<double> total_;
  std::vector<bool> named_;
  int64_t steps_ = 0, firstStep_ = 0;
};

} // namespace dtc

#endif // DTC_COMPILER_RUN_TELEMETRY_H
