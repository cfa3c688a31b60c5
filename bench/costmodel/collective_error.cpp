//===- collective_error.cpp - The collective model against nccl-tests -----===//
//
// Prices every nccl-tests row of compiler/costmodel/data/corpus
// (collectives.csv, on the links of collective_systems.csv) with the
// presets' link constants and with constants fitted leaving the row's
// source out, then prints the held-out error per source, per message-size
// regime and over all rows, and the constants a fit on every row chooses.
//
//   ninja costmodel-collectives && ./bench/costmodel/costmodel-collectives [-v]
//
// -v lists every row and the rows the model cannot price.
//
//===----------------------------------------------------------------------===//

#include "compiler/costmodel/CollectiveCorpus.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace dtc;

static void printStats(llvm::StringRef what, const ErrorStats &s) {
  llvm::outs() << llvm::format(
      "  %-34s %4zu  median %6.1f%%  p90 %7.1f%%  worst %7.1f%%\n",
      what.str().c_str(), s.rows, 100 * s.median, 100 * s.p90, 100 * s.worst);
}

static const char *kindName(Collective kind) {
  switch (kind) {
  case Collective::AllReduce:
    return "all-reduce";
  case Collective::AllGather:
    return "all-gather";
  case Collective::ReduceScatter:
    return "reduce-scatter";
  case Collective::AllToAll:
    return "all-to-all";
  case Collective::Broadcast:
    return "broadcast";
  case Collective::SendRecv:
    return "send/recv";
  }
  return "?";
}

int main(int argc, char **argv) {
  bool verbose = argc > 1 && llvm::StringRef(argv[1]) == "-v";
  std::vector<std::string> skipped;
  auto runs = loadCollectiveRuns(DTC_COSTMODEL_DATA_DIR, &skipped);
  if (!runs) {
    llvm::errs() << llvm::toString(runs.takeError()) << "\n";
    return 1;
  }
  LinkConstants preset = presetLinkConstants();
  CollectiveCrossValidation cv = leaveOneSourceOut(*runs);
  std::vector<bool> every(runs->size());
  for (size_t i = 0; i < runs->size(); ++i)
    every[i] = presetFabric((*runs)[i]);
  LinkConstants fitted = fitLinkConstants(*runs, every, preset);
  if (verbose) {
    llvm::outs() << "  ranks nodes      bytes  kind            measured    "
                    "preset  held out  system\n";
    for (size_t i = 0; i < runs->size(); ++i) {
      const CollectiveRun &r = (*runs)[i];
      llvm::outs() << llvm::format(
          "  %5lld %5lld %10.4g  %-14s %9.1f us %7.2fx %7.2fx  %s (%s)\n",
          static_cast<long long>(r.ranks), static_cast<long long>(r.nodes),
          r.bytes, kindName(r.kind), r.measuredSeconds * 1e6,
          collectiveTimeRatio(r, preset), cv.heldOutRatio[i], r.system.c_str(),
          r.fabric.c_str());
    }
    llvm::outs() << "not priced (" << skipped.size() << "):\n";
    for (const std::string &s : skipped)
      llvm::outs() << "  " << s << "\n";
  }
  llvm::outs() << runs->size() << " nccl-tests rows priced, " << skipped.size()
               << " not (-v lists them)\n";
  llvm::outs() << "held-out error of the time, by source:\n";
  for (const auto &[source, stats] : cv.bySource)
    printStats(source, stats);
  llvm::outs() << "by message size:\n";
  for (const auto &[regime, stats] : cv.byRegime)
    printStats(messageRegimeName(regime), stats);
  printStats("all (NVLink, InfiniBand, RoCE)", cv.all);
  printStats("EFA, GPUDirect-TCPXO", cv.otherFabrics);
  std::vector<double> presetErrors;
  for (const CollectiveRun &r : *runs)
    if (presetFabric(r))
      presetErrors.push_back(std::fabs(collectiveTimeRatio(r, preset) - 1));
  printStats("all, the presets' constants", errorStats(presetErrors));
  llvm::outs() << llvm::format(
      "presets: NVLink %.1f us, %.2f of nominal; scale-out %.1f us, %.2f\n",
      preset.intraLatencyUs, preset.intraEfficiency, preset.interLatencyUs,
      preset.interEfficiency);
  llvm::outs() << llvm::format(
      "fit on every row: NVLink %.1f us, %.2f; scale-out %.1f us, %.2f\n",
      fitted.intraLatencyUs, fitted.intraEfficiency, fitted.interLatencyUs,
      fitted.interEfficiency);
  // The presets fit latencies only: their efficiencies come from the step
  // times of the run corpus (docs/cost-model.md).
  LinkConstants latencies = fitLinkConstants(*runs, every, preset, false);
  CollectiveCrossValidation cvLatency = leaveOneSourceOut(*runs, false);
  llvm::outs() << llvm::format(
      "latencies only, efficiencies kept: NVLink %.1f us, scale-out %.1f "
      "us\n",
      latencies.intraLatencyUs, latencies.interLatencyUs);
  for (const auto &[regime, stats] : cvLatency.byRegime)
    printStats(messageRegimeName(regime), stats);
  printStats("all (NVLink, InfiniBand, RoCE)", cvLatency.all);
  return 0;
}
