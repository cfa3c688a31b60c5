//===- MpiCommunicator.cpp - The MPI backend of Communicator --------------===//
//
// Groups are MPI communicators split from MPI_COMM_WORLD, one per subset of
// the mesh axes, all created in create() (Comm_split is collective, so none
// can be created lazily when only some ranks need it). Point-to-point
// traffic has its own duplicate of the world with one tag: MPI never lets two
// messages of the same communicator, source and tag overtake each other, so
// several sends in flight to one peer arrive in program order.
//
// A start checks shapes on the caller's thread and queues a job. Whoever
// holds the MPI lock drives progress: it packs non-contiguous layouts into
// the job's own buffers, posts the queued operations in order and tests all
// outstanding requests (MPI_Testsome), unpacking what completes. A job may
// have a second stage, posted when its first completes. A start posts at
// once unless another thread is in MPI. While the caller computes (it says
// so with computing()), a progress thread drives; a caller blocked in
// wait() drives itself, as in a blocking MPI call, and the progress thread
// sleeps. So an operation waited for right after its start involves no
// other thread: waking one at the start and handing the completion back
// cost 20-40 us, a third of a 1 MiB all-gather on two ranks.
//
// All-gather, reduce-scatter and all-reduce are direct point-to-point
// exchanges on the group communicator rather than Open MPI's nonblocking
// collectives (libnbc), which measured 0.7-0.9 of the blocking calls on 2-4
// ranks of one machine (bench/collectives.sh): a gather sends each rank's
// part straight to every other; a reduce-scatter sends part p to rank p,
// which reduces what it receives with MPI_Reduce_local; an all-reduce is a
// reduce-scatter of n near-equal blocks followed by a gather of them. Each
// moves the bytes of a ring, in one or two rounds. Every job on a group
// communicator takes the next pair of tags, so exchanges whose stages are
// posted at different times on different ranks never match each other's
// messages.
//
// The progress thread sleeps on a condition variable when idle or while
// someone waits; while operations are outstanding it polls, pausing between
// polls (20 us, doubling while nothing completes, up to 1 ms) so that it
// leaves the cores to overlapping compute.
//
//===----------------------------------------------------------------------===//

#include "runtime/mpi/MpiCommunicator.h"
#include "runtime/support/Error.h"

#include "runtime/core/CollectiveKernels.h"

#include "llvm/ADT/StringExtras.h"

#include <mpi.h>
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/lsan_interface.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <unordered_map>

#if defined(__SANITIZE_ADDRESS__)
// Sanitizer builds only: every dlopen'ed library stays mapped. Open MPI
// unloads its plugins at MPI_Finalize while memory they allocated is still
// referenced only from their globals; unmapped, LeakSanitizer reports that
// memory as leaked from "<unknown module>". Kept, it stays reachable, and
// what remains is named and suppressed in scripts/lsan.supp.
extern "C" int dlclose(void *) { return 0; }
#endif

namespace dtc::runtime::mpi {

namespace {
/// Open MPI's plugins allocate at init, at communicator splits and on the
/// first use of each collective, and keep it until they are unloaded at
/// MPI_Finalize, after which no one frees it: not dtc's leaks. Scopes that
/// call into Open MPI hold one of these, so LeakSanitizer skips what they
/// allocate (scripts/sanitize.sh).
struct OpenMpiAllocations {
#if defined(__SANITIZE_ADDRESS__)
  __lsan::ScopedDisabler disabler;
#else
  OpenMpiAllocations() {} // not trivial: a scope holding one is no warning
#endif
};
} // namespace

namespace {

llvm::Error mpiError(const llvm::Twine &what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS)
    length = 0;
  return dtc::failureText(
      what + ": MPI error " + llvm::Twine(code) +
      (length ? ": " + std::string(text, length) : std::string()));
}

std::string shapeText(const TensorRef &t) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(t.shape))
    s += (i ? "x" : "") + std::to_string(d);
  return s + "] " + dtypeName(t.dtype).str();
}

llvm::Expected<MPI_Datatype> reducibleType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return MPI_FLOAT;
  case DType::F64:
    return MPI_DOUBLE;
  case DType::I64:
    return MPI_INT64_T;
  case DType::I32:
    return MPI_INT32_T;
  default:
    return dtc::failureText("the MPI backend does not reduce " +
                            dtypeName(dtype) +
                            " tensors (f32, f64, i64, i32 only)");
  }
}

MPI_Op mpiOp(Reduction reduction) {
  switch (reduction) {
  case Reduction::Sum:
    return MPI_SUM;
  case Reduction::Max:
    return MPI_MAX;
  case Reduction::Min:
    return MPI_MIN;
  }
  return MPI_SUM;
}

/// A byte count as an MPI count of the widest unit that divides it.
struct Count {
  int count = 0;
  MPI_Datatype type = MPI_BYTE;
};

llvm::Expected<Count> countOf(int64_t bytes) {
  Count c;
  int64_t units = bytes;
  if (bytes % 8 == 0) {
    c.type = MPI_UINT64_T;
    units = bytes / 8;
  } else if (bytes % 4 == 0) {
    c.type = MPI_UINT32_T;
    units = bytes / 4;
  }
  if (units > INT_MAX)
    return dtc::failureText("a message of " + llvm::Twine(bytes) +
                            " bytes exceeds MPI's int count");
  c.count = static_cast<int>(units);
  return c;
}

llvm::Expected<int> elementCount(const TensorRef &t) {
  if (t.numElements() > INT_MAX)
    return dtc::failureText("a tensor of " + llvm::Twine(t.numElements()) +
                            " elements exceeds MPI's int count");
  return static_cast<int>(t.numElements());
}

