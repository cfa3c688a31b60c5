#include "cublasLt.h"
#include "cuda_runtime.h"
#include <cassert>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

static cudaError_t lastError = cudaSuccess;
static std::mutex reportMutex;
static std::set<std::string> reported;
static size_t dynBytes = 0;
static std::vector<char> dynBuffer;
namespace emu {
void report(const char *what) {
  std::lock_guard<std::mutex> l(reportMutex);
  if (reported.insert(what).second)
    fprintf(stderr, "EMU WARNING: %s (block %u,%u thread %u)\n", what,
            blockIdx.x, blockIdx.y, threadIdx.x);
}
void *dynamicShared() { return dynBuffer.data(); }
void syncthreads() { block->bar->arrive_and_wait(); }
void syncwarp() {
  int w = linearTid() / 32;
  block->warpBar[w]->arrive_and_wait();
}
long long launches = 0;
void launch(dim3 grid, dim3 threads, size_t smem, std::function<void()> body) {
  ++launches;
  int n = threads.x * threads.y * threads.z;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 ||
      grid.z > 65535 || n == 0 || n > 1024 || smem > 227 * 1024) {
    fprintf(stderr,
            "EMU: invalid launch config grid %u,%u,%u block %d smem %zu\n",
            grid.x, grid.y, grid.z, n, smem);
    lastError = cudaErrorInvalidConfiguration;
    return;
  }
  if (smem > 48 * 1024)
    fprintf(stderr, "EMU NOTE: dynamic smem %zu > 48K\n", smem);
  if ((unsigned long long)grid.x * grid.y * grid.z > 20000) {
    fprintf(stderr, "EMU: grid too large to emulate (%u,%u,%u)\n", grid.x,
            grid.y, grid.z);
    abort();
  }
  dynBuffer.assign(smem + 16, (char)0xA5);
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Block b;
        b.threads = n;
        b.bar = std::make_unique<std::barrier<>>(n);
        int warps = (n + 31) / 32;
        for (int w = 0; w < warps; ++w) {
          b.warpSize[w] = std::min(32, n - 32 * w);
          b.warpBar[w] = std::make_unique<std::barrier<>>(b.warpSize[w]);
        }
        std::memset(b.valid, 0, sizeof b.valid);
        std::vector<std::thread> ts;
        ts.reserve(n);
        for (int t = 0; t < n; ++t)
          ts.emplace_back([&, t] {
            block = &b;
            blockIdx = dim3(bx, by, bz);
            gridDim = grid;
            blockDim = threads;
            threadIdx = dim3(t % threads.x, (t / threads.x) % threads.y,
                             t / (threads.x * threads.y));
            body();
            b.bar->arrive_and_drop();
            b.warpBar[t / 32]->arrive_and_drop();
          });
        for (auto &th : ts)
          th.join();
      }
}
} // namespace emu

const char *cudaGetErrorString(cudaError_t e) {
  return e == cudaSuccess                 ? "no error"
         : e == cudaErrorMemoryAllocation ? "out of memory"
                                          : "invalid configuration/value";
}
cudaError_t cudaGetLastError() {
  cudaError_t e = lastError;
  lastError = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return lastError; }
