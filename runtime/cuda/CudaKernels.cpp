//===- CudaKernels.cpp - KernelCall adapters of the CUDA backend ----------===//
//
// Checks each call's operands as the CPU kernel does (same messages where it
// matters), turns shapes into the flat sizes and strides the device
// functions take (runtime/cuda/CudaOps.h) and queues them. Compiled by the
// host compiler: LLVM and protobuf stay out of nvcc.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Attention.h"
#include "runtime/core/CollectiveKernels.h"
#include "runtime/core/Embedding.h"
#include "runtime/core/LossShards.h"
#include "runtime/core/Matmul.h"
#include "runtime/core/Moe.h"
#include "runtime/core/Normalization.h"
#include "runtime/core/Optimizer.h"
#include "runtime/core/Window.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaOps.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <nvtx3/nvToolsExt.h>

namespace dtc::runtime::cuda {

namespace ops = ::dtc::cuda;

namespace {

using llvm::ArrayRef;
using llvm::Error;
using llvm::Expected;
using llvm::SmallVector;
using llvm::Twine;

int code(DType dtype) { return static_cast<int>(dtype); }

Error cudaError(const std::string &failure) {
  if (failure.empty())
    return Error::success();
  return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                 "cuda: " + failure);
}

Error check(const KernelCall &call, const std::string &failure) {
  if (failure.empty())
    return Error::success();
  return call.error(failure);
}

/// A Layout over `shape` with up to three operands' strides, size-1 dims
/// dropped and contiguous runs merged; false past kMaxRank dims.
bool makeLayout(ArrayRef<int64_t> shape,
                ArrayRef<SmallVector<int64_t, 6>> strides, ops::Layout &out) {
  SmallVector<int64_t, 8> dims;
  SmallVector<SmallVector<int64_t, 8>, 3> st(strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    bool merge = !dims.empty();
    for (size_t o = 0; merge && o < strides.size(); ++o)
      merge = st[o].back() == strides[o][d] * shape[d];
    if (merge) {
      dims.back() *= shape[d];
      for (size_t o = 0; o < strides.size(); ++o)
        st[o].back() = strides[o][d];
      continue;
    }
    dims.push_back(shape[d]);
    for (size_t o = 0; o < strides.size(); ++o)
      st[o].push_back(strides[o][d]);
  }
  if (dims.empty()) {
    dims.push_back(1);
    for (size_t o = 0; o < strides.size(); ++o)
      st[o].push_back(0);
  }
  if (dims.size() > static_cast<size_t>(ops::kMaxRank))
    return false;
  out = ops::Layout();
  out.rank = static_cast<int>(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) {
    out.shape[d] = dims[d];
    for (size_t o = 0; o < strides.size(); ++o)
      out.strides[o][d] = st[o][d];
  }
  return true;
}

Error layoutError(const KernelCall &call, ArrayRef<int64_t> shape) {
  return call.error("the CUDA kernels take at most " + Twine(ops::kMaxRank) +
                    " non-contiguous dims, got " + shapeString(shape));
}

/// Stream-ordered device scratch, released at scope exit.
class Scratch {
public:
  explicit Scratch(size_t bytes) : ptr_(ops::scratchAllocate(bytes)) {}
  ~Scratch() { ops::scratchRelease(ptr_); }
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  void *get() const { return ptr_; }

private:
  void *ptr_;
};

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

template <ops::Unary Op> Error unaryKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (auto err = expectFloat(call, in, "input"))
    return err;
  if (in.dtype != out.dtype || in.numElements() != out.numElements())
    return call.error("output " + shapeString(out.shape) + " " +
                      dtypeName(out.dtype) + " does not match input " +
                      shapeString(in.shape) + " " + dtypeName(in.dtype));
  return check(call, ops::unary(Op, code(in.dtype), in.data, out.data,
                                in.numElements()));
}

Error geluKernel(const KernelCall &call) {
  if (call.flag("approximate_tanh"))
    return unaryKernel<ops::Unary::GeluTanh>(call);
  return unaryKernel<ops::Unary::GeluErf>(call);
}

Error castKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (in.numElements() != out.numElements())
    return call.error("output " + shapeString(out.shape) +
                      " does not match input " + shapeString(in.shape));
  if (dtypeSize(in.dtype) == 0 || dtypeSize(out.dtype) == 0)
    return call.error("unsupported dtype " + dtypeName(in.dtype) + " -> " +
                      dtypeName(out.dtype));
  return check(call, ops::cast(code(in.dtype), in.data, code(out.dtype),
                               out.data, in.numElements()));
}

/// The broadcast layout of `n` operands onto `out`.
Error broadcastLayout(const KernelCall &call, ArrayRef<const TensorRef *> in,
                      const TensorRef &out, ops::Layout &layout) {
  SmallVector<SmallVector<int64_t, 6>, 3> strides(in.size());
  for (size_t i = 0; i < in.size(); ++i)
    if (!broadcastStrides(in[i]->shape, out.shape, strides[i]))
      return call.error(
          "operand " + Twine(i) + " of shape " + shapeString(in[i]->shape) +
          " does not broadcast to the result " + shapeString(out.shape));
  if (!makeLayout(out.shape, strides, layout))
    return layoutError(call, out.shape);
  return Error::success();
}

template <ops::Binary Op> Error binaryKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return err;
  const TensorRef &a = call.input(0), &b = call.input(1), &out = call.output(0);
  ops::Layout layout;
  if (auto err = broadcastLayout(call, {&a, &b}, out, layout))
    return err;
  if (out.numElements() == 0)
    return Error::success();
  if (dtypeSize(out.dtype) == 0 || dtypeSize(a.dtype) == 0 ||
      dtypeSize(b.dtype) == 0)
    return call.error("unsupported dtype " + dtypeName(out.dtype));
  return check(call, ops::binary(Op, code(out.dtype), a.data, code(a.dtype),
                                 b.data, code(b.dtype), out.data, layout));
}

Error compareKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return err;
  const TensorRef &a = call.input(0), &b = call.input(1), &out = call.output(0);
  llvm::StringRef name = call.str("predicate");
  ops::Predicate pred;
  if (name == "eq")
    pred = ops::Predicate::Eq;
  else if (name == "ne")
    pred = ops::Predicate::Ne;
  else if (name == "lt")
    pred = ops::Predicate::Lt;
  else if (name == "le")
    pred = ops::Predicate::Le;
  else if (name == "gt")
    pred = ops::Predicate::Gt;
  else if (name == "ge")
    pred = ops::Predicate::Ge;
  else
    return call.error("unknown predicate '" + name + "'");
  if (a.dtype != b.dtype)
    return call.error("operand dtypes " + dtypeName(a.dtype) + " and " +
                      dtypeName(b.dtype) + " differ");
  if (out.dtype != DType::BOOL)
    return call.error("result must be i1, got " + dtypeName(out.dtype));
  ops::Layout layout;
  if (auto err = broadcastLayout(call, {&a, &b}, out, layout))
    return err;
  if (out.numElements() == 0)
    return Error::success();
  return check(call, ops::compare(pred, code(a.dtype), a.data, b.data,
                                  out.as<uint8_t>(), layout));
}

