//===- Communicator.cpp - The device mesh of a program --------------------===//

#include "runtime/core/Communicator.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cstdlib>

namespace dtc::runtime {

Communicator::~Communicator() = default;

llvm::Expected<Reduction> parseReduction(llvm::StringRef name) {
  if (name.empty() || name == "sum")
    return Reduction::Sum;
  if (name == "max")
    return Reduction::Max;
  if (name == "min")
    return Reduction::Min;
  return dtc::failureText("unknown reduction '" + name + "'");
}

llvm::Expected<PeerRank> resolvePeer(const Mesh &mesh, int rank,
                                     llvm::StringRef axis, int64_t peerOffset,
                                     bool sending) {
  PeerRank peer;
  peer.where = (sending ? "send from rank " : "recv at rank ") +
               std::to_string(rank) + " " + (peerOffset >= 0 ? "+" : "") +
               std::to_string(peerOffset) + " along '" + axis.str() + "'";
  if (mesh.axisIndex(axis) < 0)
    return dtc::failureText(peer.where + ": no axis '" + axis + "' in mesh '" +
                            mesh.str() + "'");
  std::optional<int> other = mesh.peer(rank, axis, peerOffset);
  if (!other)
    return dtc::failureText(peer.where + ": no such peer in mesh '" +
                            mesh.str() + "'");
  peer.rank = *other;
  return peer;
}

std::optional<int> launcherLocalRank() {
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                           "SLURM_LOCALID", "LOCAL_RANK"})
    if (const char *value = std::getenv(name))
      return std::atoi(value);
  return std::nullopt;
}

} // namespace dtc::runtime
