//===- Checkpointing.cpp - dtc run's saves and resumes --------------------===//

#include "compiler/run/Checkpointing.h"
#include "compiler/run/ShardData.h"

#include "runtime/support/Error.h"
#include "runtime/support/Json.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <cstdlib>
#include <random>

namespace dtc {
namespace rt = runtime;

namespace {

/// An id every rank of this job computes alike, so that rank 0 merges only
/// manifests of this run (not ones an interrupted run left behind): the
/// launcher's job id.
std::string jobId() {
  for (const char *name : {"DTC_RUN_ID", "PMIX_NAMESPACE", "SLURM_JOB_ID"})
    if (const char *value = std::getenv(name)) {
      std::string id = value;
      if (const char *stepId = std::getenv("SLURM_STEP_ID");
          stepId && llvm::StringRef(name) == "SLURM_JOB_ID")
        id += std::string(".") + stepId;
      return id;
    }
  // One process: nobody else writes this step.
  return llvm::formatv("{0:x}", std::random_device{}()).str();
}

/// The "parallel" section of the bundle's plan.json (empty when absent).
llvm::json::Object planOf(llvm::StringRef bundle) {
  llvm::SmallString<256> path(bundle);
  llvm::sys::path::append(path, "plan.json");
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return {};
  auto json = rt::parseJson((*buffer)->getBuffer());
  if (!json) {
    llvm::consumeError(json.takeError());
    return {};
  }
  const llvm::json::Object *root = json->getAsObject();
  const llvm::json::Object *parallel =
      root ? root->getObject("parallel") : nullptr;
  return parallel ? *parallel : llvm::json::Object{};
}

/// "dp=4 tp=1 pp=2 ..." from a saved plan's parallel section.
std::string planText(const llvm::json::Object *plan) {
  if (!plan)
    return "an unrecorded plan";
  std::string text;
  for (llvm::StringRef key : {"dp", "tp", "pp", "vpp", "zero"})
    if (auto v = plan->getInteger(key))
      text += (text.empty() ? "" : " ") + key.str() + "=" + std::to_string(*v);
  return text.empty() ? "an unrecorded plan" : text;
}

/// A run on shards continues only on the same shard set: the order of
/// its samples follows from the set's row count, and which row is which
/// from its files.
llvm::Error checkSameShards(const rt::Checkpoint &ckpt,
                            const std::optional<llvm::json::Array> &shards) {
  const llvm::json::Object *data = ckpt.meta().getObject("data");
  const llvm::json::Array *saved = data ? data->getArray("shards") : nullptr;
  if (!saved && !shards)
    return llvm::Error::success();
  if (saved && shards && *saved == *shards)
    return llvm::Error::success();
  std::string before = saved ? "the shards " + describeShards(*saved)
                             : std::string("a token file or synthetic data");
  std::string now = shards ? "the shards " + describeShards(*shards)
                           : std::string("a token file or synthetic data");
  return badInput("--resume: {0} was trained on {1}, this run reads {2}; "
                  "resume with the same --data",
                  ckpt.directory(), before, now);
}

} // namespace

llvm::Expected<std::optional<Resumed>>
resumeTraining(const program::RankProgram &program, const rt::Mesh &mesh,
               int rank, rt::Executor &executor, llvm::StringRef root,
               int64_t globalBatch,
               const std::optional<llvm::json::Array> &shards) {
  // A run resumed before its first save starts from the beginning.
  if (!llvm::sys::fs::is_directory(root) || !rt::isCheckpointRoot(root))
    return std::nullopt;
  auto steps = rt::listSteps(root);
  if (!steps)
    return badInput("--resume: {0}", llvm::toString(steps.takeError()));
  const rt::StepEntry *newest = nullptr;
  for (const rt::StepEntry &s : *steps)
    if (s.committed)
      newest = &s;
  if (!newest)
    return std::nullopt;
  // `latest` is replaced last: a crash just before leaves it one behind.
  llvm::SmallString<256> latest(root);
  llvm::sys::path::append(latest, "latest");
  auto ckpt = rt::Checkpoint::open(
      llvm::sys::fs::exists(latest) ? root : llvm::StringRef(newest->path));
  if (!ckpt)
    return badInput("--resume: {0}", llvm::toString(ckpt.takeError()));

  Resumed resumed;
  resumed.directory = ckpt->directory().str();
  const llvm::json::Object *position = ckpt->meta().getObject("position");
  resumed.position.step = ckpt->step();
  // The saved position decides the data order from here on: read, never
  // guessed (a step of 2^62 or a seed that is an object were accepted).
  if (resumed.position.step < 0 || resumed.position.step > (int64_t(1) << 40))
    return badInput("--resume: {0}: step {1} is not a step a run reaches "
                    "(0 to 2^40); the checkpoint is damaged",
                    resumed.directory, resumed.position.step);
  if (position) {
    resumed.position.globalBatch =
        position->getInteger("global_batch").value_or(0);
    if (const llvm::json::Value *seed = position->get("seed")) {
      std::optional<llvm::StringRef> text = seed->getAsString();
      if (!text || text->getAsInteger(10, resumed.position.seed))
        return badInput("--resume: {0}: the saved data seed is not a decimal "
                        "string; the checkpoint is damaged",
                        resumed.directory);
    }
  }
  if (resumed.position.globalBatch != globalBatch)
    return badInput("--resume: {0} was trained with a global batch of {1} "
                    "sequences, this bundle uses {2}; recompile it with "
                    "--global-batch {1} so the run continues the same way",
                    resumed.directory, resumed.position.globalBatch,
                    globalBatch);
  if (llvm::Error e = checkSameShards(*ckpt, shards))
    return std::move(e);
  resumed.position.shards = shards;
  resumed.savedPlan = planText(ckpt->meta().getObject("plan"));
  // Steps after the one resumed belong to a timeline this run abandons
  // (`latest` was set back past a damaged step, or a run died before
  // moving it): rank 0 moves them aside, before its first training step,
  // which no other rank can finish without it, so this run's saves never
  // meet them. Nothing is deleted.
  if (rank == 0)
    for (const rt::StepEntry &s : *steps)
      if (s.step > resumed.position.step) {
        std::string aside = s.path + ".abandoned";
        for (int n = 2; llvm::sys::fs::exists(aside); ++n)
          aside = s.path + ".abandoned-" + std::to_string(n);
        if (std::error_code ec = llvm::sys::fs::rename(s.path, aside))
          return failure("--resume: cannot move {0} aside ({1}); move it "
                         "out of {2}",
                         s.path, ec.message(), root);
        llvm::errs() << "moved " << s.name << " (after the resumed step) to "
                     << llvm::sys::path::filename(aside) << "\n";
      }

  for (const program::Variable &v : program.variables()) {
    std::optional<std::string> key = rt::checkpointKey(v);
    if (!key)
      continue;
    const rt::CheckpointTensor *saved = ckpt->find(*key);
    if (!saved)
      return badInput("--resume: {0} has no tensor '{1}', which this plan "
                      "needs; it was saved from another model (or without "
                      "optimizer state)",
                      resumed.directory, *key);
    auto layout = rt::ShardLayout::of(v, mesh, rank);
    if (!layout)
      return badInput("program.pb: {0}; recompile the bundle",
                      llvm::toString(layout.takeError()));
    if (llvm::ArrayRef<int64_t>(saved->shape) != layout->globalShape() ||
        saved->dtype != v.type().dtype())
      return badInput("--resume: {0}: tensor '{1}' is {2} {3} there, this "
                      "plan's is {4} {5}; it was saved from another model",
                      resumed.directory, *key, rt::dtypeName(saved->dtype),
                      rt::shapeString(saved->shape),
                      rt::dtypeName(v.type().dtype()),
                      rt::shapeString(layout->globalShape()));
    rt::Tensor local(saved->dtype, layout->localShape());
    if (llvm::Error e = ckpt->read(*key, *layout, local.ref()))
      return badInput("--resume: {0}: {1}; to resume from an earlier "
                      "committed step, write its name into {2}/latest "
                      "('dtc ckpt verify {2}' checks them all)",
                      resumed.directory, llvm::toString(std::move(e)), root);
    if (llvm::Error e = executor.writeVariable(v.name(), local))
      return failure("--resume: variable '{0}': {1}", v.name(),
                     llvm::toString(std::move(e)));
  }
  return resumed;
}

TrainingSaver::TrainingSaver(const program::RankProgram &program,
                             const rt::Mesh &mesh, int rank, std::string root,
                             rt::ChunkWriters writers, llvm::json::Object plan)
    : program_(program), mesh_(mesh), rank_(rank), root_(std::move(root)),
      writers_(std::move(writers)), plan_(std::move(plan)) {
  rt::WriterOptions options;
  options.saveId = jobId();
  // DTC_FAULT_KILL_SAVE=RANK:STEP: that rank dies halfway through writing
  // that step (test/cli/ckpt-faults.test).
  if (const char *fault = std::getenv("DTC_FAULT_KILL_SAVE")) {
    auto [who, when] = llvm::StringRef(fault).split(':');
    int victim = -1;
    if (!who.getAsInteger(10, victim) && victim == rank_)
      (void)when.getAsInteger(10, options.faultKillStep);
  }
  writer_ = std::make_unique<rt::CheckpointWriter>(
      root_, rank_, mesh_.worldSize(), mesh_.str(), options);
}

llvm::Expected<std::unique_ptr<TrainingSaver>>
TrainingSaver::create(const program::Program &program, const rt::Mesh &mesh,
                      int rank, std::string root, llvm::StringRef bundle) {
  const program::RankProgram *mine = rt::rankProgramOf(program, rank);
  if (!mine)
    return badInput("program.pb: no program for rank {0}; recompile the "
                    "bundle",
                    rank);
  auto writers = rt::ChunkWriters::of(program);
  if (!writers)
    return badInput("program.pb: {0}; recompile the bundle",
                    llvm::toString(writers.takeError()));
  if (std::error_code ec = llvm::sys::fs::create_directories(root))
    return failure("--ckpt-dir {0}: cannot create it ({1})", root,
                   ec.message());
  return std::unique_ptr<TrainingSaver>(new TrainingSaver(
      *mine, mesh, rank, std::move(root), std::move(*writers), planOf(bundle)));
}

llvm::Error TrainingSaver::save(rt::Executor &executor,
                                const TrainingPosition &position) {
  // The staging buffers are the previous save's snapshot until it is
  // written.
  if (writer_->busy())
    if (llvm::Error e = writer_->finish())
      return saveFailed(std::move(e));
  std::vector<rt::SaveItem> items;
  for (const program::Variable &v : program_.variables()) {
    std::optional<std::string> key = rt::checkpointKey(v);
    if (!key || !writers_.writes(rank_, v.name()))
      continue;
    auto layout = rt::ShardLayout::of(v, mesh_, rank_);
    if (!layout)
      return badInput("program.pb: {0}; recompile the bundle",
                      llvm::toString(layout.takeError()));
    // Reused, so that a save does not first fault in fresh pages.
    rt::Tensor &staged = staging_[v.name()];
    if (staged.empty())
      staged = rt::Tensor(v.type().dtype(), layout->localShape());
    if (llvm::Error e = executor.readVariable(v.name(), staged))
      return failure("checkpoint: {0}", llvm::toString(std::move(e)));
    // The item shares the buffer's storage.
    items.push_back({*key,
                     v.parameter(),
                     v.role(),
                     *layout,
                     staged,
                     {v.aliases().begin(), v.aliases().end()}});
  }
  // The seed is a string: JSON numbers do not hold every uint64.
  llvm::json::Object meta{
      {"plan", llvm::json::Object(plan_)},
      {"position",
       llvm::json::Object{{"step", position.step},
                          {"global_batch", position.globalBatch},
                          {"samples", position.step * position.globalBatch},
                          {"seed", std::to_string(position.seed)}}}};
  if (position.shards)
    meta["data"] =
        llvm::json::Object{{"shards", llvm::json::Array(*position.shards)}};
  if (llvm::Error e =
          writer_->startSave(position.step, std::move(items), std::move(meta)))
    return saveFailed(std::move(e));
  return llvm::Error::success();
}

llvm::Error TrainingSaver::finish() {
  if (llvm::Error e = writer_->finish())
    return saveFailed(std::move(e));
  return llvm::Error::success();
}

llvm::Error TrainingSaver::poll() {
  return writer_->busy() ? llvm::Error::success() : finish();
}

llvm::Error TrainingSaver::saveFailed(llvm::Error error) {
  std::string message;
  bool io = false;
  llvm::handleAllErrors(std::move(error), [&](const llvm::ErrorInfoBase &e) {
    message += (message.empty() ? "" : "; ") + e.message();
    io |= e.convertToErrorCode() == std::errc::io_error;
  });
  if (!io)
    return failure("checkpoint: {0}", message);
  // A failed write (a full disk, a lost mount) never touches a committed
  // step: say which one a --resume would start from, read back from the
  // directory rather than assumed, and what to do.
  std::string kept = "no step is committed yet";
  if (auto latest = rt::latestStep(root_))
    kept = llvm::sys::path::filename(*latest).str() +
           " (the step --resume starts from) is intact";
  else
    llvm::consumeError(latest.takeError());
  return failure("checkpoint: {0}; {1}: make room in {2} (or pass another "
                 "--ckpt-dir) and rerun with --resume",
                 message, kept, root_);
}

} // namespace dtc
