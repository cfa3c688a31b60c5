//===- NcclCommunicator.cpp - The NCCL backend of Communicator ------------===//

#include "runtime/cuda/NcclCommunicator.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaOps.h"
#include "runtime/support/Error.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <map>

namespace dtc::runtime::cuda {

namespace ops = ::dtc::cuda;

namespace {

llvm::Error failure(const llvm::Twine &message) {
  return dtc::failureText("nccl: " + message);
}

llvm::Error ncclCheck(ncclResult_t result, const char *what) {
  if (result == ncclSuccess)
    return llvm::Error::success();
  return failure(llvm::Twine(what) + ": " + ncclGetErrorString(result));
}

llvm::Error cudaCheck(cudaError_t result, const char *what) {
  if (result == cudaSuccess)
    return llvm::Error::success();
  return failure(llvm::Twine(what) + ": " + cudaGetErrorString(result));
}

llvm::Expected<ncclDataType_t> ncclType(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return ncclFloat32;
  case DType::F16:
    return ncclFloat16;
  case DType::BF16:
    return ncclBfloat16;
  case DType::F64:
    return ncclFloat64;
  case DType::I64:
    return ncclInt64;
  case DType::I32:
    return ncclInt32;
  case DType::I8:
    return ncclInt8;
  case DType::BOOL:
    return ncclUint8;
  default:
    return failure("unsupported dtype " + dtypeName(dtype));
  }
}

ncclRedOp_t ncclOp(Reduction r) {
  switch (r) {
  case Reduction::Max:
    return ncclMax;
  case Reduction::Min:
    return ncclMin;
  default:
    return ncclSum;
  }
}

int64_t product(llvm::ArrayRef<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims)
    n *= d;
  return n;
}

/// Frees stream-ordered scratch unless released.
struct Staging {
  void *ptr = nullptr;
  ~Staging() { ops::scratchRelease(ptr); }
  void *release() {
    void *p = ptr;
    ptr = nullptr;
    return p;
  }
};

} // namespace

struct NcclCommunicator::Impl {
  /// A group of mesh axes: its communicator and its own stream, so one
  /// group's collectives (a data-parallel gradient all-reduce) never queue
  /// ahead of another's (a tensor-parallel all-reduce on the critical path).
  struct Group {
    std::vector<int> ranks;
    int position = 0;
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  /// A point-to-point channel: a two-rank communicator (sender rank 0,
  /// receiver rank 1) and its own stream on each side, carrying messages
  /// one way between two ring neighbours of an axis.
  struct Channel {
    ncclComm_t comm = nullptr;
    cudaStream_t stream = nullptr;
  };
  /// An operation in flight: its completion event on its group's or
  /// channel's stream and what wait() still does on the compute stream
  /// (unpack).
  struct Pending {
    cudaEvent_t done = nullptr;
    ncclComm_t comm = nullptr; // polled for asynchronous errors in wait()
    void *staging[2] = {nullptr, nullptr};
    const void *unpackFrom = nullptr;
    void *unpackTo = nullptr;
    size_t elemSize = 0;
    std::vector<int64_t> unpackShape, unpackPerm;
  };

  Mesh mesh;
  int rank = 0;
  ncclComm_t world = nullptr;
  cudaStream_t compute = nullptr;
  std::map<unsigned, Group> groups; // by bit mask of mesh axes
  /// By (sending rank, receiving rank).
  std::map<std::pair<int, int>, Channel> channels;
  std::map<Request, Pending> pending;
  Request next = 1;

  ~Impl();

  llvm::Expected<Group *> group(llvm::ArrayRef<std::string> axes) {
    if (axes.empty())
      return failure("a collective needs at least one mesh axis");
    unsigned mask = 0;
    for (const std::string &a : axes) {
      int index = mesh.axisIndex(a);
      if (index < 0)
        return failure("unknown mesh axis '" + a + "' (mesh " + mesh.str() +
                       ")");
      mask |= 1u << index;
    }
    return &groups.at(mask);
  }

  llvm::Expected<Channel *> channel(int from, int to, llvm::StringRef axis) {
    auto it = channels.find({from, to});
    if (it == channels.end())
      return failure("no point-to-point channel from rank " +
                     llvm::Twine(from) + " to rank " + llvm::Twine(to) +
                     " along '" + axis +
                     "': channels join the ring neighbours of the axes the "
                     "program sends along");
    return &it->second;
  }

