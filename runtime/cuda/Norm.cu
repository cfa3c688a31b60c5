//===- Norm.cu - Softmax, layer/rms norm, cross-entropy and gradients -----===//
//
// The semantics of runtime/cpu/Norm.cpp, LossShards.cpp (cross_entropy)
// and Gradient.cpp: one block per row for rows along the last dim; the
// weight/bias gradients sum per-chunk partials in a fixed order.
//
//===----------------------------------------------------------------------===//

#include "runtime/cuda/CudaCommon.cuh"

namespace dtc::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void softmaxRows(int dtype, const void *in, void *out, int64_t rows,
                            int64_t size) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * size;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x)
      mx = fmaxf(mx, loadF(in, dtype, base + j));
    mx = blockMax(mx);
    float sum = 0;
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x)
      sum += expf(loadF(in, dtype, base + j) - mx);
    float inv = 1.0f / blockSum(sum);
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x)
      storeF(out, dtype, base + j, expf(loadF(in, dtype, base + j) - mx) * inv);
  }
}

/// inner > 1: one thread per (outer, inner) column.
__global__ void softmaxColumns(int dtype, const void *in, void *out,
                               int64_t outer, int64_t size, int64_t inner) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       t < outer * inner; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = t / inner * size * inner + t % inner;
    float mx = -INFINITY;
    for (int64_t j = 0; j < size; ++j)
      mx = fmaxf(mx, loadF(in, dtype, base + j * inner));
    float sum = 0;
    for (int64_t j = 0; j < size; ++j)
      sum += expf(loadF(in, dtype, base + j * inner) - mx);
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < size; ++j)
      storeF(out, dtype, base + j * inner,
             expf(loadF(in, dtype, base + j * inner) - mx) * inv);
  }
}

/// dx = y (dy - sum(y dy)) along the axis; one thread per column (the
/// common case, inner == 1, gets a block per row).
__global__ void softmaxGradRows(int yDtype, const void *y, int dyDtype,
                                const void *dy, int outDtype, void *out,
                                int64_t rows, int64_t size) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * size;
    double dot = 0;
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x)
      dot += static_cast<double>(loadF(y, yDtype, base + j)) *
             loadF(dy, dyDtype, base + j);
    float s = static_cast<float>(blockSum(dot));
    for (int64_t j = threadIdx.x; j < size; j += blockDim.x)
      storeF(out, outDtype, base + j,
             loadF(y, yDtype, base + j) * (loadF(dy, dyDtype, base + j) - s));
  }
}

__global__ void softmaxGradColumns(int yDtype, const void *y, int dyDtype,
                                   const void *dy, int outDtype, void *out,
                                   int64_t outer, int64_t size, int64_t inner) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
       t < outer * inner; t += int64_t(gridDim.x) * blockDim.x) {
    int64_t base = t / inner * size * inner + t % inner;
    double dot = 0;
    for (int64_t j = 0; j < size; ++j)
      dot += static_cast<double>(loadF(y, yDtype, base + j * inner)) *
             loadF(dy, dyDtype, base + j * inner);
    float s = static_cast<float>(dot);
    for (int64_t j = 0; j < size; ++j) {
      int64_t idx = base + j * inner;
      storeF(out, outDtype, idx,
             loadF(y, yDtype, idx) * (loadF(dy, dyDtype, idx) - s));
    }
  }
}

__global__ void normRows(bool rms, int dtype, const void *x, int wDtype,
                         const void *w, int bDtype, const void *b, int outDtype,
                         void *out, int64_t rows, int64_t n, double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * n;
    float mean = 0;
    if (!rms) {
      float sum = 0;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        sum += loadF(x, dtype, base + j);
      mean = blockSum(sum) / static_cast<float>(n);
    }
    float var = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float c = loadF(x, dtype, base + j) - mean;
      var += c * c;
    }
    var = blockSum(var) / static_cast<float>(n);
    float inv = static_cast<float>(1.0 / sqrt(static_cast<double>(var) + eps));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float bias = b ? loadF(b, bDtype, j) : 0.0f;
      storeF(out, outDtype, base + j,
             (loadF(x, dtype, base + j) - mean) * inv * loadF(w, wDtype, j) +
                 bias);
    }
  }
}

