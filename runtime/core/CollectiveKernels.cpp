//===- CollectiveKernels.cpp - Backend-neutral collective kernels ---------===//

#include "runtime/core/CollectiveKernels.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <cstring>

namespace dtc::runtime {

namespace {

std::string shapeText(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? "x" : "") + std::to_string(d);
  return s + "]";
}

llvm::Error layoutError(const llvm::Twine &message) {
  return dtc::failureText(message);
}

llvm::Error checkArity(const KernelCall &call, size_t inputs, size_t outputs) {
  if (call.numInputs() != inputs || call.numOutputs() != outputs)
    return call.error("expected " + llvm::Twine(inputs) + " input(s) and " +
                      llvm::Twine(outputs) + " output(s), got " +
                      llvm::Twine(call.numInputs()) + " and " +
                      llvm::Twine(call.numOutputs()));
  return llvm::Error::success();
}

llvm::Expected<Communicator *> communicatorOf(const KernelCall &call) {
  ExecutionContext *context = call.context();
  if (!context || !context->communicator)
    return call.error(
        "no communicator: this program communicates between ranks (mesh "
        "axes [" +
        llvm::join(call.strings("mesh_axes"), ",") +
        "]); run it with `dtc run`, which starts one process per rank");
  return context->communicator;
}

llvm::Expected<int64_t> requestOf(const KernelCall &call) {
  if (!call.has("request"))
    return call.error("missing the 'request' attribute");
  return call.i64("request");
}

/// Checks the instruction, starts the operation through `start` and records
/// it under the instruction's request.
llvm::Error
startOp(const KernelCall &call, size_t inputs, size_t outputs,
        llvm::function_ref<llvm::Expected<Request>(Communicator &)> start) {
  if (auto err = checkArity(call, inputs, outputs))
    return err;
  llvm::Expected<Communicator *> comm = communicatorOf(call);
  if (!comm)
    return comm.takeError();
  llvm::Expected<int64_t> id = requestOf(call);
  if (!id)
    return id.takeError();
  ExecutionContext &context = *call.context();
  if (context.pending.count(*id))
    return call.error("request " + llvm::Twine(*id) +
                      " is already in flight (started twice without a wait)");
  llvm::Expected<Request> request = start(**comm);
  if (!request)
    return call.error(llvm::toString(request.takeError()));
  context.pending[*id] = *request;
  return llvm::Error::success();
}

llvm::Expected<Reduction> reductionOf(const KernelCall &call) {
  llvm::Expected<Reduction> reduction = parseReduction(call.str("reduction"));
  if (!reduction)
    return call.error(llvm::toString(reduction.takeError()));
  return *reduction;
}

llvm::Error allReduceStart(const KernelCall &call) {
  llvm::Expected<Reduction> reduction = reductionOf(call);
  if (!reduction)
    return reduction.takeError();
  return startOp(call, 1, 1, [&](Communicator &comm) {
    return comm.allReduce(call.strings("mesh_axes"), call.input(0),
                          call.output(0), *reduction);
  });
}

llvm::Error allGatherStart(const KernelCall &call) {
  return startOp(call, 1, 1, [&](Communicator &comm) {
    return comm.allGather(call.strings("mesh_axes"), call.input(0),
                          call.output(0), call.i64("dim"), call.i64("block"));
  });
}

llvm::Error reduceScatterStart(const KernelCall &call) {
  llvm::Expected<Reduction> reduction = reductionOf(call);
  if (!reduction)
    return reduction.takeError();
  return startOp(call, 1, 1, [&](Communicator &comm) {
    return comm.reduceScatter(call.strings("mesh_axes"), call.input(0),
                              call.output(0), call.i64("dim"),
                              call.i64("block"), *reduction);
  });
}

llvm::Error allToAllStart(const KernelCall &call) {
  return startOp(call, 1, 1, [&](Communicator &comm) {
    return comm.allToAll(call.strings("mesh_axes"), call.input(0),
                         call.output(0), call.i64("split_dim"),
                         call.i64("concat_dim"));
  });
}

/// The single axis of a send or receive.
llvm::Expected<std::string> peerAxisOf(const KernelCall &call) {
  std::vector<std::string> axes = call.strings("mesh_axes");
  if (axes.size() != 1)
    return call.error("expected exactly one mesh axis, got [" +
                      llvm::join(axes, ",") + "]");
  return axes.front();
}

/// The peer's offset along `axis`; a `cyclic` one wraps around the axis, so
/// it becomes the plain offset that reaches the same coordinate.
int64_t peerOffsetOf(const KernelCall &call, Communicator &comm,
                     llvm::StringRef axis) {
  int64_t offset = call.i64("peer_offset");
  int index = comm.mesh().axisIndex(axis);
  if (!call.flag("cyclic") || index < 0)
    return offset;
  int64_t size = comm.mesh().axes()[index].size;
  int64_t at = comm.mesh().coordinates(comm.rank())[index];
  return ((at + offset) % size + size) % size - at;
}

llvm::Error sendStart(const KernelCall &call) {
  llvm::Expected<std::string> axis = peerAxisOf(call);
  if (!axis)
    return axis.takeError();
  return startOp(call, 1, 0, [&](Communicator &comm) {
    return comm.send(*axis, peerOffsetOf(call, comm, *axis), call.input(0));
  });
}

llvm::Error recvStart(const KernelCall &call) {
  llvm::Expected<std::string> axis = peerAxisOf(call);
  if (!axis)
    return axis.takeError();
  return startOp(call, 0, 1, [&](Communicator &comm) {
    return comm.recv(*axis, peerOffsetOf(call, comm, *axis), call.output(0));
  });
}

llvm::Error waitKernel(const KernelCall &call) {
  if (call.numInputs() > 1 || call.numOutputs() > call.numInputs())
    return call.error("expected the start's buffer as input and output (or "
                      "neither), got " +
                      llvm::Twine(call.numInputs()) + " input(s) and " +
                      llvm::Twine(call.numOutputs()) + " output(s)");
  llvm::Expected<Communicator *> comm = communicatorOf(call);
  if (!comm)
    return comm.takeError();
  llvm::Expected<int64_t> id = requestOf(call);
  if (!id)
    return id.takeError();
  ExecutionContext &context = *call.context();
  auto it = context.pending.find(*id);
  if (it == context.pending.end())
    return call.error("request " + llvm::Twine(*id) +
                      " is not in flight (never started, or already waited)");
  Request request = it->second;
  context.pending.erase(it);
  if (auto err = (*comm)->wait(request))
    return call.error(llvm::toString(std::move(err)));
  // The lowering gives the wait the start's buffer; should it ever be a
  // different one, the data still has to arrive there.
  if (call.numOutputs() == 1 && call.output(0).data != call.input(0).data) {
    if (call.output(0).bytes() != call.input(0).bytes())
      return call.error("output of " + llvm::Twine(call.output(0).bytes()) +
                        " bytes for a result of " +
                        llvm::Twine(call.input(0).bytes()) + " bytes");
    if (call.input(0).bytes())
      std::memcpy(call.output(0).data, call.input(0).data,
                  call.input(0).bytes());
  }
  return llvm::Error::success();
}

} // namespace