  /// Orders `stream` (a group's or a channel's) after the compute stream's
  /// work so far.
  llvm::Error handOff(cudaStream_t stream) {
    cudaEvent_t ready;
    if (llvm::Error e =
            cudaCheck(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming),
                      "cudaEventCreate"))
      return e;
    llvm::Error e =
        cudaCheck(cudaEventRecord(ready, compute), "cudaEventRecord");
    if (!e)
      e = cudaCheck(cudaStreamWaitEvent(stream, ready, 0),
                    "cudaStreamWaitEvent");
    cudaEventDestroy(ready); // released once the wait completes
    return e;
  }

  /// Records the operation just queued on `stream` over `comm` as pending.
  llvm::Expected<Request> finish(Pending p, ncclComm_t comm,
                                 cudaStream_t stream) {
    p.comm = comm;
    if (llvm::Error e =
            cudaCheck(cudaEventCreateWithFlags(&p.done, cudaEventDisableTiming),
                      "cudaEventCreate"))
      return std::move(e);
    if (llvm::Error e =
            cudaCheck(cudaEventRecord(p.done, stream), "cudaEventRecord"))
      return std::move(e);
    Request id = next++;
    pending.emplace(id, std::move(p));
    return id;
  }
};

NcclCommunicator::NcclCommunicator(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}

NcclCommunicator::~NcclCommunicator() = default;

// Also frees what a failed create() had set up.
NcclCommunicator::Impl::~Impl() {
  for (auto &[id, p] : pending) {
    cudaEventSynchronize(p.done);
    cudaEventDestroy(p.done);
    for (void *s : p.staging)
      ops::scratchRelease(s);
  }
  // The stream drains before its communicator goes.
  auto release = [](cudaStream_t stream, ncclComm_t comm) {
    if (stream) {
      cudaStreamSynchronize(stream);
      cudaStreamDestroy(stream);
    }
    if (comm)
      ncclCommDestroy(comm);
  };
  for (auto &[pair, channel] : channels)
    release(channel.stream, channel.comm);
  for (auto &[mask, g] : groups)
    release(g.stream, g.comm);
  if (world)
    ncclCommDestroy(world);
}

namespace {

/// Creates the point-to-point channels of `axis` (see the header): the
/// directed edges r -> r + step, step = +1 and -1, between ring neighbours.
/// A split gives each rank at most one new communicator, so each step's
/// edges are split in three classes whose edges share no rank: by the
/// sender's position r % 2, with the closing edge of an odd ring on its own.
llvm::Error createChannels(
    ncclComm_t world, const Mesh &m, int rank, int axis,
    std::map<std::pair<int, int>, NcclCommunicator::Impl::Channel> &channels);

} // namespace