/// Tags of point-to-point exchanges on a group communicator: job k on it
/// uses 2 (k mod kTagPairs) + stage (MPI guarantees tags up to 32767;
/// collectives never match point-to-point traffic).
constexpr uint64_t kTagPairs = 16383;
/// The pause between polls of outstanding operations while nobody waits:
/// the first, doubled after each poll that completes nothing, up to the
/// last. Operations posted ahead (a pipeline's receives, its sends waited at
/// the end of the step) stay outstanding through most of a step, and
/// polling them every 20 us took a third of a core from the compute of two
/// ranks on two cores.
constexpr std::chrono::microseconds kPollPause(20), kMaxPollPause(1000);

/// One started operation.
struct Job {
  Request id = 0;
  /// "all_gather over [tp] (ranks 0,1)": names it in errors.
  std::string what;
  /// Packs (if needed) and posts the nonblocking MPI operation; returns an
  /// MPI error code. Or postMany: an operation of several requests (what
  /// it posted before an error is still waited for).
  std::function<int(MPI_Request *)> post;
  std::function<int(std::vector<MPI_Request> &)> postMany;
  /// A second stage, posted like postMany once the first completed without
  /// error.
  std::function<int(std::vector<MPI_Request> &)> then;
  /// Runs once the operation completed: unpacks, checks the status.
  std::function<llvm::Error(const MPI_Status &)> finish;
  /// Packing buffers, owned until the job is done.
  std::vector<char> sendScratch, recvScratch;

  /// Requests still outstanding, the first error of the others, and the
  /// status of the last to complete (a receive's, for finish).
  size_t outstanding = 0;
  int firstError = MPI_SUCCESS;
  MPI_Status lastStatus{};
  bool done = false;
  std::chrono::steady_clock::time_point completedAt;
  std::string error;
};

/// How a direct exchange cuts a buffer among the n ranks of a group: rank
/// p's block is count[p] units of `type` starting offset[p] units in.
struct Blocks {
  MPI_Datatype type = MPI_BYTE;
  int64_t unitBytes = 1;
  std::vector<int64_t> offset, count;

  /// n blocks of `units` units each, back to back.
  static Blocks equal(int64_t units, int64_t n, MPI_Datatype type,
                      int64_t unitBytes) {
    Blocks b{type, unitBytes, {}, {}};
    for (int64_t p = 0; p < n; ++p) {
      b.offset.push_back(p * units);
      b.count.push_back(units);
    }
    return b;
  }
  /// `total` units cut into n blocks as evenly as they go (the first
  /// total % n blocks one unit longer).
  static Blocks even(int64_t total, int64_t n, MPI_Datatype type,
                     int64_t unitBytes) {
    Blocks b{type, unitBytes, {}, {}};
    for (int64_t p = 0, offset = 0; p < n; ++p) {
      int64_t count = total / n + (p < total % n ? 1 : 0);
      b.offset.push_back(offset);
      b.count.push_back(count);
      offset += count;
    }
    return b;
  }
  int64_t size() const { return static_cast<int64_t>(count.size()); }
  char *at(void *base, int64_t p) const {
    return static_cast<char *>(base) + offset[p] * unitBytes;
  }
  const char *at(const void *base, int64_t p) const {
    return static_cast<const char *>(base) + offset[p] * unitBytes;
  }
};

/// The ranks a direct exchange visits from rank `me`, in order: me - 1,
/// me - 2, ... (receiving) and me + 1, me + 2, ... (sending), so that each
/// rank is first served by a different peer.
int64_t peerBefore(int64_t me, int64_t step, int64_t n) {
  return (me - step + n) % n;
}
int64_t peerAfter(int64_t me, int64_t step, int64_t n) {
  return (me + step) % n;
}

/// Posts this rank's part of a direct all-gather: block p of `gathered`
/// from each other rank p, and `mine` to each other rank; then copies
/// `mine` into its own block unless it is that block.
int postGather(MPI_Comm comm, int tag, int64_t me, const Blocks &blocks,
               const void *mine, void *gathered,
               std::vector<MPI_Request> &requests) {
  int64_t n = blocks.size();
  int64_t mineBytes = blocks.count[me] * blocks.unitBytes;
  for (int64_t step = 1; step < n; ++step) {
    int64_t from = peerBefore(me, step, n);
    if (!blocks.count[from])
      continue;
    MPI_Request request;
    int rc = MPI_Irecv(blocks.at(gathered, from),
                       static_cast<int>(blocks.count[from]), blocks.type,
                       static_cast<int>(from), tag, comm, &request);
    if (rc != MPI_SUCCESS)
      return rc;
    requests.push_back(request);
  }
  for (int64_t step = 1; step < n && mineBytes; ++step) {
    MPI_Request request;
    int rc = MPI_Isend(mine, static_cast<int>(blocks.count[me]), blocks.type,
                       static_cast<int>(peerAfter(me, step, n)), tag, comm,
                       &request);
    if (rc != MPI_SUCCESS)
      return rc;
    requests.push_back(request);
  }
  // The own block is copied while the peers' arrive.
  if (mineBytes && mine != blocks.at(gathered, me))
    std::memcpy(blocks.at(gathered, me), mine, mineBytes);
  return MPI_SUCCESS;
}

