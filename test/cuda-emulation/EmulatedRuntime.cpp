//===- EmulatedRuntime.cpp - CUDA runtime and cuBLASLt on the host --------===//
//
// The host side of the CUDA host emulation (include/Emulator.h has the
// device side and what is and is not emulated):
// - The runtime API on host memory: one device, calls run at once and in
//   order, a failing call leaves its error for cudaGetLastError as the real
//   runtime does. New allocations are filled with 0xff bytes (NaN as floats)
//   so that reads before writes show in the results.
// - cuBLASLt as a reference GEMM: D = alpha op(A) op(B) + beta C, column
//   major, strided batches, accumulated in double. It refuses the type
//   combinations and shapes cuBLASLt refuses and the pointers less aligned
//   than the preference the algorithm was chosen for; it has no heuristics
//   and does not round to TF32.
//
//===----------------------------------------------------------------------===//

#include "cublasLt.h"
#include "cuda_bf16.h"
#include "cuda_fp16.h"
#include "cuda_runtime.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

//===----------------------------------------------------------------------===//
// Runtime API
//===----------------------------------------------------------------------===//

struct CUstream_st {};

namespace {

cudaError_t lastError = cudaSuccess;
CUstream_st theStream;

cudaError_t failed(cudaError_t error) {
  lastError = error;
  return error;
}

} // namespace

void emu::recordError(cudaError_t error) { lastError = error; }

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "no error";
  case cudaErrorInvalidValue:
    return "invalid argument";
  case cudaErrorMemoryAllocation:
    return "out of memory";
  case cudaErrorInvalidConfiguration:
    return "invalid configuration argument";
  }
  return "unknown error";
}

cudaError_t cudaGetLastError() {
  cudaError_t error = lastError;
  lastError = cudaSuccess;
  return error;
}

cudaError_t cudaSetDevice(int device) {
  return device == 0 ? cudaSuccess : failed(cudaErrorInvalidValue);
}