Error selectKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 3, 1))
    return err;
  const TensorRef &cond = call.input(0), &t = call.input(1), &f = call.input(2),
                  &out = call.output(0);
  if (cond.dtype != DType::BOOL)
    return call.error("condition must be i1, got " + dtypeName(cond.dtype));
  if (t.dtype != out.dtype || f.dtype != out.dtype)
    return call.error("value dtypes " + dtypeName(t.dtype) + ", " +
                      dtypeName(f.dtype) + " differ from the result's " +
                      dtypeName(out.dtype));
  ops::Layout layout;
  if (auto err = broadcastLayout(call, {&t, &f, &cond}, out, layout))
    return err;
  if (out.numElements() == 0)
    return Error::success();
  return check(call,
               ops::select(cond.as<uint8_t>(), t.data, f.data, out.data,
                           static_cast<int>(dtypeSize(out.dtype)), layout));
}

template <ops::ActivationGrad Op>
Error activationGradKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return err;
  const TensorRef &x = call.input(0), &dy = call.input(1),
                  &out = call.output(0);
  if (auto err = expectFloat(call, x, "input"))
    return err;
  if (auto err = expectFloat(call, dy, "grad"))
    return err;
  if (auto err = expectFloat(call, out, "result"))
    return err;
  if (x.shape != dy.shape || x.shape != out.shape)
    return call.error("shapes " + shapeString(x.shape) + ", " +
                      shapeString(dy.shape) + " and " + shapeString(out.shape) +
                      " differ");
  return check(call, ops::activationGrad(
                         Op, code(x.dtype), x.data, code(dy.dtype), dy.data,
                         code(out.dtype), out.data, x.numElements()));
}

Error geluGradKernel(const KernelCall &call) {
  if (call.flag("approximate_tanh"))
    return activationGradKernel<ops::ActivationGrad::GeluTanh>(call);
  return activationGradKernel<ops::ActivationGrad::GeluErf>(call);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

Error reshapeKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (in.dtype != out.dtype || in.numElements() != out.numElements())
    return call.error("cannot reshape " + shapeString(in.shape) + " " +
                      dtypeName(in.dtype) + " to " + shapeString(out.shape) +
                      " " + dtypeName(out.dtype));
  return check(call, ops::copy(out.data, in.data, in.bytes(), 2));
}

Error transposeKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  ArrayRef<int64_t> perm = call.ints("permutation");
  if (static_cast<int64_t>(perm.size()) != in.rank() ||
      out.rank() != in.rank() || in.dtype != out.dtype)
    return call.error("permutation of " + Twine(perm.size()) +
                      " dims does not match " + shapeString(in.shape) + " -> " +
                      shapeString(out.shape));
  SmallVector<int64_t, 6> inStrides = stridesOf(in.shape);
  SmallVector<SmallVector<int64_t, 6>, 2> strides(2);
  SmallVector<bool, 6> seen(in.rank(), false);
  for (int64_t d = 0; d < in.rank(); ++d) {
    int64_t p = perm[d];
    if (p < 0 || p >= in.rank() || seen[p] || out.shape[d] != in.shape[p])
      return call.error("permutation does not map " + shapeString(in.shape) +
                        " to " + shapeString(out.shape));
    seen[p] = true;
    strides[0].push_back(inStrides[p]);
  }
  if (out.numElements() == 0)
    return Error::success();
  strides[1] = stridesOf(out.shape);
  ops::Layout layout;
  if (!makeLayout(out.shape, strides, layout))
    return layoutError(call, out.shape);
  return check(call,
               ops::gather(in.data, out.data,
                           static_cast<int>(dtypeSize(in.dtype)), layout));
}

Error concatKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &out = call.output(0);
  int64_t axis = call.i64("axis", 0);
  if (axis < 0)
    axis += out.rank();
  if (axis < 0 || axis >= out.rank())
    return call.error("axis out of range for " + shapeString(out.shape));
  size_t elem = dtypeSize(out.dtype);
  int64_t outer = numElements(ArrayRef<int64_t>(out.shape).take_front(axis));
  int64_t innerAfter =
      numElements(ArrayRef<int64_t>(out.shape).drop_front(axis + 1));
  int64_t sum = 0;
  for (size_t i = 0; i < call.numInputs(); ++i) {
    const TensorRef &in = call.input(i);
    bool ok = in.rank() == out.rank() && in.dtype == out.dtype;
    for (int64_t d = 0; ok && d < out.rank(); ++d)
      ok = d == axis || in.shape[d] == out.shape[d];
    if (!ok)
      return call.error("input " + Twine(i) + " " + shapeString(in.shape) +
                        " " + dtypeName(in.dtype) +
                        " does not fit the result " + shapeString(out.shape));
    sum += in.shape[axis];
  }
  if (sum != out.shape[axis])
    return call.error("inputs along axis sum to " + Twine(sum) +
                      ", result has " + Twine(out.shape[axis]));
  size_t outRow = out.shape[axis] * innerAfter * elem, offset = 0;
  for (size_t i = 0; i < call.numInputs(); ++i) {
    const TensorRef &in = call.input(i);
    size_t chunk = in.shape[axis] * innerAfter * elem;
    if (auto err = check(
            call, ops::copy2d(in.data, out.data, chunk, outRow, offset, outer)))
      return err;
    offset += chunk;
  }
  return Error::success();
}

Error sliceKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  ArrayRef<int64_t> starts = call.ints("starts"), limits = call.ints("limits"),
                    steps = call.ints("strides");
  int64_t rank = in.rank();
  if (static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(limits.size()) != rank ||
      static_cast<int64_t>(steps.size()) != rank || out.rank() != rank ||
      in.dtype != out.dtype)
    return call.error("starts, limits and strides need " + Twine(rank) +
                      " entries each");
  SmallVector<int64_t, 6> inStrides = stridesOf(in.shape);
  SmallVector<SmallVector<int64_t, 6>, 2> strides(2);
  int64_t base = 0;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t expected = steps[d] > 0 && starts[d] >= 0 &&
                               starts[d] <= limits[d] &&
                               limits[d] <= in.shape[d]
                           ? (limits[d] - starts[d] + steps[d] - 1) / steps[d]
                           : -1;
    if (expected != out.shape[d])
      return call.error("slice of dim " + Twine(d) + " [" + Twine(starts[d]) +
                        ", " + Twine(limits[d]) + ") step " + Twine(steps[d]) +
                        " of " + shapeString(in.shape) + " does not give " +
                        shapeString(out.shape));
    base += starts[d] * inStrides[d];
    strides[0].push_back(inStrides[d] * steps[d]);
  }
  if (out.numElements() == 0)
    return Error::success();
  strides[1] = stridesOf(out.shape);
  ops::Layout layout;
  if (!makeLayout(out.shape, strides, layout))
    return layoutError(call, out.shape);
  size_t elem = dtypeSize(in.dtype);
  return check(call, ops::gather(in.as<char>() + base * elem, out.data,
                                 static_cast<int>(elem), layout));
}