void registerCollectiveKernels(KernelRegistry &registry) {
  registry.add("dtc.all_reduce_start", allReduceStart);
  registry.add("dtc.all_gather_start", allGatherStart);
  registry.add("dtc.reduce_scatter_start", reduceScatterStart);
  registry.add("dtc.all_to_all_start", allToAllStart);
  registry.add("dtc.send_start", sendStart);
  registry.add("dtc.recv_start", recvStart);
  registry.add("dtc.wait", waitKernel);
}

llvm::Expected<SplitLayout> SplitLayout::get(llvm::ArrayRef<int64_t> whole,
                                             size_t elementBytes, int64_t dim,
                                             int64_t block, int64_t parts) {
  int64_t rank = static_cast<int64_t>(whole.size());
  if (dim < -rank || dim >= rank)
    return layoutError("dim " + llvm::Twine(dim) + " is out of range for " +
                       shapeText(whole));
  if (dim < 0)
    dim += rank;
  if (parts < 1)
    return layoutError("a group of " + llvm::Twine(parts) + " ranks");
  int64_t size = whole[dim];
  if (block < 0)
    return layoutError("negative block " + llvm::Twine(block));
  int64_t b = block ? block : size;
  if (b == 0 ? size != 0 : size % b != 0)
    return layoutError("dim " + llvm::Twine(dim) + " of " + shapeText(whole) +
                       " is not a multiple of block " + llvm::Twine(b));
  if (b % parts != 0)
    return layoutError(
        "dim " + llvm::Twine(dim) + " of " + shapeText(whole) +
        (block ? " (block " + std::to_string(block) + ")" : std::string()) +
        " does not split into " + llvm::Twine(parts) + " parts");
  SplitLayout layout;
  layout.parts = parts;
  for (int64_t d = 0; d < dim; ++d)
    layout.outer *= whole[d];
  int64_t inner = static_cast<int64_t>(elementBytes);
  for (int64_t d = dim + 1; d < rank; ++d)
    inner *= whole[d];
  layout.blocks = b ? size / b : 0;
  layout.runBytes = b / parts * inner;
  return layout;
}

void SplitLayout::extract(const void *whole, void *part, int64_t p) const {
  const char *src = static_cast<const char *>(whole) + p * runBytes;
  char *dst = static_cast<char *>(part);
  if (runBytes == 0)
    return;
  for (int64_t row = 0, rows = outer * blocks; row < rows; ++row)
    std::memcpy(dst + row * runBytes, src + row * parts * runBytes, runBytes);
}

void SplitLayout::insert(const void *part, void *whole, int64_t p) const {
  const char *src = static_cast<const char *>(part);
  char *dst = static_cast<char *>(whole) + p * runBytes;
  if (runBytes == 0)
    return;
  for (int64_t row = 0, rows = outer * blocks; row < rows; ++row)
    std::memcpy(dst + row * parts * runBytes, src + row * runBytes, runBytes);
}

llvm::SmallVector<int64_t, 6> partShape(llvm::ArrayRef<int64_t> whole,
                                        int64_t dim, int64_t parts) {
  llvm::SmallVector<int64_t, 6> shape(whole.begin(), whole.end());
  int64_t rank = static_cast<int64_t>(shape.size());
  if (dim < 0)
    dim += rank;
  if (dim >= 0 && dim < rank && parts > 0)
    shape[dim] /= parts;
  return shape;
}

llvm::Expected<GroupPlace> groupPlaceOf(const KernelCall &call) {
  GroupPlace place;
  ExecutionContext *context = call.context();
  if (!context || !context->communicator)
    return place;
  Communicator &comm = *context->communicator;
  llvm::Expected<std::vector<int>> group =
      comm.mesh().group(comm.rank(), call.strings("mesh_axes"));
  if (!group)
    return call.error(llvm::toString(group.takeError()));
  place.size = static_cast<int64_t>(group->size());
  place.position =
      std::find(group->begin(), group->end(), comm.rank()) - group->begin();
  place.hasCommunicator = true;
  return place;
}

} // namespace dtc::runtime