/// dx per row; keeps each row's mean and rstd for the weight gradients.
__global__ void normGradRows(bool rms, int xDtype, const void *x, int wDtype,
                             const void *w, int dyDtype, const void *dy,
                             int dxDtype, void *dx, float *means, float *rstds,
                             int64_t rows, int64_t n, double eps) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t base = r * n;
    double m = 0;
    if (!rms) {
      double sum = 0;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        sum += loadF(x, xDtype, base + j);
      m = blockSum(sum) / n;
    }
    double var = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      double c = loadF(x, xDtype, base + j) - m;
      var += c * c;
    }
    var = blockSum(var) / n;
    float mean = static_cast<float>(m);
    float rstd = static_cast<float>(1.0 / sqrt(var + eps));
    if (threadIdx.x == 0) {
      means[r] = mean;
      rstds[r] = rstd;
    }
    double sumG = 0, sumGX = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float g = loadF(dy, dyDtype, base + j) * loadF(w, wDtype, j);
      float xhat = (loadF(x, xDtype, base + j) - mean) * rstd;
      sumG += g;
      sumGX += static_cast<double>(g) * xhat;
    }
    sumG = blockSum(sumG);
    sumGX = blockSum(sumGX);
    float meanG = rms ? 0.0f : static_cast<float>(sumG / n);
    float meanGX = static_cast<float>(sumGX / n);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      float g = loadF(dy, dyDtype, base + j) * loadF(w, wDtype, j);
      float xhat = (loadF(x, xDtype, base + j) - mean) * rstd;
      storeF(dx, dxDtype, base + j, rstd * (g - meanG - xhat * meanGX));
    }
  }
}

/// Partial dw/db over a chunk of rows: [chunks, n] each.
__global__ void normGradColumns(int xDtype, const void *x, int dyDtype,
                                const void *dy, const float *means,
                                const float *rstds, float *dwPartial,
                                float *dbPartial, int64_t rows, int64_t n,
                                int64_t chunkRows) {
  int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  int64_t c = blockIdx.y;
  if (j >= n)
    return;
  int64_t begin = c * chunkRows;
  int64_t end = begin + chunkRows < rows ? begin + chunkRows : rows;
  float sw = 0, sb = 0;
  for (int64_t r = begin; r < end; ++r) {
    float g = loadF(dy, dyDtype, r * n + j);
    float xhat = (loadF(x, xDtype, r * n + j) - means[r]) * rstds[r];
    sw += g * xhat;
    sb += g;
  }
  dwPartial[c * n + j] = sw;
  if (dbPartial)
    dbPartial[c * n + j] = sb;
}

__global__ void crossEntropyRows(int dtype, const void *logits,
                                 const void *labels, bool labels64,
                                 double *losses, int64_t rows, int64_t vocab,
                                 int64_t ignore, int *error) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t label = labels64 ? static_cast<const int64_t *>(labels)[r]
                             : static_cast<const int32_t *>(labels)[r];
    if (label == ignore)
      continue;
    if (label < 0 || label >= vocab) {
      if (threadIdx.x == 0)
        flagError(error, kLabelOutOfRange);
      continue;
    }
    int64_t base = r * vocab;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      mx = fmaxf(mx, loadF(logits, dtype, base + j));
    mx = blockMax(mx);
    float sum = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      sum += expf(loadF(logits, dtype, base + j) - mx);
    sum = blockSum(sum);
    if (threadIdx.x == 0)
      losses[r] = mx + log(static_cast<double>(sum)) -
                  loadF(logits, dtype, base + label);
  }
}