Error sliceGradKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &dy = call.input(0), &out = call.output(0);
  int64_t rank = dy.rank();
  ArrayRef<int64_t> starts = call.ints("starts"), steps = call.ints("strides");
  if (dy.dtype != out.dtype)
    return call.error("grad dtype " + dtypeName(dy.dtype) +
                      " differs from the result's " + dtypeName(out.dtype));
  if (out.rank() != rank || static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(steps.size()) != rank)
    return call.error("result " + shapeString(out.shape) +
                      ", starts and strides need the grad's rank " +
                      Twine(rank));
  for (int64_t i = 0; i < rank; ++i) {
    int64_t extent = dy.shape[i];
    if (steps[i] < 1 || starts[i] < 0 ||
        (extent && starts[i] + (extent - 1) * steps[i] >= out.shape[i]))
      return call.error("grad " + shapeString(dy.shape) + " from starts " +
                        shapeString(starts) + " by strides " +
                        shapeString(steps) + " does not fit in " +
                        shapeString(out.shape));
  }
  if (auto err = check(call, ops::memsetZero(out.data, out.bytes())))
    return err;
  if (dy.numElements() == 0)
    return Error::success();
  SmallVector<SmallVector<int64_t, 6>, 2> strides(2);
  strides[0] = stridesOf(out.shape);
  int64_t base = 0;
  for (int64_t i = 0; i < rank; ++i) {
    base += starts[i] * strides[0][i];
    strides[0][i] *= steps[i];
  }
  strides[1] = stridesOf(dy.shape);
  ops::Layout layout;
  if (!makeLayout(dy.shape, strides, layout))
    return layoutError(call, dy.shape);
  size_t elem = dtypeSize(out.dtype);
  return check(call, ops::scatter(dy.data, out.as<char>() + base * elem, 0,
                                  static_cast<int>(elem), layout));
}

/// The device description of an embedding lookup (whole or one shard).
ops::Lookup deviceLookup(const EmbeddingRows &e) {
  ops::Lookup l;
  l.count = e.count;
  l.dim = e.dim;
  l.rows = e.rows;
  l.firstId = e.firstId();
  l.wholeRows = e.wholeRows();
  l.ids64 = e.ids64;
  return l;
}

/// dtc.embedding and dtc.embedding_shard.
Error embeddingKernel(const KernelCall &call) {
  Expected<EmbeddingRows> e = readEmbedding(call);
  if (!e)
    return e.takeError();
  const TensorRef &table = call.input(0);
  return check(call, ops::embedding(deviceLookup(*e), table.data,
                                    static_cast<int>(dtypeSize(table.dtype)),
                                    call.input(1).data, call.output(0).data));
}

/// dtc.embedding_grad and dtc.embedding_shard_grad.
Error embeddingGradKernel(const KernelCall &call) {
  Expected<EmbeddingRows> e = readEmbeddingGrad(call);
  if (!e)
    return e.takeError();
  const TensorRef &dy = call.input(0), &out = call.output(0);
  return check(call, ops::embeddingGrad(deviceLookup(*e), dy.data,
                                        code(dy.dtype), call.input(1).data,
                                        out.data, code(out.dtype)));
}

/// This rank's part of a replicated tensor (runtime/cpu/Collective.cpp):
/// the group of `mesh_axes` splits `dim` (interleaved by `block`).
Error shardSliceKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  Expected<GroupPlace> place = groupPlaceOf(call);
  if (!place)
    return place.takeError();
  int64_t size = place->size, position = place->position;
  int64_t dim = call.i64("dim");
  Expected<SplitLayout> layout = SplitLayout::get(in.shape, dtypeSize(in.dtype),
                                                  dim, call.i64("block"), size);
  if (!layout)
    return call.error(llvm::toString(layout.takeError()));
  if (in.dtype != out.dtype || out.shape != partShape(in.shape, dim, size))
    return call.error(
        "expected a " + shapeString(partShape(in.shape, dim, size)) + " " +
        dtypeName(in.dtype) + " result for part " + Twine(position) + " of " +
        Twine(size) + " of " + shapeString(in.shape) + ", got " +
        shapeString(out.shape) + " " + dtypeName(out.dtype));
  // The whole is [outer * blocks][parts][run]: one pitched copy.
  size_t run = static_cast<size_t>(layout->runBytes);
  return check(call, ops::copyPitched(in.as<char>() + position * run,
                                      run * layout->parts, out.data, run, run,
                                      layout->outer * layout->blocks));
}

//===----------------------------------------------------------------------===//
// Reductions, norms, losses
//===----------------------------------------------------------------------===//

template <ops::Reduce Kind> Error reduceKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  SmallVector<bool, 6> reduced(in.rank(), false);
  int64_t count = 1;
  for (int64_t dim : call.ints("dims")) {
    int64_t d = dim < 0 ? dim + in.rank() : dim;
    if (d < 0 || d >= in.rank())
      return call.error("dim " + Twine(dim) + " out of range for " +
                        shapeString(in.shape));
    if (!reduced[d])
      count *= in.shape[d];
    reduced[d] = true;
  }
  if (in.dtype != out.dtype || out.numElements() * count != in.numElements())
    return call.error("result " + shapeString(out.shape) + " " +
                      dtypeName(out.dtype) + " does not match reducing " +
                      shapeString(in.shape) + " " + dtypeName(in.dtype));
  if (in.dtype == DType::BOOL || dtypeSize(in.dtype) == 0)
    return call.error("unsupported dtype " + dtypeName(in.dtype));
  if (out.numElements() == 0)
    return Error::success();
  // Groups of adjacent dims with the same flag (size-1 dims dropped).
  SmallVector<int64_t, 6> sizes;
  SmallVector<bool, 6> flags;
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (in.shape[d] == 1)
      continue;
    if (!flags.empty() && flags.back() == reduced[d])
      sizes.back() *= in.shape[d];
    else {
      sizes.push_back(in.shape[d]);
      flags.push_back(reduced[d]);
    }
  }
  if (llvm::count(flags, true) <= 1) {
    int64_t outer = 1, inner = 1;
    bool seen = false;
    for (size_t g = 0; g < sizes.size(); ++g) {
      if (flags[g])
        seen = true;
      else
        (seen ? inner : outer) *= sizes[g];
    }
    return check(call, ops::reduce(Kind, code(in.dtype), in.data, out.data,
                                   outer, count, inner));
  }
  // Several reduced groups: move them last, then reduce rows.
  SmallVector<int64_t, 6> perm, permuted, groupStrides = stridesOf(sizes);
  for (int pass = 0; pass < 2; ++pass)
    for (size_t g = 0; g < sizes.size(); ++g)
      if (flags[g] == (pass == 1)) {
        perm.push_back(static_cast<int64_t>(g));
        permuted.push_back(sizes[g]);
      }
  SmallVector<SmallVector<int64_t, 6>, 2> strides(2);
  for (int64_t g : perm)
    strides[0].push_back(groupStrides[g]);
  strides[1] = stridesOf(permuted);
  ops::Layout layout;
  if (!makeLayout(permuted, strides, layout))
    return layoutError(call, in.shape);
  Scratch moved(in.bytes());
  if (!moved.get())
    return call.error("out of device memory");
  if (auto err = check(call, ops::gather(in.data, moved.get(),
                                         static_cast<int>(dtypeSize(in.dtype)),
                                         layout)))
    return err;
  return check(call, ops::reduce(Kind, code(in.dtype), moved.get(), out.data,
                                 out.numElements(), count, 1));
}