llvm::Expected<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::create(Mesh mesh, int rank,
                         llvm::function_ref<llvm::Error(NcclId &)> broadcastId,
                         llvm::ArrayRef<std::string> pointToPointAxes) {
  int world = mesh.worldSize();
  if (rank < 0 || rank >= world)
    return failure("rank " + llvm::Twine(rank) + " is outside mesh " +
                   mesh.str());
  if (mesh.axes().size() > 16)
    return failure("more than 16 mesh axes");
  for (const std::string &axis : pointToPointAxes)
    if (mesh.axisIndex(axis) < 0)
      return failure("point-to-point axis '" + axis + "' is not in mesh " +
                     mesh.str());
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0)
    return failure("no CUDA device");
  // One device per rank: the launcher's local rank picks it (ranks fill
  // each node's devices in order), unless this process has set one up.
  if (ops::initializedDevice() < 0)
    if (llvm::Error e =
            initialize(launcherLocalRank().value_or(rank) % devices))
      return std::move(e);
  auto impl = std::make_unique<Impl>();
  impl->mesh = std::move(mesh);
  impl->rank = rank;
  impl->compute = static_cast<cudaStream_t>(ops::stream());
  static_assert(sizeof(ncclUniqueId) == sizeof(NcclId));
  NcclId bytes{};
  if (rank == 0) {
    ncclUniqueId id;
    if (llvm::Error e = ncclCheck(ncclGetUniqueId(&id), "ncclGetUniqueId"))
      return std::move(e);
    std::memcpy(bytes.data(), &id, sizeof(id));
  }
  if (llvm::Error e = broadcastId(bytes))
    return std::move(e);
  ncclUniqueId id;
  std::memcpy(&id, bytes.data(), sizeof(id));
  if (llvm::Error e = ncclCheck(ncclCommInitRank(&impl->world, world, id, rank),
                                "ncclCommInitRank"))
    return std::move(e);
  // Every group of every subset of axes, in the same order on every rank:
  // color = the coordinates off the group's axes, key = the group position.
  const Mesh &m = impl->mesh;
  std::vector<int64_t> coords = m.coordinates(rank);
  unsigned numAxes = static_cast<unsigned>(m.axes().size());
  for (unsigned mask = 1; mask < (1u << numAxes); ++mask) {
    std::vector<std::string> axes;
    int color = 0;
    for (unsigned a = 0; a < numAxes; ++a) {
      if (mask & (1u << a))
        axes.push_back(m.axes()[a].name);
      else
        color = color * static_cast<int>(m.axes()[a].size) +
                static_cast<int>(coords[a]);
    }
    llvm::Expected<std::vector<int>> ranks = m.group(rank, axes);
    if (!ranks)
      return ranks.takeError();
    Impl::Group g;
    g.ranks = *ranks;
    g.position = static_cast<int>(
        std::find(g.ranks.begin(), g.ranks.end(), rank) - g.ranks.begin());
    if (llvm::Error e = ncclCheck(
            ncclCommSplit(impl->world, color, g.position, &g.comm, nullptr),
            "ncclCommSplit"))
      return std::move(e);
    llvm::Error e =
        cudaCheck(cudaStreamCreateWithFlags(&g.stream, cudaStreamNonBlocking),
                  "cudaStreamCreate");
    impl->groups[mask] = std::move(g); // freed with impl, also on error
    if (e)
      return std::move(e);
  }
  for (const std::string &axis : pointToPointAxes)
    if (llvm::Error e = createChannels(impl->world, m, rank, m.axisIndex(axis),
                                       impl->channels))
      return std::move(e);
  return std::unique_ptr<NcclCommunicator>(
      new NcclCommunicator(std::move(impl)));
}

namespace {

llvm::Error createChannels(
    ncclComm_t world, const Mesh &m, int rank, int axis,
    std::map<std::pair<int, int>, NcclCommunicator::Impl::Channel> &channels) {
  int64_t n = m.axes()[axis].size;
  if (n < 2)
    return llvm::Error::success();
  std::vector<int64_t> coords = m.coordinates(rank);
  auto rankAtPosition = [&](int64_t position) {
    std::vector<int64_t> c = coords;
    c[axis] = position;
    return m.rankAt(c);
  };
  // Colors name an edge within one split: its line of the axis (the rank at
  // position 0) and its sender's position.
  int64_t line = rankAtPosition(0);
  auto edgeClass = [&](int64_t sender) {
    return n % 2 && sender == n - 1 ? 2 : sender % 2;
  };
  int64_t me = coords[axis];
  for (int64_t step : {int64_t(1), int64_t(-1)}) {
    if (n == 2 && step == -1)
      continue; // the same two edges as step +1
    int64_t to = (me + step + n) % n, from = (me - step + n) % n;
    for (int64_t cls = 0; cls < 3; ++cls) {
      // Sending on this class's edge, receiving on it, or neither (the
      // classes keep a rank out of two edges of one class).
      bool sends = edgeClass(me) == cls, receives = edgeClass(from) == cls;
      int color = NCCL_SPLIT_NOCOLOR;
      if (sends)
        color = static_cast<int>(line * n + me);
      else if (receives)
        color = static_cast<int>(line * n + from);
      ncclComm_t comm = nullptr;
      if (llvm::Error e = ncclCheck(
              ncclCommSplit(world, color, sends ? 0 : 1, &comm, nullptr),
              "ncclCommSplit (point-to-point channel)"))
        return e;
      if (!sends && !receives)
        continue;
      NcclCommunicator::Impl::Channel channel{comm, nullptr};
      if (llvm::Error e = cudaCheck(
              cudaStreamCreateWithFlags(&channel.stream, cudaStreamNonBlocking),
              "cudaStreamCreate")) {
        ncclCommDestroy(comm);
        return e;
      }
      std::pair<int, int> edge =
          sends ? std::pair<int, int>(rank, rankAtPosition(to))
                : std::pair<int, int>(rankAtPosition(from), rank);
      channels[edge] = channel;
    }
  }
  return llvm::Error::success();
}

} // namespace

