//===- Collectives.h - Alpha-beta collective costs --------------*- C++ -*-===//
//
// Time of one collective on a group of GPUs. Each link type has a latency
// alpha per step and an effective bandwidth beta per GPU and direction; a
// group that spans NVLink domains runs hierarchically (inside the domain,
// then across, then inside again), each GPU using its own scale-out NIC.
//
// `bytes` is always the size of the whole buffer on one rank:
//   all-reduce      the buffer every rank holds
//   all-gather      the gathered output (each rank contributes bytes/n)
//   reduce-scatter  the input (each rank ends with bytes/n)
//   all-to-all      everything one rank sends, its own share included
//   broadcast       the buffer
//   send/recv       the message
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_COLLECTIVES_H
#define DTC_COMPILER_COSTMODEL_COLLECTIVES_H

#include "compiler/costmodel/Cluster.h"
#include "runtime/support/KernelWork.h"

#include <cstdint>

namespace dtc {

enum class CollectiveAlgorithm {
  Ring,
  Tree, ///< Binary trees (NCCL's double binary tree); all-reduce, broadcast.
  Best  ///< The cheaper of the two, as NCCL's tuner picks per size.
};

/// Where the members of one communication group sit.
struct GroupPlacement {
  int64_t size = 1;
  int64_t perDomain = 1; ///< Members sharing one NVLink domain.
  int64_t domains() const { return (size + perDomain - 1) / perDomain; }
};

/// A group of `size` ranks `stride` apart in a row-major rank numbering
/// whose consecutive `gpusPerDomain` ranks share an NVLink domain.
GroupPlacement placeGroup(int64_t size, int64_t stride, int64_t gpusPerDomain);

/// One flat collective over `n` ranks joined by `link`. Tree applies to
/// all-reduce and broadcast; other collectives always use the ring.
double
flatCollectiveTime(Collective kind, double bytes, int64_t n, const Link &link,
                   CollectiveAlgorithm algorithm = CollectiveAlgorithm::Best);

/// A collective over a placed group: flat on NVLink inside one domain, flat
/// on the scale-out network with one member per domain, hierarchical else.
double
collectiveTime(Collective kind, double bytes, const GroupPlacement &group,
               const Cluster &cluster,
               CollectiveAlgorithm algorithm = CollectiveAlgorithm::Best);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_COLLECTIVES_H