Error softmaxKernel(const KernelCall &call) {
  Expected<NormalizedRows> rows = readSoftmax(call);
  if (!rows)
    return rows.takeError();
  const TensorRef &in = call.input(0), &out = call.output(0);
  return check(call, ops::softmax(code(in.dtype), in.data, out.data,
                                  rows->outer, rows->size, rows->inner));
}

Error softmaxGradKernel(const KernelCall &call) {
  Expected<NormalizedRows> rows = readSoftmaxGrad(call);
  if (!rows)
    return rows.takeError();
  const TensorRef &y = call.input(0), &dy = call.input(1),
                  &out = call.output(0);
  return check(call, ops::softmaxGrad(code(y.dtype), y.data, code(dy.dtype),
                                      dy.data, code(out.dtype), out.data,
                                      rows->outer, rows->size, rows->inner));
}

Error normKernel(const KernelCall &call, bool rms) {
  Expected<NormalizedRows> rows = readNorm(call, rms);
  if (!rows)
    return rows.takeError();
  const TensorRef &in = call.input(0), &weight = call.input(1),
                  &out = call.output(0);
  const TensorRef *bias = rows->bias ? &call.input(2) : nullptr;
  if (in.numElements() == 0)
    return Error::success();
  return check(call,
               ops::norm(rms, code(in.dtype), in.data, code(weight.dtype),
                         weight.data, bias ? code(bias->dtype) : 0,
                         bias ? bias->data : nullptr, code(out.dtype), out.data,
                         rows->outer, rows->size, rows->epsilon));
}

Error layerNormKernel(const KernelCall &call) {
  return normKernel(call, false);
}
Error rmsNormKernel(const KernelCall &call) { return normKernel(call, true); }

Error normGradKernel(const KernelCall &call, bool rms) {
  Expected<NormalizedRows> shape = readNormGrad(call, rms);
  if (!shape)
    return shape.takeError();
  const TensorRef &x = call.input(0), &w = call.input(1), &dy = call.input(2);
  int64_t n = shape->size, rows = shape->outer;
  const TensorRef &dx = call.output(0), &dw = call.output(1);
  const TensorRef *db = rms ? nullptr : &call.output(2);
  return check(call,
               ops::normGrad(rms, code(x.dtype), x.data, code(w.dtype), w.data,
                             code(dy.dtype), dy.data, code(dx.dtype), dx.data,
                             code(dw.dtype), dw.data, db ? code(db->dtype) : 0,
                             db ? db->data : nullptr, rows, n, shape->epsilon));
}

Error layerNormGradKernel(const KernelCall &call) {
  return normGradKernel(call, false);
}
Error rmsNormGradKernel(const KernelCall &call) {
  return normGradKernel(call, true);
}

Error crossEntropyKernel(const KernelCall &call) {
  Expected<LossShards> shape = readCrossEntropy(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &logits = call.input(0), &labels = call.input(1),
                  &out = call.output(0);
  return check(call, ops::crossEntropy(code(logits.dtype), logits.data,
                                       labels.data, labels.dtype == DType::I64,
                                       code(out.dtype), out.data, shape->rows,
                                       shape->vocab, shape->ignoreIndex));
}

Error crossEntropyGradKernel(const KernelCall &call) {
  Expected<LossShards> shape = readCrossEntropyGrad(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &logits = call.input(0), &labels = call.input(1),
                  &gradLoss = call.input(2), &out = call.output(0);
  return check(call, ops::crossEntropyGrad(
                         code(logits.dtype), logits.data, labels.data,
                         labels.dtype == DType::I64, code(gradLoss.dtype),
                         gradLoss.data, code(out.dtype), out.data, shape->rows,
                         shape->vocab, shape->ignoreIndex));
}

/// The device description of a vocabulary-parallel loss op.
ops::LossShard deviceLossShard(const LossShards &s) {
  ops::LossShard d;
  d.rows = s.rows;
  d.vocab = s.vocab;
  d.shards = s.shards;
  d.firstId = s.firstId();
  d.wholeVocab = s.wholeVocab();
  d.ignore = s.ignoreIndex;
  return d;
}

Error crossEntropyStatsKernel(const KernelCall &call) {
  Expected<LossShards> s = readCrossEntropyStats(call);
  if (!s)
    return s.takeError();
  const TensorRef &logits = call.input(0), &labels = call.input(1);
  return check(call, ops::crossEntropyStats(
                         deviceLossShard(*s), code(logits.dtype), logits.data,
                         labels.data, labels.dtype == DType::I64,
                         call.output(0).as<float>()));
}

Error crossEntropyFromStatsKernel(const KernelCall &call) {
  Expected<LossShards> s = readCrossEntropyFromStats(call);
  if (!s)
    return s.takeError();
  const TensorRef &labels = call.input(1), &out = call.output(0);
  return check(call,
               ops::crossEntropyFromStats(
                   deviceLossShard(*s), call.input(0).as<float>(), labels.data,
                   labels.dtype == DType::I64, code(out.dtype), out.data));
}

Error crossEntropyShardGradKernel(const KernelCall &call) {
  Expected<LossShards> s = readCrossEntropyShardGrad(call);
  if (!s)
    return s.takeError();
  const TensorRef &logits = call.input(0), &labels = call.input(1),
                  &gradLoss = call.input(3), &out = call.output(0);
  return check(call, ops::crossEntropyShardGrad(
                         deviceLossShard(*s), code(logits.dtype), logits.data,
                         labels.data, labels.dtype == DType::I64,
                         call.input(2).as<float>(), code(gradLoss.dtype),
                         gradLoss.data, code(out.dtype), out.data));
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// The CUDA kernels' description of checked attention operands (head dims
/// at most kMaxHeadDim).
Expected<ops::AttentionShape> toAttentionShape(const KernelCall &call,
                                               Expected<AttentionOperands> a) {
  if (!a)
    return a.takeError();
  if (a->headDim > ops::kMaxHeadDim || a->valueDim > ops::kMaxHeadDim)
    return call.error("head dims above " + Twine(ops::kMaxHeadDim) +
                      " are not supported by the CUDA kernel");
  ops::AttentionShape s;
  s.batch = a->batch;
  s.heads = a->heads;
  s.groups = a->groups;
  s.s = a->queries;
  s.t = a->keys;
  s.d = a->headDim;
  s.e = a->valueDim;
  s.scale = static_cast<float>(a->scale);
  s.causal = a->causal;
  return s;
}

Expected<ops::AttentionShape> attentionShape(const KernelCall &call) {
  return toAttentionShape(call, readAttentionInputs(call));
}

Error attentionKernel(const KernelCall &call) {
  auto shape = toAttentionShape(call, readAttention(call));
  if (!shape)
    return shape.takeError();
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2),
                  &out = call.output(0);
  return check(call, ops::attention(*shape, code(q.dtype), q.data,
                                    code(k.dtype), k.data, code(v.dtype),
                                    v.data, code(out.dtype), out.data));
}

Error attentionGradKernel(const KernelCall &call) {
  auto shape = toAttentionShape(call, readAttentionGrad(call));
  if (!shape)
    return shape.takeError();
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2),
                  &dy = call.input(3);
  const TensorRef &dq = call.output(0), &dk = call.output(1),
                  &dv = call.output(2);
  return check(call, ops::attentionGrad(*shape, code(q.dtype), q.data,
                                        code(k.dtype), k.data, code(v.dtype),
                                        v.data, code(dy.dtype), dy.data,
                                        code(dq.dtype), dq.data, code(dk.dtype),
                                        dk.data, code(dv.dtype), dv.data));
}

//===----------------------------------------------------------------------===//
// Ring attention (runtime/cpu/RingAttention.cpp)
//===----------------------------------------------------------------------===//

/// The global positions of this rank's query chunk c (its place in the group
/// of `mesh_axes`, of size n) and of the key chunk it holds after `kv_shift`
/// hops, (c - kv_shift) mod n: chunk k is rows [k * len, (k + 1) * len), or
/// with `zigzag` the halves k and 2n - 1 - k. No communicator: a group of
/// one.
Error ringPositions(const KernelCall &call, ops::AttentionShape &shape) {
  Expected<GroupPlace> place = groupPlaceOf(call);
  if (!place)
    return place.takeError();
  int64_t n = place->size, c = place->position;
  int64_t shift = call.i64("kv_shift");
  if (shift < 0 || shift >= n)
    return call.error(
        "kv_shift " + Twine(shift) + " is outside [0, " + Twine(n) +
        "), the size of the group of mesh axes [" +
        llvm::join(call.strings("mesh_axes"), ",") + "]" +
        (place->hasCommunicator
             ? ""
             : "; there is no communicator, run the program with `dtc run`"));
  int64_t k = ((c - shift) % n + n) % n;
  auto chunkAt = [&](int64_t chunk, int64_t rows) {
    ops::RowPositions at;
    if (call.flag("zigzag")) {
      at.half = rows / 2;
      at.start0 = chunk * at.half;
      at.start1 = (2 * n - 1 - chunk) * at.half;
    } else {
      at.start0 = chunk * rows;
    }
    return at;
  };
  if (call.flag("zigzag") && (shape.s % 2 || shape.t % 2))
    return call.error("zigzag chunks are two halves: the query and key rows "
                      "must be even, got " +
                      Twine(shape.s) + " and " + Twine(shape.t));
  shape.queryAt = chunkAt(c, shape.s);
  shape.keyAt = chunkAt(k, shape.t);
  return Error::success();
}

Error attentionBlockKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 3, 2))
    return err;
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2),
                  &out = call.output(0), &lse = call.output(1);
  auto shape = attentionShape(call);
  if (!shape)
    return shape.takeError();
  for (auto [t, what] : {std::pair{&out, "output"}, std::pair{&lse, "lse"}})
    if (auto err = expectFloat(call, *t, what))
      return err;
  if (auto err = expectShape(call, out,
                             {shape->batch, shape->heads, shape->s, shape->e},
                             "output"))
    return err;
  if (auto err =
          expectShape(call, lse, {shape->batch, shape->heads, shape->s}, "lse"))
    return err;
  if (auto err = ringPositions(call, *shape))
    return err;
  return check(call, ops::attentionBlock(*shape, code(q.dtype), q.data,
                                         code(k.dtype), k.data, code(v.dtype),
                                         v.data, code(out.dtype), out.data,
                                         code(lse.dtype), lse.data));
}

