//===- bench_blas_candidates.cpp - one BLAS library on dtc's GEMM shapes --===//
//
// Issue 31: which sgemm should dtc's CPU runtime use on this machine? This
// standalone program (no project headers, no LLVM) dlopen()s one library,
// looks up its row-major sgemm (cblas_sgemm, or oneDNN's dnnl_sgemm) and its
// thread-count setter, and on the transformer GEMM shapes of the CPU
// benchmarks (tokens 1024 = micro-batch 4 x sequence 256, hidden 512,
// vocabulary 50304) prints, per shape, the best GFLOP/s of at least five
// timed runs after a warm-up, the largest error against a double-precision
// reference (relative to the sum of |a||b| terms; above 1e-4 fails), whether
// every run gave the same bits, and a hash of those bits (to compare thread
// counts and libraries). bench/blas_candidates.sh runs it for every
// candidate library installed.
//
// Usage: bench-blas-candidates LIBRARY.so LABEL [THREADS]
// Output: one line per shape,
//   LABEL SHAPE GFLOPS GFLOP/s maxrelerr E deterministic yes|no hash H
// Exit status 1 when a result is wrong, 2 when the library cannot be used.
//
//===----------------------------------------------------------------------===//

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// The CBLAS enumerators' values are fixed by the standard.
enum { kRowMajor = 101, kNoTrans = 111, kTrans = 112 };

using CblasSgemm = void (*)(int order, int transA, int transB, int m, int n,
                            int k, float alpha, const float *a, int lda,
                            const float *b, int ldb, float beta, float *c,
                            int ldc);
// oneDNN: row-major, dims are int64_t, returns dnnl_status_t (0: success).
using DnnlSgemm = int (*)(char transA, char transB, int64_t m, int64_t n,
                          int64_t k, float alpha, const float *a, int64_t lda,
                          const float *b, int64_t ldb, float beta, float *c,
                          int64_t ldc);
using SetThreads = void (*)(int);

struct Library {
  CblasSgemm cblas = nullptr;
  DnnlSgemm dnnl = nullptr;

  void sgemm(bool transA, bool transB, int m, int n, int k, const float *a,
             int lda, const float *b, int ldb, float *c, int ldc) const {
    if (cblas) {
      cblas(kRowMajor, transA ? kTrans : kNoTrans, transB ? kTrans : kNoTrans,
            m, n, k, 1.0f, a, lda, b, ldb, 0.0f, c, ldc);
      return;
    }
    if (int status = dnnl(transA ? 'T' : 'N', transB ? 'T' : 'N', m, n, k, 1.0f,
                          a, lda, b, ldb, 0.0f, c, ldc)) {
      std::fprintf(stderr, "dnnl_sgemm failed: status %d\n", status);
      std::exit(2);
    }
  }
};

struct Shape {
  const char *name;
  bool transA, transB;
  int m, n, k;
  int batch; ///< independent GEMMs issued one cblas call each
};

// Row-major C[m x n] = op(A) op(B); op(A) is m x k, op(B) is k x n.
const Shape kShapes[] = {
    {"square", false, false, 1024, 1024, 1024, 1},
    {"qkv", false, false, 1024, 1536, 512, 1},
    {"mlp-up", false, false, 1024, 2048, 512, 1},
    {"mlp-down", false, false, 1024, 512, 2048, 1},
    {"head", false, true, 1024, 50304, 512, 1},     // X W^T, W is 50304 x 512
    {"head-dX", false, false, 1024, 512, 50304, 1}, // dY W
    {"dW-XtdY", true, false, 512, 2048, 1024, 1},   // X^T dY, X is 1024 x 512
    {"attn-QKt", false, true, 256, 256, 64, 32},    // 4 x 8 heads, Q K^T
    {"attn-PV", false, false, 256, 64, 256, 32},    // P V
};

/// Fixed-seed LCG (Knuth's MMIX constants), values in [-1, 1].
class Lcg {
public:
  explicit Lcg(uint64_t seed) : state_(seed) {}
  float next() {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return float(state_ >> 40) / float(1 << 23) - 1.0f; // 24 bits
  }
  uint64_t nextIndex(uint64_t bound) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state_ >> 33) % bound;
  }

