//===- Gemm.cu - Matmul through cuBLASLt ----------------------------------===//
//
// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so the
// operands go to cuBLASLt swapped. f32 accumulation always (TF32 tensor
// cores for f32 inputs only with DTC_CUDA_TF32=1); batches as strided
// batches (stride 0 broadcasts). The heuristic's choice is cached per
// problem (shapes, dtypes, pointer alignment).
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaCommon.cuh"

#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

namespace dtc::cuda {

namespace {

constexpr size_t kWorkspaceBytes = 64 << 20;

struct Lt {
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  std::string error;
};

Lt &lt() {
  static Lt state;
  static std::once_flag once;
  std::call_once(once, [] {
    if (cublasStatus_t s = cublasLtCreate(&state.handle)) {
      state.error =
          std::string("cublasLtCreate: ") + cublasLtGetStatusString(s);
      return;
    }
    if (cudaError_t err = cudaMalloc(&state.workspace, kWorkspaceBytes)) {
      cudaGetLastError(); // reported through state.error, not the next op
      state.error = failure("cuBLASLt workspace", err);
    }
  });
  return state;
}

cudaDataType_t cudaType(int dtype) {
  switch (dtype) {
  case kBF16:
    return CUDA_R_16BF;
  case kF16:
    return CUDA_R_16F;
  default:
    return CUDA_R_32F;
  }
}

int alignmentOf(const void *p) {
  auto address = reinterpret_cast<uintptr_t>(p);
  int align = 256;
  while (align > 1 && address % align)
    align /= 2;
  return align;
}

std::string status(const char *what, cublasStatus_t s) {
  return std::string(what) + ": " + cublasLtGetStatusString(s);
}

using Key = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t,
                       int64_t, int64_t, int64_t, int64_t, int64_t, int, int,
                       int, int, int, int, bool>;

/// Destroys cuBLASLt descriptors at scope exit.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~Descriptors() {
    if (pref)
      cublasLtMatmulPreferenceDestroy(pref);
    if (c)
      cublasLtMatrixLayoutDestroy(c);
    if (b)
      cublasLtMatrixLayoutDestroy(b);
    if (a)
      cublasLtMatrixLayoutDestroy(a);
    if (op)
      cublasLtMatmulDescDestroy(op);
  }
};

cublasStatus_t makeLayout(cublasLtMatrixLayout_t *layout, cudaDataType_t type,
                          int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                          int64_t stride) {
  if (cublasStatus_t s =
          cublasLtMatrixLayoutCreate(layout, type, static_cast<uint64_t>(rows),
                                     static_cast<uint64_t>(cols), ld))
    return s;
  if (batch <= 1)
    return CUBLAS_STATUS_SUCCESS;
  int32_t count = static_cast<int32_t>(batch);
  if (cublasStatus_t s = cublasLtMatrixLayoutSetAttribute(
          *layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)))
    return s;
  return cublasLtMatrixLayoutSetAttribute(
      *layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
      sizeof(stride));
}