/// The first stage of a direct reduce-scatter into `mine`: block p of
/// `input` goes to each other rank p; block `me` of every other rank comes
/// back, the previous rank's straight into `mine` unless `mine` overlaps
/// the input, the others into `scratch` (slot step - 1 for the rank `step`
/// places before).
struct ScatterExchange {
  MPI_Comm comm = MPI_COMM_NULL;
  int tag = 0;
  int64_t me = 0;
  Blocks blocks;
  MPI_Op op = MPI_SUM;

  bool intoMine(const void *input, const void *mine) const {
    const char *in = static_cast<const char *>(input);
    const char *out = static_cast<const char *>(mine);
    int64_t totalBytes =
        (blocks.offset.back() + blocks.count.back()) * blocks.unitBytes;
    int64_t mineBytes = blocks.count[me] * blocks.unitBytes;
    return out + mineBytes <= in || in + totalBytes <= out;
  }

  /// Where the block from the rank `step` places before lands in scratch.
  char *slot(std::vector<char> &scratch, int64_t step) const {
    return scratch.data() + (step - 1) * blocks.count[me] * blocks.unitBytes;
  }
  const char *slot(const std::vector<char> &scratch, int64_t step) const {
    return scratch.data() + (step - 1) * blocks.count[me] * blocks.unitBytes;
  }

  int post(const void *input, void *mine, std::vector<char> &scratch,
           std::vector<MPI_Request> &requests) const {
    int64_t n = blocks.size(), units = blocks.count[me];
    if (!units)
      return postSends(input, requests);
    scratch.resize((n - 1) * units * blocks.unitBytes);
    bool direct = intoMine(input, mine);
    for (int64_t step = 1; step < n; ++step) {
      int64_t from = peerBefore(me, step, n);
      void *into = direct && step == 1 ? mine : slot(scratch, step);
      MPI_Request request;
      int rc = MPI_Irecv(into, static_cast<int>(units), blocks.type,
                         static_cast<int>(from), tag, comm, &request);
      if (rc != MPI_SUCCESS)
        return rc;
      requests.push_back(request);
    }
    return postSends(input, requests);
  }

  int postSends(const void *input, std::vector<MPI_Request> &requests) const {
    int64_t n = blocks.size();
    for (int64_t step = 1; step < n; ++step) {
      int64_t to = peerAfter(me, step, n);
      if (!blocks.count[to])
        continue;
      MPI_Request request;
      int rc =
          MPI_Isend(blocks.at(input, to), static_cast<int>(blocks.count[to]),
                    blocks.type, static_cast<int>(to), tag, comm, &request);
      if (rc != MPI_SUCCESS)
        return rc;
      requests.push_back(request);
    }
    return MPI_SUCCESS;
  }

  /// Once post's requests completed: reduces this rank's block of `input`
  /// and what arrived into `mine`, always in the order me - 1, me, me - 2,
  /// me - 3, ... (the same bits wherever the first block landed).
  int reduce(const void *input, void *mine,
             const std::vector<char> &scratch) const {
    int64_t n = blocks.size(), units = blocks.count[me];
    if (!units)
      return MPI_SUCCESS;
    int count = static_cast<int>(units);
    const char *own = blocks.at(input, me);
    if (n == 1) {
      std::memmove(mine, own, units * blocks.unitBytes);
      return MPI_SUCCESS;
    }
    int rc = MPI_SUCCESS;
    if (intoMine(input, mine)) {
      rc = MPI_Reduce_local(own, mine, count, blocks.type, op);
    } else {
      // mine overlaps the input: start from this rank's block.
      std::memmove(mine, own, units * blocks.unitBytes);
      rc = MPI_Reduce_local(slot(scratch, 1), mine, count, blocks.type, op);
    }
    for (int64_t step = 2; step < n && rc == MPI_SUCCESS; ++step)
      rc = MPI_Reduce_local(slot(scratch, step), mine, count, blocks.type, op);
    return rc;
  }
};

} // namespace

struct MpiCommunicator::Impl {
  Mesh mesh;
  int rank = 0;
  /// The group communicator of each subset of the mesh axes (bit i: axis
  /// i), ranked in group order, and the group's ranks for error messages.
  std::vector<MPI_Comm> groupComms;
  std::vector<std::vector<int>> groups;
  /// Jobs started on each group communicator: names their tags.
  std::vector<uint64_t> jobsStarted;
  MPI_Comm p2p = MPI_COMM_NULL;

  /// Guards the queue, the jobs and their completion, and the flags below.
  std::mutex mutex;
  std::condition_variable wake; // the progress thread: work to poll
  std::deque<std::shared_ptr<Job>> queue;
  std::unordered_map<Request, std::shared_ptr<Job>> jobs;
  Request nextRequest = 1;
  /// Threads in wait(), driving progress themselves.
  int waiters = 0;
  /// Whether posted requests are outstanding (as the last poll left them).
  bool inFlight = false;
  /// Set by a start since the last poll: cuts the progress thread's pause.
  bool started = false;
  /// A start left work for the progress thread, which computing() wakes.
  std::atomic<bool> wakeDue{false};
  /// When the job the last wait() returned for completed.
  std::chrono::steady_clock::time_point lastWaitCompletion;
  bool stop = false;
  std::thread thread;

  /// Held by the thread that makes MPI calls (SERIALIZED is enough) and
  /// owns the members after it. Taken before `mutex`, never while holding it.
  std::mutex mpiMutex;
  /// The outstanding requests and the job of each.
  std::vector<std::shared_ptr<Job>> active;
  std::vector<MPI_Request> requests;
  std::vector<MPI_Request> posted;
  std::vector<int> indices;
  std::vector<MPI_Status> statuses;
  /// Jobs failed while MPI still held their requests, and their buffers,
  /// kept until the communicator goes (the error ends the run anyway).
  std::vector<std::shared_ptr<Job>> abandoned;
  std::vector<std::shared_ptr<std::vector<char>>> abandonedBuffers;

