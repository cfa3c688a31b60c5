//===- Launch.h - Start every rank of a plan on this machine ----*- C++ -*-===//
//
// `dtc run BUNDLE` of a multi-rank plan started by hand runs one process
// per rank under Open MPI's mpirun (each process re-runs the same command
// and finds its rank in the MPI environment), forwards their output, and
// turns a failure into one error line: the error a rank reported, or which
// rank died and how. mpirun stops every other rank when one dies, so a dead
// rank never leaves the others hanging in a collective.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_RUN_LAUNCH_H
#define DTC_COMPILER_RUN_LAUNCH_H

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace dtc {

struct LaunchOptions {
  int ranks = 1;
  /// What every rank runs: the dtc executable, then its arguments.
  std::vector<std::string> command;
  /// Where the ranks' standard output goes; empty: this process's.
  std::string stdoutPath;
};

/// `deadRank`, when given, receives the rank that died without a word (a
/// lost process: killed, crashed) when that is why the launch failed.
llvm::Error launchRanks(const LaunchOptions &options,
                        std::optional<int> *deadRank = nullptr);

} // namespace dtc

#endif // DTC_COMPILER_RUN_LAUNCH_H