/// One block: the mean over counted rows, in a fixed order.
__global__ void crossEntropyMean(const double *losses, const void *labels,
                                 bool labels64, int64_t rows, int64_t ignore,
                                 int outDtype, void *out) {
  double total = 0, count = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    int64_t label = labels64 ? static_cast<const int64_t *>(labels)[r]
                             : static_cast<const int32_t *>(labels)[r];
    if (label == ignore)
      continue;
    total += losses[r];
    count += 1;
  }
  total = blockSum(total);
  count = blockSum(count);
  if (threadIdx.x == 0)
    storeD(out, outDtype, 0, count > 0 ? total / count : nan(""));
}

__global__ void countLabels(const void *labels, bool labels64, int64_t rows,
                            int64_t ignore, int64_t *count) {
  int64_t c = 0;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    int64_t label = labels64 ? static_cast<const int64_t *>(labels)[r]
                             : static_cast<const int32_t *>(labels)[r];
    c += label != ignore;
  }
  c = blockSum(c);
  if (threadIdx.x == 0)
    *count = c;
}

__global__ void crossEntropyGradRows(int dtype, const void *logits,
                                     const void *labels, bool labels64,
                                     int gradDtype, const void *gradLoss,
                                     const int64_t *count, int outDtype,
                                     void *out, int64_t rows, int64_t vocab,
                                     int64_t ignore, int *error) {
  int64_t counted = *count;
  float factor =
      counted ? loadF(gradLoss, gradDtype, 0) / static_cast<float>(counted)
              : 0.0f;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t label = labels64 ? static_cast<const int64_t *>(labels)[r]
                             : static_cast<const int32_t *>(labels)[r];
    int64_t base = r * vocab;
    bool skip = label == ignore || counted == 0;
    if (!skip && (label < 0 || label >= vocab)) {
      if (threadIdx.x == 0)
        flagError(error, kLabelOutOfRange);
      skip = true;
    }
    if (skip) {
      for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
        storeF(out, outDtype, base + j, 0.0f);
      continue;
    }
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      mx = fmaxf(mx, loadF(logits, dtype, base + j));
    mx = blockMax(mx);
    double sum = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x)
      sum += expf(loadF(logits, dtype, base + j) - mx);
    float inv = static_cast<float>(1.0 / blockSum(sum));
    for (int64_t j = threadIdx.x; j < vocab; j += blockDim.x) {
      float d = expf(loadF(logits, dtype, base + j) - mx) * inv * factor;
      storeF(out, outDtype, base + j, j == label ? d - factor : d);
    }
  }
}

//===----------------------------------------------------------------------===//
// The vocabulary-parallel loss (runtime/cpu/LossShards.cpp is the reference)
//===----------------------------------------------------------------------===//

__device__ __forceinline__ int64_t labelAt(const void *labels, bool labels64,
                                           int64_t r) {
  return labels64 ? static_cast<const int64_t *>(labels)[r]
                  : static_cast<const int32_t *>(labels)[r];
}

/// One block per row: the shard's max, sum of exp(logit - max) (in
/// double) and the label's logit when this shard holds it.
__global__ void crossEntropyStatsRows(LossShard s, int dtype,
                                      const void *logits, const void *labels,
                                      bool labels64, float *stats, int *error) {
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    int64_t label = labelAt(labels, labels64, r);
    if (label != s.ignore && (label < 0 || label >= s.wholeVocab) &&
        threadIdx.x == 0)
      flagError(error, kLabelOutOfRange);
    int64_t base = r * s.vocab;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < s.vocab; j += blockDim.x)
      mx = fmaxf(mx, loadF(logits, dtype, base + j));
    mx = blockMax(mx);
    double sum = 0;
    for (int64_t j = threadIdx.x; j < s.vocab; j += blockDim.x)
      sum += exp(static_cast<double>(loadF(logits, dtype, base + j)) - mx);
    sum = blockSum(sum);
    if (threadIdx.x == 0) {
      int64_t local = label - s.firstId;
      bool here = label != s.ignore && local >= 0 && local < s.vocab;
      stats[3 * r] = mx;
      stats[3 * r + 1] = static_cast<float>(sum);
      stats[3 * r + 2] = here ? loadF(logits, dtype, base + local) : 0.0f;
    }
  }
}

