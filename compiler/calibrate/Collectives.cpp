//===- Collectives.cpp - dtc calibrate: the link between ranks ------------===//
//
// Two MPI ranks on this machine time all-reduces through the runtime's
// communicator for the backend calibrated (start + wait, as a program runs
// them): MpiCommunicator on host buffers, or NcclCommunicator between two
// GPUs. The link of the calibrated cluster is fitted to them: for two ranks
// the cost model's all-reduce takes 2 latency + bytes / bandwidth
// (Collectives.cpp, the ring for n = 2), a straight line in the message
// size.
//
//===----------------------------------------------------------------------===//

#include "compiler/calibrate/Calibrate.h"
#include "compiler/run/Launch.h"
#include "compiler/run/Run.h"
#include "runtime/mpi/MpiCommunicator.h"
#include "runtime/support/Error.h"
#ifdef DTC_HAVE_CUDA
#include "runtime/cuda/CudaPlugin.h"
#endif

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>

using namespace dtc;
namespace rt = dtc::runtime;

namespace {

/// Message sizes by factors of 4: on the CPU 4 KiB to 16 MiB (4 MiB with
/// --quick); between GPUs 64 KiB to 256 MiB (64 MiB), where NVLink's
/// bandwidth shows only in messages of megabytes.
std::vector<int64_t> messageBytes(bool cuda, bool quick) {
  int64_t first = cuda ? 64 << 10 : 4 << 10;
  int64_t last = cuda ? (int64_t(quick ? 64 : 256) << 20)
                      : (int64_t(quick ? 4 : 16) << 20);
  std::vector<int64_t> sizes;
  for (int64_t bytes = first; bytes <= last; bytes *= 4)
    sizes.push_back(bytes);
  return sizes;
}

/// The communicator between this machine's ranks for `backend`.
llvm::Expected<std::unique_ptr<rt::Communicator>>
createCommunicator(const RuntimeBackend &backend, const rt::Mesh &mesh) {
#ifdef DTC_HAVE_CUDA
  if (backend.cuda)
    return backend.plugin->createNcclWithMpi(mesh, {});
#endif
  auto mpi = rt::mpi::MpiCommunicator::create(mesh);
  if (!mpi)
    return mpi.takeError();
  return std::unique_ptr<rt::Communicator>(std::move(*mpi));
}

} // namespace

llvm::Expected<calibrate::LinkFit>
calibrate::fitLink(llvm::ArrayRef<CollectiveSample> samples) {
  // t = a + b bytes, relative residuals: the small messages (latency)
  // count as much as the large ones.
  RelativeLineFit line;
  for (const CollectiveSample &s : samples) {
    if (!(s.bytes > 0) || !(s.seconds > 0))
      return badInput("calibrate: all-reduce sample of {0} bytes in {1} s is "
                      "not positive",
                      s.bytes, s.seconds);
    line.add(s.bytes, s.seconds);
  }
  if (samples.size() < 2 || !line.hasSpread())
    return badInput("calibrate: fitting the link needs all-reduces of at "
                    "least two sizes, got {0}",
                    samples.size());
  double b = line.slope(), a = line.intercept();
  if (a < 0) { // No measurable latency: a line through the origin.
    a = 0;
    b = line.slopeThroughOrigin();
  }
  if (!(b > 0))
    return failure("calibrate: the all-reduce timings fit no positive "
                   "bandwidth (slope {0}); rerun on a quieter machine",
                   b);
  LinkFit fit;
  fit.bytesPerSecond = 1 / b;
  fit.latencySeconds = a / 2;
  std::vector<double> errors;
  for (const CollectiveSample &s : samples)
    errors.push_back(std::abs(
        (2 * fit.latencySeconds + s.bytes / fit.bytesPerSecond) / s.seconds -
        1));
  summarizeErrors(std::move(errors), fit.medianError, fit.worstError);
  return fit;
}

