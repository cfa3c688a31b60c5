//===- NcclPointToPointTest.cpp - NCCL sends in a program's orders --------===//
//
// Two ranks, one GPU each, under mpirun. The orders of sends and receives
// compiled programs start, which deadlock on a single NCCL stream
// (NcclCommunicator.h), must complete through the point-to-point channels
// and deliver every byte:
//   - a pipeline step: each rank posts its receive before its send;
//   - GPipe: several sends in flight before the peer receives any;
//   - a ring shift (context parallelism): send to +1, receive from -1, for
//     K and then V, on both ranks at once.
// Messages are 16 MiB, beyond NCCL's internal buffering. A watchdog fails the
// run after 120 s instead of hanging. Exits 77 (skipped) with fewer than two
// GPUs: two ranks of one communicator cannot share a device.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Tensor.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/mpi/MpiCommunicator.h"

#include "llvm/Support/raw_ostream.h"

#include <cuda_runtime.h>
#include <mpi.h>

#include <csignal>
#include <unistd.h>

using namespace dtc::runtime;

namespace {

int worldRank = 0, failures = 0;

void check(bool ok, const llvm::Twine &what) {
  if (!ok) {
    ++failures;
    llvm::errs() << "rank " << worldRank << ": FAILED: " << what << "\n";
  }
}

void checkOk(llvm::Error err, const llvm::Twine &what) {
  if (err)
    check(false, what + ": " + llvm::toString(std::move(err)));
}

void onTimeout(int) {
  const char message[] =
      "nccl point-to-point test: no progress in 120 s (deadlock)\n";
  (void)!write(2, message, sizeof(message) - 1);
  _exit(1);
}

/// Rank q's message number k, element i.
float messageValue(int q, int k, int64_t i) {
  return static_cast<float>(q * 1000 + k * 100 + i % 97);
}

constexpr int64_t kElements = 4 << 20; // 16 MiB of f32

struct Fixture {
  std::unique_ptr<cuda::NcclCommunicator> comm;
  cuda::CudaMemory memory;
  int rank = 0, peer = 0;

  Tensor message(int k) {
    Tensor host(DType::F32, {kElements});
    for (int64_t i = 0; i < kElements; ++i)
      host.as<float>()[i] = messageValue(rank, k, i);
    llvm::Expected<Tensor> device = cuda::toDevice(host, memory);
    checkOk(device.takeError(), "copy a message to the device");
    return device ? std::move(*device) : Tensor();
  }
  Tensor buffer() {
    llvm::Expected<Tensor> t =
        Tensor::allocate(DType::F32, {kElements}, memory);
    checkOk(t.takeError(), "allocate a receive buffer");
    return t ? std::move(*t) : Tensor();
  }
  void expectFromPeer(const Tensor &received, int k, const llvm::Twine &what) {
    llvm::Expected<Tensor> host = cuda::toHost(received, memory);
    if (!host)
      return checkOk(host.takeError(), what);
    for (int64_t i = 0; i < kElements; ++i)
      if (host->as<float>()[i] != messageValue(peer, k, i))
        return check(false, what + ": element " + llvm::Twine(i) + " is " +
                                std::to_string(host->as<float>()[i]));
  }
  void waitAll(llvm::MutableArrayRef<llvm::Expected<Request>> requests,
               const llvm::Twine &what) {
    for (llvm::Expected<Request> &request : requests)
      checkOk(request ? comm->wait(*request) : request.takeError(), what);
    checkOk(memory.synchronize(), what);
  }
};

} // namespace

int main(int argc, char **argv) {
  if (llvm::Error e = mpi::initializeMpi(&argc, &argv)) {
    llvm::errs() << llvm::toString(std::move(e)) << "\n";
    return 1;
  }
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess)
    devices = 0;
  if (size != 2 || devices < 2) {
    if (worldRank == 0)
      llvm::outs() << "skipped: needs 2 ranks and 2 GPUs (have " << size
                   << " and " << devices << ")\n";
    mpi::finalizeMpi();
    return 77;
  }
  std::signal(SIGALRM, onTimeout);
  alarm(120);
  {
    Fixture f;
    f.rank = worldRank;
    f.peer = 1 - worldRank;
    llvm::Expected<Mesh> mesh = Mesh::parse("pp:2");
    if (!mesh) {
      llvm::errs() << llvm::toString(mesh.takeError()) << "\n";
      return 1;
    }
    auto comm = cuda::NcclCommunicator::createWithMpi(*mesh, {"pp"});
    if (!comm) {
      llvm::errs() << "rank " << worldRank << ": "
                   << llvm::toString(comm.takeError()) << "\n";
      return 1;
    }
    f.comm = std::move(*comm);
    int64_t toPeer = f.rank == 0 ? 1 : -1;

    // A pipeline step: receive posted before the send, on both ranks.
    {
      Tensor out = f.message(0), in = f.buffer();
      llvm::Expected<Request> requests[] = {
          f.comm->recv("pp", toPeer, in.ref()),
          f.comm->send("pp", toPeer, out.ref())};
      f.waitAll(requests, "receive before send");
      f.expectFromPeer(in, 0, "receive before send");
    }
    // GPipe: three sends in flight before any receive is posted.
    {
      Tensor outs[] = {f.message(1), f.message(2), f.message(3)};
      Tensor ins[] = {f.buffer(), f.buffer(), f.buffer()};
      std::vector<llvm::Expected<Request>> requests;
      for (Tensor &out : outs)
        requests.push_back(f.comm->send("pp", toPeer, out.ref()));
      for (Tensor &in : ins)
        requests.push_back(f.comm->recv("pp", toPeer, in.ref()));
      f.waitAll(requests, "sends ahead of receives");
      for (int k = 0; k < 3; ++k)
        f.expectFromPeer(ins[k], k + 1,
                         "sends ahead, message " + llvm::Twine(k + 1));
    }
    // A ring shift of K and V: send to +1, receive from -1 (on an axis of
    // two both are the other rank).
    {
      Tensor k = f.message(4), v = f.message(5);
      Tensor kIn = f.buffer(), vIn = f.buffer();
      int64_t next = f.rank == 0 ? 1 : -1, prev = -next;
      llvm::Expected<Request> requests[] = {
          f.comm->send("pp", next, k.ref()),
          f.comm->recv("pp", prev, kIn.ref()),
          f.comm->send("pp", next, v.ref()),
          f.comm->recv("pp", prev, vIn.ref())};
      f.waitAll(requests, "ring shift");
      f.expectFromPeer(kIn, 4, "ring shift K");
      f.expectFromPeer(vIn, 5, "ring shift V");
    }
    for (const char *what : {"an unknown axis", "no peer"}) {
      Tensor t = f.buffer();
      llvm::Expected<Request> bad = llvm::StringRef(what) == "no peer"
                                        ? f.comm->send("pp", 2, t.ref())
                                        : f.comm->send("tp", 1, t.ref());
      check(!bad, llvm::Twine("a send to ") + what + " is an error");
      if (!bad)
        llvm::consumeError(bad.takeError());
    }
  }
  alarm(0);
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (worldRank == 0)
    llvm::outs() << "nccl point-to-point: " << total << " failures\n";
  mpi::finalizeMpi();
  return total ? 1 : 0;
}
