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
#include "runtime/core/DataMovement.h"
#include "runtime/core/Elementwise.h"
#include "runtime/core/Embedding.h"
#include "runtime/core/LossShards.h"
#include "runtime/core/Matmul.h"
#include "runtime/core/Moe.h"
#include "runtime/core/Normalization.h"
#include "runtime/core/Optimizer.h"
#include "runtime/core/Reduce.h"
#include "runtime/core/Window.h"
#include "runtime/cuda/CudaBackend.h"
#include "runtime/cuda/CudaOps.h"
#include "runtime/support/Error.h"

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
  return dtc::failureText("cuda: " + failure);
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
  if (Error err = checkUnary(call))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  return check(call, ops::unary(Op, code(in.dtype), in.data, out.data,
                                in.numElements()));
}

Error geluKernel(const KernelCall &call) {
  if (call.flag("approximate_tanh"))
    return unaryKernel<ops::Unary::GeluTanh>(call);
  return unaryKernel<ops::Unary::GeluErf>(call);
}

Error castKernel(const KernelCall &call) {
  if (Error err = checkCast(call))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
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
  Expected<Predicate> pred = readCompare(call);
  if (!pred)
    return pred.takeError();
  const TensorRef &a = call.input(0), &b = call.input(1), &out = call.output(0);
  ops::Layout layout;
  if (auto err = broadcastLayout(call, {&a, &b}, out, layout))
    return err;
  if (out.numElements() == 0)
    return Error::success();
  return check(call, ops::compare(*pred, code(a.dtype), a.data, b.data,
                                  out.as<uint8_t>(), layout));
}

Error selectKernel(const KernelCall &call) {
  if (Error err = checkSelect(call))
    return err;
  const TensorRef &cond = call.input(0), &t = call.input(1), &f = call.input(2),
                  &out = call.output(0);
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
  if (Error err = checkActivationGrad(call))
    return err;
  const TensorRef &x = call.input(0), &dy = call.input(1),
                  &out = call.output(0);
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
  if (Error err = checkReshape(call))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  return check(call, ops::copy(out.data, in.data, in.bytes(), 2));
}

/// The device layout of `view`: its strided side and its dense side.
Error deviceLayout(const KernelCall &call, const StridedView &view,
                   ops::Layout &layout) {
  SmallVector<SmallVector<int64_t, 6>, 2> strides = {view.strides,
                                                     stridesOf(view.shape)};
  if (!makeLayout(view.shape, strides, layout))
    return layoutError(call, view.shape);
  return Error::success();
}

/// dtc.transpose and dtc.slice: the result gathered from a strided input.
Error gatherView(const KernelCall &call, Expected<StridedView> view) {
  if (!view)
    return view.takeError();
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (out.numElements() == 0)
    return Error::success();
  ops::Layout layout;
  if (Error err = deviceLayout(call, *view, layout))
    return err;
  size_t elem = dtypeSize(in.dtype);
  return check(call, ops::gather(in.as<char>() + view->base * elem, out.data,
                                 static_cast<int>(elem), layout));
}

Error transposeKernel(const KernelCall &call) {
  return gatherView(call, readTranspose(call));
}

Error sliceKernel(const KernelCall &call) {
  return gatherView(call, readSlice(call));
}

Error concatKernel(const KernelCall &call) {
  Expected<ConcatRows> rows = readConcat(call);
  if (!rows)
    return rows.takeError();
  size_t offset = 0;
  for (size_t i = 0; i < call.numInputs(); ++i) {
    size_t chunk = rows->chunkBytes[i];
    if (auto err = check(
            call, ops::copy2d(call.input(i).data, call.output(0).data, chunk,
                              rows->rowBytes, offset, rows->outer)))
      return err;
    offset += chunk;
  }
  return Error::success();
}

