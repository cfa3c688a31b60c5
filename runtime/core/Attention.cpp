//===- Attention.cpp - dtc.attention operand checks -----------------------===//

#include "runtime/core/Attention.h"

#include "runtime/core/CollectiveKernels.h"

#include "llvm/ADT/StringExtras.h"

#include <utility>

namespace dtc::runtime {

/// [batch, heads, queries, valueDim], the attention output's shape.
static llvm::SmallVector<int64_t, 4> outputShape(const AttentionOperands &a) {
  return {a.batch, a.heads, a.queries, a.valueDim};
}

/// Outputs 0-2 of a gradient are d query, d key, d value, each shaped as
/// its primal (inputs 0-2).
static llvm::Error expectInputGrads(const KernelCall &call) {
  const char *names[] = {"query_grad", "key_grad", "value_grad"};
  for (int i = 0; i < 3; ++i)
    if (llvm::Error err = expectFloatShape(call, call.output(i),
                                           call.input(i).shape, names[i]))
      return err;
  return llvm::Error::success();
}

llvm::Expected<AttentionOperands> readAttentionInputs(const KernelCall &call) {
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2);
  for (auto [t, what] :
       {std::pair{&q, "query"}, std::pair{&k, "key"}, std::pair{&v, "value"}})
    if (llvm::Error err = expectFloat(call, *t, what))
      return std::move(err);
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    return call.error("query, key and value must be [batch, heads, seq, dim]");
  AttentionOperands a;
  a.batch = q.shape[0];
  a.heads = q.shape[1];
  a.queries = q.shape[2];
  a.headDim = q.shape[3];
  a.groups = k.shape[1];
  a.keys = k.shape[2];
  a.valueDim = v.shape[3];
  if (k.shape[0] != a.batch || k.shape[3] != a.headDim ||
      v.shape[0] != a.batch || v.shape[1] != a.groups || v.shape[2] != a.keys ||
      a.groups < 1 || a.heads % a.groups != 0)
    return call.error("query " + shapeString(q.shape) + ", key " +
                      shapeString(k.shape) + " and value " +
                      shapeString(v.shape) + " are inconsistent");
  llvm::Expected<double> scale = call.requiredF64("scale");
  if (!scale)
    return scale.takeError();
  a.scale = *scale;
  a.causal = call.flag("causal");
  return a;
}

llvm::Expected<AttentionOperands> readAttention(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 3, 1))
    return std::move(err);
  auto a = readAttentionInputs(call);
  if (!a)
    return a.takeError();
  if (llvm::Error err =
          expectFloatShape(call, call.output(0), outputShape(*a), "result"))
    return std::move(err);
  return a;
}

llvm::Expected<AttentionOperands> readAttentionGrad(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 4, 3))
    return std::move(err);
  auto a = readAttentionInputs(call);
  if (!a)
    return a.takeError();
  if (llvm::Error err =
          expectFloatShape(call, call.input(3), outputShape(*a), "grad"))
    return std::move(err);
  if (llvm::Error err = expectInputGrads(call))
    return std::move(err);
  return a;
}

/// A ring block's float output [batch, heads, queries, valueDim] and the
/// log-sum-exp of its rows [batch, heads, queries].
static llvm::Error expectOutputAndLse(const KernelCall &call,
                                      const TensorRef &output,
                                      const TensorRef &lse,
                                      const AttentionOperands &a) {
  llvm::SmallVector<int64_t, 4> shape = outputShape(a);
  if (llvm::Error err = expectFloatShape(call, output, shape, "output"))
    return err;
  return expectFloatShape(call, lse, llvm::ArrayRef(shape).drop_back(), "lse");
}

static llvm::Expected<RingChunks> readRingChunks(const KernelCall &call,
                                                 const AttentionOperands &a) {
  llvm::Expected<GroupPlace> place = groupPlaceOf(call);
  if (!place)
    return place.takeError();
  int64_t n = place->size, c = place->position;
  int64_t shift = call.i64("kv_shift");
  if (shift < 0 || shift >= n)
    return call.error(
        "kv_shift " + llvm::Twine(shift) + " is outside [0, " + llvm::Twine(n) +
        "), the size of the group of mesh axes [" +
        llvm::join(call.strings("mesh_axes"), ",") + "]" +
        (place->hasCommunicator
             ? ""
             : "; there is no communicator, run the program with `dtc run`"));
  RingChunks at;
  at.queryChunk = c;
  at.keyChunk = ((c - shift) % n + n) % n;
  at.chunks = n;
  at.zigzag = call.flag("zigzag");
  if (at.zigzag && (a.queries % 2 || a.keys % 2))
    return call.error("zigzag chunks are two halves: the query and key rows "
                      "must be even, got " +
                      llvm::Twine(a.queries) + " and " + llvm::Twine(a.keys));
  return at;
}

