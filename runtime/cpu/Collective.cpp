//===- Collective.cpp - dtc.shard_slice on the CPU ------------------------===//
//
// The one collective op without communication: this rank's part of a
// replicated tensor. The communicating collectives are backend-neutral
// (runtime/core/CollectiveKernels.cpp); registerCpuKernels adds both.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/CollectiveKernels.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"

#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cstring>

namespace dtc::runtime::cpu {

namespace {

llvm::Error shardSliceKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0);
  const TensorRef &out = call.output(0);
  std::vector<std::string> axes = call.strings("mesh_axes");
  llvm::Expected<GroupPlace> place = groupPlaceOf(call);
  if (!place)
    return place.takeError();
  int64_t size = place->size, position = place->position;
  int64_t dim = call.i64("dim");
  llvm::Expected<SplitLayout> layout = SplitLayout::get(
      in.shape, dtypeSize(in.dtype), dim, call.i64("block"), size);
  if (!layout)
    return call.error(llvm::toString(layout.takeError()));
  if (in.dtype != out.dtype || out.shape != partShape(in.shape, dim, size)) {
    if (size == 1 && out.shape != in.shape)
      return call.error(
          "a slice of " + shapeString(in.shape) + " into " +
          shapeString(out.shape) + " needs the group of mesh axes [" +
          llvm::join(axes, ",") +
          "], but there is no communicator; run the program with `dtc run`");
    return call.error(
        "expected a " + shapeString(partShape(in.shape, dim, size)) + " " +
        dtypeName(in.dtype) + " result for part " + llvm::Twine(position) +
        " of " + llvm::Twine(size) + " of " + shapeString(in.shape) + ", got " +
        shapeString(out.shape) + " " + dtypeName(out.dtype));
  }
  layout->extract(in.data, out.data, position);
  return llvm::Error::success();
}

} // namespace

void registerShardSliceKernel(KernelRegistry &registry) {
  registry.add("dtc.shard_slice", shardSliceKernel);
}

} // namespace dtc::runtime::cpu