/// A row's maximum over the shards and its sum of exp(logit - maximum).
__device__ void rowNorm(const float *stats, int64_t shards, float &max,
                        double &sum) {
  max = -INFINITY;
  for (int64_t k = 0; k < shards; ++k)
    max = fmaxf(max, stats[3 * k]);
  sum = 0;
  for (int64_t k = 0; k < shards; ++k)
    if (stats[3 * k + 1] > 0)
      sum += stats[3 * k + 1] * exp(static_cast<double>(stats[3 * k]) - max);
}

/// One block: the mean over counted rows, each summed in a fixed order.
__global__ void crossEntropyFromStatsMean(LossShard s, const float *stats,
                                          const void *labels, bool labels64,
                                          int outDtype, void *out) {
  double total = 0, count = 0;
  for (int64_t r = threadIdx.x; r < s.rows; r += blockDim.x) {
    if (labelAt(labels, labels64, r) == s.ignore)
      continue;
    const float *row = stats + r * 3 * s.shards;
    float mx;
    double sum;
    rowNorm(row, s.shards, mx, sum);
    double target = 0;
    for (int64_t k = 0; k < s.shards; ++k)
      target += row[3 * k + 2];
    total += mx + log(sum) - target;
    count += 1;
  }
  total = blockSum(total);
  count = blockSum(count);
  if (threadIdx.x == 0)
    storeD(out, outDtype, 0, count > 0 ? total / count : nan(""));
}

__global__ void crossEntropyShardGradRows(
    LossShard s, int dtype, const void *logits, const void *labels,
    bool labels64, const float *stats, int gradDtype, const void *gradLoss,
    const int64_t *count, int outDtype, void *out, int *error) {
  int64_t counted = *count;
  float factor =
      counted ? loadF(gradLoss, gradDtype, 0) / static_cast<float>(counted)
              : 0.0f;
  for (int64_t r = blockIdx.x; r < s.rows; r += gridDim.x) {
    int64_t label = labelAt(labels, labels64, r);
    int64_t base = r * s.vocab;
    bool skip = label == s.ignore || counted == 0;
    if (!skip && (label < 0 || label >= s.wholeVocab)) {
      if (threadIdx.x == 0)
        flagError(error, kLabelOutOfRange);
      skip = true;
    }
    if (skip) {
      for (int64_t j = threadIdx.x; j < s.vocab; j += blockDim.x)
        storeF(out, outDtype, base + j, 0.0f);
      continue;
    }
    float mx;
    double sum;
    rowNorm(stats + r * 3 * s.shards, s.shards, mx, sum);
    float scale = static_cast<float>(factor / sum);
    int64_t local = label - s.firstId;
    for (int64_t j = threadIdx.x; j < s.vocab; j += blockDim.x) {
      float d = expf(loadF(logits, dtype, base + j) - mx) * scale;
      storeF(out, outDtype, base + j, j == local ? d - factor : d);
    }
  }
}

unsigned rowBlocks(int64_t rows) {
  return static_cast<unsigned>(rows < (1 << 20) ? (rows ? rows : 1)
                                                : (1 << 20));
}

} // namespace

std::string softmax(int dtype, const void *in, void *out, int64_t outer,
                    int64_t size, int64_t inner) {
  if (outer * size * inner == 0)
    return "";
  if (inner == 1)
    softmaxRows<<<rowBlocks(outer), kThreads, 0, computeStream()>>>(
        dtype, in, out, outer, size);
  else
    softmaxColumns<<<blocksFor(outer * inner), kThreads, 0, computeStream()>>>(
        dtype, in, out, outer, size, inner);
  return launched("softmax kernel");
}

