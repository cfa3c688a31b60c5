//===- Calibrate.h - dtc calibrate: measure this machine --------*- C++ -*-===//
//
// Measures the present machine by running the CPU runtime's own kernels
// (dtc.matmul over several GEMM shapes, dtc.add for memory bandwidth,
// dtc.attention and its gradient) and then a small GPT training step
// end to end, and fits the cost model's few constants, so that
// `dtc compile --cluster FILE.json` predicts CPU-backend step times
// (docs/cost-model.md, "Calibrating on this machine"). The machine is
// described as one "GPU".
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_CALIBRATE_CALIBRATE_H
#define DTC_COMPILER_CALIBRATE_CALIBRATE_H

#include "compiler/costmodel/Cluster.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtc::calibrate {

/// Weighted least squares of y = a + b x with weights 1/y^2, so that the
/// residuals are relative and small and large samples count alike: what
/// every calibration fit is (GEMM curve, link).
class RelativeLineFit {
public:
  void add(double x, double y) {
    double w = 1 / (y * y);
    sw += w;
    sx += w * x;
    sy += w * y;
    sxx += w * x * x;
    sxy += w * x * y;
  }
  /// Whether the x values differ enough to fit a slope.
  bool hasSpread() const { return sw * sxx - sx * sx > 1e-12 * sw * sxx; }
  double slope() const { return (sw * sxy - sx * sy) / (sw * sxx - sx * sx); }
  double intercept() const { return (sy - slope() * sx) / sw; }
  /// The best a with b = 0, and the best b with a = 0.
  double flatIntercept() const { return sy / sw; }
  double slopeThroughOrigin() const { return sxy / sxx; }

private:
  double sw = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
};

/// The median and the worst of `relativeErrors` (not empty).
void summarizeErrors(std::vector<double> relativeErrors, double &median,
                     double &worst);

/// One timed GEMM C[M,N] = A[M,K] B[K,N].
struct GemmSample {
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
  double flops() const { return 2.0 * m * n * k; }
};

/// The cost model's GEMM curve fitted to measurements: a GEMM of shape
/// (M, N, K) runs at peakFlops / (1 + halfSize (1/M + 1/N + 1/K)).
struct GemmFit {
  double peakFlops = 0;
  double halfSize = 0;
  /// |predicted / measured - 1| of the samples' times under the fit.
  double medianError = 0;
  double worstError = 0;
};

/// Fits the curve by weighted least squares on seconds per FLOP, which is
/// linear in x = 1/M + 1/N + 1/K: y = (1 + H x) / R. Weights 1/y^2 make the
/// residuals relative, so small and large GEMMs count alike. A negative
/// slope (small shapes no slower) fits H = 0. Needs two samples with
/// different x.
llvm::Expected<GemmFit> fitGemmCurve(llvm::ArrayRef<GemmSample> samples);

/// Seconds the fitted curve predicts for one GEMM.
double gemmSeconds(const GemmFit &fit, int64_t m, int64_t n, int64_t k);

/// Fused attention forward and backward of one shape, timed.
struct AttentionSample {
  int64_t batch = 0, heads = 0, seq = 0, headDim = 0;
  bool causal = true;
  double forwardSeconds = 0, backwardSeconds = 0;
  /// Forward FLOPs as the cost model counts them (4 b a s^2 d, halved when
  /// causal).
  double forwardFlops() const {
    return 4.0 * batch * heads * seq * seq * headDim * (causal ? 0.5 : 1);
  }
};

/// A small GPT's training step, compiled for this machine with the kernel
/// constants above and run by `dtc run`: what fixes memory_efficiency.
struct StepFit {
  std::string model; ///< "layers/hidden/heads/vocab/seq/batch".
  double measuredSeconds = 0;
  /// plan.json's predicted step time at memory_efficiency 1 and 0.5.
  double predictedFull = 0, predictedHalf = 0;
  double memoryEfficiency = 1;
};

