//===- KernelUtil.cpp - Helpers shared by the CPU kernels -----------------===//

#include "runtime/cpu/KernelUtil.h"
#include "runtime/cpu/Parallel.h"

#include <cblas.h>

#include <algorithm>
#include <cstring>

namespace dtc::runtime::cpu {

llvm::Expected<std::vector<int64_t>>
readIndices(const KernelCall &call, const TensorRef &t, int64_t limit,
            llvm::StringRef what, std::optional<int64_t> ignore) {
  std::vector<int64_t> values(t.numElements());
  for (int64_t i = 0, n = values.size(); i < n; ++i) {
    values[i] = loadAsInt(t, i);
    if (values[i] != ignore && (values[i] < 0 || values[i] >= limit))
      return call.error(what + " " + llvm::Twine(values[i]) + " at position " +
                        llvm::Twine(i) + " is out of range [0, " +
                        llvm::Twine(limit) + ")");
  }
  return values;
}

llvm::Expected<std::vector<int64_t>>
readAxisIndices(const KernelCall &call, const TensorRef &t, int64_t size) {
  std::vector<int64_t> values(t.numElements());
  for (int64_t i = 0, n = values.size(); i < n; ++i) {
    int64_t id = loadAsInt(t, i);
    if (id < -size || id >= size)
      return call.error("index " + llvm::Twine(id) + " at position " +
                        llvm::Twine(i) + " is out of range [" +
                        llvm::Twine(-size) + ", " + llvm::Twine(size) + ")");
    values[i] = id < 0 ? id + size : id;
  }
  return values;
}

void loadF32(const TensorRef &t, std::vector<float> &out) {
  int64_t n = t.numElements();
  out.resize(n);
  float *dst = out.data();
  switch (t.dtype) {
  case DType::F32:
    std::memcpy(dst, t.data, n * sizeof(float));
    return;
  case DType::BF16: {
    const uint16_t *src = t.as<uint16_t>();
    parallelFor(n, kWorkCopy, [&](int64_t rangeBegin, int64_t rangeEnd) {
      for (int64_t i = rangeBegin; i < rangeEnd; ++i)
        dst[i] = bf16ToFloat(src[i]);
    });
    return;
  }
  case DType::F16: {
    const uint16_t *src = t.as<uint16_t>();
    parallelFor(n, kWorkCopy, [&](int64_t rangeBegin, int64_t rangeEnd) {
      for (int64_t i = rangeBegin; i < rangeEnd; ++i)
        dst[i] = halfToFloat(src[i]);
    });
    return;
  }
  case DType::F64: {
    const double *src = t.as<double>();
    for (int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<float>(src[i]);
    return;
  }
  default:
    for (int64_t i = 0; i < n; ++i)
      dst[i] = static_cast<float>(loadAsInt(t, i));
    return;
  }
}

void storeF32(const float *values, const TensorRef &t) {
  int64_t n = t.numElements();
  switch (t.dtype) {
  case DType::F32:
    if (values != t.f32())
      std::memcpy(t.data, values, n * sizeof(float));
    return;
  case DType::BF16: {
    uint16_t *dst = t.as<uint16_t>();
    parallelFor(n, kWorkCopy, [&](int64_t rangeBegin, int64_t rangeEnd) {
      for (int64_t i = rangeBegin; i < rangeEnd; ++i)
        dst[i] = floatToBF16(values[i]);
    });
    return;
  }
  case DType::F16: {
    uint16_t *dst = t.as<uint16_t>();
    parallelFor(n, kWorkCopy, [&](int64_t rangeBegin, int64_t rangeEnd) {
      for (int64_t i = rangeBegin; i < rangeEnd; ++i)
        dst[i] = floatToHalf(values[i]);
    });
    return;
  }
  case DType::F64: {
    double *dst = t.as<double>();
    for (int64_t i = 0; i < n; ++i)
      dst[i] = values[i];
    return;
  }
  default:
    return; // float kernels only produce float tensors
  }
}

void parallelSgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
                   float alpha, const float *a, int64_t lda, const float *b,
                   int64_t ldb, float *c, int64_t ldc) {
  if (m <= 0 || n <= 0)
    return;
  if (k <= 0) {
    for (int64_t i = 0; i < m; ++i)
      std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  // Tiles as tall as keeps at least 16 of them: each tile re-reads its
  // K x 256 panel of B, so a 512-row tile reads B a quarter as often as a
  // 128-row one (the LM head's 100 MB weight, 8 times per GEMM at 1024
  // tokens before). Chosen from the shape alone, like the tiles themselves.
  constexpr int64_t kColBlock = 256, kMinTiles = 16;
  int64_t colBlocks = (n + kColBlock - 1) / kColBlock;
  int64_t rowBlock = 512;
  while (rowBlock > 128 &&
         (m + rowBlock - 1) / rowBlock * colBlocks < kMinTiles)
    rowBlock /= 2;
  int64_t rowBlocks = (m + rowBlock - 1) / rowBlock;
  int64_t tasks = rowBlocks * colBlocks;
  parallelForTasks(
      tasks, m * n * k / (kMacsPerWork * tasks), [&](int64_t task) {
        int64_t i0 = (task / colBlocks) * rowBlock;
        int64_t j0 = (task % colBlocks) * kColBlock;
        int64_t rows = std::min(rowBlock, m - i0);
        int64_t cols = std::min(kColBlock, n - j0);
        const float *aTile = transA ? a + i0 : a + i0 * lda;
        const float *bTile = transB ? b + j0 * ldb : b + j0;
        cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
                    transB ? CblasTrans : CblasNoTrans, rows, cols, k, alpha,
                    aTile, lda, bTile, ldb, 0.0f, c + i0 * ldc + j0, ldc);
      });
}

void collapseDims(
    llvm::SmallVectorImpl<int64_t> &shape,
    llvm::MutableArrayRef<llvm::SmallVector<int64_t, 6>> strides) {
  // Drop size-1 dimensions: their stride never matters.
  llvm::SmallVector<int64_t, 6> newShape;
  llvm::SmallVector<llvm::SmallVector<int64_t, 6>, 4> newStrides(
      strides.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1)
      continue;
    bool merge = !newShape.empty();
    for (size_t o = 0; o < strides.size() && merge; ++o)
      merge = newStrides[o].back() == strides[o][d] * shape[d];
    if (merge) {
      newShape.back() *= shape[d];
      for (size_t o = 0; o < strides.size(); ++o)
        newStrides[o].back() = strides[o][d];
      continue;
    }
    newShape.push_back(shape[d]);
    for (size_t o = 0; o < strides.size(); ++o)
      newStrides[o].push_back(strides[o][d]);
  }
  if (newShape.empty()) {
    newShape.push_back(1);
    for (auto &s : newStrides)
      s.push_back(0);
  }
  shape.assign(newShape.begin(), newShape.end());
  for (size_t o = 0; o < strides.size(); ++o)
    strides[o] = newStrides[o];
}

} // namespace dtc::runtime::cpu
