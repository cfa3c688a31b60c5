//===- Emulator.cpp - Blocks of fibers for the CUDA host emulation --------===//
//
// A block's threads are fibers on the launching thread. The scheduler
// resumes each ready fiber in thread order until it returns or waits at a
// barrier, then releases the barriers every live thread waits at, and so on
// until all have returned. Fibers and their stacks are kept for the next
// block and launch. See include/Emulator.h for what is and is not emulated.
//
//===----------------------------------------------------------------------===//

#include "Emulator.h"
#include "cuda_runtime.h"

#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <vector>

namespace {

constexpr unsigned kMaxBlockThreads = 1024;
constexpr unsigned kMaxWarps = kMaxBlockThreads / emu::kWarpSize;
// The opt-in maximum of an H100/H200 (sm_90).
constexpr size_t kMaxDynamicSharedBytes = 227 << 10;
constexpr size_t kStackBytes = 256 << 10;

enum class Wait { None, BlockBarrier, WarpBarrier, Returned };

struct Fiber {
  ucontext_t context;
  unsigned thread = 0; // linear index in the block
  Wait wait = Wait::Returned;
  unsigned shuffles = 0; // how many this thread has done in this block
};

/// A lane's value for one shuffle; `shuffle` tells which (0: none).
struct Offer {
  uint64_t bits;
  unsigned shuffle;
};

struct Emulator {
  std::mutex launchMutex; // statics are the shared memory of one block
  const std::function<void()> *threadBody = nullptr;
  std::vector<std::unique_ptr<Fiber>> fibers; // as many as the largest block
  ucontext_t scheduler;
  Fiber *running = nullptr;
  std::vector<char> dynamicShared;