Error attentionMergeKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 4, 2))
    return err;
  const TensorRef &outA = call.input(0), &lseA = call.input(1),
                  &outB = call.input(2), &lseB = call.input(3),
                  &out = call.output(0), &lse = call.output(1);
  for (auto [t, what] :
       {std::pair{&outA, "output_a"}, std::pair{&lseA, "lse_a"},
        std::pair{&outB, "output_b"}, std::pair{&lseB, "lse_b"},
        std::pair{&out, "output"}, std::pair{&lse, "lse"}})
    if (auto err = expectFloat(call, *t, what))
      return err;
  if (outA.rank() < 1)
    return call.error("output_a must have rank at least 1");
  ArrayRef<int64_t> rowShape = ArrayRef<int64_t>(outA.shape).drop_back();
  for (auto [t, what] :
       {std::pair{&outB, "output_b"}, std::pair{&out, "output"}})
    if (auto err = expectShape(call, *t, outA.shape, what))
      return err;
  for (auto [t, what] : {std::pair{&lseA, "lse_a"}, std::pair{&lseB, "lse_b"},
                         std::pair{&lse, "lse"}})
    if (auto err = expectShape(call, *t, rowShape, what))
      return err;
  int64_t width = outA.shape.back();
  int64_t rows = width ? outA.numElements() / width : lseA.numElements();
  return check(call, ops::attentionMerge(
                         rows, width, code(outA.dtype), outA.data,
                         code(lseA.dtype), lseA.data, code(outB.dtype),
                         outB.data, code(lseB.dtype), lseB.data,
                         code(out.dtype), out.data, code(lse.dtype), lse.data));
}

Error attentionBlockGradKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 6, 3))
    return err;
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2),
                  &o = call.input(3), &lse = call.input(4), &dy = call.input(5);
  auto shape = attentionShape(call);
  if (!shape)
    return shape.takeError();
  for (auto [t, what] : {std::pair{&o, "output"}, std::pair{&lse, "lse"},
                         std::pair{&dy, "grad"}})
    if (auto err = expectFloat(call, *t, what))
      return err;
  SmallVector<int64_t, 4> outShape = {shape->batch, shape->heads, shape->s,
                                      shape->e};
  if (auto err = expectShape(call, o, outShape, "output"))
    return err;
  if (auto err = expectShape(call, lse, ArrayRef<int64_t>(outShape).drop_back(),
                             "lse"))
    return err;
  if (auto err = expectShape(call, dy, outShape, "grad"))
    return err;
  const char *names[] = {"query_grad", "key_grad", "value_grad"};
  for (size_t i = 0; i < 3; ++i) {
    if (auto err = expectFloat(call, call.output(i), names[i]))
      return err;
    if (auto err =
            expectShape(call, call.output(i), call.input(i).shape, names[i]))
      return err;
  }
  if (auto err = ringPositions(call, *shape))
    return err;
  const TensorRef &dq = call.output(0), &dk = call.output(1),
                  &dv = call.output(2);
  return check(call, ops::attentionBlockGrad(
                         *shape, code(q.dtype), q.data, code(k.dtype), k.data,
                         code(v.dtype), v.data, code(o.dtype), o.data,
                         code(lse.dtype), lse.data, code(dy.dtype), dy.data,
                         code(dq.dtype), dq.data, code(dk.dtype), dk.data,
                         code(dv.dtype), dv.data));
}

Error zigzagOrderKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (auto err = expectShape(call, out, in.shape, "output"))
    return err;
  if (out.dtype != in.dtype)
    return call.error("output " + dtypeName(out.dtype) +
                      " does not match input " + dtypeName(in.dtype));
  int64_t dim = call.i64("dim", -1), parts = call.i64("parts");
  if (dim < 0 || dim >= in.rank())
    return call.error("dim " + Twine(dim) + " is outside [0, " +
                      Twine(in.rank()) + ")");
  if (parts < 1 || in.shape[dim] % (2 * parts))
    return call.error("dimension " + Twine(dim) + " of " +
                      shapeString(in.shape) + " does not split into 2 x " +
                      Twine(parts) + " equal pieces");
  if (in.numElements() == 0)
    return Error::success();
  int64_t outer = numElements(ArrayRef<int64_t>(in.shape).take_front(dim));
  // Within one outer index a piece is contiguous.
  size_t piece = in.bytes() / (outer * 2 * parts);
  return check(call, ops::zigzagOrder(in.data, out.data, piece, outer, parts,
                                      call.flag("inverse")));
}

