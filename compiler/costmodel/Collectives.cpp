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

double dtc::flatCollectiveTime(Collective kind, double bytes, int64_t n,
                               const Link &link,
                               CollectiveAlgorithm algorithm) {
  if (kind != Collective::SendRecv && n <= 1)
    return 0;
  double alpha = link.latencySeconds;
  double beta = 1 / link.effectiveBytesPerSecond();
  double steps = static_cast<double>(n - 1);
  double share = steps / static_cast<double>(n); // (n-1)/n
  switch (kind) {
  case Collective::AllReduce: {
    // Ring: reduce-scatter then all-gather, 2(n-1) steps of bytes/n each.
    double ring = 2 * steps * alpha + 2 * share * bytes * beta;
    // Double binary tree: pipelined reduce up, broadcast down.
    double tree = 2 * ceilLog2(n) * alpha + 2 * bytes * beta;
    if (algorithm == CollectiveAlgorithm::Ring)
      return ring;
    if (algorithm == CollectiveAlgorithm::Tree)
      return tree;
    return std::min(ring, tree);
  }
  case Collective::AllGather:
  case Collective::ReduceScatter:
  case Collective::AllToAll:
    // Every rank moves (n-1)/n of the buffer in n-1 steps (ring, or
    // pairwise exchange for all-to-all).
    return steps * alpha + share * bytes * beta;
  case Collective::Broadcast: {
    // Pipelined chain or pipelined tree: the buffer crosses each link once.
    double ring = steps * alpha + bytes * beta;
    double tree = ceilLog2(n) * alpha + bytes * beta;
    if (algorithm == CollectiveAlgorithm::Ring)
      return ring;
    if (algorithm == CollectiveAlgorithm::Tree)
      return tree;
    return std::min(ring, tree);
  }
  case Collective::SendRecv:
    return alpha + bytes * beta;
  }
  return 0;
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
  // the scale-out step, so the slow links carry k times less.
  double shard = bytes / static_cast<double>(k);
  switch (kind) {
  case Collective::AllReduce:
    return flatCollectiveTime(Collective::ReduceScatter, bytes, k, intra) +
           flatCollectiveTime(Collective::AllReduce, shard, domains, inter,
                              algorithm) +
           flatCollectiveTime(Collective::AllGather, bytes, k, intra);
  case Collective::AllGather:
    return flatCollectiveTime(Collective::AllGather, shard, domains, inter) +
           flatCollectiveTime(Collective::AllGather, bytes, k, intra);
  case Collective::ReduceScatter:
    return flatCollectiveTime(Collective::ReduceScatter, bytes, k, intra) +
           flatCollectiveTime(Collective::ReduceScatter, shard, domains, inter);
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
    return flatCollectiveTime(Collective::Broadcast, bytes, domains, inter,
                              algorithm) +
           flatCollectiveTime(Collective::Broadcast, bytes, k, intra,
                              algorithm);
  case Collective::SendRecv:
    break;
  }
  return 0;
}
