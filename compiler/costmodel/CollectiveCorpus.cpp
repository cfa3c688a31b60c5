//===- CollectiveCorpus.cpp - Collectives against nccl-tests --------------===//

#include "compiler/costmodel/CollectiveCorpus.h"

#include "compiler/costmodel/Calibration.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/Support/Path.h"

#include <cmath>

using namespace dtc;

namespace {

struct SystemLinks {
  std::string preset;
  int64_t gpusPerDomain = 0;
  double nvlinkGBps = 0, scaleOutGBps = 0;
  std::string fabric;
  bool inNetworkReduction = false;
};

std::optional<Collective> collectiveOf(llvm::StringRef cell) {
  if (cell.starts_with("all_reduce"))
    return Collective::AllReduce;
  if (cell.starts_with("all_gather"))
    return Collective::AllGather;
  if (cell.starts_with("reduce_scatter"))
    return Collective::ReduceScatter;
  if (cell.starts_with("alltoall") || cell.starts_with("all_to_all"))
    return Collective::AllToAll;
  if (cell.starts_with("sendrecv"))
    return Collective::SendRecv;
  if (cell.starts_with("broadcast"))
    return Collective::Broadcast;
  return std::nullopt;
}

/// nccl-tests' bus bandwidth over algorithm bandwidth (size / time).
double busFactor(Collective kind, int64_t n) {
  double share = static_cast<double>(n - 1) / static_cast<double>(n);
  switch (kind) {
  case Collective::AllReduce:
    return 2 * share;
  case Collective::AllGather:
  case Collective::ReduceScatter:
  case Collective::AllToAll:
    return share;
  case Collective::Broadcast:
  case Collective::SendRecv:
    return 1;
  }
  return 1;
}

} // namespace

llvm::Expected<std::vector<CollectiveRun>>
dtc::loadCollectiveRuns(llvm::StringRef dataDir,
                        std::vector<std::string> *skipped) {
  llvm::SmallString<256> systemsPath(dataDir), runsPath(dataDir);
  llvm::sys::path::append(systemsPath, "corpus", "collective_systems.csv");
  llvm::sys::path::append(runsPath, "corpus", "collectives.csv");
  auto systems = readCsv(systemsPath);
  if (!systems)
    return systems.takeError();
  llvm::StringMap<SystemLinks> links;
  for (const auto &row : systems->rows) {
    SystemLinks l;
    l.preset = systems->cell(row, "preset").str();
    double domain = 0;
    if (!parseCsvNumber(systems->cell(row, "gpus_per_domain"), domain) ||
        !parseCsvNumber(systems->cell(row, "nvlink_gbytes_per_s"),
                        l.nvlinkGBps) ||
        !parseCsvNumber(systems->cell(row, "scaleout_gbytes_per_s"),
                        l.scaleOutGBps))
      return badInput("{0}: '{1}': malformed link figures", systemsPath,
                      systems->cell(row, "gpu_system"));
    l.gpusPerDomain = static_cast<int64_t>(domain);
    l.fabric = systems->cell(row, "fabric").str();
    l.inNetworkReduction = systems->cell(row, "in_network_reduction") == "yes";
    links[systems->cell(row, "gpu_system")] = l;
  }

  auto table = readCsv(runsPath);
  if (!table)
    return table.takeError();
  std::vector<CollectiveRun> runs;
  for (const auto &row : table->rows) {
    auto cell = [&](llvm::StringRef name) { return table->cell(row, name); };
    std::string label = (cell("gpu_system") + ", " + cell("collective") + ", " +
                         cell("message_bytes") + " B")
                            .str();
    auto skip = [&](const llvm::Twine &why) {
      if (skipped)
        skipped->push_back(label + ": " + why.str());
    };
    auto system = links.find(cell("gpu_system"));
    if (system == links.end()) {
      skip("no links in collective_systems.csv");
      continue;
    }
    if (system->second.inNetworkReduction) {
      skip("reduces in the switches (NVLS or SHARP), which is not modelled");
      continue;
    }
    std::optional<Collective> kind = collectiveOf(cell("collective"));
    double ranks = 0, nodes = 0, bytes = 0, latencyUs = 0, busGBps = 0;
    if (!kind || !parseCsvNumber(cell("ranks"), ranks) ||
        !parseCsvNumber(cell("nodes"), nodes) ||
        !parseCsvNumber(cell("message_bytes"), bytes) || ranks < 1 ||
        nodes < 1) {
      skip("malformed collective, ranks, nodes or size");
      continue;
    }
    CollectiveRun run;
    run.kind = *kind;
    run.ranks = static_cast<int64_t>(ranks);
    run.nodes = static_cast<int64_t>(nodes);
    run.bytes = bytes;
    if (parseCsvNumber(cell("latency_us"), latencyUs) && latencyUs > 0)
      run.measuredSeconds = latencyUs * 1e-6;
    else if (parseCsvNumber(cell("busbw_GBps"), busGBps) && busGBps > 0)
      run.measuredSeconds =
          bytes * busFactor(*kind, run.ranks) / (busGBps * 1e9);
    else {
      skip("neither a time nor a bus bandwidth");
      continue;
    }
    if (bytes < 1024 && latencyUs <= 0) {
      skip("a bus bandwidth of a tiny message gives no time");
      continue;
    }
    const SystemLinks &l = system->second;
    auto cluster = lookupClusterPreset(l.preset, run.ranks);
    if (!cluster)
      return cluster.takeError();
    run.cluster = std::move(*cluster);
    run.cluster.gpusPerNode = l.gpusPerDomain;
    run.cluster.intraNodeGBps = l.nvlinkGBps;
    run.cluster.interNodeGBps = l.scaleOutGBps;
    if (run.nodes > 1 && l.gpusPerDomain < run.ranks && l.scaleOutGBps <= 0) {
      skip("spans NVLink domains with no scale-out bandwidth");
      continue;
    }
    // The publication the row came from: its repository, or its page.
    llvm::StringRef source = cell("source");
    run.source = source.split('@').first.split(": ").first.str();
    if (source.starts_with("https://docs.cloud.google.com"))
      run.source = "docs.cloud.google.com";
    run.system = cell("gpu_system").str();
    run.fabric = l.fabric;
    runs.push_back(std::move(run));
  }
  return runs;
}