llvm::Error calibrate::runCollectiveRank(llvm::StringRef backendName,
                                         bool quick,
                                         llvm::StringRef samplesPath) {
  if (llvm::Error e = rt::mpi::initializeMpi(nullptr, nullptr))
    return failure("{0}", llvm::toString(std::move(e)));
  auto backend = selectRuntimeBackend(backendName);
  if (!backend)
    return backend.takeError();
  rt::MemorySpace &memory = *backend->memory;
  std::vector<CollectiveSample> samples;
  int rank = 0;
  {
    rt::Mesh mesh({{"link", 2}});
    auto comm = createCommunicator(*backend, mesh);
    if (!comm)
      return failure("calibrate: {0}", llvm::toString(comm.takeError()));
    rank = (*comm)->rank();
    const std::vector<std::string> axes = {"link"};
    for (int64_t bytes : messageBytes(backend->cuda, quick)) {
      int64_t count = bytes / 4;
      auto in = rt::Tensor::allocate(rt::DType::F32, {count}, memory);
      auto out = rt::Tensor::allocate(rt::DType::F32, {count}, memory);
      if (!in || !out)
        return failure("calibrate: {0}", llvm::toString(llvm::joinErrors(
                                             in.takeError(), out.takeError())));
      auto allReduce = [&]() -> llvm::Error {
        auto request =
            (*comm)->allReduce(axes, in->ref(), out->ref(), rt::Reduction::Sum);
        if (!request)
          return request.takeError();
        return (*comm)->wait(*request);
      };
      // Blocks of calls long enough to time (about 20 ms), the median of
      // five blocks after a warm-up block. Every call synchronizes the two
      // ranks, so their blocks line up; a block ends when the device has
      // run its queued operations.
      int64_t blockBytes = backend->cuda ? (int64_t(quick ? 1 : 4) << 30)
                                         : (int64_t(quick ? 8 : 64) << 20);
      int calls =
          static_cast<int>(std::clamp<int64_t>(blockBytes / bytes, 2, 200));
      std::vector<double> perCall;
      for (int block = 0; block <= (quick ? 3 : 5); ++block) {
        auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i)
          if (llvm::Error err = allReduce())
            return failure("calibrate: all-reduce of {0} bytes: {1}", bytes,
                           llvm::toString(std::move(err)));
        if (llvm::Error err = memory.synchronize())
          return failure("calibrate: all-reduce of {0} bytes: {1}", bytes,
                         llvm::toString(std::move(err)));
        double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
        if (block > 0)
          perCall.push_back(seconds / calls);
      }
      llvm::sort(perCall);
      samples.push_back(
          {static_cast<double>(bytes), perCall[perCall.size() / 2]});
    }
  }
  rt::mpi::finalizeMpi();
  if (rank != 0)
    return llvm::Error::success();
  std::error_code ec;
  llvm::raw_fd_ostream os(samplesPath, ec);
  if (ec)
    return failure("calibrate: cannot write {0}: {1}", samplesPath,
                   ec.message());
  for (const CollectiveSample &s : samples)
    os << llvm::formatv("{0} {1:e}\n", s.bytes, s.seconds);
  return llvm::Error::success();
}

llvm::Expected<std::vector<calibrate::CollectiveSample>>
calibrate::measureCollectives(const Options &options) {
  if (options.executable.empty())
    return failure("calibrate: the dtc executable is unknown, so no ranks "
                   "can be started");
  llvm::SmallString<128> path;
  if (std::error_code ec =
          llvm::sys::fs::createTemporaryFile("dtc-calibrate-link", "txt", path))
    return failure("calibrate: cannot create a temporary file: {0}",
                   ec.message());
  auto removeFile = llvm::make_scope_exit([&] { llvm::sys::fs::remove(path); });
  LaunchOptions launch;
  launch.ranks = 2;
  launch.command = {options.executable, "calibrate", "--collectives-rank",
                    std::string(path)};
  if (!options.backend.empty())
    launch.command.insert(launch.command.end(), {"--backend", options.backend});
  if (options.quick)
    launch.command.push_back("--quick");
  // The ranks' own output (none unless they fail) is not the calibration's.
  launch.stdoutPath = "/dev/null";
  if (llvm::Error err = launchRanks(launch))
    return std::move(err);
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return failure("calibrate: the ranks wrote no all-reduce timings");
  std::vector<CollectiveSample> samples;
  llvm::SmallVector<llvm::StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines) {
    auto [bytes, seconds] = line.split(' ');
    CollectiveSample s;
    if (bytes.trim().getAsDouble(s.bytes) ||
        seconds.trim().getAsDouble(s.seconds))
      return failure("calibrate: bad all-reduce timing line '{0}'", line);
    samples.push_back(s);
  }
  if (samples.empty())
    return failure("calibrate: the ranks wrote no all-reduce timings");
  return samples;
}