Error sliceGradKernel(const KernelCall &call) {
  Expected<StridedView> view = readSliceGrad(call);
  if (!view)
    return view.takeError();
  const TensorRef &dy = call.input(0), &out = call.output(0);
  if (auto err = check(call, ops::memsetZero(out.data, out.bytes())))
    return err;
  if (dy.numElements() == 0)
    return Error::success();
  ops::Layout layout;
  if (Error err = deviceLayout(call, *view, layout))
    return err;
  size_t elem = dtypeSize(out.dtype);
  return check(call, ops::scatter(dy.data, out.as<char>() + view->base * elem,
                                  0, static_cast<int>(elem), layout));
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

ops::ElementLookup deviceElementLookup(const ElementLookup &l) {
  ops::ElementLookup d;
  d.outer = l.outer;
  d.count = l.count;
  d.size = l.size;
  d.inner = l.inner;
  d.ids64 = l.ids64;
  return d;
}

Error gatherElementsKernel(const KernelCall &call) {
  Expected<ElementLookup> l = readGatherElements(call);
  if (!l)
    return l.takeError();
  const TensorRef &data = call.input(0);
  return check(call,
               ops::gatherElements(deviceElementLookup(*l), data.data,
                                   static_cast<int>(dtypeSize(data.dtype)),
                                   call.input(1).data, call.output(0).data));
}

Error gatherElementsGradKernel(const KernelCall &call) {
  Expected<ElementLookup> l = readGatherElementsGrad(call);
  if (!l)
    return l.takeError();
  const TensorRef &dy = call.input(0), &out = call.output(0);
  return check(call, ops::gatherElementsGrad(deviceElementLookup(*l), dy.data,
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

/// Whether every input and output of `call` has input 0's dtype (the
/// selective scan kernels read and write one dtype, as f32).
bool oneDtype(const KernelCall &call) {
  for (size_t i = 1; i < call.numInputs(); ++i)
    if (call.input(i).dtype != call.input(0).dtype)
      return false;
  for (size_t i = 0; i < call.numOutputs(); ++i)
    if (call.output(i).dtype != call.input(0).dtype)
      return false;
  return true;
}

Error selectiveScanKernel(const KernelCall &call) {
  Expected<SelectiveScan> s = readSelectiveScan(call, false);
  if (!s)
    return s.takeError();
  if (!oneDtype(call))
    return call.error("operands of different dtypes");
  return check(call,
               ops::selectiveScan(code(call.input(0).dtype), call.input(0).data,
                                  call.input(1).data, call.input(2).data,
                                  call.output(0).data, s->batch, s->channels,
                                  s->length, s->state));
}

Error selectiveScanGradKernel(const KernelCall &call) {
  Expected<SelectiveScan> s = readSelectiveScan(call, true);
  if (!s)
    return s.takeError();
  if (!oneDtype(call))
    return call.error("operands of different dtypes");
  return check(call, ops::selectiveScanGrad(
                         code(call.input(0).dtype), call.input(0).data,
                         call.input(1).data, call.input(2).data,
                         call.input(3).data, call.output(0).data,
                         call.output(1).data, call.output(2).data, s->batch,
                         s->channels, s->length, s->state));
}

Error cumSumKernel(const KernelCall &call) {
  Expected<Scan> scan = readCumSum(call);
  if (!scan)
    return scan.takeError();
  const TensorRef &in = call.input(0);
  return check(call, ops::cumSum(code(in.dtype), in.data, call.output(0).data,
                                 scan->outer, scan->length, scan->inner,
                                 scan->exclusive, scan->reverse));
}

template <ops::Reduce Kind> Error reduceKernel(const KernelCall &call) {
  Expected<ReduceGroups> groups = readReduce(call);
  if (!groups)
    return groups.takeError();
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (out.numElements() == 0)
    return Error::success();
  int64_t count = groups->count;
  if (groups->rowShaped())
    return check(call, ops::reduce(Kind, code(in.dtype), in.data, out.data,
                                   groups->outer(), count, groups->inner()));
  ArrayRef<int64_t> sizes = groups->sizes;
  ArrayRef<bool> flags = groups->reduced;
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

/// A ring block's shape with the global positions of its chunks
/// (runtime/core/Attention.h's RingChunks as row offsets).
Expected<ops::AttentionShape>
toBlockShape(const KernelCall &call, Expected<AttentionBlockOperands> block) {
  if (!block)
    return block.takeError();
  auto shape = toAttentionShape(call, block->dims);
  if (!shape)
    return shape.takeError();
  const RingChunks &at = block->at;
  auto chunkAt = [&](int64_t chunk, int64_t rows) {
    ops::RowPositions p;
    if (at.zigzag) {
      p.half = rows / 2;
      p.start0 = chunk * p.half;
      p.start1 = (2 * at.chunks - 1 - chunk) * p.half;
    } else {
      p.start0 = chunk * rows;
    }
    return p;
  };
  shape->queryAt = chunkAt(at.queryChunk, shape->s);
  shape->keyAt = chunkAt(at.keyChunk, shape->t);
  return shape;
}

Error attentionBlockKernel(const KernelCall &call) {
  auto shape = toBlockShape(call, readAttentionBlock(call));
  if (!shape)
    return shape.takeError();
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2),
                  &out = call.output(0), &lse = call.output(1);
  return check(call, ops::attentionBlock(*shape, code(q.dtype), q.data,
                                         code(k.dtype), k.data, code(v.dtype),
                                         v.data, code(out.dtype), out.data,
                                         code(lse.dtype), lse.data));
}

Error attentionMergeKernel(const KernelCall &call) {
  Expected<AttentionMergeRows> merge = readAttentionMerge(call);
  if (!merge)
    return merge.takeError();
  const TensorRef &outA = call.input(0), &lseA = call.input(1),
                  &outB = call.input(2), &lseB = call.input(3),
                  &out = call.output(0), &lse = call.output(1);
  return check(call, ops::attentionMerge(
                         merge->rows, merge->width, code(outA.dtype), outA.data,
                         code(lseA.dtype), lseA.data, code(outB.dtype),
                         outB.data, code(lseB.dtype), lseB.data,
                         code(out.dtype), out.data, code(lse.dtype), lse.data));
}

Error attentionBlockGradKernel(const KernelCall &call) {
  auto shape = toBlockShape(call, readAttentionBlockGrad(call));
  if (!shape)
    return shape.takeError();
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2),
                  &o = call.input(3), &lse = call.input(4), &dy = call.input(5);
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
  Expected<ZigzagPieces> z = readZigzagOrder(call);
  if (!z)
    return z.takeError();
  if (z->pieceBytes == 0)
    return Error::success();
  return check(call,
               ops::zigzagOrder(call.input(0).data, call.output(0).data,
                                z->pieceBytes, z->outer, z->parts, z->inverse));
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
  registry.add("dtc.softplus", unaryKernel<U::Softplus>);
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
  registry.add("dtc.gather_elements", gatherElementsKernel);
  registry.add("dtc.gather_elements_grad", gatherElementsGradKernel);
  registry.add("dtc.cumsum", cumSumKernel);
  registry.add("dtc.selective_scan", selectiveScanKernel);
  registry.add("dtc.selective_scan_grad", selectiveScanGradKernel);
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
    return dtc::failureText("cuda: a permutation of " + shapeString(inShape) +
                            " has too many dims");
  return cudaError(ops::gather(in, out, static_cast<int>(elemSize), layout));
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

Error initialize(int device) {
  if (device >= 0 && ops::deviceCount() <= device)
    return dtc::failureText("cuda: no CUDA device " + std::to_string(device));
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
