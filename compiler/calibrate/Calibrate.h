//===- Calibrate.h - dtc calibrate: measure this machine --------*- C++ -*-===//
//
// Measures the present machine by running the runtime's own kernels on the
// backend `dtc run` would use (the CPU, or with --backend cuda the GPU):
// dtc.matmul over several GEMM shapes, dtc.add for memory bandwidth,
// dtc.attention and its gradient, all-reduces between two ranks (MPI on
// the CPU, NCCL between two GPUs), and then a small GPT training step end
// to end. It fits the cost model's few constants, so that
// `dtc compile --cluster FILE.json` predicts that backend's step times
// (docs/cost-model.md, "Calibrating on this machine"). A CPU is described
// as one "GPU"; a GPU keeps the node topology and scale-out link of its
// preset, which one machine cannot measure.
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
  /// Measured on the CUDA backend (one GPU), else on the CPU's.
  bool cuda = false;
  /// The CPU's model name from /proc/cpuinfo ("CPU" if unknown), or the
  /// GPU's name (cudaDeviceProp::name).
  std::string device;
  int threads = 1; ///< OpenMP threads the CPU kernels ran on.
  int gpus = 0;    ///< GPUs on this machine (CUDA).
  double memoryBytes = 0;
  /// GEMMs in the dtype models train in on this backend: f32 on the CPU
  /// (which computes every dtype in f32), bf16 on a GPU.
  std::vector<GemmSample> gemms;
  /// CUDA: an f32 GEMM's rate (TF32 tensor cores where the runtime enables
  /// them) over the bf16 rate of the same shape; 1 on the CPU.
  double f32OverBf16 = 1;
  double streamBytes = 0, streamSeconds = 0; ///< dtc.add, a + b -> c.
  double copyBytes = 0, copySeconds = 0;     ///< One copy, read + write.
  AttentionSample attention;
  double perOpSeconds = 0; ///< dtc.add on one element: the call overhead.
  /// A small GPT training step run end to end (StepFit).
  StepFit step;
  /// All-reduces between two ranks and the link fitted to them; empty
  /// (bytesPerSecond 0) when the ranks could not run (or, on CUDA, when
  /// the machine has one GPU), and then the links fall back to memcpy's
  /// bandwidth on the CPU and to the GPU preset's links on CUDA.
  std::vector<CollectiveSample> collectives;
  LinkFit link;

  double streamBytesPerSecond() const {
    return streamSeconds > 0 ? streamBytes / streamSeconds : 0;
  }
};

struct Options {
  /// `--backend`: cpu, cuda, or (empty) cuda where a GPU is present.
  std::string backend;
  /// Fewer, smaller shapes and repetitions: a second or two.
  bool quick = false;
  /// Also compile and run a small GPT step to fit memory_efficiency.
  bool step = true;
  /// Also time all-reduces between two ranks started from `executable`
  /// (dtc itself: `dtc calibrate --collectives-rank FILE` under mpirun;
  /// on CUDA only where the machine has two GPUs).
  bool collectives = true;
  std::string executable;
};

/// Starts two ranks of `options.executable` that time all-reduces, and
/// returns rank 0's timings.
llvm::Expected<std::vector<CollectiveSample>>
measureCollectives(const Options &options);

/// One of those ranks (under mpirun): times all-reduces through the
/// runtime's communicator for `backend` (MpiCommunicator on host buffers,
/// 4 KiB to 16 MiB, 4 MiB when `quick`; NcclCommunicator on device
/// buffers, 64 KiB to 256 MiB, 64 MiB when `quick`); rank 0 writes one
/// "bytes seconds" line per size to `samplesPath`.
llvm::Error runCollectiveRank(llvm::StringRef backend, bool quick,
                              llvm::StringRef samplesPath);

/// Runs the micro-benchmarks; progress lines go to `log` if given.
llvm::Expected<Measurements> measure(const Options &options,
                                     llvm::raw_ostream *log = nullptr);

/// The cluster preset of a GPU named `device` ("NVIDIA H100 80GB HBM3":
/// "h100"), or "" when no preset is that GPU.
llvm::StringRef presetForGpu(llvm::StringRef device);

/// This machine as a cluster. Every peak is a fitted GEMM rate with
/// gemm_efficiency.peak = 1; the HBM is the bandwidth dtc.add reaches, with
/// memory_efficiency from the step fit; kernel_overhead_us is the
/// one-element dtc.add's time.
///  - A CPU is one "GPU": bf16, fp16 and tf32 are the f32 rate (the CPU
///    computes all of them in f32), there is no fp8, and both links are the
///    one two ranks' all-reduces measured (memory copies if they could not
///    run).
///  - A GPU: bf16 and fp16 are the bf16 rate, tf32 that times f32OverBf16,
///    fp8 the bf16 rate times its preset's fp8 / bf16 ratio (the runtime
///    has no fp8 GEMM to time); the NVLink link is the one two GPUs'
///    all-reduces measured, else its preset's; GPUs per node and the
///    scale-out link are its preset's (or one node of this machine's GPUs
///    on nominal PCIe figures when no preset is that GPU).
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