private:
  uint64_t state_;
};

void fill(std::vector<float> &v, uint64_t seed) {
  Lcg lcg(seed);
  for (float &x : v)
    x = lcg.next();
}

uint64_t fnv1a(const std::vector<float> &v) {
  uint64_t h = 1469598103934665603ULL;
  const auto *bytes = reinterpret_cast<const unsigned char *>(v.data());
  for (size_t i = 0, e = v.size() * sizeof(float); i < e; ++i)
    h = (h ^ bytes[i]) * 1099511628211ULL;
  return h;
}

struct Operands {
  const Shape &s;
  int rowsA, colsA, rowsB, colsB;
  size_t sizeA, sizeB, sizeC;
  std::vector<float> a, b, c;

  explicit Operands(const Shape &shape)
      : s(shape), rowsA(s.transA ? s.k : s.m), colsA(s.transA ? s.m : s.k),
        rowsB(s.transB ? s.n : s.k), colsB(s.transB ? s.k : s.n),
        sizeA(size_t(rowsA) * colsA), sizeB(size_t(rowsB) * colsB),
        sizeC(size_t(s.m) * s.n), a(sizeA * s.batch), b(sizeB * s.batch),
        c(sizeC * s.batch) {
    fill(a, 1);
    fill(b, 2);
  }

  void run(const Library &lib) {
    for (int i = 0; i < s.batch; ++i)
      lib.sgemm(s.transA, s.transB, s.m, s.n, s.k, a.data() + i * sizeA, colsA,
                b.data() + i * sizeB, colsB, c.data() + i * sizeC, s.n);
  }

  float elemA(int batch, int i, int p) const {
    return a[batch * sizeA +
             (s.transA ? size_t(p) * colsA + i : size_t(i) * colsA + p)];
  }
  float elemB(int batch, int p, int j) const {
    return b[batch * sizeB +
             (s.transB ? size_t(j) * colsB + p : size_t(p) * colsB + j)];
  }

  /// |c - exact| / sum |a||b| of one entry, in double precision.
  double relError(int batch, int i, int j) const {
    double exact = 0, scale = 0;
    for (int p = 0; p < s.k; ++p) {
      double term = double(elemA(batch, i, p)) * double(elemB(batch, p, j));
      exact += term;
      scale += std::fabs(term);
    }
    double got = c[batch * sizeC + size_t(i) * s.n + j];
    if (!std::isfinite(got))
      return INFINITY;
    return scale > 0 ? std::fabs(got - exact) / scale : std::fabs(got);
  }

  /// The largest relError over every entry when the check is small (2^28
  /// multiply-adds), else over 8192 entries drawn with a fixed seed.
  double maxRelError() const {
    double worst = 0;
    double work = double(s.m) * s.n * s.k * s.batch;
    if (work <= double(1 << 28)) {
      for (int bt = 0; bt < s.batch; ++bt)
        for (int i = 0; i < s.m; ++i)
          for (int j = 0; j < s.n; ++j)
            worst = std::max(worst, relError(bt, i, j));
      return worst;
    }
    Lcg lcg(3);
    for (int t = 0; t < 8192; ++t) {
      int bt = int(lcg.nextIndex(s.batch));
      int i = int(lcg.nextIndex(s.m)), j = int(lcg.nextIndex(s.n));
      worst = std::max(worst, relError(bt, i, j));
    }
    return worst;
  }
};

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

template <typename T> T lookup(void *handle, const char *name) {
  return reinterpret_cast<T>(dlsym(handle, name));
}

