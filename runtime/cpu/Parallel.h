//===- Parallel.h - The CPU backend's threads, sized by the work -*- C++
//-*-===//
//
// Every parallel loop of the CPU kernels goes through parallelFor or
// parallelForTasks. A loop runs on the calling thread unless its work (items
// times the work of one item, in simple element operations) pays for waking
// the pool's workers, so small models and small ops never fork. The workers
// spin only for a few microseconds after a loop and then sleep, so they do
// not steal the core of a peer rank or of the serial code between loops (an
// OpenMP runtime spins for hundreds of microseconds by default: on a 2-core
// machine that made tiny models 1.5-15 times slower with two threads than
// with one). The thread count comes from the cores this rank owns
// (docs/runtime.md "Threads").
//
// Results never depend on the thread count: each output element is computed
// by one thread in a fixed order, whichever thread that is.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CPU_PARALLEL_H
#define DTC_RUNTIME_CPU_PARALLEL_H

#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>

namespace dtc::runtime::cpu {

/// Work (element operations) below which a loop stays on the calling thread:
/// about 50 us of one core, several times what waking a sleeping worker and
/// joining it costs.
constexpr int64_t kParallelWork = int64_t(1) << 17;

/// Rough work of one element for the loops' estimates: a load-add-store, a
/// polynomial (exp, tanh, erf), a division or square root.
constexpr int64_t kWorkCopy = 1, kWorkTranscendental = 16, kWorkDivide = 4;

/// Multiply-adds of a GEMM per unit of work: vector FMA units do several
/// per cycle where an elementwise loop does about one element.
constexpr int64_t kMacsPerWork = 8;

/// Calls `body(begin, end)` on disjoint contiguous ranges covering [0, n),
/// one range per thread, in parallel when `n * itemWork` reaches
/// kParallelWork, else once on the calling thread. Nested calls (from inside
/// a body) run on the calling thread.
void parallelFor(int64_t n, int64_t itemWork,
                 llvm::function_ref<void(int64_t begin, int64_t end)> body);

/// Calls `task(i)` for every i in [0, n), each index claimed by the next free
/// thread: for tasks of uneven work (GEMM tiles, attention heads). In
/// parallel when there are at least two tasks and `n * taskWork` reaches
/// kParallelWork.
void parallelForTasks(int64_t n, int64_t taskWork,
                      llvm::function_ref<void(int64_t i)> task);

/// Hands out the indices of a parallelForTasks loop: true with the next
/// unclaimed index in `i`, false when none is left.
using ClaimTask = llvm::function_ref<bool(int64_t &i)>;

/// Calls `participant(claim)` once on each thread that takes part in a loop
/// over [0, n) (once on the calling thread when the work is too small); each
/// claims indices until none is left. The building block of the overloads
/// below.
void parallelClaim(int64_t n, int64_t taskWork,
                   llvm::function_ref<void(ClaimTask claim)> participant);

/// parallelForTasks for tasks that need a scratch buffer (a score block, an
/// im2col matrix): each thread that takes part makes one default-constructed
/// `Scratch` and passes it to every task it runs.
template <typename Scratch, typename Task>
void parallelForTasksWithScratch(int64_t n, int64_t taskWork, Task &&task) {
  parallelClaim(n, taskWork, [&](ClaimTask claim) {
    Scratch scratch;
    for (int64_t i; claim(i);)
      task(i, scratch);
  });
}

/// The threads a parallel loop uses, the caller included.
int threadCount();

/// Sets the thread count (at least 1) for later loops; tests use it to check
/// that results do not depend on it.
void setThreadCount(int threads);

/// The thread count this rank uses by default: OMP_NUM_THREADS when set (the
/// usual override), else the cores it may run on (its CPU affinity, bounded
/// by a cgroup CPU quota) shared evenly among the ranks a launcher started on
/// this machine (Open MPI's, MPICH's, Slurm's or torchrun's local size).
int defaultThreadCount();

} // namespace dtc::runtime::cpu

#endif // DTC_RUNTIME_CPU_PARALLEL_H
