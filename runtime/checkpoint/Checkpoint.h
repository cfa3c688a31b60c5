//===- Checkpoint.h - Sharded checkpoints that reshard on load --*- C++ -*-===//
//
// SPEC "Checkpoints" and docs/checkpoints.md. A checkpoint is a step
// directory `root/step-NNNNNNNN/` with one safetensors file per rank
// (`rank-RRRRR.safetensors`, the chunks that rank wrote), `index.json`
// (every tensor's chunks: file, byte range, layout, SHA-256 of the chunk and
// of each hash block), and `COMMITTED`, written last; `root/latest` names
// the newest committed step. Saving is asynchronous and coordinated only
// through the directory (no communicator): each rank writes its file and a
// manifest, rank 0 merges the manifests into index.json and commits.
// Loading reads, for any target layout of the same global shape, only the
// byte ranges the target needs, checking the hash blocks it touches.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CHECKPOINT_CHECKPOINT_H
#define DTC_RUNTIME_CHECKPOINT_CHECKPOINT_H

#include "runtime/core/Shard.h"
#include "runtime/core/Tensor.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/JSON.h"

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace dtc::runtime {

/// "step-00000100".
std::string stepDirName(int64_t step);
/// "rank-00003.safetensors".
std::string rankFileName(int rank);

/// The checkpoint key of a variable: its initializer name for a parameter,
/// "<role>:<parameter>" for optimizer state ("exp_avg:h.0.w", as its
/// variable and layout.json name it); nullopt for what is not saved
/// (gradient accumulators: zero at a step boundary).
std::optional<std::string> checkpointKey(const program::Variable &var);

/// Which rank writes each chunk: of the ranks holding the same part of the
/// same checkpoint key (replicas over dp, pp-tied copies), the lowest.
class ChunkWriters {
public:
  /// Computes the table from every rank's variables and layouts.
  static llvm::Expected<ChunkWriters> of(const program::Program &program);
  /// Whether `rank` saves its variable `variable` (by name): false for
  /// replicas of a lower rank's chunk and for unsaved roles.
  bool writes(int rank, llvm::StringRef variable) const;

private:
  std::set<std::pair<int, std::string>> writers_;
};

/// One-off form of ChunkWriters (computes the table: prefer the class when
/// asking for many variables).
llvm::Expected<bool> writesChunk(const program::Program &program,
                                 const Mesh &mesh, const program::Variable &var,
                                 int rank);

/// One tensor part a rank saves: a host snapshot of its variable.
struct SaveItem {
  std::string key;       ///< checkpointKey() of the variable
  std::string parameter; ///< the initializer it belongs to
  std::string role;      ///< "parameter", "exp_avg", ...
  ShardLayout layout;    ///< where `value` sits in the whole tensor
  Tensor value;          ///< host memory, layout.localShape() elements
  /// Other state_dict names of the tensor (tied weights).
  std::vector<std::string> aliases = {};
};

struct WriterOptions {
  /// Bytes per hash block (the granularity of verified ranged reads).
  uint64_t hashBlockBytes = 1 << 20;
  /// How long rank 0 waits for the other ranks' manifests before it gives
  /// up on committing the step.
  std::chrono::milliseconds commitTimeout = std::chrono::minutes(30);
  /// When set (the same on every rank of one run), rank 0 only accepts
  /// manifests carrying it: a manifest left by an interrupted earlier run
  /// in the same step directory is never merged.
  std::string saveId;
  /// Fault injection for the crash-during-save tests: when the save of this
  /// step has written half of this rank's file, the process kills itself
  /// (SIGKILL, as the OOM killer or a node failure would). -1: never.
  int64_t faultKillStep = -1;
};

/// One rank's writer. Saves run on a background thread; the caller's
/// snapshot (`items`) is owned by the writer until the save is done.
class CheckpointWriter {
public:
  CheckpointWriter(std::string root, int rank, int worldSize, std::string mesh,
                   WriterOptions options = {});
  CheckpointWriter(const CheckpointWriter &) = delete;
  CheckpointWriter &operator=(const CheckpointWriter &) = delete;
  /// finish(), errors dropped.
  ~CheckpointWriter();

  /// Returns at once (after waiting for a save still in flight, whose error
  /// it returns, if any). The background thread writes rank-R.safetensors
  /// (tmp file, fsync, rename), then its manifest rank-R.json (tmp +
  /// rename). Rank 0's thread then waits until all manifests exist, writes
  /// index.json, then COMMITTED, then replaces `latest` by rename. `meta`
  /// (plan, data position, RNG state, ...) is recorded by rank 0 only.
  llvm::Error startSave(int64_t step, std::vector<SaveItem> items,
                        llvm::json::Object meta = {});
  /// Waits for the save in flight (rank 0: until it committed) and returns
  /// its error.
  llvm::Error finish();
  /// Whether a save is in flight.
  bool busy() const;

private:
  llvm::Error save(int64_t step, std::vector<SaveItem> items,
                   llvm::json::Object meta);
  llvm::Error commit(int64_t step, const std::string &dir,
                     llvm::json::Object meta);

  std::string root_, mesh_;
  int rank_, worldSize_;
  WriterOptions options_;
  std::thread thread_;
  mutable std::mutex mutex_;
  bool running_ = false;
  std::optional<llvm::Error> result_;
};

/// One saved part of a tensor: where its bytes are and which elements.
struct CheckpointChunk {
  std::string file; ///< rank file name, relative to the step directory
  std::string name; ///< its tensor name in that file
  ShardLayout layout;
  uint64_t offset = 0, bytes = 0; ///< byte range in the file
  std::string sha256;             ///< hex, the whole chunk
  std::vector<std::string> blockSha256;
};

struct CheckpointTensor {
  std::string key, role, parameter;
  std::vector<std::string> aliases; ///< other state_dict names (tied)
  llvm::SmallVector<int64_t, 6> shape;
  DType dtype = DType::F32;
  std::vector<CheckpointChunk> chunks;
  uint64_t bytes() const; ///< the chunks' bytes together
};

/// What verify() checked.
struct VerifyStats {
  int64_t tensors = 0, chunks = 0, bytes = 0, hashes = 0;
};

/// A committed step directory, opened for reading.
class Checkpoint {
public:
  /// `path`: a checkpoint root (follows `latest`) or a step directory.
  /// Refuses a step directory without COMMITTED, an invalid index.json, a
  /// missing rank file, with one-line errors naming the path and what to do.
  static llvm::Expected<Checkpoint> open(llvm::StringRef path);

  int64_t step() const { return step_; }
  int worldSize() const { return worldSize_; }
  llvm::StringRef mesh() const { return mesh_; }
  const llvm::json::Object &meta() const { return meta_; }
  llvm::StringRef directory() const { return dir_; }
  uint64_t hashBlockBytes() const { return blockBytes_; }
  /// Key -> tensor, in key order.
  const std::map<std::string, CheckpointTensor> &tensors() const {
    return tensors_;
  }
  const CheckpointTensor *find(llvm::StringRef key) const;

  /// Fills `out` (target.localShape()'s elements, the saved dtype) with the
  /// target's part of tensor `key`, for any target layout of the saved
  /// global shape. Reads only the hash blocks holding needed bytes (pread)
  /// and checks each; errors name the tensor and the file.
  llvm::Error read(llvm::StringRef key, const ShardLayout &target,
                   const TensorRef &out) const;
  /// The whole tensor `key`.
  llvm::Expected<Tensor> readWhole(llvm::StringRef key) const;

  /// Checks, from the rank files' headers only, that each chunk of index.json
  /// is its rank file's tensor of that name at that place (valid
  /// safetensors): read() trusts the index's offsets, so a chunk only
  /// index.json lists would read other bytes.
  llvm::Error checkChunkLocations() const;
  /// Checks every hash (blocks and whole chunks), that every tensor's chunks
  /// cover it exactly once, that each chunk is its rank file's tensor
  /// (valid safetensors), and that COMMITTED is present.
  llvm::Error verify(VerifyStats *stats = nullptr) const;

private:
  std::string dir_, mesh_;
  int64_t step_ = 0;
  int worldSize_ = 0;
  uint64_t blockBytes_ = 0;
  llvm::json::Object meta_;
  std::map<std::string, CheckpointTensor> tensors_;
};

/// A step directory under a checkpoint root.
struct StepEntry {
  std::string name, path;
  int64_t step = 0;
  bool committed = false;
};
/// The step directories of `root`, oldest first.
llvm::Expected<std::vector<StepEntry>> listSteps(llvm::StringRef root);
/// Whether `path` is a checkpoint root (has `latest` or step directories)
/// rather than a step directory.
bool isCheckpointRoot(llvm::StringRef path);
/// The step directory `root/latest` names (when `latest` is missing, the
/// newest committed step: a save can fail between COMMITTED and `latest`);
/// an error when it names no committed step or there is none.
llvm::Expected<std::string> latestStep(llvm::StringRef root);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CHECKPOINT_CHECKPOINT_H