  // The block that runs.
  unsigned threads = 0, live = 0, waitingAtBlockBarrier = 0;
  unsigned liveInWarp[kMaxWarps], waitingAtWarpBarrier[kMaxWarps];
  // Consecutive shuffles alternate between the two: a lane may offer its
  // next value before the slower lanes have read the last.
  Offer offers[2][kMaxBlockThreads];
};

Emulator emulator;

[[noreturn]] void fail(const char *format, ...) {
  std::fprintf(stderr, "cuda emulation: block (%u,%u,%u): ", blockIdx.x,
               blockIdx.y, blockIdx.z);
  va_list args;
  va_start(args, format);
  std::vfprintf(stderr, format, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

void returnToScheduler(Wait wait) {
  Fiber &fiber = *emulator.running;
  fiber.wait = wait;
  swapcontext(&fiber.context, &emulator.scheduler);
}

/// A fiber runs the kernel's thread once per block it is resumed in.
void fiberMain() {
  for (;;) {
    (*emulator.threadBody)();
    unsigned thread = emulator.running->thread;
    --emulator.live;
    --emulator.liveInWarp[thread / emu::kWarpSize];
    returnToScheduler(Wait::Returned);
  }
}

void *mapStack() {
  // A guard page below the stack turns an overflow into a crash.
  size_t guard = sysconf(_SC_PAGESIZE);
  void *memory = mmap(nullptr, guard + kStackBytes, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (memory == MAP_FAILED || mprotect(memory, guard, PROT_NONE) != 0)
    fail("cannot map a fiber stack");
  return static_cast<char *>(memory) + guard;
}

void addFibers(unsigned count) {
  while (emulator.fibers.size() < count) {
    auto fiber = std::make_unique<Fiber>();
    getcontext(&fiber->context);
    fiber->context.uc_stack.ss_sp = mapStack();
    fiber->context.uc_stack.ss_size = kStackBytes;
    fiber->context.uc_link = nullptr; // fiberMain never returns
    makecontext(&fiber->context, fiberMain, 0);
    emulator.fibers.push_back(std::move(fiber));
  }
}

void resume(Fiber &fiber) {
  unsigned t = fiber.thread;
  threadIdx = dim3(t % blockDim.x, t / blockDim.x % blockDim.y,
                   t / (blockDim.x * blockDim.y));
  emulator.running = &fiber;
  swapcontext(&emulator.scheduler, &fiber.context);
}

/// Releases each barrier that every live thread it is for waits at; false
/// if none.
bool releaseBarriers() {
  Emulator &e = emulator;
  bool released = false;
  if (e.live > 0 && e.waitingAtBlockBarrier == e.live) {
    // The GPU may hang or go on: either way a kernel bug.
    if (e.live < e.threads)
      fail("__syncthreads is reached by %u threads; the other %u returned",
           e.live, e.threads - e.live);
    for (unsigned t = 0; t < e.threads; ++t)
      if (e.fibers[t]->wait == Wait::BlockBarrier)
        e.fibers[t]->wait = Wait::None;
    e.waitingAtBlockBarrier = 0;
    released = true;
  }
  for (unsigned w = 0; w * emu::kWarpSize < e.threads; ++w) {
    if (e.waitingAtWarpBarrier[w] == 0 ||
        e.waitingAtWarpBarrier[w] != e.liveInWarp[w])
      continue;
    unsigned end = std::min<unsigned>(e.threads, (w + 1) * emu::kWarpSize);
    for (unsigned t = w * emu::kWarpSize; t < end; ++t)
      if (e.fibers[t]->wait == Wait::WarpBarrier)
        e.fibers[t]->wait = Wait::None;
    e.waitingAtWarpBarrier[w] = 0;
    released = true;
  }
  return released;
}

void runBlock() {
  Emulator &e = emulator;
  e.live = e.threads;
  e.waitingAtBlockBarrier = 0;
  for (unsigned w = 0; w * emu::kWarpSize < e.threads; ++w) {
    e.liveInWarp[w] =
        std::min<unsigned>(emu::kWarpSize, e.threads - w * emu::kWarpSize);
    e.waitingAtWarpBarrier[w] = 0;
  }
  for (unsigned t = 0; t < e.threads; ++t) {
    Fiber &fiber = *e.fibers[t];
    fiber.thread = t;
    fiber.wait = Wait::None;
    fiber.shuffles = 0;
    e.offers[0][t].shuffle = e.offers[1][t].shuffle = 0;
  }
  while (e.live > 0) {
    bool progressed = false;
    for (unsigned t = 0; t < e.threads; ++t) {
      if (e.fibers[t]->wait == Wait::None) {
        resume(*e.fibers[t]);
        progressed = true;
      }
    }
    if (!releaseBarriers() && !progressed)
      fail("deadlock: %u of %u live threads wait at __syncthreads, the "
           "others at a warp barrier their warp does not complete",
           e.waitingAtBlockBarrier, e.live);
  }
}

bool validLaunch(dim3 grid, dim3 block, size_t dynamicSharedBytes) {
  uint64_t threads = uint64_t(block.x) * block.y * block.z;
  return grid.x >= 1 && grid.x <= 0x7fffffffu && grid.y >= 1 &&
         grid.y <= 65535 && grid.z >= 1 && grid.z <= 65535 && block.z <= 64 &&
         threads >= 1 && threads <= kMaxBlockThreads &&
         dynamicSharedBytes <= kMaxDynamicSharedBytes;
}

} // namespace

void emu::launch(dim3 grid, dim3 block, size_t dynamicSharedBytes,
                 CUstream_st *, const std::function<void()> &thread) {
  if (!validLaunch(grid, block, dynamicSharedBytes)) {
    std::fprintf(stderr,
                 "cuda emulation: refused launch of grid (%u,%u,%u), block "
                 "(%u,%u,%u), %zu bytes of dynamic shared memory\n",
                 grid.x, grid.y, grid.z, block.x, block.y, block.z,
                 dynamicSharedBytes);
    recordError(cudaErrorInvalidConfiguration);
    return;
  }
  std::lock_guard<std::mutex> lock(emulator.launchMutex);
  emulator.threads = block.x * block.y * block.z;
  addFibers(emulator.threads);
  emulator.threadBody = &thread;
  // Garbage, as on the GPU, so that reads before writes show.
  emulator.dynamicShared.assign(dynamicSharedBytes, char(0xa5));
  gridDim = grid;
  blockDim = block;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        blockIdx = dim3(x, y, z);
        runBlock();
      }
}

void *emu::dynamicShared() { return emulator.dynamicShared.data(); }

void emu::syncThreads() {
  ++emulator.waitingAtBlockBarrier;
  returnToScheduler(Wait::BlockBarrier);
}

void emu::syncWarp() {
  ++emulator.waitingAtWarpBarrier[emulator.running->thread / kWarpSize];
  returnToScheduler(Wait::WarpBarrier);
}

int emu::laneId() { return emulator.running->thread % kWarpSize; }

uint64_t emu::exchange(uint64_t bits, int sourceLane) {
  Fiber &fiber = *emulator.running;
  unsigned shuffle = ++fiber.shuffles;
  Offer *offers = emulator.offers[shuffle % 2];
  offers[fiber.thread] = {bits, shuffle};
  syncWarp();
  unsigned source = fiber.thread - fiber.thread % kWarpSize + sourceLane;
  // The source lane must have offered a value for this same shuffle.
  if (sourceLane < 0 || sourceLane >= kWarpSize || source >= emulator.threads ||
      offers[source].shuffle != shuffle)
    fail("thread %u reads lane %d in shuffle %u, which that lane did not "
         "take part in",
         fiber.thread, sourceLane, shuffle);
  return offers[source].bits;
}