std::string softmaxGrad(int yDtype, const void *y, int dyDtype, const void *dy,
                        int outDtype, void *out, int64_t outer, int64_t size,
                        int64_t inner) {
  if (outer * size * inner == 0)
    return "";
  if (inner == 1)
    softmaxGradRows<<<rowBlocks(outer), kThreads, 0, computeStream()>>>(
        yDtype, y, dyDtype, dy, outDtype, out, outer, size);
  else
    softmaxGradColumns<<<blocksFor(outer * inner), kThreads, 0,
                         computeStream()>>>(yDtype, y, dyDtype, dy, outDtype,
                                            out, outer, size, inner);
  return launched("softmax_grad kernel");
}

std::string norm(bool rms, int dtype, const void *x, int wDtype, const void *w,
                 int bDtype, const void *b, int outDtype, void *out,
                 int64_t rows, int64_t n, double eps) {
  if (rows * n == 0)
    return "";
  normRows<<<rowBlocks(rows), kThreads, 0, computeStream()>>>(
      rms, dtype, x, wDtype, w, bDtype, b, outDtype, out, rows, n, eps);
  return launched("norm kernel");
}

std::string normGrad(bool rms, int xDtype, const void *x, int wDtype,
                     const void *w, int dyDtype, const void *dy, int dxDtype,
                     void *dx, int dwDtype, void *dw, int dbDtype, void *db,
                     int64_t rows, int64_t n, double eps) {
  if (n == 0)
    return "";
  if (rows == 0) {
    static const int sizes[] = {0, 4, 2, 2, 8, 8, 4, 1, 1};
    if (std::string e = memsetZero(dw, n * sizes[dwDtype]); !e.empty())
      return e;
    return db ? memsetZero(db, n * sizes[dbDtype]) : "";
  }
  // Rows per partial: 64, more when the grid's y would pass 65535.
  int64_t kChunkRows = std::max<int64_t>(64, (rows + 65534) / 65535);
  int64_t chunks = (rows + kChunkRows - 1) / kChunkRows;
  Scratch stats(2 * rows * sizeof(float));
  Scratch partial((db ? 2 : 1) * chunks * n * sizeof(float));
  Scratch sums(2 * n * sizeof(float));
  if (!stats || !partial || !sums)
    return "norm_grad: out of device memory";
  float *means = stats.as<float>(), *rstds = means + rows;
  normGradRows<<<rowBlocks(rows), kThreads, 0, computeStream()>>>(
      rms, xDtype, x, wDtype, w, dyDtype, dy, dxDtype, dx, means, rstds, rows,
      n, eps);
  if (std::string e = launched("norm_grad kernel"); !e.empty())
    return e;
  float *dwPartial = partial.as<float>();
  float *dbPartial = db ? dwPartial + chunks * n : nullptr;
  dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
            static_cast<unsigned>(chunks));
  normGradColumns<<<grid, kThreads, 0, computeStream()>>>(
      xDtype, x, dyDtype, dy, means, rstds, dwPartial, dbPartial, rows, n,
      kChunkRows);
  if (std::string e = launched("norm_grad weight kernel"); !e.empty())
    return e;
  // Partials summed over chunks in order, then converted to the outputs.
  float *dwSum = dwDtype == kF32 ? static_cast<float *>(dw) : sums.as<float>();
  if (std::string e = reduce(Reduce::Sum, kF32, dwPartial, dwSum, 1, chunks, n);
      !e.empty())
    return e;
  if (dwDtype != kF32)
    if (std::string e = cast(kF32, dwSum, dwDtype, dw, n); !e.empty())
      return e;
  if (!db)
    return "";
  float *dbSum =
      dbDtype == kF32 ? static_cast<float *>(db) : sums.as<float>() + n;
  if (std::string e = reduce(Reduce::Sum, kF32, dbPartial, dbSum, 1, chunks, n);
      !e.empty())
    return e;
  if (dbDtype != kF32)
    return cast(kF32, dbSum, dbDtype, db, n);
  return "";
}