/// One line naming the library's version and, for OpenBLAS and BLIS, the
/// kernels it picked, from whichever of these entry points it exports.
std::string describe(void *handle) {
  std::string out;
  if (auto config = lookup<const char *(*)()>(handle, "openblas_get_config"))
    out += std::string("openblas ") + config();
  if (auto core = lookup<const char *(*)()>(handle, "openblas_get_corename"))
    out += std::string(", core ") + core();
  if (auto version =
          lookup<const char *(*)()>(handle, "bli_info_get_version_str"))
    out += std::string("blis ") + version();
  auto archId = lookup<int (*)()>(handle, "bli_arch_query_id");
  auto archName = lookup<const char *(*)(int)>(handle, "bli_arch_string");
  if (archId && archName)
    out += std::string(", arch ") + archName(archId());
  if (auto version =
          lookup<void (*)(char *, int)>(handle, "MKL_Get_Version_String")) {
    char buffer[256] = {};
    version(buffer, sizeof(buffer) - 1);
    out += buffer;
  }
  struct DnnlVersion {
    int major, minor, patch;
    const char *hash;
  };
  if (auto version = lookup<const DnnlVersion *(*)()>(handle, "dnnl_version"))
    if (const DnnlVersion *v = version())
      out += "onednn " + std::to_string(v->major) + "." +
             std::to_string(v->minor) + "." + std::to_string(v->patch) + " (" +
             (v->hash ? v->hash : "?") + ")";
  return out.empty() ? "unknown version" : out;
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr, "usage: %s LIBRARY.so LABEL [THREADS]\n", argv[0]);
    return 2;
  }
  const char *path = argv[1], *label = argv[2];
  int threads = argc > 3 ? std::atoi(argv[3]) : 0;

  void *handle = dlopen(path, RTLD_LOCAL | RTLD_NOW);
  if (!handle) {
    std::fprintf(stderr, "%s: %s\n", label, dlerror());
    return 2;
  }
  Library lib;
  lib.cblas = lookup<CblasSgemm>(handle, "cblas_sgemm");
  if (!lib.cblas)
    lib.dnnl = lookup<DnnlSgemm>(handle, "dnnl_sgemm");
  if (!lib.cblas && !lib.dnnl) {
    std::fprintf(stderr, "%s: %s has neither cblas_sgemm nor dnnl_sgemm\n",
                 label, path);
    return 2;
  }

  // The library's own setter first; OpenMP's (found through the library's
  // dependencies: oneDNN, BLIS-openmp) when it has none.
  std::string setter = "none";
  if (threads > 0) {
    for (const char *name :
         {"openblas_set_num_threads", "bli_thread_set_num_threads",
          "MKL_Set_Num_Threads", "mkl_set_num_threads",
          "omp_set_num_threads"}) {
      if (auto set = lookup<SetThreads>(handle, name)) {
        set(threads);
        setter = name;
        break;
      }
    }
  }
  std::printf("# %s: %s\n# %s, %s, threads %d via %s\n", label, path,
              describe(handle).c_str(),
              lib.cblas ? "cblas_sgemm" : "dnnl_sgemm", threads,
              setter.c_str());
  std::fflush(stdout);

  bool allCorrect = true;
  for (const Shape &s : kShapes) {
    Operands ops(s);
    // Run 1 (also the warm-up) is checked against the double reference;
    // every later run must reproduce its bits. Run 2 starts from a C full
    // of a sentinel, so an entry left unwritten shows.
    std::fill(ops.c.begin(), ops.c.end(), 0.0f);
    ops.run(lib);
    std::vector<float> first = ops.c;
    double error = ops.maxRelError();
    std::fill(ops.c.begin(), ops.c.end(), 12345.0f);
    ops.run(lib);
    bool deterministic = ops.c == first;

    // At least 5 timed runs, more for the small shapes (up to 0.5 s).
    double best = 1e30, total = 0;
    for (int rep = 0; rep < 5 || (total < 0.5 && rep < 200); ++rep) {
      auto start = std::chrono::steady_clock::now();
      ops.run(lib);
      double t = seconds(start);
      best = std::min(best, t);
      total += t;
      deterministic = deterministic && ops.c == first;
    }
    double gflops = 2.0 * s.m * s.n * s.k * s.batch / best / 1e9;
    bool correct = error <= 1e-4;
    allCorrect = allCorrect && correct;
    std::printf("%s %s %.1f GFLOP/s maxrelerr %.2e%s deterministic %s hash "
                "%016llx\n",
                label, s.name, gflops, error, correct ? "" : " (WRONG)",
                deterministic ? "yes" : "no",
                static_cast<unsigned long long>(fnv1a(first)));
    std::fflush(stdout);
  }
  return allCorrect ? 0 : 1;
}
