//===- Elastic.cpp - A run that re-plans for the ranks it has -------------===//
//
// The supervisor's loop: launch, and on a lost rank re-plan (a `dtc
// compile` of the bundle's own request for fewer GPUs, the global batch
// pinned: micro-batches and accumulation change, the samples per step do
// not), resume from the newest committed step, launch again. Checkpoints
// resume under any plan (docs/checkpoints.md), and the data order is a
// function of the global sample index, so the samples after the resume are
// those the lost run would have read next.
//
//===----------------------------------------------------------------------===//

#include "compiler/run/Elastic.h"

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"

#include <chrono>
#include <cstdlib>
#include <thread>
#include <unistd.h>

namespace dtc {

llvm::Expected<ElasticRange> parseElasticRange(llvm::StringRef text) {
  auto [low, high] = text.split(':');
  if (high.empty())
    high = low;
  ElasticRange range;
  if (low.trim().getAsInteger(10, range.min) ||
      high.trim().getAsInteger(10, range.max) || range.min < 1 ||
      range.max < range.min)
    return badInput("--elastic {0}: give MIN:MAX ranks, 1 <= MIN <= MAX "
                    "(for example 2:4)",
                    text);
  return range;
}

namespace {

/// The compile request a bundle was made from, and its global batch.
struct CompileRequest {
  std::vector<std::string> command;
  int64_t globalBatch = 0;
};

llvm::Expected<CompileRequest> readCompileRequest(llvm::StringRef bundle) {
  llvm::SmallString<256> path(bundle);
  llvm::sys::path::append(path, "plan.json");
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return badInput("--elastic: cannot read {0}", path);
  auto json = llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return badInput("--elastic: {0} is not JSON: {1}", path,
                    llvm::toString(json.takeError()));
  const llvm::json::Object *plan = json->getAsObject();
  const llvm::json::Array *command =
      plan ? plan->getArray("compile_command") : nullptr;
  const llvm::json::Object *parallel =
      plan ? plan->getObject("parallel") : nullptr;
  std::optional<int64_t> global =
      parallel ? parallel->getInteger("global_batch") : std::nullopt;
  if (!command || command->size() < 3 || !global)
    return badInput("--elastic: {0} does not record the compile request "
                    "(compile_command, parallel.global_batch); recompile the "
                    "bundle with this dtc",
                    path);
  CompileRequest request;
  for (const llvm::json::Value &arg : *command)
    if (std::optional<llvm::StringRef> text = arg.getAsString())
      request.command.push_back(text->str());
  request.globalBatch = *global;
  return request;
}

/// The request re-planned for `gpus` ranks into `output`: the plan's
/// degrees, micro-batch and mesh order searched again (the old ones need
/// the old rank count), the global batch pinned.
std::vector<std::string> replanned(const CompileRequest &request,
                                   const std::string &dtc, int64_t gpus,
                                   llvm::StringRef output) {
  static const char *const searchedAgain[] = {
      "--gpus",      "-o",     "--output",      "--dp",
      "--tp",        "--pp",   "--cp",          "--ep",
      "--vpp",       "--zero", "--micro-batch", "--global-batch",
      "--mesh-order"};
  std::vector<std::string> args = {dtc};
  const std::vector<std::string> &old = request.command;
  for (size_t i = 1; i < old.size(); ++i) {
    llvm::StringRef arg = old[i];
    llvm::StringRef flag = arg.split('=').first;
    if (llvm::is_contained(searchedAgain, flag)) {
      if (!arg.contains('=') && i + 1 < old.size())
        ++i; // its value
      continue;
    }
    args.push_back(arg.str());
  }
  llvm::append_range(args, std::vector<std::string>{
                               "--gpus", std::to_string(gpus), "--global-batch",
                               std::to_string(request.globalBatch), "-o",
                               output.str()});
  return args;
}

/// The ranks' command for `bundle`, resuming: the starting bundle's path
/// replaced, --resume added once.
/// `--trace DIR` becomes DIR/elastic-ranks-N, so that the lost run's
/// traces stay and the new plan's say which they are.
std::vector<std::string> resumeCommand(const std::vector<std::string> &command,
                                       llvm::StringRef from,
                                       llvm::StringRef bundle, int64_t ranks) {
  const std::string traces = "/elastic-ranks-" + std::to_string(ranks);
  std::vector<std::string> result;
  bool resume = false;
  for (size_t i = 0; i < command.size(); ++i) {
    llvm::StringRef arg = command[i];
    if (arg == "--trace" && i + 1 < command.size()) {
      result.push_back(arg.str());
      result.push_back(command[++i] + traces);
      continue;
    }
    if (arg.starts_with("--trace=")) {
      result.push_back(arg.str() + traces);
      continue;
    }
    result.push_back(arg == from ? bundle.str() : arg.str());
    resume |= arg == "--resume";
  }
  if (!resume)
    result.push_back("--resume");
  return result;
}

double secondsSinceEpoch() {
  return std::chrono::duration<double>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

/// The `plan` line of a compile's output, for the log.
std::string planLine(llvm::StringRef log) {
  auto buffer = llvm::MemoryBuffer::getFile(log);
  if (!buffer)
    return "";
  llvm::SmallVector<llvm::StringRef> lines;
  (*buffer)->getBuffer().split(lines, '\n');
  for (llvm::StringRef line : lines)
    if (line.consume_front("plan"))
      return line.trim().str();
  return "";
}

/// The last line of a failed compile: its error.
std::string lastLine(llvm::StringRef log) {
  auto buffer = llvm::MemoryBuffer::getFile(log);
  if (!buffer)
    return "";
  llvm::StringRef text = (*buffer)->getBuffer().trim();
  return text.substr(text.rfind('\n') + 1).str();
}

/// A bundle re-planned for a rank count, and its plan line.
struct Replanned {
  std::string bundle, plan;
};

/// `request` compiled for `ranks` into DIR/elastic/ranks-N (its output in
/// ranks-N.log beside it); the compile's refusal as the error.
llvm::Expected<Replanned> compileFor(const CompileRequest &request,
                                     const std::string &dtc,
                                     llvm::StringRef ckptDir, int64_t ranks) {
  llvm::SmallString<256> dir(ckptDir);
  llvm::sys::path::append(dir, "elastic", "ranks-" + std::to_string(ranks));
  std::string log = (dir + ".log").str();
  // The compile's output replaces the file, not what a link there names.
  llvm::sys::fs::remove(log);
  if (std::error_code ec =
          llvm::sys::fs::create_directories(llvm::sys::path::parent_path(dir)))
    return failure("elastic: cannot create {0}: {1}",
                   llvm::sys::path::parent_path(dir), ec.message());
  std::vector<std::string> args = replanned(request, dtc, ranks, dir.str());
  llvm::SmallVector<llvm::StringRef> argv(args.begin(), args.end());
  std::optional<llvm::StringRef> redirects[] = {
      std::nullopt, llvm::StringRef(log), llvm::StringRef(log)};
  if (llvm::sys::ExecuteAndWait(dtc, argv, std::nullopt, redirects) != 0)
    return badInput(
        "{0}", llvm::StringRef(lastLine(log)).split("dtc: error: ").second);
  return Replanned{dir.str().str(), planLine(log)};
}

} // namespace

llvm::Error superviseElastic(const ElasticRun &run, llvm::raw_ostream &out) {
  const ElasticRange &range = run.range;
  if (run.worldSize < range.min || run.worldSize > range.max)
    return badInput("--elastic {0}:{1}: the bundle's plan has {2} ranks, "
                    "outside the range",
                    range.min, range.max, run.worldSize);
  auto request = readCompileRequest(run.bundle);
  if (!request)
    return request.takeError();
  const std::string &dtc = run.command.front();
  int64_t world = run.worldSize;
  std::vector<std::string> command = run.command;
  while (true) {
    RankLaunch outcome;
    llvm::Error failed = run.launch(world, command, outcome);
    if (!failed || !outcome.deadRank)
      return failed;
    std::string why = llvm::toString(std::move(failed));
    double failedAt = secondsSinceEpoch();
    auto start = std::chrono::steady_clock::now();
    // An injected fault fires once; the environment is the relaunch's.
    ::unsetenv(kKillRankFault);
    auto step = runtime::latestStep(run.ckptDir);
    if (!step)
      return failure("elastic: {0}; no committed step in {1} to resume "
                     "from ({2})",
                     why, run.ckptDir, llvm::toString(step.takeError()));
    // The most ranks left with a plan that keeps the global batch.
    std::string bundle, plan, refusal;
    int64_t ranks = world - 1;
    for (; ranks >= range.min; --ranks) {
      auto replan = compileFor(*request, dtc, run.ckptDir, ranks);
      if (replan) {
        bundle = replan->bundle;
        plan = replan->plan;
        break;
      }
      std::string why = llvm::toString(replan.takeError());
      if (refusal.empty())
        refusal = llvm::formatv("{0}: {1}", ranks, why).str();
    }
    llvm::StringRef resumeFrom = llvm::sys::path::filename(*step);
    if (bundle.empty() && world - 1 < range.min)
      return failure("elastic: {0}; {1} rank{2} left, fewer than --elastic "
                     "{3}:{4} allows; the last committed step {5} is intact",
                     why, world - 1, world == 2 ? "" : "s", range.min,
                     range.max, resumeFrom);
    if (bundle.empty())
      return failure("elastic: {0}; no plan for {1} to {2} ranks keeps the "
                     "global batch of {3} ({4}); the last committed step {5} "
                     "is intact",
                     why, range.min, world - 1, request->globalBatch, refusal,
                     resumeFrom);
    double replanS =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    out << llvm::formatv("elastic: {0}; re-planned for {1} rank{2} in {3:f2} "
                         "s: {4}{5}; resuming from {6}\n",
                         why, ranks, ranks == 1 ? "" : "s", replanS, plan,
                         refusal.empty() ? "" : " (not " + refusal + ")",
                         resumeFrom);
    out.flush();
    ::setenv(kElasticFailedAt, std::to_string(failedAt).c_str(), 1);
    command = resumeCommand(run.command, run.bundle, bundle, ranks);
    world = ranks;
  }
}

namespace {
/// What tells this launch's ranks apart from an earlier launch's: the
/// process-management namespace of the job, else the launcher's pid (every
/// rank on a machine is its child).
std::string launchToken() {
  for (const char *name :
       {"PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "SLURM_STEP_ID"})
    if (const char *value = std::getenv(name))
      return value;
  return std::to_string(::getppid());
}
} // namespace

llvm::Expected<std::string>
replanForLauncher(llvm::StringRef bundle, llvm::StringRef ckptDir,
                  const std::string &dtc, ElasticRange range,
                  int64_t bundleRanks, int64_t world, int rank) {
  if (world < range.min || world > range.max)
    return badInput("--elastic {0}:{1}: the launcher started {2} ranks, "
                    "outside the range",
                    range.min, range.max, world);
  llvm::SmallString<256> marker(ckptDir);
  llvm::sys::path::append(marker, "elastic",
                          "ranks-" + std::to_string(world) + ".ready");
  llvm::SmallString<256> dir(marker);
  llvm::sys::path::replace_extension(dir, "");
  const std::string token = launchToken();
  if (rank == 0) {
    // The verdict for this launch's ranks: "TOKEN\nok" or "TOKEN\nWHY",
    // written whole (rename) so that no rank reads half of it.
    auto start = std::chrono::steady_clock::now();
    std::string verdict = "ok";
    auto request = readCompileRequest(bundle);
    llvm::Expected<Replanned> replan =
        request ? compileFor(*request, dtc, ckptDir, world)
                : llvm::Expected<Replanned>(request.takeError());
    if (!replan)
      verdict = llvm::toString(replan.takeError());
    std::string temporary = (marker + ".tmp").str();
    {
      // Whatever sits at the name (a planted link) is removed, never
      // written through.
      llvm::sys::fs::remove(temporary);
      std::error_code ec;
      llvm::raw_fd_ostream file(temporary, ec, llvm::sys::fs::CD_CreateNew);
      if (ec)
        return failure("elastic: cannot write {0}: {1}", temporary,
                       ec.message());
      file << token << "\n" << verdict;
    }
    if (std::error_code ec = llvm::sys::fs::rename(temporary, marker))
      return failure("elastic: cannot write {0}: {1}", marker, ec.message());
    if (verdict != "ok")
      return failure("elastic: the launcher started {0} ranks for a bundle "
                     "of {1}, and re-planning failed: {2}",
                     world, bundleRanks, verdict);
    llvm::errs() << llvm::formatv(
        "elastic: the launcher started {0} ranks for a bundle of {1}; "
        "re-planned for {0} in {2:f2} s: {3}\n",
        world, bundleRanks,
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count(),
        replan->plan);
    return replan->bundle;
  }
  // The other ranks wait for rank 0's verdict on this launch.
  for (int waited = 0; waited < 6000; ++waited) {
    if (auto buffer = llvm::MemoryBuffer::getFile(marker)) {
      auto [first, verdict] = (*buffer)->getBuffer().split('\n');
      if (first == token) {
        if (verdict != "ok")
          return failure("elastic: rank 0 could not re-plan for {0} ranks: "
                         "{1}",
                         world, verdict);
        return dir.str().str();
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return failure("elastic: rank 0 did not re-plan for {0} ranks within 300 "
                 "s ({1})",
                 world, marker);
}

} // namespace dtc