llvm::Expected<AttentionBlockOperands>
readAttentionBlock(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 3, 2))
    return std::move(err);
  auto a = readAttentionInputs(call);
  if (!a)
    return a.takeError();
  if (llvm::Error err =
          expectOutputAndLse(call, call.output(0), call.output(1), *a))
    return std::move(err);
  auto at = readRingChunks(call, *a);
  if (!at)
    return at.takeError();
  return AttentionBlockOperands{*a, *at};
}

llvm::Expected<AttentionBlockOperands>
readAttentionBlockGrad(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 6, 3))
    return std::move(err);
  auto a = readAttentionInputs(call);
  if (!a)
    return a.takeError();
  if (llvm::Error err =
          expectOutputAndLse(call, call.input(3), call.input(4), *a))
    return std::move(err);
  if (llvm::Error err =
          expectFloatShape(call, call.input(5), outputShape(*a), "grad"))
    return std::move(err);
  if (llvm::Error err = expectInputGrads(call))
    return std::move(err);
  auto at = readRingChunks(call, *a);
  if (!at)
    return at.takeError();
  return AttentionBlockOperands{*a, *at};
}

llvm::Expected<AttentionMergeRows> readAttentionMerge(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 4, 2))
    return std::move(err);
  const TensorRef &outA = call.input(0), &lseA = call.input(1);
  const char *names[] = {"output_a", "lse_a", "output_b", "lse_b"};
  for (size_t i = 0; i < 4; ++i)
    if (llvm::Error err = expectFloat(call, call.input(i), names[i]))
      return std::move(err);
  if (outA.rank() < 1)
    return call.error("output_a must have rank at least 1");
  llvm::ArrayRef<int64_t> rowShape = llvm::ArrayRef(outA.shape).drop_back();
  if (llvm::Error err =
          expectShape(call, call.input(2), outA.shape, "output_b"))
    return std::move(err);
  if (llvm::Error err = expectShape(call, call.input(3), rowShape, "lse_b"))
    return std::move(err);
  if (llvm::Error err = expectShape(call, lseA, rowShape, "lse_a"))
    return std::move(err);
  if (llvm::Error err =
          expectFloatShape(call, call.output(0), outA.shape, "output"))
    return std::move(err);
  if (llvm::Error err = expectFloatShape(call, call.output(1), rowShape, "lse"))
    return std::move(err);
  AttentionMergeRows m;
  m.width = outA.shape.back();
  m.rows = lseA.numElements();
  return m;
}

llvm::Expected<ZigzagPieces> readZigzagOrder(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 1, 1))
    return std::move(err);
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (llvm::Error err = expectShape(call, out, in.shape, "output"))
    return std::move(err);
  if (out.dtype != in.dtype)
    return call.error("output " + dtypeName(out.dtype) +
                      " does not match input " + dtypeName(in.dtype));
  int64_t dim = call.i64("dim", -1), parts = call.i64("parts");
  if (dim < 0 || dim >= in.rank())
    return call.error("dim " + llvm::Twine(dim) + " is outside [0, " +
                      llvm::Twine(in.rank()) + ")");
  if (parts < 1 || in.shape[dim] % (2 * parts))
    return call.error("dimension " + llvm::Twine(dim) + " of " +
                      shapeString(in.shape) + " does not split into 2 x " +
                      llvm::Twine(parts) + " equal pieces");
  ZigzagPieces z;
  z.outer = numElements(llvm::ArrayRef(in.shape).take_front(dim));
  z.parts = parts;
  z.inverse = call.flag("inverse");
  if (in.numElements() != 0)
    z.pieceBytes = in.bytes() / (z.outer * 2 * parts);
  return z;
}

} // namespace dtc::runtime
