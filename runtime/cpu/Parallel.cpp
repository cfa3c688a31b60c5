//===- Parallel.cpp - The CPU backend's threads, sized by the work --------===//
//
// One process-wide pool of worker threads, started lazily. A loop is posted
// as a job of chunks: the caller bumps a generation under a mutex and wakes
// the workers; every participant (the caller first) claims chunks from one
// counter until none is left. A worker that wakes after the caller has
// claimed the last chunk is not waited for: the caller closes the job, and
// waits only for the workers that joined it before it was closed.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Parallel.h"

#include "llvm/ADT/StringRef.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <thread>
#include <vector>

namespace dtc::runtime::cpu {

namespace {

/// How long a worker (and the caller, for its workers) polls before it
/// sleeps: long enough to catch the next loop of a run of back-to-back
/// kernels, short enough not to matter to a peer rank sharing the core.
constexpr std::chrono::microseconds kSpinTime{20};

/// Set while a thread runs a loop body: nested loops run serially.
thread_local bool insideLoop = false;

void cpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

/// Polls `done` for kSpinTime; true when it became true.
template <typename Done> bool spinUntil(Done done) {
  auto until = std::chrono::steady_clock::now() + kSpinTime;
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done())
        return true;
      cpuRelax();
    }
    if (std::chrono::steady_clock::now() >= until)
      return done();
  }
}

/// The leading positive integer of an environment variable ("4", "4,2",
/// "2(x3)"), or 0.
int envCount(const char *name) {
  const char *value = std::getenv(name);
  if (!value)
    return 0;
  long long count = 0;
  if (llvm::StringRef(value).trim().consumeInteger(10, count) || count <= 0)
    return 0;
  return static_cast<int>(std::min<long long>(count, 1 << 16));
}

/// The CPUs a cgroup v2 quota allows ("200000 100000" in cpu.max: 2), or 0
/// without a quota.
int cgroupCpuLimit() {
  std::ifstream file("/sys/fs/cgroup/cpu.max");
  std::string quota;
  long long period = 0;
  if (!(file >> quota >> period) || quota == "max" || period <= 0)
    return 0;
  long long q = std::atoll(quota.c_str());
  return q > 0 ? static_cast<int>((q + period - 1) / period) : 0;
}

class Pool {
public:
  static Pool &get() {
    // Never destroyed: workers may still be asleep when the process exits.
    static Pool *pool = new Pool(defaultThreadCount());
    return *pool;
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }
  void setThreads(int threads) {
    threads_.store(std::max(1, threads), std::memory_order_relaxed);
  }

  /// Runs chunk(c) for every c in [0, chunks) on up to threads() threads.
  /// False, having run nothing, when another thread's loop holds the pool.
  bool run(int64_t chunks, llvm::function_ref<void(int64_t)> chunk) {
    std::unique_lock<std::mutex> running(runMutex_, std::try_to_lock);
    if (!running.owns_lock())
      return false;
    int helpers = static_cast<int>(
        std::min<int64_t>(threads() - 1, std::max<int64_t>(chunks - 1, 0)));
    startWorkers(helpers);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = chunk;
      chunks_ = chunks;
      helpers_ = helpers;
      open_ = true;
      joined_ = 0;
      next_.store(0, std::memory_order_relaxed);
      finished_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    work(chunk, chunks);
    int joined;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      open_ = false;
      joined = joined_;
    }
    auto allFinished = [&] {
      return finished_.load(std::memory_order_acquire) == joined;
    };
    while (!spinUntil(allFinished))
      std::this_thread::yield();
    return true;
  }

