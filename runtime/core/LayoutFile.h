//===- LayoutFile.h - layout.json: placements, not chunks -------*- C++ -*-===//
//
// A bundle's layout.json (SPEC "bundle", schema "dtc.layout/2") records,
// for every variable of the program, its whole shape and dtype and its
// placement over the mesh: which mesh axes split which dims (with the
// interleave block), the mesh axes of ZeRO's flat partition, and the ranks
// whose program holds it. A rank's chunk is never listed: it follows from
// the placement by ShardLayout::of, the one function the runtime's
// initialization, `dtc verify` and checkpoints use. The file therefore
// grows with the number of tensors, not with ranks x tensors (the per-rank
// listing it replaces was 1.5 GB for GPT-3 175B on 1024 GPUs).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_LAYOUTFILE_H
#define DTC_RUNTIME_CORE_LAYOUTFILE_H

#include "runtime/core/Shard.h"

#include <optional>
#include <string>
#include <vector>

namespace dtc::runtime {

/// "0-3,8,10-11" for {0,1,2,3,8,10,11} (sorted, distinct ranks).
std::string formatRankSet(llvm::ArrayRef<int> ranks);
/// Inverse of formatRankSet; errors on anything else, or a rank outside
/// [0, worldSize).
llvm::Expected<std::vector<int>> parseRankSet(llvm::StringRef text,
                                              int worldSize);

struct LayoutFile {
  /// One way the tensor is held: the same shard rule on every rank listed.
  struct Placement {
    std::vector<int> ranks; ///< sorted
    /// The variable as these ranks' program declares it: local type,
    /// global_shape, shard and flat_axes (what ShardLayout::of reads).
    program::Variable variable;
  };
  struct Tensor {
    std::string name, role, parameter;
    std::vector<int64_t> shape; ///< the whole tensor
    program::DType dtype = program::DTYPE_UNSPECIFIED;
    std::vector<Placement> placements;
  };

  std::string meshText;
  Mesh mesh;
  int worldSize = 1;
  std::vector<Tensor> tensors; ///< sorted by name

  const Tensor *find(llvm::StringRef name) const;
  /// The chunk `rank` holds of `tensor`; nullopt when its program holds
  /// none.
  llvm::Expected<std::optional<ShardLayout>> chunkOf(const Tensor &tensor,
                                                     int rank) const;
};

/// layout.json's text for `program` (deterministic: tensors by name,
/// placements by first rank).
std::string writeLayoutFile(const program::Program &program);

/// Parses layout.json's text; `source` names the file in errors, which
/// name the tensor and field at fault.
llvm::Expected<LayoutFile> readLayoutFile(llvm::StringRef text,
                                          llvm::StringRef source);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_LAYOUTFILE_H
