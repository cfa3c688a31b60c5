//===- DataMovement.cpp - Reshape, transpose, concat, slice, lookups ------===//
//
// Byte-level kernels, dtype-agnostic except the lookups' ids. Copies run over
// the longest contiguous chunk each op allows (memcpy), rows split across
// threads.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/DataMovement.h"
#include "runtime/core/Embedding.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <cstring>

namespace dtc::runtime::cpu {

namespace {

llvm::Error reshapeKernel(const KernelCall &call) {
  if (llvm::Error err = checkReshape(call))
    return err;
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (in.data != out.data && in.bytes())
    std::memcpy(out.data, in.data, in.bytes());
  return llvm::Error::success();
}

/// Copies elements of `elem` bytes: out[i] = in[offset(i)] where the input
/// offset of output index i follows `inStrides` (in elements) over `shape`.
/// The last dimension is copied as one chunk when its stride is 1.
void stridedCopy(const char *in, char *out, size_t elem,
                 llvm::ArrayRef<int64_t> shape,
                 llvm::ArrayRef<int64_t> inStrides) {
  int64_t rank = shape.size();
  int64_t inner = shape[rank - 1], innerStride = inStrides[rank - 1];
  int64_t rows = numElements(shape) / inner;
  parallelFor(rows, inner, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t row = rangeBegin; row < rangeEnd; ++row) {
      int64_t off = 0, rest = row;
      for (int64_t d = rank - 2; d >= 0; --d) {
        off += (rest % shape[d]) * inStrides[d];
        rest /= shape[d];
      }
      const char *src = in + off * elem;
      char *dst = out + row * inner * elem;
      if (innerStride == 1) {
        std::memcpy(dst, src, inner * elem);
      } else if (elem == 4) {
        const uint32_t *s = reinterpret_cast<const uint32_t *>(src);
        uint32_t *o = reinterpret_cast<uint32_t *>(dst);
        for (int64_t i = 0; i < inner; ++i)
          o[i] = s[i * innerStride];
      } else {
        for (int64_t i = 0; i < inner; ++i)
          std::memcpy(dst + i * elem, src + i * innerStride * elem, elem);
      }
    }
  });
}

/// Copies the dense side of `view` from `in` (the strided side) to `out`.
void copyView(const char *in, char *out, size_t elem, StridedView view) {
  if (numElements(view.shape) == 0)
    return;
  llvm::SmallVector<int64_t, 6> strides[2] = {view.strides,
                                              stridesOf(view.shape)};
  collapseDims(view.shape, strides);
  stridedCopy(in + view.base * elem, out, elem, view.shape, strides[0]);
}

llvm::Error transposeKernel(const KernelCall &call) {
  llvm::Expected<StridedView> view = readTranspose(call);
  if (!view)
    return view.takeError();
  const TensorRef &in = call.input(0);
  copyView(in.as<char>(), call.output(0).as<char>(), dtypeSize(in.dtype),
           std::move(*view));
  return llvm::Error::success();
}

llvm::Error concatKernel(const KernelCall &call) {
  llvm::Expected<ConcatRows> rows = readConcat(call);
  if (!rows)
    return rows.takeError();
  char *dst = call.output(0).as<char>();
  size_t offset = 0;
  for (size_t i = 0; i < call.numInputs(); ++i) {
    size_t chunk = rows->chunkBytes[i];
    const char *src = call.input(i).as<char>();
    parallelFor(rows->outer, static_cast<int64_t>(chunk) / 4 + 1,
                [&](int64_t rangeBegin, int64_t rangeEnd) {
                  for (int64_t o = rangeBegin; o < rangeEnd; ++o)
                    if (chunk)
                      std::memcpy(dst + o * rows->rowBytes + offset,
                                  src + o * chunk, chunk);
                });
    offset += chunk;
  }
  return llvm::Error::success();
}

llvm::Error sliceKernel(const KernelCall &call) {
  llvm::Expected<StridedView> view = readSlice(call);
  if (!view)
    return view.takeError();
  const TensorRef &in = call.input(0);
  copyView(in.as<char>(), call.output(0).as<char>(), dtypeSize(in.dtype),
           std::move(*view));
  return llvm::Error::success();
}

/// Shared by dtc.embedding and dtc.embedding_shard: ids are whole-table
/// rows; those outside this rank's shard read zeros.
llvm::Error embeddingKernel(const KernelCall &call) {
  llvm::Expected<EmbeddingRows> e = readEmbedding(call);
  if (!e)
    return e.takeError();
  const TensorRef &table = call.input(0), &ids = call.input(1);
  llvm::Expected<std::vector<int64_t>> id =
      readIndices(call, ids, e->wholeRows(), "id");
  if (!id)
    return id.takeError();
  size_t rowBytes = e->dim * dtypeSize(table.dtype);
  const char *src = static_cast<const char *>(table.data);
  char *dst = static_cast<char *>(call.output(0).data);
  parallelFor(e->count, e->dim, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t i = rangeBegin; i < rangeEnd; ++i) {
      int64_t row = e->localRow((*id)[i]);
      if (row < 0)
        std::memset(dst + i * rowBytes, 0, rowBytes);
      else
        std::memcpy(dst + i * rowBytes, src + row * rowBytes, rowBytes);
    }
  });
  return llvm::Error::success();
}

llvm::Error gatherElementsKernel(const KernelCall &call) {
  llvm::Expected<ElementLookup> l = readGatherElements(call);
  if (!l)
    return l.takeError();
  llvm::Expected<std::vector<int64_t>> ids =
      readAxisIndices(call, call.input(1), l->size);
  if (!ids)
    return ids.takeError();
  size_t elem = dtypeSize(call.input(0).dtype);
  const char *src = static_cast<const char *>(call.input(0).data);
  char *dst = static_cast<char *>(call.output(0).data);
  parallelFor(l->elements(), 1, [&](int64_t rangeBegin, int64_t rangeEnd) {
    for (int64_t e = rangeBegin; e < rangeEnd; ++e)
      std::memcpy(dst + e * elem, src + l->dataOffset(e, (*ids)[e]) * elem,
                  elem);
  });
  return llvm::Error::success();
}

} // namespace

void registerDataMovementKernels(KernelRegistry &registry) {
  registry.add("dtc.reshape", reshapeKernel);
  registry.add("dtc.transpose", transposeKernel);
  registry.add("dtc.concat", concatKernel);
  registry.add("dtc.slice", sliceKernel);
  registry.add("dtc.embedding", embeddingKernel);
  registry.add("dtc.embedding_shard", embeddingKernel);
  registry.add("dtc.gather_elements", gatherElementsKernel);
}

} // namespace dtc::runtime::cpu
