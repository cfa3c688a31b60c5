//===- Elastic.h - A run that re-plans for the ranks it has -----*- C++ -*-===//
//
// `dtc run BUNDLE --elastic MIN:MAX` (docs/checkpoints.md, "Elastic
// training"): the local launcher supervises the ranks; when one dies, it
// re-plans the bundle's own compile request (plan.json's compile_command)
// for the most ranks left that have a plan keeping the global batch,
// writes that bundle under --ckpt-dir, and resumes from the newest
// committed step, by itself. Below MIN ranks the run ends with one line
// and the last committed step intact.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_RUN_ELASTIC_H
#define DTC_COMPILER_RUN_ELASTIC_H

#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace dtc {

/// `--elastic MIN:MAX`: the ranks a run may shrink to and grow to.
struct ElasticRange {
  int64_t min = 1, max = 1;
};

/// "MIN:MAX" (or "N" for N:N), 1 <= MIN <= MAX.
llvm::Expected<ElasticRange> parseElasticRange(llvm::StringRef text);

/// The environment variable that kills a rank halfway through a step
/// (RANK:STEP; docs/testing.md): a lost node for the elastic tests. The
/// supervisor clears it once it has fired.
inline constexpr const char *kKillRankFault = "DTC_FAULT_KILL_RANK";
/// Set by the supervisor on a relaunch: when the failure was seen (seconds
/// since the epoch), so that rank 0 reports the recovery time at its first
/// step.
inline constexpr const char *kElasticFailedAt = "DTC_ELASTIC_FAILED_AT";

/// How one launch of the ranks ended.
struct RankLaunch {
  /// The rank that died without a word (a lost process or node), if the
  /// launch failed that way; other failures are errors as they are.
  std::optional<int> deadRank;
};

struct ElasticRun {
  ElasticRange range;
  std::string bundle;  ///< The bundle the run starts with.
  std::string ckptDir; ///< Where checkpoints and re-planned bundles go.
  std::vector<std::string> command; ///< What each rank runs (dtc first).
  int64_t worldSize = 1;            ///< The starting bundle's ranks.
  /// Starts `ranks` processes running `command`; fills `outcome`.
  std::function<llvm::Error(int64_t ranks,
                            const std::vector<std::string> &command,
                            RankLaunch &outcome)>
      launch;
};

/// Runs `run`, re-planning and resuming after each lost rank.
llvm::Error superviseElastic(const ElasticRun &run, llvm::raw_ostream &out);

/// A launcher (mpirun, srun) started `world` ranks for a bundle planned for
/// another count: rank 0 re-plans the bundle's request for `world` into
/// --ckpt-dir/elastic while the others wait for it; every rank returns the
/// new bundle, to resume from. `dtc` is the executable that compiles.
llvm::Expected<std::string>
replanForLauncher(llvm::StringRef bundle, llvm::StringRef ckptDir,
                  const std::string &dtc, ElasticRange range,
                  int64_t bundleRanks, int64_t world, int rank);

} // namespace dtc

#endif // DTC_COMPILER_RUN_ELASTIC_H