//===----------------------------------------------------------------------===//
// Mixture of experts (runtime/cpu/Moe.cpp)
//===----------------------------------------------------------------------===//

/// The device form of the routing runtime/core/Moe.cpp checked.
ops::MoeRoute deviceRoute(const MoeRouting &r) {
  return ops::MoeRoute{r.batch,    r.positions, r.experts,  r.topK,
                       r.capacity, r.sigmoid,   r.normalize};
}

Error moeRouteKernel(const KernelCall &call) {
  Expected<MoeRouting> routing = readMoeRoute(call);
  if (!routing)
    return routing.takeError();
  const TensorRef &logits = call.input(0), &gates = call.output(0),
                  &slots = call.output(1), &aux = call.output(2);
  ops::MoeRoute r = deviceRoute(*routing);
  // dtc run's routing figures (not of a recomputed route): [b, E + 1]
  // doubles read back after the kernels.
  ExecutionContext *context = call.context();
  bool collect = context && context->moeRouting && call.has("layer") &&
                 !call.flag("recomputed");
  int64_t e = r.experts;
  Scratch stats(collect ? r.batch * (e + 1) * sizeof(double) : 0);
  if (collect && !stats.get())
    return call.error("out of device memory");
  if (auto err = check(
          call, ops::moeRoute(
                    r, code(logits.dtype), logits.data, code(gates.dtype),
                    gates.data, slots.as<int64_t>(), code(aux.dtype), aux.data,
                    collect ? static_cast<double *>(stats.get()) : nullptr)))
    return err;
  if (!collect)
    return Error::success();
  std::vector<double> host(r.batch * (e + 1));
  if (auto err = check(call, ops::copy(host.data(), stats.get(),
                                       host.size() * sizeof(double), 1)))
    return err;
  MoeRoutingStats::Layer &layer =
      context->moeRouting->layers[call.i64("layer")];
  layer.expertChoices.resize(e, 0.0);
  for (int64_t b = 0; b < r.batch; ++b) {
    const double *row = host.data() + b * (e + 1);
    for (int64_t x = 0; x < e; ++x) {
      layer.expertChoices[x] += row[x];
      layer.dropped += std::max(0.0, row[x] - double(r.capacity));
    }
    layer.auxSum += row[e];
    layer.sequences += 1;
  }
  return Error::success();
}

Error moeRouteGradKernel(const KernelCall &call) {
  Expected<MoeRouting> routing = readMoeRouteGrad(call);
  if (!routing)
    return routing.takeError();
  const TensorRef &logits = call.input(0), &gatesGrad = call.input(1),
                  &auxGrad = call.input(2), &out = call.output(0);
  ops::MoeRoute r = deviceRoute(*routing);
  return check(call, ops::moeRouteGrad(r, code(logits.dtype), logits.data,
                                       code(gatesGrad.dtype), gatesGrad.data,
                                       code(auxGrad.dtype), auxGrad.data,
                                       code(out.dtype), out.data));
}

/// The device form of slots runtime/core/Moe.cpp checked (their values are
/// checked on the device).
ops::MoeSlots deviceSlots(const MoeSlots &s, const TensorRef &slots) {
  return ops::MoeSlots{s.batch,  s.positions,       s.experts, s.capacity,
                       s.hidden, code(slots.dtype), slots.data};
}

