//===- Checkpointing.h - dtc run's saves and resumes ------------*- C++ -*-===//
//
// What `dtc run --ckpt-dir DIR [--save-every K] [--resume]` adds to the
// training loop (docs/checkpoints.md): a rank's parameters and optimizer
// moments snapshotted to host memory and written in the background by the
// checkpoint library, with the run's position (step, samples seen, data
// seed) and plan as metadata; and on resume, every variable of this rank
// read back from the latest committed step, whatever plan saved it.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_RUN_CHECKPOINTING_H
#define DTC_COMPILER_RUN_CHECKPOINTING_H

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/core/Executor.h"

#include <map>
#include <memory>

namespace dtc {

/// Where a run is in its data: the stream of samples is a function of the
/// seed and the global sample index only, so this is the whole data and
/// RNG state a resume needs (docs/checkpoints.md).
struct TrainingPosition {
  int64_t step = 0;        ///< optimizer steps done
  int64_t globalBatch = 0; ///< sequences per step
  uint64_t seed = 0;       ///< the data-order seed
  /// --data DIR: the shard set's files and row counts (the order of its
  /// samples depends on them); none for a token file or synthetic data.
  std::optional<llvm::json::Array> shards;
};

/// A checkpoint was loaded: training continues after `position.step`.
struct Resumed {
  TrainingPosition position;
  std::string directory; ///< the step directory read
  std::string savedPlan; ///< "dp=4 tp=1 pp=1 zero=3" of the saving run
};

/// Reads the latest committed checkpoint under `root` into this rank's
/// variables (parameters and optimizer moments; gradient accumulators
/// start at zero), resharding from whatever plan saved it. None when
/// `root` holds no checkpoint yet. Bad input (exit 2): a corrupt or
/// incomplete checkpoint, another model, another global batch, another
/// shard set than `shards` (this run's, if it reads shards).
llvm::Expected<std::optional<Resumed>>
resumeTraining(const program::RankProgram &program, const runtime::Mesh &mesh,
               int rank, runtime::Executor &executor, llvm::StringRef root,
               int64_t globalBatch,
               const std::optional<llvm::json::Array> &shards = std::nullopt);

/// This rank's side of the run's saves.
class TrainingSaver {
public:
  /// `program` is the whole job's (which rank writes which replica);
  /// `bundle`'s plan.json "parallel" section is recorded with each save.
  static llvm::Expected<std::unique_ptr<TrainingSaver>>
  create(const program::Program &program, const runtime::Mesh &mesh, int rank,
         std::string root, llvm::StringRef bundle);

  /// Snapshots this rank's saved variables (the host copies are the
  /// snapshot: training may go on at once) and starts writing them.
  llvm::Error save(runtime::Executor &executor,
                   const TrainingPosition &position);
  /// Waits for the save in flight (rank 0: until it is committed).
  llvm::Error finish();
  /// The error of a save that already ended, without waiting for one in
  /// flight: called every step, so that a failed save (a full disk) stops
  /// the run at once rather than at the next save.
  llvm::Error poll();

private:
  TrainingSaver(const program::RankProgram &program, const runtime::Mesh &mesh,
                int rank, std::string root, runtime::ChunkWriters writers,
                llvm::json::Object plan);
  /// The writer's error as dtc run reports it; an I/O error also names the
  /// step a --resume would start from and what to do.
  llvm::Error saveFailed(llvm::Error error);

  const program::RankProgram &program_;
  const runtime::Mesh &mesh_;
  int rank_;
  std::string root_;
  runtime::ChunkWriters writers_;
  llvm::json::Object plan_;
  /// Host copies of the saved variables: one snapshot's worth of host
  /// memory for the whole run, the price of saving in the background.
  std::map<std::string, runtime::Tensor> staging_;
  std::unique_ptr<runtime::CheckpointWriter> writer_;
};

} // namespace dtc

#endif // DTC_COMPILER_RUN_CHECKPOINTING_H
