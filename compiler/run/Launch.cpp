//===- Launch.cpp - Start every rank of a plan on this machine ------------===//

#include "compiler/run/Launch.h"

#include "runtime/support/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/Regex.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace dtc {
namespace {

/// Sets `name` in this process's environment (inherited by mpirun and the
/// ranks) unless the user set it.
void setDefaultEnv(const char *name, const std::string &value) {
  if (!std::getenv(name))
    ::setenv(name, value.c_str(), 1);
}

/// Why the job failed, from what mpirun and the ranks printed.
llvm::Error diagnose(int status, llvm::ArrayRef<std::string> rankErrors,
                     llvm::ArrayRef<std::string> mpirunLines,
                     std::optional<int> *deadRank) {
  // A rank that failed said why (its own "dtc: error: rank R: ..." line);
  // the first one is the cause, the others are consequences.
  if (!rankErrors.empty()) {
    llvm::StringRef line = rankErrors.front();
    line.consume_front("dtc: error: ");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2)
      return badInput("{0}", line);
    return failure("{0}", line);
  }
  // A rank that died without a word: mpirun names it.
  llvm::Regex died("process rank ([0-9]+) with PID [0-9]+ on node [^ ]+ "
                   "(exited on signal [0-9]+( \\([^)]*\\))?|[^.]*)");
  for (const std::string &line : mpirunLines) {
    llvm::SmallVector<llvm::StringRef> match;
    if (died.match(line, &match)) {
      int rank = 0;
      if (deadRank && !match[1].getAsInteger(10, rank))
        *deadRank = rank;
      return failure("rank {0} died ({1}); every other rank was stopped",
                     match[1], match[2]);
    }
  }
  llvm::Regex anyRank("rank ([0-9]+)");
  for (const std::string &line : mpirunLines) {
    llvm::SmallVector<llvm::StringRef> match;
    if (anyRank.match(line, &match))
      return failure("rank {0} failed: {1}", match[1],
                     llvm::StringRef(line).trim());
  }
  std::string first;
  for (const std::string &line : mpirunLines)
    if (!llvm::StringRef(line).trim().empty() &&
        !llvm::StringRef(line).starts_with("----")) {
      first = llvm::StringRef(line).trim().str();
      break;
    }
  return failure("the ranks failed (mpirun {0}){1}",
                 WIFEXITED(status)
                     ? "exit code " + std::to_string(WEXITSTATUS(status))
                     : "killed by signal " + std::to_string(WTERMSIG(status)),
                 first.empty() ? "" : ": " + first);
}

} // namespace

llvm::Error launchRanks(const LaunchOptions &options,
                        std::optional<int> *deadRank) {
  auto mpirun = llvm::sys::findProgramByName("mpirun");
  if (!mpirun)
    return badInput("a plan of {0} ranks needs mpirun to start them; install "
                    "Open MPI (apt-get install openmpi-bin) or launch the "
                    "ranks with srun",
                    options.ranks);
  if (options.command.empty())
    return failure("launch: no command to run on the ranks");
  // Every rank becomes a process on this machine: far more than it can
  // hold (a program.pb claiming 2^30 ranks) is refused before mpirun runs.
  int64_t cores = std::max(1u, std::thread::hardware_concurrency());
  int64_t most = std::max<int64_t>(256, 64 * cores);
  if (options.ranks < 1 || options.ranks > most)
    return badInput("a plan of {0} ranks cannot run as processes on this "
                    "machine ({1} cores, at most {2}); start its ranks across "
                    "nodes with srun or mpirun",
                    options.ranks, cores, most);

  // Each rank's threads take an equal share of this machine's cores: the
  // CPU backend divides them by Open MPI's local rank count
  // (runtime/cpu/Parallel.h). OpenBLAS's own threads are never used (each
  // GEMM tile is one single-threaded call); one thread keeps it from
  // starting idle ones in every rank.
  setDefaultEnv("OPENBLAS_NUM_THREADS", "1");
  // Containers usually forbid the cross-process memory reads of Open MPI's
  // single-copy shared-memory path; copying through the shared segment
  // always works.
  setDefaultEnv("OMPI_MCA_btl_vader_single_copy_mechanism", "none");
  if (::geteuid() == 0) {
    setDefaultEnv("OMPI_ALLOW_RUN_AS_ROOT", "1");
    setDefaultEnv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
  }

  std::vector<std::string> args = {
      *mpirun,           "-np",       std::to_string(options.ranks),
      "--oversubscribe", "--bind-to", "none"};
  args.insert(args.end(), options.command.begin(), options.command.end());
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  int errPipe[2];
  if (::pipe(errPipe) != 0)
    return failure("launch: cannot create a pipe");
  int outFd = -1;
  if (!options.stdoutPath.empty()) {
    outFd =
        ::open(options.stdoutPath.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (outFd < 0)
      return failure("launch: cannot write {0}", options.stdoutPath);
  }
  pid_t pid = ::fork();
  if (pid < 0)
    return failure("launch: cannot start mpirun");
  if (pid == 0) {
    ::dup2(errPipe[1], STDERR_FILENO);
    if (outFd >= 0)
      ::dup2(outFd, STDOUT_FILENO);
    ::close(errPipe[0]);
    ::close(errPipe[1]);
    // mpirun must not read our stdin (it would forward it to rank 0).
    int devNull = ::open("/dev/null", O_RDONLY);
    if (devNull >= 0)
      ::dup2(devNull, STDIN_FILENO);
    ::execv(argv[0], argv.data());
    std::perror("dtc: cannot run mpirun");
    ::_exit(127);
  }
  ::close(errPipe[1]);
  if (outFd >= 0)
    ::close(outFd);

  // Forward the ranks' messages as they come; keep Open MPI's banners
  // (multi-line reports between dashed lines) for the diagnosis only.
  std::vector<std::string> rankErrors, mpirunLines;
  FILE *err = ::fdopen(errPipe[0], "r");
  char *line = nullptr;
  size_t capacity = 0;
  bool inBanner = false;
  while (err && ::getline(&line, &capacity, err) >= 0) {
    llvm::StringRef text = llvm::StringRef(line).rtrim("\n");
    if (text.starts_with("dtc: error: ")) {
      rankErrors.push_back(text.str());
      continue;
    }
    bool dashes = text.starts_with("------");
    if (dashes)
      inBanner = !inBanner;
    bool fromMpi = dashes || inBanner || text.starts_with("[") ||
                   text.starts_with("mpirun") || text.contains("MPI_ABORT") ||
                   text.contains("Open MPI");
    if (fromMpi) {
      mpirunLines.push_back(text.str());
      continue;
    }
    llvm::errs() << text << "\n";
  }
  std::free(line);
  if (err)
    std::fclose(err);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
    return llvm::Error::success();
  return diagnose(status, rankErrors, mpirunLines, deadRank);
}

} // namespace dtc