private:
  explicit Pool(int threads) : threads_(std::max(1, threads)) {}

  void work(llvm::function_ref<void(int64_t)> chunk, int64_t chunks) {
    insideLoop = true;
    for (int64_t c = next_.fetch_add(1, std::memory_order_relaxed); c < chunks;
         c = next_.fetch_add(1, std::memory_order_relaxed))
      chunk(c);
    insideLoop = false;
  }

  void startWorkers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      int id = static_cast<int>(workers_.size());
      uint64_t seen = generation_.load(std::memory_order_relaxed);
      workers_.emplace_back([this, id, seen] { workerLoop(id, seen); });
    }
  }

  void workerLoop(int id, uint64_t seen) {
    for (;;) {
      spinUntil(
          [&] { return generation_.load(std::memory_order_acquire) != seen; });
      llvm::function_ref<void(int64_t)> chunk;
      int64_t chunks = 0;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] {
          return generation_.load(std::memory_order_relaxed) != seen;
        });
        seen = generation_.load(std::memory_order_relaxed);
        // A job this worker is not needed for, or one already closed.
        if (id >= helpers_ || !open_)
          continue;
        ++joined_;
        chunk = job_;
        chunks = chunks_;
      }
      work(chunk, chunks);
      finished_.fetch_add(1, std::memory_order_release);
    }
  }

  std::atomic<int> threads_;
  std::mutex runMutex_; ///< held by the thread whose loop runs
  std::mutex mutex_;    ///< guards the job below and joined_
  std::condition_variable wake_;
  std::atomic<uint64_t> generation_{0};
  llvm::function_ref<void(int64_t)> job_;
  int64_t chunks_ = 0;
  int helpers_ = 0;
  bool open_ = false;
  int joined_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<int> finished_{0};
  std::vector<std::thread> workers_;
};

bool worthThreads(int64_t n, int64_t itemWork) {
  if (n < 2 || insideLoop)
    return false;
  // n * itemWork >= kParallelWork without overflow.
  return itemWork > 0 && n >= (kParallelWork + itemWork - 1) / itemWork;
}

} // namespace

void parallelFor(int64_t n, int64_t itemWork,
                 llvm::function_ref<void(int64_t, int64_t)> body) {
  if (n <= 0)
    return;
  Pool &pool = Pool::get();
  int64_t chunks = std::min<int64_t>(pool.threads(), n);
  if (chunks > 1 && worthThreads(n, itemWork)) {
    auto range = [&](int64_t c) { body(n * c / chunks, n * (c + 1) / chunks); };
    if (pool.run(chunks, range))
      return;
  }
  body(0, n);
}

void parallelClaim(int64_t n, int64_t taskWork,
                   llvm::function_ref<void(ClaimTask)> participant) {
  if (n <= 0)
    return;
  std::atomic<int64_t> next{0};
  auto claimNext = [&](int64_t &i) {
    i = next.fetch_add(1, std::memory_order_relaxed);
    return i < n;
  };
  ClaimTask claim = claimNext;
  Pool &pool = Pool::get();
  int64_t participants = std::min<int64_t>(pool.threads(), n);
  if (participants > 1 && worthThreads(n, taskWork) &&
      pool.run(participants, [&](int64_t) { participant(claim); }))
    return;
  participant(claim);
}

void parallelForTasks(int64_t n, int64_t taskWork,
                      llvm::function_ref<void(int64_t)> task) {
  parallelClaim(n, taskWork, [&](ClaimTask claim) {
    for (int64_t i; claim(i);)
      task(i);
  });
}

int threadCount() { return Pool::get().threads(); }

void setThreadCount(int threads) { Pool::get().setThreads(threads); }

int defaultThreadCount() {
  if (int threads = envCount("OMP_NUM_THREADS"))
    return threads;
  int cores = 0;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    cores = CPU_COUNT(&set);
  if (cores <= 0)
    cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (int limit = cgroupCpuLimit())
    cores = std::min(cores, limit);
  int localRanks = 0;
  for (const char *name : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                           "LOCAL_WORLD_SIZE", "SLURM_NTASKS_PER_NODE"})
    if ((localRanks = envCount(name)))
      break;
  return std::max(1, cores / std::max(1, localRanks));
}

} // namespace dtc::runtime::cpu