size_t emuFailAllocAbove = SIZE_MAX;
cudaError_t cudaMalloc(void **p, size_t n) {
  if (n > emuFailAllocAbove) {
    *p = nullptr;
    return lastError = cudaErrorMemoryAllocation;
  }
  *p = aligned_alloc(256, (n + 255) / 256 * 256);
  memset(*p, 0xFF, n);
  return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
  free(p);
  return cudaSuccess;
}
cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t) {
  return cudaMalloc(p, n);
}
cudaError_t cudaFreeAsync(void *p, cudaStream_t) {
  free(p);
  return cudaSuccess;
}
cudaError_t cudaMemset(void *p, int v, size_t n) {
  memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t) {
  memset(p, v, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpy(void *d, const void *s, size_t n, cudaMemcpyKind) {
  memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind,
                            cudaStream_t) {
  memmove(d, s, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpy2DAsync(void *d, size_t dp, const void *s, size_t sp,
                              size_t w, size_t h, cudaMemcpyKind,
                              cudaStream_t) {
  if (w > dp || w > sp)
    return lastError = cudaErrorInvalidValue;
  for (size_t r = 0; r < h; ++r)
    memmove((char *)d + r * dp, (const char *)s + r * sp, w);
  return cudaSuccess;
}
static int streamDummy;
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) {
  *s = &streamDummy;
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t *s) {
  *s = &streamDummy;
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaSetDevice(int d) {
  return d == 0 ? cudaSuccess : cudaErrorInvalidValue;
}
cudaError_t cudaGetDeviceCount(int *n) {
  *n = 1;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t *p, int) {
  *p = nullptr;
  return cudaSuccess;
}
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t, cudaMemPoolAttr, void *) {
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
  strcpy(p->name, "emu");
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int *v) {
  *v = 13000;
  return cudaSuccess;
}
cudaError_t emuFuncSetAttribute(const void *, cudaFuncAttribute, int) {
  return cudaSuccess;
}

// ---------------- cuBLASLt mock (column-major reference) ----------------
struct EmuLtHandle {
  int x;
};
struct EmuLtDesc {
  cublasComputeType_t compute;
  cudaDataType_t scale;
  int opA = 0, opB = 0;
};
struct EmuLtLayout {
  cudaDataType_t type;
  uint64_t rows, cols;
  int64_t ld;
  int32_t batch = 1;
  int64_t stride = 0;
};
struct EmuLtPref {
  uint64_t ws = 0;
  uint32_t align[4] = {256, 256, 256, 256};
};
long long emuGemmCalls = 0;
cublasStatus_t cublasLtCreate(cublasLtHandle_t *h) {
  *h = new EmuLtHandle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t h) {
  delete h;
  return CUBLAS_STATUS_SUCCESS;
}
const char *cublasLtGetStatusString(cublasStatus_t s) {
  return s == 0    ? "ok"
         : s == 15 ? "CUBLAS_STATUS_NOT_SUPPORTED"
                   : "CUBLAS_STATUS_INVALID_VALUE";
}
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *d,
                                        cublasComputeType_t c,
                                        cudaDataType_t s) {
  *d = new EmuLtDesc{c, s};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t d) {
  delete d;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t d,
                                              cublasLtMatmulDescAttributes_t a,
                                              const void *v, size_t n) {
  if (n != sizeof(int32_t))
    return CUBLAS_STATUS_INVALID_VALUE;
  int32_t x;
  memcpy(&x, v, 4);
  if (a == CUBLASLT_MATMUL_DESC_TRANSA)
    d->opA = x;
  else if (a == CUBLASLT_MATMUL_DESC_TRANSB)
    d->opB = x;
  else
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *l,
                                          cudaDataType_t t, uint64_t r,
                                          uint64_t c, int64_t ld) {
  if (ld < (int64_t)std::max<uint64_t>(1, r)) {
    fprintf(stderr, "EMU LT: ld %ld < rows %lu\n", (long)ld, (unsigned long)r);
    *l = nullptr;
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  *l = new EmuLtLayout{t, r, c, ld};
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t l) {
  delete l;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t
cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t l,
                                 cublasLtMatrixLayoutAttribute_t a,
                                 const void *v, size_t n) {
  if (a == CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT) {
    if (n != 4)
      return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&l->batch, v, 4);
  } else if (a == CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET) {
    if (n != 8)
      return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&l->stride, v, 8);
  } else
    return CUBLAS_STATUS_INVALID_VALUE;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *p) {
  *p = new EmuLtPref;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t p) {
  delete p;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t p,
                                     cublasLtMatmulPreferenceAttributes_t a,
                                     const void *v, size_t n) {
  if (a == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
    if (n != 8)
      return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&p->ws, v, 8);
  } else {
    if (n != 4)
      return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&p->align[a - 5], v, 4);
  }
  return CUBLAS_STATUS_SUCCESS;
}
static bool supported(EmuLtDesc *d, EmuLtLayout *a, EmuLtLayout *b,
                      EmuLtLayout *c) {
  if (d->scale != CUDA_R_32F)
    return false;
  if (a->type != b->type)
    return false;
  if (d->compute == CUBLAS_COMPUTE_32F_FAST_TF32 && a->type != CUDA_R_32F)
    return false;
  if (a->type == CUDA_R_32F)
    return c->type == CUDA_R_32F;
  return c->type == a->type || c->type == CUDA_R_32F;
}
static bool shapesOk(EmuLtDesc *d, EmuLtLayout *A, EmuLtLayout *B,
                     EmuLtLayout *C, uint64_t &m, uint64_t &n, uint64_t &k) {
  m = C->rows;
  n = C->cols;
  uint64_t am = d->opA ? A->cols : A->rows, ak = d->opA ? A->rows : A->cols;
  uint64_t bk = d->opB ? B->cols : B->rows, bn = d->opB ? B->rows : B->cols;
  k = ak;
  if (am != m || bn != n || bk != k) {
    fprintf(stderr,
            "EMU LT: shape mismatch A %lux%lu op%d B %lux%lu op%d C %lux%lu\n",
            (unsigned long)A->rows, (unsigned long)A->cols, d->opA,
            (unsigned long)B->rows, (unsigned long)B->cols, d->opB,
            (unsigned long)C->rows, (unsigned long)C->cols);
    return false;
  }
  if (A->batch != C->batch || B->batch != C->batch) {
    fprintf(stderr, "EMU LT: batch mismatch\n");
    return false;
  }
  return true;
}
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t, cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c,
    cublasLtMatrixLayout_t dd, cublasLtMatmulPreference_t p, int req,
    cublasLtMatmulHeuristicResult_t *r, int *found) {
  uint64_t m, n, k;
  *found = 0;
  if (!a || !b || !c || !dd)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported(d, a, b, c) || !shapesOk(d, a, b, c, m, n, k)) {
    fprintf(stderr,
            "EMU LT: unsupported combination types %d %d %d compute %d\n",
            a->type, b->type, c->type, d->compute);
    return CUBLAS_STATUS_NOT_SUPPORTED;
  }
  memset(r, 0, sizeof *r);
  memcpy(r->algo.data, p->align, sizeof p->align);
  *found = 1;
  return CUBLAS_STATUS_SUCCESS;
}
static float ld(cudaDataType_t t, const void *p, int64_t i) {
  if (t == CUDA_R_32F)
    return ((const float *)p)[i];
  if (t == CUDA_R_16BF)
    return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
  return __half2float(((const __half *)p)[i]);
}
static void st(cudaDataType_t t, void *p, int64_t i, float v) {
  if (t == CUDA_R_32F)
    ((float *)p)[i] = v;
  else if (t == CUDA_R_16BF)
    ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(v);
  else
    ((__half *)p)[i] = __float2half_rn(v);
}
static int alignOf(const void *p) {
  auto a = (uintptr_t)p;
  int al = 256;
  while (al > 1 && a % al)
    al /= 2;
  return al;
}
cublasStatus_t
cublasLtMatmul(cublasLtHandle_t, cublasLtMatmulDesc_t d, const void *alpha,
               const void *A, cublasLtMatrixLayout_t la, const void *B,
               cublasLtMatrixLayout_t lb, const void *beta, const void *C,
               cublasLtMatrixLayout_t lc, void *D, cublasLtMatrixLayout_t ldd,
               const cublasLtMatmulAlgo_t *algo, void *, size_t, cudaStream_t) {
  ++emuGemmCalls;
  uint64_t m, n, k;
  if (!supported(d, la, lb, lc) || !shapesOk(d, la, lb, lc, m, n, k))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  uint32_t al[4];
  memcpy(al, algo->data, sizeof al);
  if (alignOf(A) < (int)al[0] || alignOf(B) < (int)al[1] ||
      alignOf(C) < (int)al[2] || alignOf(D) < (int)al[3])
    fprintf(stderr,
            "EMU LT: pointer less aligned than the algo's preference\n");
  float a = *(const float *)alpha, b = *(const float *)beta;
  for (int32_t bt = 0; bt < lc->batch; ++bt) {
    const char *Ab = (const char *)A;
    const char *Bb = (const char *)B;
    char *Db = (char *)D;
    int esA = la->type == CUDA_R_32F ? 4 : 2,
        esC = lc->type == CUDA_R_32F ? 4 : 2;
    Ab += bt * la->stride * esA;
    Bb += bt * lb->stride * esA;
    Db += bt * ldd->stride * esC;
    for (uint64_t j = 0; j < n; ++j)
      for (uint64_t i = 0; i < m; ++i) {
        double s = 0;
        for (uint64_t p = 0; p < k; ++p) {
          float x = d->opA ? ld(la->type, Ab, p + i * la->ld)
                           : ld(la->type, Ab, i + p * la->ld);
          float y = d->opB ? ld(lb->type, Bb, j + p * lb->ld)
                           : ld(lb->type, Bb, p + j * lb->ld);
          s += (double)x * y;
        }
        float old = b != 0
                        ? ld(lc->type, (const char *)C + bt * lc->stride * esC,
                             i + j * lc->ld)
                        : 0.0f;
        st(ldd->type, Db, i + j * ldd->ld, a * (float)s + b * old);
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
