//===- NcclCommunicator.h - The NCCL backend of Communicator ----*- C++ -*-===//
//
// Communication between the GPUs of a CUDA run, one process (and device) per
// rank, on device buffers. One ncclComm per group of mesh axes, split from
// the world communicator at creation (every rank creates them all, in the
// same order, so no group's creation waits on another's). Each group's
// collectives run on the group's own stream, so a data-parallel gradient
// all-reduce never holds up a tensor-parallel one queued after it: a start
// records an event on the compute stream (the inputs are written) that the
// group's stream waits for; wait() makes the compute stream wait for the
// operation's completion event, so the kernels queued after it see the
// output without the host blocking.
// Layouts NCCL does not produce (a gather along dim != 0, blocked layouts,
// all-to-all) are packed and unpacked by permutation kernels on the compute
// stream.
//
// Sends and receives need their own channels. A compiled program expects
// MPI's semantics: a send completes without the receiver, and receives are
// posted ahead (a pipeline posts the next pass's receive before this pass's
// send; a ring sends to +1 and receives from -1 on every rank at once). On
// one NCCL stream a receive blocks every later operation until its sender
// runs, so those orders deadlock. Each direction between two ring
// neighbours of a point-to-point axis therefore has its own two-rank
// communicator and stream on both sides: the k-th send of a channel meets
// its k-th receive, which the program posts in the same order, and a send
// held up waiting blocks only later sends to the same peer.
//
// Ranks pick their device by their launcher's local rank
// (launcherLocalRank).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CUDA_NCCLCOMMUNICATOR_H
#define DTC_RUNTIME_CUDA_NCCLCOMMUNICATOR_H

#include "runtime/core/Communicator.h"

#include "llvm/ADT/STLFunctionalExtras.h"

#include <array>
#include <memory>

namespace dtc::runtime::cuda {

/// The bytes of an ncclUniqueId.
using NcclId = std::array<char, 128>;

class NcclCommunicator : public Communicator {
public:
  /// Collective over the mesh's world: `rank` is this process's mesh rank;
  /// `broadcastId` must give every rank the id rank 0 passes it (rank 0's
  /// argument holds the id on entry, the others' receive it).
  /// `pointToPointAxes`: the axes sends and receives run along (the same
  /// on every rank); each gets channels between ring neighbours.
  static llvm::Expected<std::unique_ptr<NcclCommunicator>>
  create(Mesh mesh, int rank,
         llvm::function_ref<llvm::Error(NcclId &)> broadcastId,
         llvm::ArrayRef<std::string> pointToPointAxes = {});
  /// The same with the id broadcast over MPI_COMM_WORLD (MPI initialized,
  /// its world the mesh's); the rank is the MPI world rank.
  static llvm::Expected<std::unique_ptr<NcclCommunicator>>
  createWithMpi(Mesh mesh, llvm::ArrayRef<std::string> pointToPointAxes = {});
  ~NcclCommunicator() override;

  int rank() const override;
  const Mesh &mesh() const override;

  llvm::Expected<Request> allReduce(llvm::ArrayRef<std::string> axes,
                                    const TensorRef &input,
                                    const TensorRef &output,
                                    Reduction reduction) override;
  llvm::Expected<Request> allGather(llvm::ArrayRef<std::string> axes,
                                    const TensorRef &input,
                                    const TensorRef &output, int64_t dim,
                                    int64_t block) override;
  llvm::Expected<Request> reduceScatter(llvm::ArrayRef<std::string> axes,
                                        const TensorRef &input,
                                        const TensorRef &output, int64_t dim,
                                        int64_t block,
                                        Reduction reduction) override;
  llvm::Expected<Request> allToAll(llvm::ArrayRef<std::string> axes,
                                   const TensorRef &input,
                                   const TensorRef &output, int64_t splitDim,
                                   int64_t concatDim) override;
  llvm::Expected<Request> send(llvm::StringRef axis, int64_t peerOffset,
                               const TensorRef &input) override;
  llvm::Expected<Request> recv(llvm::StringRef axis, int64_t peerOffset,
                               const TensorRef &output) override;
  /// Orders the compute stream after the operation (see the file comment).
  llvm::Error wait(Request request) override;

  struct Impl;

private:
  explicit NcclCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace dtc::runtime::cuda

#endif // DTC_RUNTIME_CUDA_NCCLCOMMUNICATOR_H