llvm::Expected<std::unique_ptr<NcclCommunicator>>
NcclCommunicator::createWithMpi(Mesh mesh,
                                llvm::ArrayRef<std::string> pointToPointAxes) {
  int initialized = 0, rank = 0, size = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return failure("MPI is not initialized");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != mesh.worldSize())
    return failure("MPI world of " + llvm::Twine(size) + " ranks, mesh " +
                   mesh.str() + " has " + llvm::Twine(mesh.worldSize()));
  return create(
      std::move(mesh), rank,
      [](NcclId &id) -> llvm::Error {
        if (MPI_Bcast(id.data(), static_cast<int>(id.size()), MPI_BYTE, 0,
                      MPI_COMM_WORLD) != MPI_SUCCESS)
          return failure("MPI_Bcast of the NCCL id failed");
        return llvm::Error::success();
      },
      pointToPointAxes);
}

int NcclCommunicator::rank() const { return impl_->rank; }
const Mesh &NcclCommunicator::mesh() const { return impl_->mesh; }

llvm::Expected<Request>
NcclCommunicator::allReduce(llvm::ArrayRef<std::string> axes,
                            const TensorRef &input, const TensorRef &output,
                            Reduction reduction) {
  auto g = impl_->group(axes);
  if (!g)
    return g.takeError();
  auto type = ncclType(input.dtype);
  if (!type)
    return type.takeError();
  if (input.numElements() != output.numElements() ||
      input.dtype != output.dtype)
    return failure("all_reduce: input and output differ");
  if (llvm::Error e = impl_->handOff((*g)->stream))
    return std::move(e);
  if (llvm::Error e = ncclCheck(
          ncclAllReduce(input.data, output.data, input.numElements(), *type,
                        ncclOp(reduction), (*g)->comm, (*g)->stream),
          "all_reduce"))
    return std::move(e);
  return impl_->finish({}, (*g)->comm, (*g)->stream);
}

llvm::Expected<Request>
NcclCommunicator::allGather(llvm::ArrayRef<std::string> axes,
                            const TensorRef &input, const TensorRef &output,
                            int64_t dim, int64_t block) {
  auto g = impl_->group(axes);
  if (!g)
    return g.takeError();
  auto type = ncclType(input.dtype);
  if (!type)
    return type.takeError();
  int64_t n = static_cast<int64_t>((*g)->ranks.size());
  if (dim < 0 || dim >= input.rank() || output.rank() != input.rank() ||
      output.shape[dim] != n * input.shape[dim] ||
      (block > 0 && (block % n || output.shape[dim] % block)))
    return failure("all_gather: input and output shapes do not fit a gather "
                   "of " +
                   llvm::Twine(n) + " along dim " + llvm::Twine(dim));
  // Input dim as [J, L]; the gathered buffer [n, A, J, L, C] is permuted to
  // the output [A, J, n, L, C].
  int64_t J = block > 0 ? output.shape[dim] / block : 1;
  int64_t L = block > 0 ? block / n : input.shape[dim];
  int64_t A = product(llvm::ArrayRef<int64_t>(input.shape).take_front(dim));
  int64_t C = product(llvm::ArrayRef<int64_t>(input.shape).drop_front(dim + 1));
  size_t elem = dtypeSize(input.dtype);
  Impl::Pending p;
  void *target = output.data;
  Staging staging;
  if (A * J != 1) {
    staging.ptr = ops::scratchAllocate(output.bytes());
    if (!staging.ptr)
      return failure("all_gather: out of device memory");
    target = staging.ptr;
    p.unpackFrom = staging.ptr;
    p.unpackTo = output.data;
    p.elemSize = elem;
    p.unpackShape = {n, A, J, L, C};
    p.unpackPerm = {1, 2, 0, 3, 4};
  }
  if (llvm::Error e = impl_->handOff((*g)->stream))
    return std::move(e);
  if (llvm::Error e =
          ncclCheck(ncclAllGather(input.data, target, input.numElements(),
                                  *type, (*g)->comm, (*g)->stream),
                    "all_gather"))
    return std::move(e);
  p.staging[0] = staging.release();
  return impl_->finish(std::move(p), (*g)->comm, (*g)->stream);
}