/// The memory efficiency that makes the prediction meet the measured step.
/// Streaming kernels cost S/mu and the rest A, so predictedFull = A + S and
/// predictedHalf = A + 2S; then mu = S / (measured - A), clamped to
/// [0.01, 1] (1 when the model already predicts the step or more).
double fitMemoryEfficiency(double measured, double predictedFull,
                           double predictedHalf);

/// One all-reduce between two ranks of this machine, timed.
struct CollectiveSample {
  double bytes = 0, seconds = 0;
};

/// The link between two ranks fitted to all-reduce timings: the cost
/// model's two-rank all-reduce takes 2 latency + bytes / bandwidth.
struct LinkFit {
  double bytesPerSecond = 0, latencySeconds = 0;
  /// |predicted / measured - 1| of the samples' times under the fit.
  double medianError = 0, worstError = 0;
};

/// Least squares on t = a + b bytes weighted by 1/t^2 (relative residuals);
/// a negative intercept fits a line through the origin. Needs two sizes.
llvm::Expected<LinkFit> fitLink(llvm::ArrayRef<CollectiveSample> samples);

/// Everything `dtc calibrate` measured.
struct Measurements {
  std::string cpu; ///< Model name from /proc/cpuinfo, or "CPU".
  int threads = 1; ///< OpenMP threads the kernels ran on.
  double memoryBytes = 0;
  std::vector<GemmSample> gemms;
  double streamBytes = 0, streamSeconds = 0; ///< dtc.add, a + b -> c.
  double copyBytes = 0, copySeconds = 0;     ///< memcpy, read + write.
  AttentionSample attention;
  double perOpSeconds = 0; ///< dtc.add on one element: the call overhead.
  /// A small GPT training step run end to end (StepFit).
  StepFit step;
  /// All-reduces between two MPI ranks and the link fitted to them; empty
  /// (bytesPerSecond 0) when the ranks could not run, and then the links
  /// fall back to memcpy's bandwidth.
  std::vector<CollectiveSample> collectives;
  LinkFit link;

  double streamBytesPerSecond() const {
    return streamSeconds > 0 ? streamBytes / streamSeconds : 0;
  }
};

struct Options {
  /// Fewer, smaller shapes and repetitions: a second or two.
  bool quick = false;
  /// Also compile and run a small GPT step to fit memory_efficiency.
  bool step = true;
  /// Also time all-reduces between two ranks started from `executable`
  /// (dtc itself: `dtc calibrate --collectives-rank FILE` under mpirun).
  bool collectives = true;
  std::string executable;
};

/// Starts two ranks of `options.executable` that time all-reduces, and
/// returns rank 0's timings.
llvm::Expected<std::vector<CollectiveSample>>
measureCollectives(const Options &options);

/// One of those ranks (under mpirun): times all-reduces of 4 KiB to 16 MiB
/// (4 MiB when `quick`) through the runtime's MpiCommunicator; rank 0
/// writes one "bytes seconds" line per size to `samplesPath`.
llvm::Error runCollectiveRank(bool quick, llvm::StringRef samplesPath);

/// Runs the micro-benchmarks; progress lines go to `log` if given.
llvm::Expected<Measurements> measure(const Options &options,
                                     llvm::raw_ostream *log = nullptr);

/// This machine as a one-GPU cluster: every peak (bf16, fp16, tf32; the CPU
/// computes all of them in fp32) is the fitted GEMM rate with
/// gemm_efficiency.peak = 1, the "HBM" is main memory at the bandwidth
/// dtc.add reaches with memory_efficiency from the step fit, both links are
/// the one two ranks' all-reduces measured (memory copies if they could not
/// run), and kernel_overhead_us is the one-element dtc.add's time.
/// The file is written by dtc::clusterToJson (Cluster.h).
Cluster clusterFromMeasurements(const Measurements &m, const GemmFit &fit,
                                llvm::StringRef name);

/// `dtc calibrate`: measure, fit, print what was measured and fitted, and
/// write the cluster file to `outputPath` atomically (a temporary file
/// renamed into place).
llvm::Error runCalibrate(const Options &options, llvm::StringRef outputPath,
                         llvm::raw_ostream &out);

} // namespace dtc::calibrate

#endif // DTC_COMPILER_CALIBRATE_CALIBRATE_H
