//===- MpiCommunicator.h - The MPI backend of Communicator ------*- C++ -*-===//
//
// Communication between the ranks of a CPU run: one MPI process per rank,
// host memory. The caller initializes MPI (initializeMpi) and creates the
// communicator on every rank at once (the group communicators are created
// collectively). Starts are posted as nonblocking MPI operations in
// program order and tested until complete: by a progress thread while the
// caller computes (it says so with computing()), by the caller itself while
// it is blocked in wait().
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_MPI_MPICOMMUNICATOR_H
#define DTC_RUNTIME_MPI_MPICOMMUNICATOR_H

#include "runtime/core/Communicator.h"

#include <memory>

namespace dtc::runtime::mpi {

/// MPI_Init_thread asking for MPI_THREAD_MULTIPLE; errors when the library
/// offers less than MPI_THREAD_SERIALIZED. MPI errors return instead of
/// aborting from here on. A no-op when MPI is already initialized with
/// enough thread support.
llvm::Error initializeMpi(int *argc, char ***argv);
/// MPI_Finalize, when initialized and not yet finalized. Destroy every
/// MpiCommunicator first.
void finalizeMpi();
/// Whether this process was started by an MPI launcher (mpirun, srun):
/// OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK is set.
bool launchedByMpi();

class MpiCommunicator : public Communicator {
public:
  /// Collective over MPI_COMM_WORLD, whose size must be mesh.worldSize();
  /// this process is the mesh rank of its world rank.
  static llvm::Expected<std::unique_ptr<MpiCommunicator>> create(Mesh mesh);
  /// Waits for every operation still in flight (they must all complete) and
  /// stops the progress thread. Collective: every rank destroys its own.
  ~MpiCommunicator() override;

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
  llvm::Error wait(Request request) override;
  void computing() override;
  std::optional<std::chrono::steady_clock::time_point>
  lastWaitCompletion() const override;

  /// Whether `request` has completed, without waiting (false for an unknown
  /// request). Lets tests see that operations progress in the background.
  bool isComplete(Request request) const;

  struct Impl;

private:
  explicit MpiCommunicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

} // namespace dtc::runtime::mpi

#endif // DTC_RUNTIME_MPI_MPICOMMUNICATOR_H
