//===- Collectives.cpp - Alpha-beta collective costs ----------------------===//

#include "compiler/costmodel/Collectives.h"

#include <algorithm>
#include <cmath>

using namespace dtc;

GroupPlacement dtc::placeGroup(int64_t size, int64_t stride,
                               int64_t gpusPerDomain) {
  GroupPlacement group;
  group.size = std::max<int64_t>(size, 1);
  if (stride <= 0 || gpusPerDomain <= 0 || stride >= gpusPerDomain)
    group.perDomain = 1;
  else
    group.perDomain =
        std::clamp<int64_t>(gpusPerDomain / stride, 1, group.size);
  return group;
}

static double ceilLog2(int64_t n) {
  return n <= 1 ? 0 : std::ceil(std::log2(static_cast<double>(n)));
}

namespace {
/// One collective's time as its latency (alpha per step) and its transfer
/// (bytes over bandwidth).
struct PhaseTime {
  double latency = 0, transfer = 0;
  double total() const { return latency + transfer; }
};

PhaseTime flatPhase(Collective kind, double bytes, int64_t n, const Link &link,
                    CollectiveAlgorithm algorithm = CollectiveAlgorithm::Best) {
  if (kind != Collective::SendRecv && n <= 1)
    return {};
  double alpha = link.latencySeconds;
  double beta = 1 / link.effectiveBytesPerSecond();
  double steps = static_cast<double>(n - 1);
  double share = steps / static_cast<double>(n); // (n-1)/n
  auto cheaper = [&](PhaseTime ring, PhaseTime tree) {
    if (algorithm == CollectiveAlgorithm::Ring)
      return ring;
    if (algorithm == CollectiveAlgorithm::Tree)
      return tree;
    return tree.total() < ring.total() ? tree : ring;
  };
  switch (kind) {
  case Collective::AllReduce:
    // Ring: reduce-scatter then all-gather, 2(n-1) steps of bytes/n each.
    // Double binary tree: pipelined reduce up, broadcast down.
    return cheaper({2 * steps * alpha, 2 * share * bytes * beta},
                   {2 * ceilLog2(n) * alpha, 2 * bytes * beta});
  case Collective::AllGather:
  case Collective::ReduceScatter:
  case Collective::AllToAll:
    // Every rank moves (n-1)/n of the buffer in n-1 steps (ring, or
    // pairwise exchange for all-to-all).
    return {steps * alpha, share * bytes * beta};
  case Collective::Broadcast:
    // Pipelined chain or pipelined tree: the buffer crosses each link once.
    return cheaper({steps * alpha, bytes * beta},
                   {ceilLog2(n) * alpha, bytes * beta});
  case Collective::SendRecv:
    return {alpha, bytes * beta};
  }
  return {};
}
} // namespace

double dtc::flatCollectiveTime(Collective kind, double bytes, int64_t n,
                               const Link &link,
                               CollectiveAlgorithm algorithm) {
  return flatPhase(kind, bytes, n, link, algorithm).total();
}

double dtc::collectiveTime(Collective kind, double bytes,
                           const GroupPlacement &group, const Cluster &cluster,
                           CollectiveAlgorithm algorithm) {
  Link intra = cluster.intraNode(), inter = cluster.interNode();
  int64_t n = group.size, k = group.perDomain, domains = group.domains();
  if (kind == Collective::SendRecv)
    return flatCollectiveTime(kind, bytes, 2, k >= 2 ? intra : inter,
                              algorithm);
  if (n <= 1)
    return 0;
  if (domains <= 1)
    return flatCollectiveTime(kind, bytes, n, intra, algorithm);
  if (k <= 1)
    return flatCollectiveTime(kind, bytes, n, inter, algorithm);

  // Hierarchical: the k members of a domain each own 1/k of the buffer on
  // the scale-out step, so the slow links carry k times less. NCCL streams
  // the buffer through the levels in chunks (its rings and trees span both
  // link types), so the phases overlap: each phase's latency adds up, its
  // transfer time does not (the slowest level's sets the pace). Summing
  // them priced 2-node all-reduces of 1-16 GiB on H100 and H200 twice as
  // slow as nccl-tests measured (docs/cost-model.md).
  double shard = bytes / static_cast<double>(k);
  auto pipelined = [&](std::initializer_list<PhaseTime> phases) {
    double latency = 0, transfer = 0;
    for (const PhaseTime &phase : phases) {
      latency += phase.latency;
      transfer = std::max(transfer, phase.transfer);
    }
    return latency + transfer;
  };
  switch (kind) {
  case Collective::AllReduce:
    return pipelined(
        {flatPhase(Collective::ReduceScatter, bytes, k, intra),
         flatPhase(Collective::AllReduce, shard, domains, inter, algorithm),
         flatPhase(Collective::AllGather, bytes, k, intra)});
  case Collective::AllGather:
    return pipelined({flatPhase(Collective::AllGather, shard, domains, inter),
                      flatPhase(Collective::AllGather, bytes, k, intra)});
  case Collective::ReduceScatter:
    return pipelined(
        {flatPhase(Collective::ReduceScatter, bytes, k, intra),
         flatPhase(Collective::ReduceScatter, shard, domains, inter)});
  case Collective::AllToAll: {
    // Traffic to other domains leaves through the NIC, the rest over
    // NVLink; the two proceed at once.
    double nd = static_cast<double>(n);
    double outside = static_cast<double>(n - k) / nd * bytes;
    double inside = static_cast<double>(k - 1) / nd * bytes;
    double slow = static_cast<double>(domains - 1) * inter.latencySeconds +
                  outside / inter.effectiveBytesPerSecond();
    double fast = static_cast<double>(k - 1) * intra.latencySeconds +
                  inside / intra.effectiveBytesPerSecond();
    return std::max(slow, fast);
  }
  case Collective::Broadcast:
    return pipelined(
        {flatPhase(Collective::Broadcast, bytes, domains, inter, algorithm),
         flatPhase(Collective::Broadcast, bytes, k, intra, algorithm)});
  case Collective::SendRecv:
    break;
  }
  return 0;
}
