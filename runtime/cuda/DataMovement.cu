//===- DataMovement.cu - Strided copies, zigzag order, lookups ------------===//

#include "runtime/cuda/CudaCommon.cuh"

#include <optional>

namespace dtc::cuda {

namespace {

template <typename T>
__global__ void gatherKernel(const T *in, T *out, Layout layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = in[layoutOffset(layout, 0, i)];
}

template <typename T>
__global__ void scatterKernel(const T *in, T *out, Layout layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[layoutOffset(layout, 0, i)] = in[i];
}

template <template <typename> class Kernel>
std::string launchBySize(const void *in, void *out, int elemSize,
                         const Layout &layout, const char *what) {
  int64_t n = layoutElements(layout);
  if (n == 0)
    return "";
  unsigned blocks = blocksFor(n);
  cudaStream_t s = computeStream();
  switch (elemSize) {
  case 1:
    Kernel<uint8_t>::launch(blocks, s, in, out, layout, n);
    break;
  case 2:
    Kernel<uint16_t>::launch(blocks, s, in, out, layout, n);
    break;
  case 4:
    Kernel<uint32_t>::launch(blocks, s, in, out, layout, n);
    break;
  case 8:
    Kernel<uint64_t>::launch(blocks, s, in, out, layout, n);
    break;
  default:
    return std::string(what) + ": unsupported element size";
  }
  return launched(what);
}

template <typename T> struct Gather {
  static void launch(unsigned blocks, cudaStream_t s, const void *in, void *out,
                     const Layout &layout, int64_t n) {
    gatherKernel<<<blocks, 256, 0, s>>>(static_cast<const T *>(in),
                                        static_cast<T *>(out), layout, n);
  }
};
template <typename T> struct Scatter {
  static void launch(unsigned blocks, cudaStream_t s, const void *in, void *out,
                     const Layout &layout, int64_t n) {
    scatterKernel<<<blocks, 256, 0, s>>>(static_cast<const T *>(in),
                                         static_cast<T *>(out), layout, n);
  }
};

/// dtc.zigzag_order in words of T: `pieces` pieces of `pieceWords` words per
/// outer index; piece p of the zigzag order is piece p / 2 (p even) or
/// pieces - 1 - p / 2 (p odd) of the natural order.
template <typename T>
__global__ void zigzagKernel(const T *in, T *out, int64_t pieceWords,
                             int64_t pieces, bool inverse, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t w = i % pieceWords, rest = i / pieceWords;
    int64_t p = rest % pieces, o = rest / pieces;
    int64_t z = p % 2 ? pieces - 1 - p / 2 : p / 2;
    int64_t from = inverse ? p : z, to = inverse ? z : p;
    out[(o * pieces + to) * pieceWords + w] =
        in[(o * pieces + from) * pieceWords + w];
  }
}

template <typename T>
void launchZigzag(const void *in, void *out, size_t pieceBytes, int64_t pieces,
                  bool inverse, int64_t outer) {
  int64_t pieceWords = static_cast<int64_t>(pieceBytes / sizeof(T));
  int64_t n = outer * pieces * pieceWords;
  zigzagKernel<<<blocksFor(n), 256, 0, computeStream()>>>(
      static_cast<const T *>(in), static_cast<T *>(out), pieceWords, pieces,
      inverse, n);
}

/// Id `i`'s row of the table shard, -1 for a zero row; flags an id outside
/// the whole table.
__device__ int64_t lookupRow(const Lookup &l, const void *ids, int64_t i,
                             int *error) {
  int64_t id = l.ids64 ? static_cast<const int64_t *>(ids)[i]
                       : static_cast<const int32_t *>(ids)[i];
  if (id < 0 || id >= l.wholeRows) {
    if (threadIdx.x == 0)
      flagError(error, kIdOutOfRange);
    return -1;
  }
  int64_t row = id - l.firstId;
  return row >= 0 && row < l.rows ? row : -1;
}

/// One block per id: rows copied as 4-byte words when they allow it.
__global__ void embeddingKernel(Lookup l, const char *table, size_t rowBytes,
                                const void *ids, char *out, int *error) {
  int64_t i = blockIdx.x;
  int64_t row = lookupRow(l, ids, i, error);
  char *dst = out + i * rowBytes;
  const char *src = row < 0 ? nullptr : table + row * rowBytes;
  if (rowBytes % 4 == 0) {
    const uint32_t *s = reinterpret_cast<const uint32_t *>(src);
    uint32_t *d = reinterpret_cast<uint32_t *>(dst);
    for (size_t j = threadIdx.x; j < rowBytes / 4; j += blockDim.x)
      d[j] = s ? s[j] : 0;
  } else {
    for (size_t j = threadIdx.x; j < rowBytes; j += blockDim.x)
      dst[j] = src ? src[j] : 0;
  }
}

__global__ void embeddingGradKernel(Lookup l, const void *dy, int dyDtype,
                                    const void *ids, float *out, int *error) {
  int64_t i = blockIdx.x;
  int64_t row = lookupRow(l, ids, i, error);
  if (row < 0)
    return;
  for (int64_t j = threadIdx.x; j < l.dim; j += blockDim.x)
    atomicAdd(out + row * l.dim + j, loadF(dy, dyDtype, i * l.dim + j));
}

/// Indices element `e`'s data offset, or -1 (flagged) for an index outside
/// [-size, size); a negative index counts from the end (ONNX).
__device__ int64_t elementOffset(const ElementLookup &l, const void *indices,
                                 int64_t e, int *error) {
  int64_t id = l.ids64 ? static_cast<const int64_t *>(indices)[e]
                       : static_cast<const int32_t *>(indices)[e];
  if (id < -l.size || id >= l.size) {
    flagError(error, kIndexOutOfRange);
    return -1;
  }
  if (id < 0)
    id += l.size;
  int64_t o = e / (l.count * l.inner), i = e % l.inner;
  return (o * l.size + id) * l.inner + i;
}

template <typename T>
__global__ void gatherElementsKernel(ElementLookup l, const T *data,
                                     const void *indices, T *out, int64_t n,
                                     int *error) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t at = elementOffset(l, indices, e, error);
    out[e] = at < 0 ? T() : data[at];
  }
}