  ~Impl() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) // too late to free anything; MPI_Finalize did
      return;
    for (MPI_Comm &comm : groupComms)
      if (comm != MPI_COMM_NULL)
        MPI_Comm_free(&comm);
    if (p2p != MPI_COMM_NULL)
      MPI_Comm_free(&p2p);
  }

  llvm::Expected<unsigned> maskOf(llvm::ArrayRef<std::string> axes) const {
    unsigned mask = 0;
    for (const std::string &name : axes) {
      int index = mesh.axisIndex(name);
      if (index < 0)
        return dtc::failureText("no axis '" + name + "' in mesh '" +
                                mesh.str() + "'");
      mask |= 1u << index;
    }
    return mask;
  }

  /// The first of the next job's pair of tags on group communicator `mask`.
  /// Called in program order, which is the same on every rank of a group.
  int takeTags(unsigned mask) {
    std::lock_guard<std::mutex> lock(mutex);
    return static_cast<int>(2 * (jobsStarted[mask]++ % kTagPairs));
  }

  /// This rank's position in group communicator `mask`.
  int64_t position(unsigned mask) const {
    const std::vector<int> &group = groups[mask];
    return std::find(group.begin(), group.end(), rank) - group.begin();
  }

  std::string describe(llvm::StringRef op, llvm::ArrayRef<std::string> axes,
                       unsigned mask) const {
    std::string ranks;
    for (int r : groups[mask])
      ranks += (ranks.empty() ? "" : ",") + std::to_string(r);
    return (op + " over [" + llvm::join(axes, ",") + "] (ranks " + ranks + ")")
        .str();
  }

  Request submit(std::shared_ptr<Job> job) {
    {
      std::lock_guard<std::mutex> lock(mutex);
      job->id = nextRequest++;
      jobs[job->id] = job;
      queue.push_back(job);
    }
    // Post at once where no other thread is making MPI calls, so the
    // transfer starts without waiting for the progress thread. That thread
    // is woken by computing(), if something is left to progress.
    std::unique_lock<std::mutex> hold(mpiMutex, std::try_to_lock);
    if (hold.owns_lock()) {
      poll();
      hold.unlock();
    }
    bool pending;
    {
      std::lock_guard<std::mutex> lock(mutex);
      started = true;
      pending = inFlight || !queue.empty();
    }
    if (pending)
      wakeDue.store(true, std::memory_order_release);
    return job->id;
  }

  void complete(Job &job, llvm::Error err) {
    std::string message = err ? llvm::toString(std::move(err)) : "";
    {
      std::lock_guard<std::mutex> lock(mutex);
      job.error = std::move(message);
      job.done = true;
      job.completedAt = std::chrono::steady_clock::now();
      // The buffers are not needed any more; a job may stay unwaited.
      job.sendScratch = {};
      job.recvScratch = {};
      job.post = nullptr;
      job.postMany = nullptr;
      job.then = nullptr;
      job.finish = nullptr;
    }
  }

  /// Posts the job's post or postMany; finishes the stage if that failed
  /// or posted nothing.
  void postStage(const std::shared_ptr<Job> &job);
  /// Completes a job whose requests are all done, or posts its second stage.
  void finishStage(const std::shared_ptr<Job> &job);
  /// One round of progress, holding mpiMutex: posts what is queued and
  /// tests what is outstanding. Returns whether it posted or completed
  /// anything.
  bool poll();
  /// Tests the outstanding requests once; returns whether any completed.
  bool testOutstanding();
  /// The progress thread.
  void progress();
};

void MpiCommunicator::Impl::finishStage(const std::shared_ptr<Job> &job) {
  if (job->firstError != MPI_SUCCESS)
    return complete(*job, mpiError(job->what, job->firstError));
  if (job->then) {
    job->post = nullptr;
    job->postMany = std::move(job->then);
    job->then = nullptr;
    return postStage(job);
  }
  complete(*job,
           job->finish ? job->finish(job->lastStatus) : llvm::Error::success());
}

void MpiCommunicator::Impl::postStage(const std::shared_ptr<Job> &job) {
  posted.clear();
  int rc = MPI_SUCCESS;
  if (OpenMpiAllocations exempt; job->postMany) {
    rc = job->postMany(posted);
  } else {
    MPI_Request request = MPI_REQUEST_NULL;
    rc = job->post(&request);
    if (rc == MPI_SUCCESS)
      posted.push_back(request);
  }
  job->firstError = rc;
  job->outstanding = posted.size();
  if (posted.empty()) // failed, or nothing to exchange
    return finishStage(job);
  for (MPI_Request request : posted) {
    active.push_back(job);
    requests.push_back(request);
  }
}

