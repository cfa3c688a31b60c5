//===- DataMovement.cpp - Reshape, transpose, concat, slice, embedding ----===//
//
// Byte-level kernels, dtype-agnostic except embedding's ids. Copies run over
// the longest contiguous chunk each op allows (memcpy), rows split across
// threads.
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Embedding.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/cpu/KernelUtil.h"

#include <cstring>

namespace dtc::runtime::cpu {

namespace {

llvm::Error reshapeKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0);
  const TensorRef &out = call.output(0);
  if (in.dtype != out.dtype || in.numElements() != out.numElements())
    return call.error("cannot reshape " + shapeString(in.shape) + " " +
                      dtypeName(in.dtype) + " to " + shapeString(out.shape) +
                      " " + dtypeName(out.dtype));
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
  int64_t total = rows * inner;
#pragma omp parallel for if (total >= kParallelElements)
  for (int64_t row = 0; row < rows; ++row) {
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
}

llvm::Error transposeKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0);
  const TensorRef &out = call.output(0);
  llvm::ArrayRef<int64_t> perm = call.ints("permutation");
  if (static_cast<int64_t>(perm.size()) != in.rank() ||
      out.rank() != in.rank() || in.dtype != out.dtype)
    return call.error("permutation of " + llvm::Twine(perm.size()) +
                      " dims does not match " + shapeString(in.shape) + " -> " +
                      shapeString(out.shape));
  auto inStrides = stridesOf(in.shape);
  llvm::SmallVector<int64_t, 6> shape;
  llvm::SmallVector<int64_t, 6> strides[2];
  llvm::SmallVector<bool, 6> seen(in.rank(), false);
  for (int64_t d = 0; d < in.rank(); ++d) {
    int64_t p = perm[d];
    if (p < 0 || p >= in.rank() || seen[p] || out.shape[d] != in.shape[p])
      return call.error("permutation does not map " + shapeString(in.shape) +
                        " to " + shapeString(out.shape));
    seen[p] = true;
    shape.push_back(out.shape[d]);
    strides[0].push_back(inStrides[p]);
  }
  if (out.numElements() == 0)
    return llvm::Error::success();
  strides[1] = stridesOf(shape);
  collapseDims(shape, strides);
  stridedCopy(static_cast<const char *>(in.data), static_cast<char *>(out.data),
              dtypeSize(in.dtype), shape, strides[0]);
  return llvm::Error::success();
}

llvm::Error concatKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &out = call.output(0);
  int64_t axis = call.i64("axis", 0);
  if (axis < 0)
    axis += out.rank();
  if (axis < 0 || axis >= out.rank())
    return call.error("axis out of range for " + shapeString(out.shape));
  size_t elem = dtypeSize(out.dtype);
  int64_t outer =
      numElements(llvm::ArrayRef<int64_t>(out.shape).take_front(axis));
  int64_t innerAfter =
      numElements(llvm::ArrayRef<int64_t>(out.shape).drop_front(axis + 1));
  int64_t sum = 0;
  for (size_t i = 0; i < call.numInputs(); ++i) {
    const TensorRef &in = call.input(i);
    bool ok = in.rank() == out.rank() && in.dtype == out.dtype;
    for (int64_t d = 0; ok && d < out.rank(); ++d)
      ok = d == axis || in.shape[d] == out.shape[d];
    if (!ok)
      return call.error("input " + llvm::Twine(i) + " " +
                        shapeString(in.shape) + " " + dtypeName(in.dtype) +
                        " does not fit the result " + shapeString(out.shape));
    sum += in.shape[axis];
  }
  if (sum != out.shape[axis])
    return call.error("inputs along axis sum to " + llvm::Twine(sum) +
                      ", result has " + llvm::Twine(out.shape[axis]));
  size_t outRow = out.shape[axis] * innerAfter * elem;
  char *dst = static_cast<char *>(out.data);
  size_t offset = 0;
  for (size_t i = 0; i < call.numInputs(); ++i) {
    const TensorRef &in = call.input(i);
    size_t chunk = in.shape[axis] * innerAfter * elem;
    const char *src = static_cast<const char *>(in.data);
    bool parallel =
        static_cast<int64_t>(outer * chunk) >= kParallelElements * 4;
#pragma omp parallel for if (parallel)
    for (int64_t o = 0; o < outer; ++o)
      if (chunk)
        std::memcpy(dst + o * outRow + offset, src + o * chunk, chunk);
    offset += chunk;
  }
  return llvm::Error::success();
}

llvm::Error sliceKernel(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return err;
  const TensorRef &in = call.input(0);
  const TensorRef &out = call.output(0);
  llvm::ArrayRef<int64_t> starts = call.ints("starts"),
                          limits = call.ints("limits"),
                          steps = call.ints("strides");
  int64_t rank = in.rank();
  if (static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(limits.size()) != rank ||
      static_cast<int64_t>(steps.size()) != rank || out.rank() != rank ||
      in.dtype != out.dtype)
    return call.error("starts, limits and strides need " + llvm::Twine(rank) +
                      " entries each");
  auto inStrides = stridesOf(in.shape);
  llvm::SmallVector<int64_t, 6> shape(out.shape.begin(), out.shape.end());
  llvm::SmallVector<int64_t, 6> strides[2];
  int64_t base = 0;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t expected = steps[d] > 0 && starts[d] >= 0 &&
                               starts[d] <= limits[d] &&
                               limits[d] <= in.shape[d]
                           ? (limits[d] - starts[d] + steps[d] - 1) / steps[d]
                           : -1;
    if (expected != out.shape[d])
      return call.error("slice of dim " + llvm::Twine(d) + " [" +
                        llvm::Twine(starts[d]) + ", " + llvm::Twine(limits[d]) +
                        ") step " + llvm::Twine(steps[d]) + " of " +
                        shapeString(in.shape) + " does not give " +
                        shapeString(out.shape));
    base += starts[d] * inStrides[d];
    strides[0].push_back(inStrides[d] * steps[d]);
  }
  if (out.numElements() == 0)
    return llvm::Error::success();
  strides[1] = stridesOf(shape);
  collapseDims(shape, strides);
  size_t elem = dtypeSize(in.dtype);
  stridedCopy(static_cast<const char *>(in.data) + base * elem,
              static_cast<char *>(out.data), elem, shape, strides[0]);
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
#pragma omp parallel for if (e->count * e->dim >= kParallelElements)
  for (int64_t i = 0; i < e->count; ++i) {
    int64_t row = e->localRow((*id)[i]);
    if (row < 0)
      std::memset(dst + i * rowBytes, 0, rowBytes);
    else
      std::memcpy(dst + i * rowBytes, src + row * rowBytes, rowBytes);
  }
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
}

} // namespace dtc::runtime::cpu
