//===- CollectiveCorpus.h - Collectives against nccl-tests ------*- C++ -*-===//
//
// The alpha-beta collective model (Collectives.h) against measured NCCL
// collectives: data/corpus/collectives.csv holds nccl-tests rows (one
// collective, rank and node count and message size each, with the time it
// took), data/corpus/collective_systems.csv the nominal links of each
// system they ran on. The link constants the presets use (latency per hop
// and achieved fraction of nominal bandwidth, inside an NVLink domain and
// across domains) are fitted to these rows and cross-validated leaving one
// source out, so that the bench that chose them
// (bench/costmodel/collective_error.cpp) and the test that guards them
// compute the same figures.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_COLLECTIVECORPUS_H
#define DTC_COMPILER_COSTMODEL_COLLECTIVECORPUS_H

#include "compiler/costmodel/Collectives.h"
#include "compiler/costmodel/Validation.h"

#include "llvm/Support/Error.h"

#include <map>
#include <string>
#include <vector>

namespace dtc {

/// One measured collective: nccl-tests' out-of-place time of `kind` over
/// `ranks` GPUs on `nodes` nodes (consecutive ranks share a node).
struct CollectiveRun {
  std::string source; ///< The unit cross-validation leaves out.
  std::string system; ///< The collective_systems.csv row it ran on.
  /// "nvlink" (one domain), "infiniband", "roce", "efa" or "tcpxo".
  std::string fabric;
  Collective kind = Collective::AllReduce;
  int64_t ranks = 0, nodes = 1;
  double bytes = 0;           ///< As Collectives.h counts them.
  double measuredSeconds = 0; ///< nccl-tests' time column.
  /// The system's links at nominal bandwidth; latencies and efficiencies
  /// come from the constants priced with.
  Cluster cluster;
};

/// The rows of collectives.csv whose system collective_systems.csv
/// describes; others are appended to `skipped` with the reason.
llvm::Expected<std::vector<CollectiveRun>>
loadCollectiveRuns(llvm::StringRef dataDir, std::vector<std::string> *skipped);

/// Whether `run`'s scale-out fabric is one the presets describe (NVLink
/// only, InfiniBand, RoCE): the rows the constants are fitted to. EFA and
/// GPUDirect-TCPXO have other latencies and are reported apart.
bool presetFabric(const CollectiveRun &run);

/// Predicted over measured time of `run` priced with `constants`.
double collectiveTimeRatio(const CollectiveRun &run,
                           const LinkConstants &constants);

/// The constants minimizing the mean |log(predicted / measured)| over the
/// runs with `use[i]`: the NVLink level on single-domain runs, then the
/// scale-out level on the others with it fixed. Where `use` holds no run
/// of a level, that level keeps `fallback`'s constants; without
/// `fitEfficiency` only the latencies are fitted, the efficiencies kept.
LinkConstants fitLinkConstants(const std::vector<CollectiveRun> &runs,
                               const std::vector<bool> &use,
                               const LinkConstants &fallback,
                               bool fitEfficiency = true);

/// The message-size regimes errors are reported in.
enum class MessageRegime { Latency, Middle, Bandwidth };
/// Latency: at most 64 KiB; bandwidth: at least 64 MiB.
MessageRegime messageRegime(double bytes);
llvm::StringRef messageRegimeName(MessageRegime regime);

struct CollectiveCrossValidation {
  std::vector<double> heldOutRatio; ///< Per run.
  std::map<std::string, ErrorStats> bySource;
  std::map<MessageRegime, ErrorStats> byRegime;
  ErrorStats all;          ///< The preset fabrics' rows.
  ErrorStats otherFabrics; ///< EFA and TCPXO rows, priced alike.
};
/// For each source, fits on the others' preset-fabric rows (falling back to
/// the presets' constants for a level they do not measure) and prices its
/// runs. bySource and byRegime cover the preset fabrics.
CollectiveCrossValidation
leaveOneSourceOut(const std::vector<CollectiveRun> &runs,
                  bool fitEfficiency = true);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_COLLECTIVECORPUS_H