/// C in a dtype cuBLASLt takes for these inputs.
std::string run(const Gemm &g) {
  Lt &state = lt();
  if (!state.error.empty())
    return state.error;
  bool useTf32 = g.abDtype == kF32 && tf32();
  cublasComputeType_t compute =
      useTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  Descriptors desc;
  if (cublasStatus_t s =
          cublasLtMatmulDescCreate(&desc.op, compute, CUDA_R_32F))
    return status("cublasLtMatmulDescCreate", s);
  // cuBLASLt's A is our B and its B our A (the column-major view).
  cublasOperation_t opA = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opB = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &opA,
                                 sizeof(opA));
  cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &opB,
                                 sizeof(opB));
  cudaDataType_t ab = cudaType(g.abDtype), c = cudaType(g.cDtype);
  if (cublasStatus_t s =
          makeLayout(&desc.a, ab, g.transB ? g.k : g.n, g.transB ? g.n : g.k,
                     g.ldb, g.batch, g.strideB))
    return status("cublasLtMatrixLayoutCreate", s);
  if (cublasStatus_t s =
          makeLayout(&desc.b, ab, g.transA ? g.m : g.k, g.transA ? g.k : g.m,
                     g.lda, g.batch, g.strideA))
    return status("cublasLtMatrixLayoutCreate", s);
  if (cublasStatus_t s =
          makeLayout(&desc.c, c, g.n, g.m, g.ldc, g.batch, g.strideC))
    return status("cublasLtMatrixLayoutCreate", s);

  int alignA = alignmentOf(g.b), alignB = alignmentOf(g.a),
      alignC = alignmentOf(g.c);
  Key key{g.transA,  g.transB,  g.m,       g.n,      g.k,
          g.batch,   g.lda,     g.ldb,     g.ldc,    g.strideA,
          g.strideB, g.strideC, g.abDtype, g.cDtype, alignA,
          alignB,    alignC,    0,         useTf32};
  static std::map<Key, cublasLtMatmulAlgo_t> cache;
  static std::mutex mutex;
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = cache.find(key);
    if (it != cache.end()) {
      algo = it->second;
    } else {
      if (cublasStatus_t s = cublasLtMatmulPreferenceCreate(&desc.pref))
        return status("cublasLtMatmulPreferenceCreate", s);
      uint64_t workspace = kWorkspaceBytes;
      uint32_t a32 = alignA, b32 = alignB, c32 = alignC;
      cublasLtMatmulPreferenceSetAttribute(
          desc.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
          sizeof(workspace));
      cublasLtMatmulPreferenceSetAttribute(
          desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &a32,
          sizeof(a32));
      cublasLtMatmulPreferenceSetAttribute(
          desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &b32,
          sizeof(b32));
      cublasLtMatmulPreferenceSetAttribute(
          desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &c32,
          sizeof(c32));
      cublasLtMatmulPreferenceSetAttribute(
          desc.pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &c32,
          sizeof(c32));
      cublasLtMatmulHeuristicResult_t result;
      int found = 0;
      cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(
          state.handle, desc.op, desc.a, desc.b, desc.c, desc.c, desc.pref, 1,
          &result, &found);
      if (s != CUBLAS_STATUS_SUCCESS || found == 0)
        return "cuBLASLt has no algorithm for a " + std::to_string(g.m) + "x" +
               std::to_string(g.n) + "x" + std::to_string(g.k) +
               " GEMM (batch " + std::to_string(g.batch) + ")";
      algo = result.algo;
      cache.emplace(key, algo);
    }
  }
  float alpha = 1.0f, beta = 0.0f;
  if (cublasStatus_t s =
          cublasLtMatmul(state.handle, desc.op, &alpha, g.b, desc.a, g.a,
                         desc.b, &beta, g.c, desc.c, g.c, desc.c, &algo,
                         state.workspace, kWorkspaceBytes, computeStream()))
    return status("cublasLtMatmul", s);
  return "";
}

} // namespace

std::string gemm(const Gemm &g) {
  if (g.m == 0 || g.n == 0 || g.batch == 0)
    return "";
  if (g.k == 0) {
    static const int sizes[] = {0, 4, 2, 2, 8, 8, 4, 1, 1};
    // Empty sums: zeros (the C of every batch is contiguous here).
    return memsetZero(g.c, g.batch * g.m * g.n * sizes[g.cDtype]);
  }
  if (g.cDtype != kF32 && g.cDtype != g.abDtype) {
    // cuBLASLt pairs inputs with a result of their own type or f32 (f32
    // inputs: f32 only): other results are converted from f32 after.
    Scratch c32(g.batch * g.m * g.n * sizeof(float));
    if (!c32)
      return "matmul: out of device memory";
    Gemm wide = g;
    wide.cDtype = kF32;
    wide.c = c32.as<void>();
    wide.ldc = g.n;
    wide.strideC = g.m * g.n;
    if (std::string e = run(wide); !e.empty())
      return e;
    return cast(kF32, c32.as<void>(), g.cDtype, g.c, g.batch * g.m * g.n);
  }
  return run(g);
}

} // namespace dtc::cuda