__global__ void gatherElementsGradKernel(ElementLookup l, const void *dy,
                                         int dyDtype, const void *indices,
                                         float *out, int64_t n, int *error) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * blockDim.x) {
    int64_t at = elementOffset(l, indices, e, error);
    if (at >= 0)
      atomicAdd(out + at, loadF(dy, dyDtype, e));
  }
}

template <typename T>
void launchGatherElements(const ElementLookup &l, const void *data,
                          const void *indices, void *out, int64_t n) {
  gatherElementsKernel<T><<<blocksFor(n), 256, 0, computeStream()>>>(
      l, static_cast<const T *>(data), indices, static_cast<T *>(out), n,
      errorWord());
}

} // namespace

std::string gatherElements(const ElementLookup &l, const void *data,
                           int elemSize, const void *indices, void *out) {
  int64_t n = l.outer * l.count * l.inner;
  if (n == 0)
    return "";
  switch (elemSize) {
  case 1:
    launchGatherElements<uint8_t>(l, data, indices, out, n);
    break;
  case 2:
    launchGatherElements<uint16_t>(l, data, indices, out, n);
    break;
  case 4:
    launchGatherElements<uint32_t>(l, data, indices, out, n);
    break;
  case 8:
    launchGatherElements<uint64_t>(l, data, indices, out, n);
    break;
  default:
    return "gather_elements: unsupported element size " +
           std::to_string(elemSize);
  }
  return launched("gather_elements kernel");
}

// Elements landing on one data element add with atomics: the sum's order
// (and so its last bits) may vary from run to run, unlike the CPU kernel's.
std::string gatherElementsGrad(const ElementLookup &l, const void *dy,
                               int dyDtype, const void *indices, void *out,
                               int outDtype) {
  int64_t dataElements = l.outer * l.size * l.inner,
          n = l.outer * l.count * l.inner;
  size_t bytes = dataElements * sizeof(float);
  Scratch scratch(outDtype == kF32 ? 0 : bytes);
  float *acc =
      outDtype == kF32 ? static_cast<float *>(out) : scratch.as<float>();
  if (!acc && bytes)
    return "gather_elements_grad: out of device memory";
  if (std::string e = memsetZero(acc, bytes); !e.empty())
    return e;
  if (n) {
    gatherElementsGradKernel<<<blocksFor(n), 256, 0, computeStream()>>>(
        l, dy, dyDtype, indices, acc, n, errorWord());
    if (std::string e = launched("gather_elements_grad kernel"); !e.empty())
      return e;
  }
  if (outDtype != kF32)
    return cast(kF32, acc, outDtype, out, dataElements);
  return "";
}

std::string gather(const void *in, void *out, int elemSize,
                   const Layout &layout) {
  return launchBySize<Gather>(in, out, elemSize, layout, "gather kernel");
}

std::string scatter(const void *in, void *out, size_t outBytes, int elemSize,
                    const Layout &layout) {
  if (std::string e = memsetZero(out, outBytes); !e.empty())
    return e;
  return launchBySize<Scatter>(in, out, elemSize, layout, "scatter kernel");
}

std::string copy2d(const void *in, void *out, size_t chunk, size_t outRow,
                   size_t offset, int64_t outer) {
  return copyPitched(in, chunk, static_cast<char *>(out) + offset, outRow,
                     chunk, outer);
}