llvm::Expected<Request> NcclCommunicator::reduceScatter(
    llvm::ArrayRef<std::string> axes, const TensorRef &input,
    const TensorRef &output, int64_t dim, int64_t block, Reduction reduction) {
  auto g = impl_->group(axes);
  if (!g)
    return g.takeError();
  auto type = ncclType(input.dtype);
  if (!type)
    return type.takeError();
  int64_t n = static_cast<int64_t>((*g)->ranks.size());
  if (dim < 0 || dim >= input.rank() || output.rank() != input.rank() ||
      input.shape[dim] != n * output.shape[dim] ||
      (block > 0 && (block % n || input.shape[dim] % block)))
    return failure("reduce_scatter: input and output shapes do not fit a "
                   "scatter of " +
                   llvm::Twine(n) + " along dim " + llvm::Twine(dim));
  // The input [A, J, n, L, C] is packed to [n, A, J, L, C] for NCCL.
  int64_t J = block > 0 ? input.shape[dim] / block : 1;
  int64_t L = block > 0 ? block / n : output.shape[dim];
  int64_t A = product(llvm::ArrayRef<int64_t>(input.shape).take_front(dim));
  int64_t C = product(llvm::ArrayRef<int64_t>(input.shape).drop_front(dim + 1));
  const void *source = input.data;
  Staging staging;
  if (A * J != 1) {
    staging.ptr = ops::scratchAllocate(input.bytes());
    if (!staging.ptr)
      return failure("reduce_scatter: out of device memory");
    if (llvm::Error e =
            permuteOnDevice(input.data, staging.ptr, dtypeSize(input.dtype),
                            {A, J, n, L, C}, {2, 0, 1, 3, 4}))
      return std::move(e);
    source = staging.ptr;
  }
  if (llvm::Error e = impl_->handOff((*g)->stream))
    return std::move(e);
  if (llvm::Error e = ncclCheck(
          ncclReduceScatter(source, output.data, output.numElements(), *type,
                            ncclOp(reduction), (*g)->comm, (*g)->stream),
          "reduce_scatter"))
    return std::move(e);
  Impl::Pending p;
  p.staging[0] = staging.release();
  return impl_->finish(std::move(p), (*g)->comm, (*g)->stream);
}

llvm::Expected<Request>
NcclCommunicator::allToAll(llvm::ArrayRef<std::string> axes,
                           const TensorRef &input, const TensorRef &output,
                           int64_t splitDim, int64_t concatDim) {
  auto g = impl_->group(axes);
  if (!g)
    return g.takeError();
  auto type = ncclType(input.dtype);
  if (!type)
    return type.takeError();
  int64_t n = static_cast<int64_t>((*g)->ranks.size());
  int64_t rank = input.rank();
  if (splitDim < 0 || splitDim >= rank || concatDim < 0 || concatDim >= rank ||
      output.rank() != rank || input.shape[splitDim] % n ||
      input.numElements() != output.numElements())
    return failure("all_to_all: shapes do not fit a split of dim " +
                   llvm::Twine(splitDim) + " " + llvm::Twine(n) + " ways");
  llvm::SmallVector<int64_t, 6> part(input.shape.begin(), input.shape.end());
  part[splitDim] /= n;
  for (int64_t d = 0; d < rank; ++d)
    if (output.shape[d] != (d == concatDim ? n * part[d] : part[d]))
      return failure("all_to_all: output does not concatenate the parts "
                     "along dim " +
                     llvm::Twine(concatDim));
  size_t elem = dtypeSize(input.dtype);
  llvm::ArrayRef<int64_t> in(input.shape), partShape(part);
  int64_t As = product(in.take_front(splitDim)),
          Cs = product(in.drop_front(splitDim + 1)), Ps = part[splitDim];
  int64_t Ac = product(partShape.take_front(concatDim)),
          Cc = product(partShape.drop_front(concatDim + 1)),
          Pc = part[concatDim];
  Staging send, recv;
  send.ptr = ops::scratchAllocate(input.bytes());
  recv.ptr = ops::scratchAllocate(output.bytes());
  if (!send.ptr || !recv.ptr)
    return failure("all_to_all: out of device memory");
  // Parts contiguous by destination: [As, n, Ps, Cs] -> [n, As, Ps, Cs].
  if (llvm::Error e = permuteOnDevice(input.data, send.ptr, elem,
                                      {As, n, Ps, Cs}, {1, 0, 2, 3}))
    return std::move(e);
  if (llvm::Error e = impl_->handOff((*g)->stream))
    return std::move(e);
  size_t count = input.numElements() / n;
  ncclGroupStart();
  for (int64_t r = 0; r < n; ++r) {
    ncclSend(static_cast<char *>(send.ptr) + r * count * elem, count, *type,
             static_cast<int>(r), (*g)->comm, (*g)->stream);
    ncclRecv(static_cast<char *>(recv.ptr) + r * count * elem, count, *type,
             static_cast<int>(r), (*g)->comm, (*g)->stream);
  }
  if (llvm::Error e = ncclCheck(ncclGroupEnd(), "all_to_all"))
    return std::move(e);
  // Received [n, Ac, Pc, Cc] -> output [Ac, n, Pc, Cc] in wait().
  Impl::Pending p;
  p.unpackFrom = recv.ptr;
  p.unpackTo = output.data;
  p.elemSize = elem;
  p.unpackShape = {n, Ac, Pc, Cc};
  p.unpackPerm = {1, 0, 2, 3};
  p.staging[0] = send.release();
  p.staging[1] = recv.release();
  return impl_->finish(std::move(p), (*g)->comm, (*g)->stream);
}

