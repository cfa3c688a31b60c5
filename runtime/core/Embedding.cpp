//===- Embedding.cpp - Embedding lookup operand checks --------------------===//

#include "runtime/core/Embedding.h"
#include "runtime/core/CollectiveKernels.h"

#include "llvm/ADT/Twine.h"

using namespace llvm;

namespace dtc::runtime {

namespace {

/// Ids of i64 or i32 and, for the sharded ops, this rank's shard.
Expected<EmbeddingRows> readIds(const KernelCall &call, const TensorRef &ids) {
  if (ids.dtype != DType::I64 && ids.dtype != DType::I32)
    return call.error("ids must be i64 or i32, got " + dtypeName(ids.dtype));
  EmbeddingRows e;
  e.count = ids.numElements();
  e.ids64 = ids.dtype == DType::I64;
  if (call.has("mesh_axes")) {
    Expected<GroupPlace> place = groupPlaceOf(call);
    if (!place)
      return place.takeError();
    e.shards = place->size;
    e.position = place->position;
  }
  return e;
}

/// `rowsOfIds` [..., dim] must be the ids' shape plus `dim`.
Error expectRowsOfIds(const KernelCall &call, const TensorRef &rowsOfIds,
                      const TensorRef &ids, int64_t dim, StringRef what) {
  SmallVector<int64_t, 6> shape(ids.shape.begin(), ids.shape.end());
  shape.push_back(dim);
  if (ArrayRef<int64_t>(rowsOfIds.shape) != ArrayRef<int64_t>(shape))
    return call.error(what + " " + shapeString(rowsOfIds.shape) +
                      " must be the ids' shape " + shapeString(ids.shape) +
                      " plus the embedding dim");
  return Error::success();
}

} // namespace

Expected<EmbeddingRows> readEmbedding(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &table = call.input(0), &ids = call.input(1);
  const TensorRef &out = call.output(0);
  if (table.rank() != 2)
    return call.error("table must have rank 2, got " +
                      shapeString(table.shape));
  Expected<EmbeddingRows> e = readIds(call, ids);
  if (!e)
    return e.takeError();
  e->rows = table.shape[0];
  e->dim = table.shape[1];
  if (out.dtype != table.dtype)
    return call.error("result dtype " + dtypeName(out.dtype) +
                      " is not the table's " + dtypeName(table.dtype));
  if (auto err = expectRowsOfIds(call, out, ids, e->dim, "result"))
    return std::move(err);
  return e;
}

Expected<EmbeddingRows> readEmbeddingGrad(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &dy = call.input(0), &ids = call.input(1);
  const TensorRef &out = call.output(0);
  if (auto err = expectFloat(call, dy, "grad"))
    return std::move(err);
  if (auto err = expectFloat(call, out, "result"))
    return std::move(err);
  Expected<EmbeddingRows> e = readIds(call, ids);
  if (!e)
    return e.takeError();
  if (dy.rank() < 1)
    return call.error("grad must have an embedding dim");
  e->dim = dy.shape.back();
  if (auto err = expectRowsOfIds(call, dy, ids, e->dim, "grad"))
    return std::move(err);
  e->rows = call.i64("num_rows", out.rank() == 2 ? out.shape[0] : -1);
  if (auto err = expectShape(call, out, {e->rows, e->dim}, "result"))
    return std::move(err);
  return e;
}

namespace {

/// The lookup of `indices` into `data` (the forward's data shape) along
/// the call's `axis`.
Expected<ElementLookup> readElementLookup(const KernelCall &call,
                                          const TensorRef &data,
                                          const TensorRef &indices,
                                          StringRef dataName) {
  if (indices.dtype != DType::I64 && indices.dtype != DType::I32)
    return call.error("indices must be i64 or i32, got " +
                      dtypeName(indices.dtype));
  int64_t rank = indices.rank(), axis = call.i64("axis", 0);
  if (data.rank() != rank || axis < 0 || axis >= rank)
    return call.error(dataName + " " + shapeString(data.shape) +
                      " and indices " + shapeString(indices.shape) +
                      " need one rank and an axis in it, got axis " +
                      Twine(axis));
  ElementLookup l;
  l.ids64 = indices.dtype == DType::I64;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != axis && data.shape[d] != indices.shape[d])
      return call.error(dataName + " " + shapeString(data.shape) +
                        " and indices " + shapeString(indices.shape) +
                        " differ off axis " + Twine(axis));
    if (d < axis)
      l.outer *= indices.shape[d];
    else if (d > axis)
      l.inner *= indices.shape[d];
  }
  l.count = indices.shape[axis];
  l.size = data.shape[axis];
  return l;
}

} // namespace

Expected<ElementLookup> readGatherElements(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &data = call.input(0), &indices = call.input(1);
  const TensorRef &out = call.output(0);
  if (out.dtype != data.dtype)
    return call.error("result dtype " + dtypeName(out.dtype) +
                      " is not the data's " + dtypeName(data.dtype));
  if (auto err = expectShape(call, out, indices.shape, "result"))
    return std::move(err);
  return readElementLookup(call, data, indices, "data");
}

Expected<ElementLookup> readGatherElementsGrad(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &dy = call.input(0), &indices = call.input(1);
  const TensorRef &out = call.output(0);
  if (auto err = expectFloat(call, dy, "grad"))
    return std::move(err);
  if (auto err = expectFloat(call, out, "result"))
    return std::move(err);
  if (auto err = expectShape(call, dy, indices.shape, "grad"))
    return std::move(err);
  Expected<ElementLookup> l = readElementLookup(call, out, indices, "result");
  if (!l)
    return l.takeError();
  int64_t size = call.i64("dim_size", l->size);
  if (size != l->size)
    return call.error("result dim " + Twine(l->size) +
                      " along the axis is not "
                      "dim_size " +
                      Twine(size));
  return l;
}

} // namespace dtc::runtime