std::string copyPitched(const void *src, size_t srcPitch, void *dst,
                        size_t dstPitch, size_t width, int64_t height) {
  if (!width || !height)
    return "";
  // Contiguous rows are one copy. cudaMemcpy2D refuses pitches past the
  // device's limit (2^31 - 1 bytes on current GPUs): such rows, megabytes
  // each, go one copy per row.
  constexpr size_t kMaxPitch = 2147483647;
  if (height == 1 || (srcPitch == width && dstPitch == width)) {
    if (cudaError_t err =
            cudaMemcpyAsync(dst, src, width * height, cudaMemcpyDeviceToDevice,
                            computeStream()))
      return failure("cudaMemcpyAsync", err);
    return "";
  }
  if (srcPitch > kMaxPitch || dstPitch > kMaxPitch) {
    for (int64_t r = 0; r < height; ++r)
      if (cudaError_t err =
              cudaMemcpyAsync(static_cast<char *>(dst) + r * dstPitch,
                              static_cast<const char *>(src) + r * srcPitch,
                              width, cudaMemcpyDeviceToDevice, computeStream()))
        return failure("cudaMemcpyAsync", err);
    return "";
  }
  if (cudaError_t err =
          cudaMemcpy2DAsync(dst, dstPitch, src, srcPitch, width, height,
                            cudaMemcpyDeviceToDevice, computeStream()))
    return failure("cudaMemcpy2DAsync", err);
  return "";
}

std::string zigzagOrder(const void *in, void *out, size_t pieceBytes,
                        int64_t outer, int64_t parts, bool inverse) {
  int64_t pieces = 2 * parts;
  size_t bytes = pieceBytes * pieces * outer;
  if (bytes == 0)
    return "";
  // Pieces move, so the output cannot be the input's memory.
  std::optional<Scratch> copy;
  if (in == out) {
    copy.emplace(bytes);
    if (!*copy)
      return "zigzag_order: out of device memory";
    if (cudaError_t err =
            cudaMemcpyAsync(copy->as<char>(), in, bytes,
                            cudaMemcpyDeviceToDevice, computeStream()))
      return failure("cudaMemcpyAsync", err);
    in = copy->as<char>();
  }
  // The widest word that divides the pieces and both addresses.
  size_t word = 8;
  auto fits = [&](size_t w) {
    return pieceBytes % w == 0 && reinterpret_cast<uintptr_t>(in) % w == 0 &&
           reinterpret_cast<uintptr_t>(out) % w == 0;
  };
  while (word > 1 && !fits(word))
    word /= 2;
  switch (word) {
  case 8:
    launchZigzag<uint64_t>(in, out, pieceBytes, pieces, inverse, outer);
    break;
  case 4:
    launchZigzag<uint32_t>(in, out, pieceBytes, pieces, inverse, outer);
    break;
  case 2:
    launchZigzag<uint16_t>(in, out, pieceBytes, pieces, inverse, outer);
    break;
  default:
    launchZigzag<uint8_t>(in, out, pieceBytes, pieces, inverse, outer);
  }
  return launched("zigzag_order kernel");
}

std::string embedding(const Lookup &l, const void *table, int elemSize,
                      const void *ids, void *out) {
  if (l.count == 0 || l.dim == 0)
    return "";
  embeddingKernel<<<static_cast<unsigned>(l.count), 128, 0, computeStream()>>>(
      l, static_cast<const char *>(table), l.dim * elemSize, ids,
      static_cast<char *>(out), errorWord());
  return launched("embedding kernel");
}

// Rows shared by several ids add with atomics: the sum's order (and so its
// last bits) may vary from run to run, unlike the CPU kernel's.
std::string embeddingGrad(const Lookup &l, const void *dy, int dyDtype,
                          const void *ids, void *out, int outDtype) {
  size_t bytes = l.rows * l.dim * sizeof(float);
  Scratch scratch(outDtype == kF32 ? 0 : bytes);
  float *acc =
      outDtype == kF32 ? static_cast<float *>(out) : scratch.as<float>();
  if (!acc)
    return "embedding_grad: out of device memory";
  if (std::string e = memsetZero(acc, bytes); !e.empty())
    return e;
  if (l.count && l.dim) {
    embeddingGradKernel<<<static_cast<unsigned>(l.count), 128, 0,
                          computeStream()>>>(l, dy, dyDtype, ids, acc,
                                             errorWord());
    if (std::string e = launched("embedding_grad kernel"); !e.empty())
      return e;
  }
  if (outDtype != kF32)
    return cast(kF32, acc, outDtype, out, l.rows * l.dim);
  return "";
}

} // namespace dtc::cuda
