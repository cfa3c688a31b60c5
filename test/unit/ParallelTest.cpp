//===- ParallelTest.cpp - The CPU backend's thread pool -------------------===//
//
// runtime/cpu/Parallel.h: every index runs exactly once whatever the thread
// count; small loops stay on the calling thread (issue 60: small models must
// not pay for waking threads); large ones use the workers; nested loops and
// loops started by two threads at once run serially instead of deadlocking;
// the default thread count follows the environment a launcher sets.
//
//===----------------------------------------------------------------------===//

#include "runtime/cpu/Parallel.h"

#include "gtest/gtest.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

using namespace dtc::runtime::cpu;

namespace {

/// Restores the thread count and an environment variable after a test.
class ThreadCountGuard {
public:
  ThreadCountGuard() : saved_(threadCount()) {}
  ~ThreadCountGuard() { setThreadCount(saved_); }

private:
  int saved_;
};

class EnvGuard {
public:
  explicit EnvGuard(const char *name) : name_(name) {
    if (const char *v = std::getenv(name))
      saved_ = v, had_ = true;
  }
  ~EnvGuard() {
    if (had_)
      ::setenv(name_, saved_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

private:
  const char *name_;
  std::string saved_;
  bool had_ = false;
};

/// Blocks until `count` reaches `target` or 20 s pass; true if it did.
bool waitFor(std::atomic<int> &count, int target) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (count.load() < target)
    if (std::chrono::steady_clock::now() > until)
      return false;
    else
      std::this_thread::yield();
  return true;
}

TEST(Parallel, EveryIndexOnceForAnyThreadCountAndSize) {
  ThreadCountGuard guard;
  for (int threads : {1, 2, 3, 7}) {
    setThreadCount(threads);
    for (int64_t n : {int64_t(1), int64_t(2), int64_t(5), int64_t(1000),
                      int64_t(1) << 18}) {
      std::vector<std::atomic<int>> visits(n);
      parallelFor(n, kWorkCopy, [&](int64_t begin, int64_t end) {
        ASSERT_LE(0, begin);
        ASSERT_LE(begin, end);
        ASSERT_LE(end, n);
        for (int64_t i = begin; i < end; ++i)
          visits[i]++;
      });
      std::vector<std::atomic<int>> tasks(n);
      parallelForTasks(n, kParallelWork, [&](int64_t i) { tasks[i]++; });
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(visits[i].load(), 1) << threads << " threads, n " << n;
        ASSERT_EQ(tasks[i].load(), 1) << threads << " threads, n " << n;
      }
    }
  }
}

TEST(Parallel, SmallWorkStaysOnTheCallingThread) {
  ThreadCountGuard guard;
  setThreadCount(4);
  std::thread::id caller = std::this_thread::get_id();
  std::atomic<int> elsewhere{0};
  auto record = [&] {
    if (std::this_thread::get_id() != caller)
      elsewhere++;
  };
  // Just under the threshold, in either form.
  parallelFor(kParallelWork - 1, kWorkCopy,
              [&](int64_t, int64_t) { record(); });
  parallelFor((kParallelWork - 1) / kWorkTranscendental, kWorkTranscendental,
              [&](int64_t, int64_t) { record(); });
  parallelForTasks(3, kParallelWork / 4, [&](int64_t) { record(); });
  // One task is never split, however large.
  parallelForTasks(1, kParallelWork * 100, [&](int64_t) { record(); });
  EXPECT_EQ(elsewhere.load(), 0);
}

TEST(Parallel, LargeWorkUsesTheWorkers) {
  ThreadCountGuard guard;
  setThreadCount(2);
  // Each of the two ranges waits until the other has started: this only
  // finishes if a second thread runs one of them.
  std::atomic<int> started{0};
  std::mutex mutex;
  std::set<std::thread::id> ids;
  bool bothRan = true;
  parallelFor(2, kParallelWork, [&](int64_t, int64_t) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      ids.insert(std::this_thread::get_id());
    }
    started++;
    if (!waitFor(started, 2))
      bothRan = false;
  });
  EXPECT_TRUE(bothRan);
  EXPECT_EQ(ids.size(), 2u);
}

TEST(Parallel, NestedLoopsRunOnTheirThread) {
  ThreadCountGuard guard;
  setThreadCount(2);
  std::atomic<int> mismatched{0}, inner{0};
  parallelFor(2, kParallelWork, [&](int64_t begin, int64_t end) {
    std::thread::id outer = std::this_thread::get_id();
    for (int64_t i = begin; i < end; ++i)
      parallelFor(1 << 20, kWorkCopy, [&](int64_t b, int64_t e) {
        if (std::this_thread::get_id() != outer)
          mismatched++;
        inner += static_cast<int>(e - b);
      });
  });
  EXPECT_EQ(mismatched.load(), 0);
  EXPECT_EQ(inner.load(), 2 << 20);
}

TEST(Parallel, TwoCallersAtOnceBothFinish) {
  ThreadCountGuard guard;
  setThreadCount(2);
  constexpr int64_t n = 1 << 20;
  std::vector<std::atomic<int>> a(n), b(n);
  auto loop = [](std::vector<std::atomic<int>> &v) {
    for (int round = 0; round < 20; ++round)
      parallelFor(n, kWorkCopy, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i)
          v[i]++;
      });
  };
  std::thread other(loop, std::ref(b));
  loop(a);
  other.join();
  for (int64_t i = 0; i < n; i += 4099) {
    ASSERT_EQ(a[i].load(), 20);
    ASSERT_EQ(b[i].load(), 20);
  }
}

TEST(Parallel, ScratchIsMadeOncePerTakingPartThread) {
  ThreadCountGuard guard;
  setThreadCount(3);
  std::atomic<int> made{0};
  struct Scratch {
    int uses = 0;
  };
  std::vector<std::atomic<int>> visits(64);
  std::atomic<int> uses{0};
  parallelForTasksWithScratch<Scratch>(64, kParallelWork,
                                       [&](int64_t i, Scratch &scratch) {
                                         if (scratch.uses++ == 0)
                                           made++;
                                         uses++;
                                         visits[i]++;
                                       });
  EXPECT_GE(made.load(), 1);
  EXPECT_LE(made.load(), 3);
  EXPECT_EQ(uses.load(), 64);
  for (auto &v : visits)
    EXPECT_EQ(v.load(), 1);
}

TEST(Parallel, DefaultThreadCountFollowsTheLauncher) {
  EnvGuard omp("OMP_NUM_THREADS"), ompi("OMPI_COMM_WORLD_LOCAL_SIZE");
  ::setenv("OMP_NUM_THREADS", "3", 1);
  EXPECT_EQ(defaultThreadCount(), 3);
  // OpenMP's list form: the outermost level's count.
  ::setenv("OMP_NUM_THREADS", "5,2", 1);
  EXPECT_EQ(defaultThreadCount(), 5);
  ::unsetenv("OMP_NUM_THREADS");
  ::unsetenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  int own = defaultThreadCount();
  EXPECT_GE(own, 1);
  EXPECT_LE(own, static_cast<int>(std::thread::hardware_concurrency()));
  // More ranks on this machine than cores: one thread each.
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4096", 1);
  EXPECT_EQ(defaultThreadCount(), 1);
  // Nonsense is ignored, not trusted.
  ::setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "-2", 1);
  ::setenv("OMP_NUM_THREADS", "zero", 1);
  EXPECT_EQ(defaultThreadCount(), own);
}

} // namespace