std::string crossEntropy(int dtype, const void *logits, const void *labels,
                         bool labels64, int outDtype, void *out, int64_t rows,
                         int64_t vocab, int64_t ignore) {
  Scratch losses(rows * sizeof(double));
  if (!losses)
    return "cross_entropy: out of device memory";
  if (rows > 0) {
    crossEntropyRows<<<rowBlocks(rows), kThreads, 0, computeStream()>>>(
        dtype, logits, labels, labels64, losses.as<double>(), rows, vocab,
        ignore, errorWord());
    if (std::string e = launched("cross_entropy kernel"); !e.empty())
      return e;
  }
  crossEntropyMean<<<1, 1024, 0, computeStream()>>>(
      losses.as<double>(), labels, labels64, rows, ignore, outDtype, out);
  return launched("cross_entropy mean kernel");
}

std::string crossEntropyGrad(int dtype, const void *logits, const void *labels,
                             bool labels64, int gradDtype, const void *gradLoss,
                             int outDtype, void *out, int64_t rows,
                             int64_t vocab, int64_t ignore) {
  // With vocab 0 the kernels still run: every label not ignored is out of
  // range, an error as on the CPU.
  if (rows == 0)
    return "";
  Scratch count(sizeof(int64_t));
  if (!count)
    return "cross_entropy_grad: out of device memory";
  countLabels<<<1, 1024, 0, computeStream()>>>(labels, labels64, rows, ignore,
                                               count.as<int64_t>());
  if (std::string e = launched("cross_entropy_grad count kernel"); !e.empty())
    return e;
  crossEntropyGradRows<<<rowBlocks(rows), kThreads, 0, computeStream()>>>(
      dtype, logits, labels, labels64, gradDtype, gradLoss, count.as<int64_t>(),
      outDtype, out, rows, vocab, ignore, errorWord());
  return launched("cross_entropy_grad kernel");
}

std::string crossEntropyStats(const LossShard &s, int dtype, const void *logits,
                              const void *labels, bool labels64, float *stats) {
  if (s.rows == 0)
    return "";
  crossEntropyStatsRows<<<rowBlocks(s.rows), kThreads, 0, computeStream()>>>(
      s, dtype, logits, labels, labels64, stats, errorWord());
  return launched("cross_entropy_stats kernel");
}

std::string crossEntropyFromStats(const LossShard &s, const float *stats,
                                  const void *labels, bool labels64,
                                  int outDtype, void *out) {
  crossEntropyFromStatsMean<<<1, 1024, 0, computeStream()>>>(
      s, stats, labels, labels64, outDtype, out);
  return launched("cross_entropy_from_stats kernel");
}

std::string crossEntropyShardGrad(const LossShard &s, int dtype,
                                  const void *logits, const void *labels,
                                  bool labels64, const float *stats,
                                  int gradDtype, const void *gradLoss,
                                  int outDtype, void *out) {
  if (s.rows == 0)
    return "";
  Scratch count(sizeof(int64_t));
  if (!count)
    return "cross_entropy_shard_grad: out of device memory";
  countLabels<<<1, 1024, 0, computeStream()>>>(labels, labels64, s.rows,
                                               s.ignore, count.as<int64_t>());
  if (std::string e = launched("cross_entropy_shard_grad count kernel");
      !e.empty())
    return e;
  crossEntropyShardGradRows<<<rowBlocks(s.rows), kThreads, 0,
                              computeStream()>>>(
      s, dtype, logits, labels, labels64, stats, gradDtype, gradLoss,
      count.as<int64_t>(), outDtype, out, errorWord());
  return launched("cross_entropy_shard_grad kernel");
}

} // namespace dtc::cuda