llvm::Expected<Request> NcclCommunicator::send(llvm::StringRef axis,
                                               int64_t peerOffset,
                                               const TensorRef &input) {
  llvm::Expected<PeerRank> peer =
      resolvePeer(impl_->mesh, impl_->rank, axis, peerOffset, true);
  if (!peer)
    return peer.takeError();
  auto channel = impl_->channel(impl_->rank, peer->rank, axis);
  if (!channel)
    return channel.takeError();
  auto type = ncclType(input.dtype);
  if (!type)
    return type.takeError();
  if (llvm::Error e = impl_->handOff((*channel)->stream))
    return std::move(e);
  if (llvm::Error e =
          ncclCheck(ncclSend(input.data, input.numElements(), *type,
                             /*peer=*/1, (*channel)->comm, (*channel)->stream),
                    "send"))
    return std::move(e);
  return impl_->finish({}, (*channel)->comm, (*channel)->stream);
}

llvm::Expected<Request> NcclCommunicator::recv(llvm::StringRef axis,
                                               int64_t peerOffset,
                                               const TensorRef &output) {
  llvm::Expected<PeerRank> peer =
      resolvePeer(impl_->mesh, impl_->rank, axis, peerOffset, false);
  if (!peer)
    return peer.takeError();
  auto channel = impl_->channel(peer->rank, impl_->rank, axis);
  if (!channel)
    return channel.takeError();
  auto type = ncclType(output.dtype);
  if (!type)
    return type.takeError();
  // The stream waits for the compute stream: the buffer may still be read.
  if (llvm::Error e = impl_->handOff((*channel)->stream))
    return std::move(e);
  if (llvm::Error e =
          ncclCheck(ncclRecv(output.data, output.numElements(), *type,
                             /*peer=*/0, (*channel)->comm, (*channel)->stream),
                    "recv"))
    return std::move(e);
  return impl_->finish({}, (*channel)->comm, (*channel)->stream);
}

llvm::Error NcclCommunicator::wait(Request request) {
  auto it = impl_->pending.find(request);
  if (it == impl_->pending.end())
    return failure("wait on unknown request " + llvm::Twine(request));
  Impl::Pending p = std::move(it->second);
  impl_->pending.erase(it);
  llvm::Error e = cudaCheck(cudaStreamWaitEvent(impl_->compute, p.done, 0),
                            "cudaStreamWaitEvent");
  cudaEventDestroy(p.done);
  if (!e && p.unpackTo)
    e = permuteOnDevice(p.unpackFrom, p.unpackTo, p.elemSize, p.unpackShape,
                        p.unpackPerm);
  for (void *s : p.staging)
    ops::scratchRelease(s); // after the unpack, on the compute stream
  if (e)
    return e;
  // NCCL reports asynchronous failures (a peer gone) on the communicator
  // the operation ran on.
  ncclResult_t async = ncclSuccess;
  ncclCommGetAsyncError(p.comm ? p.comm : impl_->world, &async);
  return ncclCheck(async, "communicator");
}

} // namespace dtc::runtime::cuda