bool dtc::presetFabric(const CollectiveRun &run) {
  return run.fabric == "nvlink" || run.fabric == "infiniband" ||
         run.fabric == "roce";
}

double dtc::collectiveTimeRatio(const CollectiveRun &run,
                                const LinkConstants &constants) {
  Cluster cluster = run.cluster;
  cluster.intraNodeLatencyUs = constants.intraLatencyUs;
  cluster.intraNodeEfficiency = constants.intraEfficiency;
  cluster.interNodeLatencyUs = constants.interLatencyUs;
  cluster.interNodeEfficiency = constants.interEfficiency;
  GroupPlacement group = placeGroup(run.ranks, 1, cluster.gpusPerNode);
  return collectiveTime(run.kind, run.bytes, group, cluster) /
         run.measuredSeconds;
}

static bool spansDomains(const CollectiveRun &run) {
  return run.ranks > run.cluster.gpusPerNode;
}

LinkConstants dtc::fitLinkConstants(const std::vector<CollectiveRun> &runs,
                                    const std::vector<bool> &use,
                                    const LinkConstants &fallback,
                                    bool fitEfficiency) {
  // Mean |log(predicted / measured)| of the chosen runs of one level.
  auto loss = [&](const LinkConstants &c, bool scaleOut) {
    double sum = 0;
    size_t count = 0;
    for (size_t i = 0; i < runs.size(); ++i)
      if (use[i] && spansDomains(runs[i]) == scaleOut) {
        sum += std::fabs(std::log(collectiveTimeRatio(runs[i], c)));
        ++count;
      }
    return count ? sum / static_cast<double>(count) : -1.0;
  };
  LinkConstants best = fallback;
  for (bool scaleOut : {false, true}) {
    if (loss(best, scaleOut) < 0)
      continue; // No run of this level: keep the fallback's.
    double bestLoss = INFINITY;
    LinkConstants trial = best;
    for (double latency = 0.5; latency <= 30; latency += 0.5)
      for (double efficiency = fitEfficiency ? 0.30 : 2;
           efficiency <= 1.0001 || (!fitEfficiency && efficiency == 2);
           efficiency += fitEfficiency ? 0.01 : 1) {
        (scaleOut ? trial.interLatencyUs : trial.intraLatencyUs) = latency;
        if (fitEfficiency)
          (scaleOut ? trial.interEfficiency : trial.intraEfficiency) =
              efficiency;
        double l = loss(trial, scaleOut);
        if (l < bestLoss) {
          bestLoss = l;
          best = trial;
        }
      }
  }
  return best;
}

MessageRegime dtc::messageRegime(double bytes) {
  if (bytes <= 64.0 * 1024)
    return MessageRegime::Latency;
  if (bytes >= 64.0 * 1024 * 1024)
    return MessageRegime::Bandwidth;
  return MessageRegime::Middle;
}

llvm::StringRef dtc::messageRegimeName(MessageRegime regime) {
  switch (regime) {
  case MessageRegime::Latency:
    return "<= 64 KiB";
  case MessageRegime::Middle:
    return "64 KiB - 64 MiB";
  case MessageRegime::Bandwidth:
    return ">= 64 MiB";
  }
  return "";
}

CollectiveCrossValidation
dtc::leaveOneSourceOut(const std::vector<CollectiveRun> &runs,
                       bool fitEfficiency) {
  CollectiveCrossValidation cv;
  cv.heldOutRatio.assign(runs.size(), 0);
  std::map<std::string, std::vector<double>> bySource;
  std::map<MessageRegime, std::vector<double>> byRegime;
  std::vector<double> all, other;
  std::map<std::string, bool> sources;
  for (const CollectiveRun &run : runs)
    sources[run.source] = true;
  for (const auto &[source, unused] : sources) {
    std::vector<bool> use(runs.size());
    for (size_t i = 0; i < runs.size(); ++i)
      use[i] = runs[i].source != source && presetFabric(runs[i]);
    LinkConstants fitted =
        fitLinkConstants(runs, use, presetLinkConstants(), fitEfficiency);
    for (size_t i = 0; i < runs.size(); ++i) {
      if (runs[i].source != source)
        continue;
      double ratio = collectiveTimeRatio(runs[i], fitted);
      cv.heldOutRatio[i] = ratio;
      double error = std::fabs(ratio - 1);
      if (!presetFabric(runs[i])) {
        other.push_back(error);
        continue;
      }
      bySource[source].push_back(error);
      byRegime[messageRegime(runs[i].bytes)].push_back(error);
      all.push_back(error);
    }
  }
  for (auto &[source, errors] : bySource)
    cv.bySource[source] = errorStats(errors);
  for (auto &[regime, errors] : byRegime)
    cv.byRegime[regime] = errorStats(errors);
  cv.all = errorStats(all);
  cv.otherFabrics = errorStats(other);
  return cv;
}