bool MpiCommunicator::Impl::testOutstanding() {
  int count = 0;
  indices.resize(active.size());
  statuses.resize(active.size());
  int rc;
  {
    OpenMpiAllocations exempt;
    rc = MPI_Testsome(static_cast<int>(requests.size()), requests.data(),
                      &count, indices.data(), statuses.data());
  }
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    // Nothing tells which operation failed: fail them all, each once. MPI
    // may still write into their buffers, so the jobs stay alive.
    for (std::shared_ptr<Job> &job : active)
      if (!llvm::is_contained(abandoned, job)) {
        abandoned.push_back(job);
        auto buffers = std::make_shared<std::vector<char>>();
        std::swap(*buffers, job->recvScratch);
        abandonedBuffers.push_back(buffers);
        buffers = std::make_shared<std::vector<char>>();
        std::swap(*buffers, job->sendScratch);
        abandonedBuffers.push_back(buffers);
        complete(*job, mpiError(job->what, rc));
      }
    active.clear();
    requests.clear();
    return true;
  }
  if (count == MPI_UNDEFINED || count == 0) // MPI_UNDEFINED: none active
    return false;
  // Second stages are posted after the completed requests are dropped:
  // posting appends to active.
  std::vector<std::shared_ptr<Job>> finished;
  for (int k = 0; k < count; ++k) {
    std::shared_ptr<Job> &job = active[indices[k]];
    int code = rc == MPI_ERR_IN_STATUS ? statuses[k].MPI_ERROR : MPI_SUCCESS;
    if (code != MPI_SUCCESS && job->firstError == MPI_SUCCESS)
      job->firstError = code;
    job->lastStatus = statuses[k];
    if (--job->outstanding == 0)
      finished.push_back(job);
    job = nullptr;
  }
  size_t kept = 0;
  for (size_t i = 0; i < active.size(); ++i)
    if (active[i]) {
      active[kept] = std::move(active[i]);
      requests[kept] = requests[i];
      ++kept;
    }
  active.resize(kept);
  requests.resize(kept);
  for (const std::shared_ptr<Job> &job : finished)
    finishStage(job);
  return true;
}

bool MpiCommunicator::Impl::poll() {
  std::deque<std::shared_ptr<Job>> fresh;
  {
    std::lock_guard<std::mutex> lock(mutex);
    fresh.swap(queue);
  }
  // Post in program order: every rank of a communicator posts its
  // collectives in the same order, and the queue holds them in start order.
  for (std::shared_ptr<Job> &job : fresh)
    postStage(job);
  bool completed = !active.empty() && testOutstanding();
  std::lock_guard<std::mutex> lock(mutex);
  inFlight = !active.empty();
  started = false;
  return completed || !fresh.empty();
}

void MpiCommunicator::Impl::progress() {
  std::chrono::microseconds pause = kPollPause;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      // Idle, or a waiter drives progress: sleep.
      wake.wait(lock, [&] {
        return stop || (waiters == 0 && (inFlight || !queue.empty()));
      });
      if (stop && !inFlight && queue.empty())
        return;
    }
    bool progressed;
    {
      std::lock_guard<std::mutex> hold(mpiMutex);
      progressed = poll();
    }
    if (progressed) {
      pause = kPollPause;
      continue;
    }
    // Nothing happened. Leave the cores to compute for a moment; a start
    // (once the caller computes) or the end cuts the pause short, and a
    // waiter takes the polling over. Stopping, poll at once.
    std::unique_lock<std::mutex> lock(mutex);
    if (stop) {
      lock.unlock();
      std::this_thread::yield();
    } else if (wake.wait_for(lock, pause, [&] {
                 return waiters > 0 || started || !queue.empty() || stop;
               })) {
      pause = kPollPause;
    } else {
      pause = std::min(2 * pause, kMaxPollPause);
    }
  }
}

//===----------------------------------------------------------------------===//
// Set-up
//===----------------------------------------------------------------------===//

llvm::Error initializeMpi(int *argc, char ***argv) {
  int initialized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  if (initialized) {
    MPI_Query_thread(&provided);
  } else {
    OpenMpiAllocations exempt;
    int rc = MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS)
      return mpiError("MPI_Init_thread", rc);
  }
  if (provided < MPI_THREAD_SERIALIZED)
    return dtc::failureText(
        "the MPI library offers thread level " + llvm::Twine(provided) +
        "; the MPI backend needs MPI_THREAD_SERIALIZED or more");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  return llvm::Error::success();
}

void finalizeMpi() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) {
    OpenMpiAllocations exempt;
    MPI_Finalize();
  }
}

bool launchedByMpi() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name))
      return true;
  return false;
}

MpiCommunicator::MpiCommunicator(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {
  impl_->thread = std::thread([this] { impl_->progress(); });
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stop = true; // poll what is left without pausing, then leave
  }
  impl_->wake.notify_all();
  // The thread leaves once nothing is queued or in flight.
  impl_->thread.join();
}