Error moeDispatchKernel(const KernelCall &call) {
  Expected<MoeSlots> shape = readMoeDispatch(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &x = call.input(0), &out = call.output(0);
  ops::MoeSlots sl = deviceSlots(*shape, call.input(1));
  return check(call, ops::moeDispatch(sl, code(x.dtype), x.data,
                                      code(out.dtype), out.data));
}

Error moeDispatchGradKernel(const KernelCall &call) {
  Expected<MoeSlots> shape = readMoeDispatchGrad(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &grad = call.input(0), &out = call.output(0);
  ops::MoeSlots sl = deviceSlots(*shape, call.input(1));
  return check(call, ops::moeGatherSum(sl, code(grad.dtype), grad.data, 0,
                                       nullptr, code(out.dtype), out.data));
}

Error moeCombineKernel(const KernelCall &call) {
  Expected<MoeSlots> shape = readMoeCombine(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &experts = call.input(0), &gates = call.input(2),
                  &out = call.output(0);
  ops::MoeSlots sl = deviceSlots(*shape, call.input(1));
  return check(call, ops::moeGatherSum(sl, code(experts.dtype), experts.data,
                                       code(gates.dtype), gates.data,
                                       code(out.dtype), out.data));
}

Error moeCombineGradKernel(const KernelCall &call) {
  Expected<MoeSlots> shape = readMoeCombineGrad(call);
  if (!shape)
    return shape.takeError();
  const TensorRef &experts = call.input(0), &gates = call.input(2),
                  &grad = call.input(3), &dRows = call.output(0),
                  &dGates = call.output(1);
  ops::MoeSlots sl = deviceSlots(*shape, call.input(1));
  return check(call, ops::moeCombineGrad(sl, code(experts.dtype), experts.data,
                                         code(gates.dtype), gates.data,
                                         code(grad.dtype), grad.data,
                                         code(dRows.dtype), dRows.data,
                                         code(dGates.dtype), dGates.data));
}

//===----------------------------------------------------------------------===//
// Convolution and pooling (runtime/cpu/ConvPool.cpp, runtime/cpu/Gradient.cpp)
//===----------------------------------------------------------------------===//

static_assert(kMaxWindowDims <= ops::kMaxRank,
              "the device structs hold every window readWindow accepts");

/// The device copy of a window runtime/core/Window.cpp checked.
ops::Window deviceWindow(const Window &window) {
  ops::Window w;
  w.rank = static_cast<int>(window.rank());
  for (int64_t i = 0; i < window.rank(); ++i) {
    w.in[i] = window.in[i];
    w.out[i] = window.out[i];
    w.kernel[i] = window.kernel[i];
    w.stride[i] = window.strides[i];
    w.dilation[i] = window.dilations[i];
    w.padBegin[i] = window.padBegin[i];
  }
  return w;
}

/// The device description of a convolution runtime/core/Window.cpp checked.
ops::Conv deviceConv(const ConvDims &dims) {
  ops::Conv c;
  c.batch = dims.batch;
  c.channels = dims.channels;
  c.filters = dims.filters;
  c.groups = dims.groups;
  c.window = deviceWindow(dims.window);
  return c;
}

Error convKernel(const KernelCall &call) {
  auto dims = readConv(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &input = call.input(0), &weight = call.input(1);
  const TensorRef *bias = call.numInputs() > 2 ? &call.input(2) : nullptr;
  const TensorRef &out = call.output(0);
  if (out.numElements() == 0)
    return Error::success();
  return check(call, ops::conv(deviceConv(*dims), code(input.dtype), input.data,
                               code(weight.dtype), weight.data,
                               bias ? code(bias->dtype) : 0,
                               bias ? bias->data : nullptr, code(out.dtype),
                               out.data));
}

Error convGradInputKernel(const KernelCall &call) {
  auto dims = readConvGradInput(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &dy = call.input(0), &w = call.input(1);
  const TensorRef &out = call.output(0);
  return check(call, ops::convGradInput(deviceConv(*dims), code(dy.dtype),
                                        dy.data, code(w.dtype), w.data,
                                        code(out.dtype), out.data));
}

Error convGradWeightKernel(const KernelCall &call) {
  auto dims = readConvGradWeight(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &x = call.input(0), &dy = call.input(1);
  const TensorRef &out = call.output(0);
  return check(call, ops::convGradWeight(deviceConv(*dims), code(x.dtype),
                                         x.data, code(dy.dtype), dy.data,
                                         code(out.dtype), out.data));
}

template <bool Max> Error poolKernel(const KernelCall &call) {
  auto dims = readPool(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &input = call.input(0), &out = call.output(0);
  if (out.numElements() == 0)
    return Error::success();
  return check(call, ops::pool(Max, call.flag("count_include_pad"),
                               deviceWindow(dims->window), dims->planes,
                               code(input.dtype), input.data, code(out.dtype),
                               out.data));
}

Error maxPoolGradKernel(const KernelCall &call) {
  auto dims = readMaxPoolGrad(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &x = call.input(0), &dy = call.input(1);
  const TensorRef &out = call.output(0);
  return check(call, ops::maxPoolGrad(deviceWindow(dims->window), dims->planes,
                                      code(x.dtype), x.data, code(dy.dtype),
                                      dy.data, code(out.dtype), out.data));
}

Error avgPoolGradKernel(const KernelCall &call) {
  auto dims = readAvgPoolGrad(call);
  if (!dims)
    return dims.takeError();
  const TensorRef &dy = call.input(0), &out = call.output(0);
  if (auto err = expectFloat(call, out, "result"))
    return err;
  return check(call,
               ops::avgPoolGrad(deviceWindow(dims->window), dims->planes,
                                call.flag("count_include_pad"), code(dy.dtype),
                                dy.data, code(out.dtype), out.data));
}

//===----------------------------------------------------------------------===//
// Optimizer
//===----------------------------------------------------------------------===//

Error adamwKernel(const KernelCall &call) {
  Expected<AdamWConfig> config = readAdamW(call);
  if (!config)
    return config.takeError();
  const TensorRef &param = call.input(0);
  ops::AdamW h;
  h.beta1 = config->beta1;
  h.beta2 = config->beta2;
  h.eps = config->epsilon;
  h.weightDecay = config->weightDecay;
  h.lr = call.input(4).data;
  h.lrDtype = code(call.input(4).dtype);
  h.step = call.input(5).data;
  h.stepDtype = code(call.input(5).dtype);
  h.gradScale = call.input(6).data;
  h.gradScaleDtype = code(call.input(6).dtype);
  const TensorRef &g = call.input(1), &m = call.input(2), &v = call.input(3);
  return check(call,
               ops::adamw(h, param.numElements(), code(param.dtype), param.data,
                          code(g.dtype), g.data, code(m.dtype), m.data,
                          code(v.dtype), v.data, call.output(0).data,
                          call.output(1).data, call.output(2).data));
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

bool gemmDtype(DType d) {
  return d == DType::F32 || d == DType::BF16 || d == DType::F16;
}

Error matmulKernel(const KernelCall &call) {
  Expected<MatmulShape> shape = readMatmul(call);
  if (!shape)
    return shape.takeError();
  const MatmulShape &s = *shape;
  const TensorRef &lhs = call.input(0), &rhs = call.input(1),
                  &out = call.output(0);
  if (out.numElements() == 0)
    return Error::success();
  int64_t m = s.m, n = s.n, k = s.k;

  // Operands of different or unsupported dtypes are computed in f32.
  const void *a = lhs.data, *b = rhs.data;
  DType abType = lhs.dtype;
  std::unique_ptr<Scratch> wideA, wideB, wideC;
  if (lhs.dtype != rhs.dtype || !gemmDtype(lhs.dtype)) {
    abType = DType::F32;
    for (auto [t, ptr, scratch] :
         {std::tuple{&lhs, &a, &wideA}, std::tuple{&rhs, &b, &wideB}}) {
      if (t->dtype == DType::F32)
        continue;
      *scratch = std::make_unique<Scratch>(t->numElements() * sizeof(float));
      if (!(*scratch)->get())
        return call.error("out of device memory");
      if (auto err =
              check(call, ops::cast(code(t->dtype), t->data, code(DType::F32),
                                    (*scratch)->get(), t->numElements())))
        return err;
      *ptr = (*scratch)->get();
    }
  }
  void *c = out.data;
  DType cType = out.dtype;
  if (!gemmDtype(out.dtype)) {
    wideC = std::make_unique<Scratch>(out.numElements() * sizeof(float));
    if (!wideC->get())
      return call.error("out of device memory");
    c = wideC->get();
    cType = DType::F32;
  }

  int64_t batches = s.batches, lhsBatches = s.lhsBatches,
          rhsBatches = s.rhsBatches;
  size_t abSize = dtypeSize(abType), cSize = dtypeSize(cType);
  ops::Gemm g;
  g.transA = s.transposeLhs;
  g.transB = s.transposeRhs;
  g.m = m;
  g.n = n;
  g.k = k;
  g.abDtype = code(abType);
  g.cDtype = code(cType);
  g.lda = s.lda();
  g.ldb = s.ldb();
  g.ldc = n;
  g.a = a;
  g.b = b;
  g.c = c;
  std::string failure;
  if (s.foldsIntoRows()) {
    g.m = batches * m;
    failure = ops::gemm(g);
  } else if ((lhsBatches == batches || lhsBatches == 1) &&
             (rhsBatches == batches || rhsBatches == 1)) {
    g.batch = batches;
    g.strideA = lhsBatches == 1 ? 0 : m * k;
    g.strideB = rhsBatches == 1 ? 0 : k * n;
    g.strideC = m * n;
    failure = ops::gemm(g);
  } else {
    // A general broadcast of the batch dims: one GEMM per batch.
    for (int64_t batch = 0; batch < batches && failure.empty(); ++batch) {
      auto [lhsProduct, rhsProduct] = s.operandProducts(batch);
      ops::Gemm one = g;
      one.a = static_cast<const char *>(a) + lhsProduct * m * k * abSize;
      one.b = static_cast<const char *>(b) + rhsProduct * k * n * abSize;
      one.c = static_cast<char *>(c) + batch * m * n * cSize;
      failure = ops::gemm(one);
    }
  }
  if (auto err = check(call, failure))
    return err;
  if (c != out.data)
    return check(call, ops::cast(code(cType), c, code(out.dtype), out.data,
                                 out.numElements()));
  return Error::success();
}

} // namespace

void registerCudaKernels(KernelRegistry &registry) {
  using U = ops::Unary;
  using B = ops::Binary;
  registry.add("dtc.neg", unaryKernel<U::Neg>);
  registry.add("dtc.abs", unaryKernel<U::Abs>);
  registry.add("dtc.exp", unaryKernel<U::Exp>);
  registry.add("dtc.log", unaryKernel<U::Log>);
  registry.add("dtc.sqrt", unaryKernel<U::Sqrt>);
  registry.add("dtc.rsqrt", unaryKernel<U::Rsqrt>);
  registry.add("dtc.reciprocal", unaryKernel<U::Reciprocal>);
  registry.add("dtc.tanh", unaryKernel<U::Tanh>);
  registry.add("dtc.erf", unaryKernel<U::Erf>);
  registry.add("dtc.sigmoid", unaryKernel<U::Sigmoid>);
  registry.add("dtc.relu", unaryKernel<U::Relu>);
  registry.add("dtc.silu", unaryKernel<U::Silu>);
  registry.add("dtc.gelu", geluKernel);
  registry.add("dtc.cast", castKernel);
  registry.add("dtc.add", binaryKernel<B::Add>);
  registry.add("dtc.sub", binaryKernel<B::Sub>);
  registry.add("dtc.mul", binaryKernel<B::Mul>);
  registry.add("dtc.div", binaryKernel<B::Div>);
  registry.add("dtc.max", binaryKernel<B::Max>);
  registry.add("dtc.min", binaryKernel<B::Min>);
  registry.add("dtc.pow", binaryKernel<B::Pow>);
  registry.add("dtc.compare", compareKernel);
  registry.add("dtc.select", selectKernel);
  registry.add("dtc.reshape", reshapeKernel);
  registry.add("dtc.transpose", transposeKernel);
  registry.add("dtc.concat", concatKernel);
  registry.add("dtc.slice", sliceKernel);
  registry.add("dtc.slice_grad", sliceGradKernel);
  registry.add("dtc.embedding", embeddingKernel);
  registry.add("dtc.embedding_shard", embeddingKernel);
  registry.add("dtc.shard_slice", shardSliceKernel);
  registry.add("dtc.embedding_grad", embeddingGradKernel);
  registry.add("dtc.embedding_shard_grad", embeddingGradKernel);
  registry.add("dtc.reduce_sum", reduceKernel<ops::Reduce::Sum>);
  registry.add("dtc.reduce_mean", reduceKernel<ops::Reduce::Mean>);
  registry.add("dtc.reduce_max", reduceKernel<ops::Reduce::Max>);
  registry.add("dtc.softmax", softmaxKernel);
  registry.add("dtc.softmax_grad", softmaxGradKernel);
  registry.add("dtc.layer_norm", layerNormKernel);
  registry.add("dtc.rms_norm", rmsNormKernel);
  registry.add("dtc.layer_norm_grad", layerNormGradKernel);
  registry.add("dtc.rms_norm_grad", rmsNormGradKernel);
  registry.add("dtc.gelu_grad", geluGradKernel);
  registry.add("dtc.silu_grad",
               activationGradKernel<ops::ActivationGrad::Silu>);
  registry.add("dtc.attention", attentionKernel);
  registry.add("dtc.attention_grad", attentionGradKernel);
  registry.add("dtc.attention_block", attentionBlockKernel);
  registry.add("dtc.attention_merge", attentionMergeKernel);
  registry.add("dtc.attention_block_grad", attentionBlockGradKernel);
  registry.add("dtc.zigzag_order", zigzagOrderKernel);
  registry.add("dtc.cross_entropy", crossEntropyKernel);
  registry.add("dtc.cross_entropy_grad", crossEntropyGradKernel);
  registry.add("dtc.cross_entropy_stats", crossEntropyStatsKernel);
  registry.add("dtc.cross_entropy_from_stats", crossEntropyFromStatsKernel);
  registry.add("dtc.cross_entropy_shard_grad", crossEntropyShardGradKernel);
  registry.add("dtc.adamw", adamwKernel);
  registry.add("dtc.matmul", matmulKernel);
  registry.add("dtc.moe_route", moeRouteKernel);
  registry.add("dtc.moe_route_grad", moeRouteGradKernel);
  registry.add("dtc.moe_dispatch", moeDispatchKernel);
  registry.add("dtc.moe_dispatch_grad", moeDispatchGradKernel);
  registry.add("dtc.moe_combine", moeCombineKernel);
  registry.add("dtc.moe_combine_grad", moeCombineGradKernel);
  registry.add("dtc.conv", convKernel);
  registry.add("dtc.conv_grad_input", convGradInputKernel);
  registry.add("dtc.conv_grad_weight", convGradWeightKernel);
  registry.add("dtc.max_pool", poolKernel<true>);
  registry.add("dtc.max_pool_grad", maxPoolGradKernel);
  registry.add("dtc.avg_pool", poolKernel<false>);
  registry.add("dtc.avg_pool_grad", avgPoolGradKernel);
  // The collectives run on device buffers through an NcclCommunicator.
  registerCollectiveKernels(registry);
}

Error permuteOnDevice(const void *in, void *out, size_t elemSize,
                      ArrayRef<int64_t> inShape, ArrayRef<int64_t> perm) {
  SmallVector<int64_t, 6> inStrides = stridesOf(inShape), outShape;
  SmallVector<SmallVector<int64_t, 6>, 2> strides(2);
  for (int64_t p : perm) {
    outShape.push_back(inShape[p]);
    strides[0].push_back(inStrides[p]);
  }
  if (numElements(outShape) == 0)
    return Error::success();
  strides[1] = stridesOf(outShape);
  ops::Layout layout;
  if (!makeLayout(outShape, strides, layout))
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cuda: a permutation of " +
                                       shapeString(inShape) +
                                       " has too many dims");
  return cudaError(ops::gather(in, out, static_cast<int>(elemSize), layout));
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

Error initialize(int device) {
  if (device >= 0 && ops::deviceCount() <= device)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cuda: no CUDA device " +
                                       std::to_string(device));
  return cudaError(ops::initialize(device));
}

void *CudaMemory::allocate(size_t bytes) {
  if (!ops::initialize(-1).empty())
    return nullptr;
  return ops::allocate(bytes);
}

void CudaMemory::release(void *pointer) { ops::release(pointer); }

Error CudaMemory::copyToDevice(void *dst, const void *src, size_t bytes) {
  return cudaError(ops::copy(dst, src, bytes, 0));
}

Error CudaMemory::copyToHost(void *dst, const void *src, size_t bytes) {
  return cudaError(ops::copy(dst, src, bytes, 1));
}

Error CudaMemory::copyOnDevice(void *dst, const void *src, size_t bytes) {
  return cudaError(ops::copy(dst, src, bytes, 2));
}

Error CudaMemory::synchronize() { return cudaError(ops::synchronize()); }

void CudaMemory::pushRange(const std::string &name) {
  nvtxRangePushA(name.c_str());
}

void CudaMemory::popRange() { nvtxRangePop(); }

llvm::Expected<Tensor> toDevice(const Tensor &host, MemorySpace &memory) {
  llvm::Expected<Tensor> device =
      Tensor::allocate(host.dtype(), host.shape(), memory);
  if (!device)
    return device.takeError();
  if (Error e = memory.copyToDevice(device->data(), host.data(), host.bytes()))
    return std::move(e);
  return device;
}

llvm::Expected<Tensor> toHost(const Tensor &device, MemorySpace &memory) {
  Tensor host(device.dtype(), device.shape());
  if (Error e = memory.copyToHost(host.data(), device.data(), device.bytes()))
    return std::move(e);
  return host;
}

} // namespace dtc::runtime::cuda