cudaError_t cudaGetDeviceCount(int *count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *pool, int) {
  *pool = nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void *) {
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned) {
  *stream = &theStream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

cudaError_t cudaMalloc(void **pointer, size_t bytes) {
  // cudaMalloc's alignment; aligned_alloc wants a multiple of it.
  constexpr size_t kAlignment = 256;
  *pointer = std::aligned_alloc(kAlignment, (bytes + kAlignment - 1) /
                                                kAlignment * kAlignment);
  if (!*pointer && bytes)
    return failed(cudaErrorMemoryAllocation);
  std::memset(*pointer, 0xff, bytes);
  return cudaSuccess;
}

cudaError_t cudaFree(void *pointer) {
  std::free(pointer);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void **pointer, size_t bytes, cudaStream_t) {
  return cudaMalloc(pointer, bytes);
}

cudaError_t cudaFreeAsync(void *pointer, cudaStream_t) {
  return cudaFree(pointer);
}

cudaError_t cudaMemset(void *pointer, int value, size_t bytes) {
  std::memset(pointer, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *pointer, int value, size_t bytes,
                            cudaStream_t) {
  return cudaMemset(pointer, value, bytes);
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes,
                       cudaMemcpyKind) {
  std::memcpy(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes,
                            cudaMemcpyKind kind, cudaStream_t) {
  return cudaMemcpy(dst, src, bytes, kind);
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dstPitch, const void *src,
                              size_t srcPitch, size_t width, size_t height,
                              cudaMemcpyKind, cudaStream_t) {
  if (width > dstPitch || width > srcPitch)
    return failed(cudaErrorInvalidValue);
  for (size_t row = 0; row < height; ++row)
    std::memcpy(static_cast<char *>(dst) + row * dstPitch,
                static_cast<const char *>(src) + row * srcPitch, width);
  return cudaSuccess;
}

//===----------------------------------------------------------------------===//
// cuBLASLt
//===----------------------------------------------------------------------===//

struct cublasLtContext {};

struct cublasLtMatmulDescOpaque {
  cublasComputeType_t compute;
  cudaDataType_t scaleType;
  int32_t transA = CUBLAS_OP_N, transB = CUBLAS_OP_N;
};

struct cublasLtMatrixLayoutOpaque {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t batchStride = 0; // in elements
};

struct cublasLtMatmulPreferenceOpaque {
  uint64_t workspaceBytes = 0;
  // The minimum alignments of A, B, C and D (cuBLASLt's default: 256).
  uint32_t alignment[4] = {256, 256, 256, 256};
};

namespace {

cublasLtContext theContext;

/// Stores an attribute's value in the field that `attr` names among
/// `fields` ({attribute, field} pairs); the value must be exactly of the
/// field's type.
template <typename Attr, typename... T>
cublasStatus_t setAttribute(Attr attr, const void *value, size_t bytes,
                            std::pair<Attr, T *>... fields) {
  cublasStatus_t status = CUBLAS_STATUS_INVALID_VALUE;
  auto set = [&](Attr known, auto *field) {
    if (known != attr || bytes != sizeof(*field))
      return;
    std::memcpy(field, value, bytes);
    status = CUBLAS_STATUS_SUCCESS;
  };
  (set(fields.first, fields.second), ...);
  return status;
}

size_t elementBytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

float load(cudaDataType_t type, const void *base, int64_t index) {
  switch (type) {
  case CUDA_R_32F:
    return static_cast<const float *>(base)[index];
  case CUDA_R_16BF:
    return __bfloat162float(static_cast<const __nv_bfloat16 *>(base)[index]);
  case CUDA_R_16F:
    return __half2float(static_cast<const __half *>(base)[index]);
  }
  std::abort();
}

void store(cudaDataType_t type, void *base, int64_t index, float value) {
  switch (type) {
  case CUDA_R_32F:
    static_cast<float *>(base)[index] = value;
    return;
  case CUDA_R_16BF:
    static_cast<__nv_bfloat16 *>(base)[index] = __float2bfloat16_rn(value);
    return;
  case CUDA_R_16F:
    static_cast<__half *>(base)[index] = __float2half_rn(value);
    return;
  }
}

/// cuBLASLt's supported type combinations with f32 compute and scale.
bool supportedTypes(const cublasLtMatmulDescOpaque &desc,
                    const cublasLtMatrixLayoutOpaque &a,
                    const cublasLtMatrixLayoutOpaque &b,
                    const cublasLtMatrixLayoutOpaque &c) {
  if (desc.scaleType != CUDA_R_32F || a.type != b.type)
    return false;
  if (a.type == CUDA_R_32F)
    return c.type == CUDA_R_32F;
  // TF32 is for f32 inputs only; bf16 and f16 write their own type or f32.
  return desc.compute == CUBLAS_COMPUTE_32F &&
         (c.type == a.type || c.type == CUDA_R_32F);
}

/// op(A) is m x k, op(B) k x n, C and D m x n, all with the same batch.
bool consistentShapes(const cublasLtMatmulDescOpaque &desc,
                      const cublasLtMatrixLayoutOpaque &a,
                      const cublasLtMatrixLayoutOpaque &b,
                      const cublasLtMatrixLayoutOpaque &c,
                      const cublasLtMatrixLayoutOpaque &d) {
  uint64_t aRows = desc.transA ? a.cols : a.rows;
  uint64_t k = desc.transA ? a.rows : a.cols;
  uint64_t bRows = desc.transB ? b.cols : b.rows;
  uint64_t bCols = desc.transB ? b.rows : b.cols;
  return aRows == c.rows && bRows == k && bCols == c.cols && d.rows == c.rows &&
         d.cols == c.cols && a.batch == c.batch && b.batch == c.batch &&
         d.batch == c.batch;
}

bool supported(const cublasLtMatmulDescOpaque &desc,
               const cublasLtMatrixLayoutOpaque &a,
               const cublasLtMatrixLayoutOpaque &b,
               const cublasLtMatrixLayoutOpaque &c,
               const cublasLtMatrixLayoutOpaque &d) {
  if (supportedTypes(desc, a, b, c) && d.type == c.type &&
      consistentShapes(desc, a, b, c, d))
    return true;
  std::fprintf(stderr,
               "cuda emulation: cuBLASLt refuses types (%d, %d, %d) compute "
               "%d, A %llux%llu%s, B %llux%llu%s, C %llux%llu, batch %d\n",
               a.type, b.type, c.type, desc.compute, (unsigned long long)a.rows,
               (unsigned long long)a.cols, desc.transA ? "^T" : "",
               (unsigned long long)b.rows, (unsigned long long)b.cols,
               desc.transB ? "^T" : "", (unsigned long long)c.rows,
               (unsigned long long)c.cols, c.batch);
  return false;
}

uint32_t alignmentOf(const void *pointer) {
  auto address = reinterpret_cast<uintptr_t>(pointer);
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment)
    alignment /= 2;
  return alignment;
}

} // namespace

const char *cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
  *handle = &theContext;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc,
                                        cublasComputeType_t compute,
                                        cudaDataType_t scaleType) {
  *desc = new cublasLtMatmulDescOpaque{compute, scaleType};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  delete desc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                               cublasLtMatmulDescAttributes_t attr,
                               const void *value, size_t bytes) {
  return setAttribute(attr, value, bytes,
                      std::pair{CUBLASLT_MATMUL_DESC_TRANSA, &desc->transA},
                      std::pair{CUBLASLT_MATMUL_DESC_TRANSB, &desc->transB});
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout,
                                          cudaDataType_t type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  // Column major: a column's rows must fit in the leading dimension.
  if (ld < 1 || uint64_t(ld) < rows)
    return CUBLAS_STATUS_INVALID_VALUE;
  *layout = new cublasLtMatrixLayoutOpaque{type, rows, cols, ld};
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  delete layout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                 cublasLtMatrixLayoutAttribute_t attr,
                                 const void *value, size_t bytes) {
  return setAttribute(
      attr, value, bytes,
      std::pair{CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &layout->batch},
      std::pair{CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                &layout->batchStride});
}

cublasStatus_t
cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref) {
  *pref = new cublasLtMatmulPreferenceOpaque;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                     cublasLtMatmulPreferenceAttributes_t attr,
                                     const void *value, size_t bytes) {
  return setAttribute(attr, value, bytes,
                      std::pair{CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                &pref->workspaceBytes},
                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                &pref->alignment[0]},
                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                &pref->alignment[1]},
                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                &pref->alignment[2]},
                      std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                &pref->alignment[3]});
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
    cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t pref, int requested,
    cublasLtMatmulHeuristicResult_t *results, int *found) {
  *found = 0;
  if (requested < 1)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported(*desc, *a, *b, *c, *d))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  // The one "algorithm" remembers the alignments it may assume.
  std::memset(results, 0, sizeof(*results));
  std::memcpy(results->algo.data, pref->alignment, sizeof(pref->alignment));
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t desc,
                              const void *alpha, const void *a,
                              cublasLtMatrixLayout_t aLayout, const void *b,
                              cublasLtMatrixLayout_t bLayout, const void *beta,
                              const void *c, cublasLtMatrixLayout_t cLayout,
                              void *d, cublasLtMatrixLayout_t dLayout,
                              const cublasLtMatmulAlgo_t *algo, void *, size_t,
                              cudaStream_t) {
  if (!supported(*desc, *aLayout, *bLayout, *cLayout, *dLayout))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  uint32_t assumed[4];
  std::memcpy(assumed, algo->data, sizeof(assumed));
  if (alignmentOf(a) < assumed[0] || alignmentOf(b) < assumed[1] ||
      alignmentOf(c) < assumed[2] || alignmentOf(d) < assumed[3]) {
    std::fprintf(stderr, "cuda emulation: cublasLtMatmul pointers are less "
                         "aligned than the algorithm's preference\n");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  const cublasLtMatrixLayoutOpaque &la = *aLayout, &lb = *bLayout,
                                   &lc = *cLayout, &ld = *dLayout;
  float alphaValue, betaValue;
  std::memcpy(&alphaValue, alpha, sizeof(float));
  std::memcpy(&betaValue, beta, sizeof(float));
  uint64_t m = lc.rows, n = lc.cols, k = desc->transA ? la.rows : la.cols;
  for (int32_t batch = 0; batch < lc.batch; ++batch) {
    auto at = [batch](const void *base, const cublasLtMatrixLayoutOpaque &l) {
      return static_cast<const char *>(base) +
             batch * l.batchStride * elementBytes(l.type);
    };
    const char *aBatch = at(a, la), *bBatch = at(b, lb), *cBatch = at(c, lc);
    char *dBatch = const_cast<char *>(at(d, ld));
    for (uint64_t j = 0; j < n; ++j) {
      for (uint64_t i = 0; i < m; ++i) {
        double sum = 0;
        for (uint64_t p = 0; p < k; ++p) {
          float x = desc->transA ? load(la.type, aBatch, p + i * la.ld)
                                 : load(la.type, aBatch, i + p * la.ld);
          float y = desc->transB ? load(lb.type, bBatch, j + p * lb.ld)
                                 : load(lb.type, bBatch, p + j * lb.ld);
          sum += double(x) * y;
        }
        // beta == 0: C is not read (it may hold NaNs), as documented.
        float value = alphaValue * float(sum);
        if (betaValue != 0)
          value += betaValue * load(lc.type, cBatch, i + j * lc.ld);
        store(ld.type, dBatch, i + j * ld.ld, value);
      }
    }
  }
  return CUBLAS_STATUS_SUCCESS;
}