llvm::Expected<std::unique_ptr<MpiCommunicator>>
MpiCommunicator::create(Mesh mesh) {
  int initialized = 0, provided = MPI_THREAD_SINGLE;
  MPI_Initialized(&initialized);
  if (!initialized)
    return dtc::failureText(
        "MPI is not initialized (call initializeMpi first)");
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_SERIALIZED)
    return dtc::failureText(
        "MPI was initialized without thread support; the MPI "
        "backend needs MPI_THREAD_SERIALIZED or more");
  OpenMpiAllocations exempt;
  int worldSize = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (worldSize != mesh.worldSize())
    return dtc::failureText(
        "mesh '" + mesh.str() + "' has " + llvm::Twine(mesh.worldSize()) +
        " ranks but MPI started " + llvm::Twine(worldSize) +
        " processes (run with -np " + llvm::Twine(mesh.worldSize()) + ")");
  size_t numAxes = mesh.axes().size();
  if (numAxes > 8)
    return dtc::failureText("mesh '" + mesh.str() + "' has " +
                            llvm::Twine(numAxes) +
                            " axes; the MPI backend supports at most 8");

  auto impl = std::make_unique<Impl>();
  impl->mesh = std::move(mesh);
  impl->rank = rank;
  const Mesh &m = impl->mesh;
  unsigned subsets = 1u << numAxes;
  impl->groupComms.assign(subsets, MPI_COMM_NULL);
  impl->jobsStarted.assign(subsets, 0);
  impl->groups.resize(subsets);
  std::vector<int64_t> coords = m.coordinates(rank);
  for (unsigned mask = 0; mask < subsets; ++mask) {
    std::vector<std::string> axes;
    std::vector<int64_t> base = coords;
    for (size_t i = 0; i < numAxes; ++i)
      if (mask & (1u << i)) {
        axes.push_back(m.axes()[i].name);
        base[i] = 0;
      }
    llvm::Expected<std::vector<int>> group = m.group(rank, axes);
    if (!group)
      return group.takeError();
    int position = static_cast<int>(
        std::find(group->begin(), group->end(), rank) - group->begin());
    // The group's first rank names it; the key orders it as Mesh::group.
    int rc = MPI_Comm_split(MPI_COMM_WORLD, m.rankAt(base), position,
                            &impl->groupComms[mask]);
    if (rc != MPI_SUCCESS)
      return mpiError("MPI_Comm_split for axes [" + llvm::join(axes, ",") + "]",
                      rc);
    MPI_Comm_set_errhandler(impl->groupComms[mask], MPI_ERRORS_RETURN);
    int size = 0, commRank = 0;
    MPI_Comm_size(impl->groupComms[mask], &size);
    MPI_Comm_rank(impl->groupComms[mask], &commRank);
    if (size != static_cast<int>(group->size()) || commRank != position)
      return dtc::failureText(
          "MPI_Comm_split for axes [" + llvm::join(axes, ",") + "] gave rank " +
          llvm::Twine(commRank) + " of " + llvm::Twine(size) + ", expected " +
          llvm::Twine(position) + " of " + llvm::Twine(group->size()));
    impl->groups[mask] = std::move(*group);
  }
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &impl->p2p);
  if (rc != MPI_SUCCESS)
    return mpiError("MPI_Comm_dup", rc);
  MPI_Comm_set_errhandler(impl->p2p, MPI_ERRORS_RETURN);
  return std::unique_ptr<MpiCommunicator>(new MpiCommunicator(std::move(impl)));
}

int MpiCommunicator::rank() const { return impl_->rank; }
const Mesh &MpiCommunicator::mesh() const { return impl_->mesh; }

//===----------------------------------------------------------------------===//
// Operations
//===----------------------------------------------------------------------===//

llvm::Expected<Request>
MpiCommunicator::allReduce(llvm::ArrayRef<std::string> axes,
                           const TensorRef &input, const TensorRef &output,
                           Reduction reduction) {
  llvm::Expected<unsigned> mask = impl_->maskOf(axes);
  if (!mask)
    return mask.takeError();
  std::string what = impl_->describe("all_reduce", axes, *mask);
  if (input.dtype != output.dtype || input.shape != output.shape)
    return dtc::failureText(what + ": output " + shapeText(output) +
                            " differs from input " + shapeText(input));
  llvm::Expected<MPI_Datatype> type = reducibleType(input.dtype);
  if (!type)
    return dtc::failureText(what + ": " + llvm::toString(type.takeError()));
  llvm::Expected<int> count = elementCount(input);
  if (!count)
    return dtc::failureText(what + ": " + llvm::toString(count.takeError()));
  auto job = std::make_shared<Job>();
  job->what = std::move(what);
  int64_t n = impl_->groups[*mask].size(), me = impl_->position(*mask);
  ScatterExchange exchange{
      impl_->groupComms[*mask], impl_->takeTags(*mask), me,
      Blocks::even(*count, n, *type, dtypeSize(input.dtype)), mpiOp(reduction)};
  void *in = input.data, *out = output.data;
  Job *j = job.get();
  // Reduce-scatter n blocks, then gather them. In place (in == out), every
  // received block goes to scratch: block `me` of the output is still input.
  job->postMany = [=](std::vector<MPI_Request> &requests) {
    return exchange.post(in, exchange.blocks.at(out, me), j->recvScratch,
                         requests);
  };
  job->then = [=](std::vector<MPI_Request> &requests) {
    void *mine = exchange.blocks.at(out, me);
    if (int rc = exchange.reduce(in, mine, j->recvScratch); rc != MPI_SUCCESS)
      return rc;
    return postGather(exchange.comm, exchange.tag + 1, me, exchange.blocks,
                      mine, out, requests);
  };
  return impl_->submit(std::move(job));
}

