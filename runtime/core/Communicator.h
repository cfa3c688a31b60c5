//===- Communicator.h - How a rank talks to the others ----------*- C++ -*-===//
//
// The runtime's view of communication, shared by every backend: the
// Communicator interface that the collective kernels call. The MPI
// backend (runtime/mpi) implements it on host memory, the NCCL backend
// (runtime/cuda) on device memory.
//
// Every operation is asynchronous: it is started in program order and
// completes in the background (overlapping the compute that follows); its
// buffers must stay untouched until wait(). All ranks of a group start the
// same operations in the same order, so implementations may match them by
// order alone.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_COMMUNICATOR_H
#define DTC_RUNTIME_CORE_COMMUNICATOR_H

#include "runtime/core/Tensor.h"
#include "runtime/support/Mesh.h"

#include "llvm/Support/Error.h"

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace dtc::runtime {

enum class Reduction { Sum, Max, Min };

/// "sum", "max" or "min".
llvm::Expected<Reduction> parseReduction(llvm::StringRef name);

/// This process's rank among the processes its launcher started on this
/// machine (Open MPI, MPICH/Hydra, Slurm, torchrun), if one says: the
/// device a GPU rank uses.
std::optional<int> launcherLocalRank();

/// An operation in flight, valid until waited.
using Request = int64_t;

/// One rank's endpoint. Group semantics are those of the dtc collective ops
/// (dialects/dtc/DtcCollectiveOps.td, docs/partition.md):
///  - allReduce: every rank of the group gets the reduction of the inputs.
///  - allGather(dim, block): the inputs concatenated along `dim` in group
///    order; with block = B > 0 the output's `dim` is read as [size/B, B]
///    and each run of B is gathered from the runs of B/n of the inputs.
///  - reduceScatter(dim, block): the reduction, of which each rank keeps
///    its part of `dim` (the inverse layout of allGather).
///  - allToAll(splitDim, concatDim): input split along splitDim into n
///    parts, part i to group rank i, received parts concatenated along
///    concatDim in group order.
///  - send/recv: to/from the peer at `peerOffset` along one axis.
/// Input and output never alias. Errors name the operation and the peer.
class Communicator {
public:
  virtual ~Communicator();

  virtual int rank() const = 0;
  virtual const Mesh &mesh() const = 0;

  virtual llvm::Expected<Request> allReduce(llvm::ArrayRef<std::string> axes,
                                            const TensorRef &input,
                                            const TensorRef &output,
                                            Reduction reduction) = 0;
  virtual llvm::Expected<Request> allGather(llvm::ArrayRef<std::string> axes,
                                            const TensorRef &input,
                                            const TensorRef &output,
                                            int64_t dim, int64_t block) = 0;
  virtual llvm::Expected<Request>
  reduceScatter(llvm::ArrayRef<std::string> axes, const TensorRef &input,
                const TensorRef &output, int64_t dim, int64_t block,
                Reduction reduction) = 0;
  virtual llvm::Expected<Request>
  allToAll(llvm::ArrayRef<std::string> axes, const TensorRef &input,
           const TensorRef &output, int64_t splitDim, int64_t concatDim) = 0;
  virtual llvm::Expected<Request> send(llvm::StringRef axis, int64_t peerOffset,
                                       const TensorRef &input) = 0;
  virtual llvm::Expected<Request> recv(llvm::StringRef axis, int64_t peerOffset,
                                       const TensorRef &output) = 0;

  /// Blocks until the operation is complete (its output written, its input
  /// free to reuse).
  virtual llvm::Error wait(Request request) = 0;
  /// The caller is about to compute while operations it started are
  /// outstanding. A backend that moves them on a thread of its own (MPI)
  /// wakes it here rather than at each start, so an operation waited for
  /// right after its start costs no thread wake-up. Cheap when nothing is
  /// due.
  virtual void computing() {}
  /// When the operation that the last wait() returned for had completed,
  /// where the backend observes it (traces); nullopt when it does not.
  virtual std::optional<std::chrono::steady_clock::time_point>
  lastWaitCompletion() const {
    return std::nullopt;
  }
};

/// The peer of a send or recv: the rank `peerOffset` away from `rank` along
/// `axis`, and how errors name the transfer ("send from rank 3 +1 along
/// 'pp'", "recv at rank 4 -1 along 'pp'").
struct PeerRank {
  int rank = 0;
  std::string where;
};

/// Resolves a send's (`sending`) or recv's peer for every backend; an error
/// names the transfer and the mesh when it has no such axis or peer.
llvm::Expected<PeerRank> resolvePeer(const Mesh &mesh, int rank,
                                     llvm::StringRef axis, int64_t peerOffset,
                                     bool sending);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_COMMUNICATOR_H
