//===- Shard.h - A rank's part of a sharded tensor --------------*- C++ -*-===//
//
// The one definition of which elements of a whole tensor a rank holds,
// from a program Variable's `global_shape` and per-dim `shard` (the
// partitioner's #dtc.sharding): a dim split over mesh axes is cut into one
// part per group member (group order of Mesh::group); with an interleave
// block B the dim is read as [size / B, B] and every run of B is cut
// instead. ZeRO's flat split then cuts the flattened shard into equal
// contiguous parts. Initialization (every plan starts from the same weights),
// `dtc verify` (gathering shards to compare with one device) and checkpoints
// (issue 9) all go through it.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_SHARD_H
#define DTC_RUNTIME_CORE_SHARD_H

#include "runtime/core/Communicator.h"
#include "runtime/core/Tensor.h"

#include "llvm/Support/JSON.h"

namespace dtc::runtime {

/// The RankProgram `rank` runs (ranks of one pipeline stage, or of an SPMD
/// program, share one); nullptr when the program has none for it.
const program::RankProgram *rankProgramOf(const program::Program &program,
                                          int rank);

/// Where a rank's shard of one tensor sits in the whole tensor.
class ShardLayout {
public:
  /// One dim: cut into `parts` (each run of `block`, or the whole dim when
  /// 0), of which this rank holds part `index`.
  struct DimPart {
    int64_t parts = 1, index = 0, block = 0;
  };

  /// The layout of `var` on `rank` of `mesh`; a variable without shard
  /// information is whole on every rank.
  static llvm::Expected<ShardLayout> of(const program::Variable &var,
                                        const Mesh &mesh, int rank);

  /// The layout with these parts (what a checkpoint's index records):
  /// `dims` per dim of `globalShape` (empty: whole), then ZeRO's flat split
  /// into `flatParts` of which this is `flatIndex`. Errors when the parts
  /// do not divide the dims, as for of().
  static llvm::Expected<ShardLayout>
  fromParts(llvm::ArrayRef<int64_t> globalShape, llvm::ArrayRef<DimPart> dims,
            int64_t flatParts = 1, int64_t flatIndex = 0);
  /// A chunk's description in checkpoint indexes:
  /// {"dims": [{"parts","index","block"}...], "flat": {"parts","index"}}
  /// ("flat" only when flatParts() > 1).
  llvm::json::Object chunkJson() const;
  /// Inverse of chunkJson() for a tensor of `globalShape`.
  static llvm::Expected<ShardLayout>
  fromChunkJson(llvm::ArrayRef<int64_t> globalShape,
                const llvm::json::Object &chunk);

  llvm::ArrayRef<int64_t> globalShape() const { return global_; }
  /// The shape of this rank's part: the shard, or with ZeRO's flat split
  /// the 1-d part of the flattened shard.
  llvm::ArrayRef<int64_t> localShape() const { return stored_; }
  bool isWhole() const { return global_ == local_ && flatParts_ == 1; }
  /// The shard's shape (before ZeRO's flat split) and its place per dim.
  llvm::ArrayRef<int64_t> shardShape() const { return local_; }
  llvm::ArrayRef<DimPart> dimParts() const { return dims_; }
  /// ZeRO's flat split: this rank holds part flatIndex() of flatParts()
  /// of the flattened shard.
  int64_t flatParts() const { return flatParts_; }
  int64_t flatIndex() const { return flatIndex_; }

  /// Copies this rank's elements of `whole` into `shard` (local shape).
  void extract(const TensorRef &whole, const TensorRef &shard) const;
  /// Writes `shard` into this rank's elements of `whole`.
  void insert(const TensorRef &shard, const TensorRef &whole) const;

private:
  /// The global index along `dim` of local index `i`.
  int64_t globalIndex(size_t dim, int64_t i) const;
  template <typename Fn> void forEach(Fn fn) const;

  /// The shard of the whole tensor (before any flat split).
  llvm::SmallVector<int64_t, 6> global_, local_, stored_;
  int64_t flatParts_ = 1, flatIndex_ = 0;
  llvm::SmallVector<DimPart, 6> dims_;
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_SHARD_H