llvm::Expected<Request>
MpiCommunicator::allGather(llvm::ArrayRef<std::string> axes,
                           const TensorRef &input, const TensorRef &output,
                           int64_t dim, int64_t block) {
  llvm::Expected<unsigned> mask = impl_->maskOf(axes);
  if (!mask)
    return mask.takeError();
  std::string what = impl_->describe("all_gather", axes, *mask);
  int64_t n = impl_->groups[*mask].size();
  llvm::Expected<SplitLayout> layout =
      SplitLayout::get(output.shape, dtypeSize(output.dtype), dim, block, n);
  if (!layout)
    return dtc::failureText(what + ": " + llvm::toString(layout.takeError()));
  if (input.dtype != output.dtype ||
      input.shape != partShape(output.shape, dim, n))
    return dtc::failureText(what + ": input " + shapeText(input) +
                            " is not one of " + llvm::Twine(n) +
                            " parts of dim " + llvm::Twine(dim) +
                            " of output " + shapeText(output));
  llvm::Expected<Count> count = countOf(layout->partBytes());
  if (!count)
    return dtc::failureText(what + ": " + llvm::toString(count.takeError()));
  auto job = std::make_shared<Job>();
  job->what = std::move(what);
  MPI_Comm comm = impl_->groupComms[*mask];
  int tag = impl_->takeTags(*mask);
  int64_t me = impl_->position(*mask);
  void *in = input.data, *out = output.data;
  SplitLayout l = *layout;
  Blocks blocks =
      Blocks::equal(count->count, n, count->type,
                    count->count ? l.partBytes() / count->count : 1);
  Job *j = job.get();
  job->postMany = [=](std::vector<MPI_Request> &requests) {
    void *gathered = out;
    if (!l.contiguous()) {
      j->recvScratch.resize(l.partBytes() * n);
      gathered = j->recvScratch.data();
    }
    return postGather(comm, tag, me, blocks, in, gathered, requests);
  };
  if (!l.contiguous())
    job->finish = [=](const MPI_Status &) {
      for (int64_t p = 0; p < n; ++p)
        l.insert(j->recvScratch.data() + p * l.partBytes(), out, p);
      return llvm::Error::success();
    };
  return impl_->submit(std::move(job));
}

llvm::Expected<Request> MpiCommunicator::reduceScatter(
    llvm::ArrayRef<std::string> axes, const TensorRef &input,
    const TensorRef &output, int64_t dim, int64_t block, Reduction reduction) {
  llvm::Expected<unsigned> mask = impl_->maskOf(axes);
  if (!mask)
    return mask.takeError();
  std::string what = impl_->describe("reduce_scatter", axes, *mask);
  int64_t n = impl_->groups[*mask].size();
  llvm::Expected<SplitLayout> layout =
      SplitLayout::get(input.shape, dtypeSize(input.dtype), dim, block, n);
  if (!layout)
    return dtc::failureText(what + ": " + llvm::toString(layout.takeError()));
  if (input.dtype != output.dtype ||
      output.shape != partShape(input.shape, dim, n))
    return dtc::failureText(what + ": output " + shapeText(output) +
                            " is not one of " + llvm::Twine(n) +
                            " parts of dim " + llvm::Twine(dim) + " of input " +
                            shapeText(input));
  llvm::Expected<MPI_Datatype> type = reducibleType(input.dtype);
  if (!type)
    return dtc::failureText(what + ": " + llvm::toString(type.takeError()));
  llvm::Expected<int> count = elementCount(output);
  if (!count)
    return dtc::failureText(what + ": " + llvm::toString(count.takeError()));
  auto job = std::make_shared<Job>();
  job->what = std::move(what);
  ScatterExchange exchange{
      impl_->groupComms[*mask], impl_->takeTags(*mask), impl_->position(*mask),
      Blocks::equal(*count, n, *type, dtypeSize(input.dtype)),
      mpiOp(reduction)};
  void *in = input.data, *out = output.data;
  SplitLayout l = *layout;
  Job *j = job.get();
  // The parts, packed back to back when the layout interleaves them.
  auto packed = [=]() -> const void * {
    return l.contiguous() ? in : j->sendScratch.data();
  };
  job->postMany = [=](std::vector<MPI_Request> &requests) {
    if (!l.contiguous()) {
      j->sendScratch.resize(l.partBytes() * n);
      for (int64_t p = 0; p < n; ++p)
        l.extract(in, j->sendScratch.data() + p * l.partBytes(), p);
    }
    return exchange.post(packed(), out, j->recvScratch, requests);
  };
  job->finish = [=](const MPI_Status &) -> llvm::Error {
    if (int rc = exchange.reduce(packed(), out, j->recvScratch);
        rc != MPI_SUCCESS)
      return mpiError(j->what, rc);
    return llvm::Error::success();
  };
  return impl_->submit(std::move(job));
}

llvm::Expected<Request>
MpiCommunicator::allToAll(llvm::ArrayRef<std::string> axes,
                          const TensorRef &input, const TensorRef &output,
                          int64_t splitDim, int64_t concatDim) {
  llvm::Expected<unsigned> mask = impl_->maskOf(axes);
  if (!mask)
    return mask.takeError();
  std::string what = impl_->describe("all_to_all", axes, *mask);
  int64_t n = impl_->groups[*mask].size();
  size_t elem = dtypeSize(input.dtype);
  llvm::Expected<SplitLayout> sendLayout =
      SplitLayout::get(input.shape, elem, splitDim, 0, n);
  if (!sendLayout)
    return dtc::failureText(what + ": " +
                            llvm::toString(sendLayout.takeError()));
  llvm::Expected<SplitLayout> recvLayout =
      SplitLayout::get(output.shape, elem, concatDim, 0, n);
  if (!recvLayout)
    return dtc::failureText(what + ": " +
                            llvm::toString(recvLayout.takeError()));
  // What each rank receives from each: the input's part along splitDim.
  llvm::SmallVector<int64_t, 6> part = partShape(input.shape, splitDim, n);
  if (input.dtype != output.dtype ||
      partShape(output.shape, concatDim, n) != part)
    return dtc::failureText(
        what + ": output " + shapeText(output) + " is not input " +
        shapeText(input) + " split " + llvm::Twine(n) + " ways along dim " +
        llvm::Twine(splitDim) + " and concatenated along dim " +
        llvm::Twine(concatDim));
  llvm::Expected<Count> count = countOf(sendLayout->partBytes());
  if (!count)
    return dtc::failureText(what + ": " + llvm::toString(count.takeError()));
  auto job = std::make_shared<Job>();
  job->what = std::move(what);
  MPI_Comm comm = impl_->groupComms[*mask];
  void *in = input.data, *out = output.data;
  SplitLayout sl = *sendLayout, rl = *recvLayout;
  Count c = *count;
  Job *j = job.get();
  job->post = [=](MPI_Request *request) {
    const void *send = in;
    if (!sl.contiguous()) {
      j->sendScratch.resize(sl.partBytes() * n);
      for (int64_t p = 0; p < n; ++p)
        sl.extract(in, j->sendScratch.data() + p * sl.partBytes(), p);
      send = j->sendScratch.data();
    }
    void *recv = out;
    if (!rl.contiguous()) {
      j->recvScratch.resize(rl.partBytes() * n);
      recv = j->recvScratch.data();
    }
    return MPI_Ialltoall(send, c.count, c.type, recv, c.count, c.type, comm,
                         request);
  };
  if (!rl.contiguous())
    job->finish = [=](const MPI_Status &) {
      for (int64_t p = 0; p < n; ++p)
        rl.insert(j->recvScratch.data() + p * rl.partBytes(), out, p);
      return llvm::Error::success();
    };
  return impl_->submit(std::move(job));
}

