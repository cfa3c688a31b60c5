//===- bench_collectives.cpp - MpiCommunicator vs blocking MPI ------------===//
//
// Bus bandwidth (nccl-tests' definition) of all-reduce, all-gather and
// reduce-scatter on f32 buffers of 1 MiB to 64 MiB, each through
// MpiCommunicator (start + wait, as a program runs them) and through the
// plain blocking MPI call in the same run. As in nccl-tests, calls run back
// to back in blocks (of up to 16 calls, 16 MiB); blocks of the two
// alternate, each after a barrier, so both see the same machine load (the
// development machine is shared). A block's time is its slowest rank's; the
// median block of each counts. Run under mpirun (bench/collectives.sh). Rank 0
// prints the table.
//
//   all-reduce:      2 (n - 1) / n * S / t
//   all-gather,
//   reduce-scatter:  (n - 1) / n * S / t   (S: the gathered size)
//
//===----------------------------------------------------------------------===//

#include "runtime/mpi/MpiCommunicator.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <functional>

using namespace dtc::runtime;

namespace {

int worldRank = 0, worldSize = 1;

void die(llvm::Error err) {
  llvm::errs() << "rank " << worldRank << ": " << llvm::toString(std::move(err))
               << "\n";
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/// The median seconds per call of each of `variants` over `iters` rounds in
/// which every variant runs one block of `calls` calls, each block timed from
/// a barrier and taken on its slowest rank.
std::vector<double>
timeAlternating(llvm::ArrayRef<std::function<void()>> variants, int iters,
                int calls) {
  size_t numVariants = variants.size();
  std::vector<double> local(numVariants * iters), slowest(local.size());
  for (int i = 0; i < iters; ++i)
    for (size_t which = 0; which < numVariants; ++which) {
      MPI_Barrier(MPI_COMM_WORLD);
      double begin = MPI_Wtime();
      for (int c = 0; c < calls; ++c)
        variants[which]();
      local[numVariants * i + which] = (MPI_Wtime() - begin) / calls;
    }
  MPI_Allreduce(local.data(), slowest.data(), static_cast<int>(local.size()),
                MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  std::vector<double> medians;
  for (size_t which = 0; which < numVariants; ++which) {
    std::vector<double> t;
    for (int i = 0; i < iters; ++i)
      t.push_back(slowest[numVariants * i + which]);
    std::nth_element(t.begin(), t.begin() + iters / 2, t.end());
    medians.push_back(t[iters / 2]);
  }
  return medians;
}

} // namespace

int main(int argc, char **argv) {
  if (auto err = mpi::initializeMpi(&argc, &argv)) {
    llvm::errs() << llvm::toString(std::move(err)) << "\n";
    return 1;
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  int64_t maxMiB = argc > 1 ? std::atoi(argv[1]) : 64;
  int blocks = argc > 2 ? std::atoi(argv[2]) : 9;
  {
    Mesh mesh({{"x", worldSize}});
    auto comm = mpi::MpiCommunicator::create(mesh);
    if (!comm)
      die(comm.takeError());
    std::vector<std::string> axes = {"x"};
    int64_t n = worldSize;
    if (worldRank == 0)
      llvm::outs() << "ranks " << n << ", f32, median of " << blocks
                   << " alternating blocks; bus bandwidth in GB/s\n"
                   << llvm::format("%-15s %8s %12s %12s %12s %7s\n", "op",
                                   "size", "MPI", "MPI nonblk", "dtc", "ratio");
    double worst = 1e9;
    for (const char *op : {"all_reduce", "all_gather", "reduce_scatter"}) {
      for (int64_t mib = 1; mib <= maxMiB; mib *= 2) {
        int64_t bytes = mib << 20, count = bytes / 4;
        int64_t part = count / n;
        llvm::StringRef name = op;
        bool gather = name == "all_gather", scatter = name == "reduce_scatter";
        // S is the full size: the all-reduce buffer, the gathered output,
        // the reduce-scatter input.
        int64_t inCount = gather ? part : count;
        int64_t outCount = scatter ? part : gather ? part * n : count;
        std::vector<float> in(inCount, 1.0f + worldRank), out(outCount, 0.0f);
        TensorRef inRef{in.data(), DType::F32, {inCount}};
        TensorRef outRef{out.data(), DType::F32, {outCount}};
        // The blocking call, and the same MPI operation started and waited
        // on the calling thread: the second separates what MPI's
        // nonblocking algorithms cost from what dtc's progress thread does.
        std::function<void()> plain, nonblocking, viaComm;
        auto startAndWait = [](auto start) {
          return [start] {
            MPI_Request request;
            start(&request);
            MPI_Wait(&request, MPI_STATUS_IGNORE);
          };
        };
        if (gather) {
          plain = [&] {
            MPI_Allgather(in.data(), part, MPI_FLOAT, out.data(), part,
                          MPI_FLOAT, MPI_COMM_WORLD);
          };
          nonblocking = startAndWait([&](MPI_Request *request) {
            MPI_Iallgather(in.data(), part, MPI_FLOAT, out.data(), part,
                           MPI_FLOAT, MPI_COMM_WORLD, request);
          });
        } else if (scatter) {
          plain = [&] {
            MPI_Reduce_scatter_block(in.data(), out.data(), part, MPI_FLOAT,
                                     MPI_SUM, MPI_COMM_WORLD);
          };
          nonblocking = startAndWait([&](MPI_Request *request) {
            MPI_Ireduce_scatter_block(in.data(), out.data(), part, MPI_FLOAT,
                                      MPI_SUM, MPI_COMM_WORLD, request);
          });
        } else {
          plain = [&] {
            MPI_Allreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM,
                          MPI_COMM_WORLD);
          };
          nonblocking = startAndWait([&](MPI_Request *request) {
            MPI_Iallreduce(in.data(), out.data(), count, MPI_FLOAT, MPI_SUM,
                           MPI_COMM_WORLD, request);
          });
        }
        viaComm = [&] {
          llvm::Expected<Request> request =
              gather ? (*comm)->allGather(axes, inRef, outRef, 0, 0)
              : scatter
                  ? (*comm)->reduceScatter(axes, inRef, outRef, 0, 0,
                                           Reduction::Sum)
                  : (*comm)->allReduce(axes, inRef, outRef, Reduction::Sum);
          if (!request)
            die(request.takeError());
          if (auto err = (*comm)->wait(*request))
            die(std::move(err));
        };
        int calls = static_cast<int>(std::clamp<int64_t>(16 / mib, 1, 16));
        std::function<void()> variants[] = {plain, nonblocking, viaComm};
        timeAlternating(variants, 1, 2); // warm up every path
        std::vector<double> seconds = timeAlternating(variants, blocks, calls);
        double factor = (scatter || gather ? 1.0 : 2.0) * (n - 1) / n;
        double busPlain = factor * bytes / seconds[0] / 1e9;
        double busNonblocking = factor * bytes / seconds[1] / 1e9;
        double busComm = factor * bytes / seconds[2] / 1e9;
        worst = std::min(worst, busComm / busPlain);
        if (worldRank == 0)
          llvm::outs() << llvm::format(
              "%-15s %4lld MiB %12.2f %12.2f %12.2f %7.2f\n", op,
              static_cast<long long>(mib), busPlain, busNonblocking, busComm,
              busComm / busPlain);
      }
    }
    if (worldRank == 0)
      llvm::outs() << llvm::format("lowest ratio %.2f (target >= 0.90)\n",
                                   worst);
  }
  mpi::finalizeMpi();
  return 0;
}
