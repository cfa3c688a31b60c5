//===- CollectiveKernels.h - Backend-neutral collective kernels -*- C++ -*-===//
//
// The kernels of the dtc collective starts and `dtc.wait`: they check the
// instruction, call the rank's Communicator (ExecutionContext) and keep the
// started operation in the context's `pending` map under the instruction's
// `request` attribute until its wait. Any backend whose Communicator works on
// its tensors' memory registers them as they are.
//
// Also the layout arithmetic shared by the backends and `dtc.shard_slice`:
// which bytes of a tensor are one group rank's part of a split dimension.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_COLLECTIVEKERNELS_H
#define DTC_RUNTIME_CORE_COLLECTIVEKERNELS_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime {

/// dtc.all_reduce_start, all_gather_start, reduce_scatter_start,
/// all_to_all_start, send_start, recv_start and dtc.wait.
void registerCollectiveKernels(KernelRegistry &registry);

/// A tensor's dimension `dim` split `parts` ways, optionally interleaved: the
/// dimension (size S) is read as [S / block, block] and part p is the run
/// [p * block / parts, (p + 1) * block / parts) of every block (block = S: a
/// plain split). A part is itself a row-major tensor of the whole's shape
/// with S / parts at `dim`.
struct SplitLayout {
  int64_t outer = 1;    // product of the dims before `dim`
  int64_t blocks = 1;   // S / block
  int64_t runBytes = 0; // bytes of one part's run in one block
  int64_t parts = 1;

  /// Bytes of one part.
  int64_t partBytes() const { return outer * blocks * runBytes; }
  /// True when every part is one contiguous range of the whole (part p at
  /// p * partBytes()), so no packing is needed.
  bool contiguous() const { return outer == 1 && blocks == 1; }

  /// Checks that `whole`'s `dim` splits into `parts` parts (block = 0 or the
  /// dimension's size: a plain split) and describes it; the error says why
  /// not.
  static llvm::Expected<SplitLayout> get(llvm::ArrayRef<int64_t> whole,
                                         size_t elementBytes, int64_t dim,
                                         int64_t block, int64_t parts);

  /// Copies part `p` of `whole` into the contiguous `part`.
  void extract(const void *whole, void *part, int64_t p) const;
  /// Copies the contiguous `part` into part `p` of `whole`.
  void insert(const void *part, void *whole, int64_t p) const;
};

/// This rank's place in the group of the call's `mesh_axes`: the group size
/// and its position in it (mesh order), for kernels whose work depends on
/// it (shard_slice, ring attention) on every backend. A run without a
/// communicator is a group of one.
struct GroupPlace {
  int64_t size = 1, position = 0;
  bool hasCommunicator = false;
};
llvm::Expected<GroupPlace> groupPlaceOf(const KernelCall &call);

/// The shape of one part: `whole` with `dim` divided by `parts`.
llvm::SmallVector<int64_t, 6> partShape(llvm::ArrayRef<int64_t> whole,
                                        int64_t dim, int64_t parts);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_COLLECTIVEKERNELS_H