llvm::Expected<Request> MpiCommunicator::send(llvm::StringRef axis,
                                              int64_t peerOffset,
                                              const TensorRef &input) {
  llvm::Expected<PeerRank> peer =
      resolvePeer(impl_->mesh, impl_->rank, axis, peerOffset, true);
  if (!peer)
    return peer.takeError();
  const std::string &where = peer->where;
  if (static_cast<int64_t>(input.bytes()) > INT_MAX)
    return dtc::failureText(where + ": a message of " +
                            llvm::Twine(input.bytes()) +
                            " bytes exceeds MPI's int count");
  auto job = std::make_shared<Job>();
  job->what = where + " (to rank " + std::to_string(peer->rank) + ")";
  MPI_Comm comm = impl_->p2p;
  void *in = input.data;
  int bytes = static_cast<int>(input.bytes()), to = peer->rank;
  job->post = [=](MPI_Request *request) {
    return MPI_Isend(in, bytes, MPI_BYTE, to, 0, comm, request);
  };
  return impl_->submit(std::move(job));
}

llvm::Expected<Request> MpiCommunicator::recv(llvm::StringRef axis,
                                              int64_t peerOffset,
                                              const TensorRef &output) {
  llvm::Expected<PeerRank> peer =
      resolvePeer(impl_->mesh, impl_->rank, axis, peerOffset, false);
  if (!peer)
    return peer.takeError();
  const std::string &where = peer->where;
  if (static_cast<int64_t>(output.bytes()) > INT_MAX)
    return dtc::failureText(where + ": a message of " +
                            llvm::Twine(output.bytes()) +
                            " bytes exceeds MPI's int count");
  auto job = std::make_shared<Job>();
  job->what = where + " (from rank " + std::to_string(peer->rank) + ")";
  MPI_Comm comm = impl_->p2p;
  void *out = output.data;
  int bytes = static_cast<int>(output.bytes()), from = peer->rank;
  job->post = [=](MPI_Request *request) {
    return MPI_Irecv(out, bytes, MPI_BYTE, from, 0, comm, request);
  };
  Job *j = job.get();
  job->finish = [=](const MPI_Status &status) -> llvm::Error {
    int received = 0;
    MPI_Get_count(&status, MPI_BYTE, &received);
    if (received != bytes)
      return dtc::failureText(j->what + ": received " + llvm::Twine(received) +
                              " bytes, expected " + llvm::Twine(bytes));
    return llvm::Error::success();
  };
  return impl_->submit(std::move(job));
}

void MpiCommunicator::computing() {
  if (impl_->wakeDue.load(std::memory_order_relaxed) &&
      impl_->wakeDue.exchange(false, std::memory_order_acq_rel))
    impl_->wake.notify_one();
}

llvm::Error MpiCommunicator::wait(Request request) {
  Impl &impl = *impl_;
  std::unique_lock<std::mutex> lock(impl.mutex);
  auto it = impl.jobs.find(request);
  if (it == impl.jobs.end())
    return dtc::failureText("wait: unknown request " + llvm::Twine(request) +
                            " (never started, or already waited)");
  std::shared_ptr<Job> job = it->second;
  // Drive progress here until the job is done, polling without pause like
  // a blocking MPI call; the progress thread sleeps meanwhile.
  ++impl.waiters;
  while (!job->done) {
    lock.unlock();
    bool progressed;
    {
      std::lock_guard<std::mutex> hold(impl.mpiMutex);
      progressed = impl.poll();
    }
    if (!progressed)
      std::this_thread::yield();
    lock.lock();
  }
  // Hand what is still outstanding back to the progress thread.
  bool handBack = --impl.waiters == 0 && (impl.inFlight || !impl.queue.empty());
  impl.lastWaitCompletion = job->completedAt;
  impl.jobs.erase(request);
  lock.unlock();
  if (handBack)
    impl.wake.notify_one();
  if (!job->error.empty())
    return dtc::failureText(job->error);
  return llvm::Error::success();
}

std::optional<std::chrono::steady_clock::time_point>
MpiCommunicator::lastWaitCompletion() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->lastWaitCompletion;
}

bool MpiCommunicator::isComplete(Request request) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->jobs.find(request);
  return it != impl_->jobs.end() && it->second->done;
}

} // namespace dtc::runtime::mpi
