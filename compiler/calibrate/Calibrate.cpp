//===- Calibrate.cpp - dtc calibrate: measure this machine ----------------===//
//
// Every benchmark calls the registered CPU kernel the runtime itself would
// call, on tensors of the shapes a transformer step uses, and keeps the
// median of several runs after a warm-up (the median, not the best, because
// `dtc run` steps are compared by their median too).
//
//===----------------------------------------------------------------------===//

#include "compiler/calibrate/Calibrate.h"

#include "compiler/Driver.h"
#include "compiler/costmodel/Compute.h"
#include "compiler/run/Run.h"
#include "compiler/support/Error.h"
#include "frontends/modelgen/ModelGen.h"
#include "runtime/core/Kernel.h"
#include "runtime/cpu/CpuKernels.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>

using namespace dtc;
using namespace dtc::calibrate;
namespace rt = dtc::runtime;

//===----------------------------------------------------------------------===//
// Fitting
//===----------------------------------------------------------------------===//

static double gemmX(int64_t m, int64_t n, int64_t k) {
  return 1.0 / static_cast<double>(m) + 1.0 / static_cast<double>(n) +
         1.0 / static_cast<double>(k);
}

double calibrate::gemmSeconds(const GemmFit &fit, int64_t m, int64_t n,
                              int64_t k) {
  return 2.0 * m * n * k * (1 + fit.halfSize * gemmX(m, n, k)) / fit.peakFlops;
}

void calibrate::summarizeErrors(std::vector<double> relativeErrors,
                                double &median, double &worst) {
  llvm::sort(relativeErrors);
  worst = relativeErrors.back();
  size_t mid = relativeErrors.size() / 2;
  median = relativeErrors.size() % 2
               ? relativeErrors[mid]
               : (relativeErrors[mid - 1] + relativeErrors[mid]) / 2;
}

llvm::Expected<GemmFit>
calibrate::fitGemmCurve(llvm::ArrayRef<GemmSample> samples) {
  // y = a + b x with a = 1/R and b = H/R.
  RelativeLineFit line;
  for (const GemmSample &s : samples) {
    if (s.m <= 0 || s.n <= 0 || s.k <= 0 || !(s.seconds > 0))
      return badInput("calibrate: GEMM sample {0}x{1}x{2} in {3} s is not "
                      "positive",
                      s.m, s.n, s.k, s.seconds);
    line.add(gemmX(s.m, s.n, s.k), s.seconds / s.flops());
  }
  if (samples.size() < 2 || !line.hasSpread())
    return badInput("calibrate: fitting the GEMM curve needs at least two "
                    "shapes of different sizes, got {0}",
                    samples.size());
  double b = line.slope(), a = line.intercept();
  if (b < 0) { // Small shapes ran no slower: a flat curve.
    b = 0;
    a = line.flatIntercept();
  }
  if (!(a > 0))
    return failure("calibrate: the GEMM timings fit no positive peak rate "
                   "(intercept {0}); rerun on a quieter machine",
                   a);
  GemmFit fit;
  fit.peakFlops = 1 / a;
  fit.halfSize = b / a;
  std::vector<double> errors;
  for (const GemmSample &s : samples)
    errors.push_back(std::abs(gemmSeconds(fit, s.m, s.n, s.k) / s.seconds - 1));
  summarizeErrors(std::move(errors), fit.medianError, fit.worstError);
  return fit;
}

//===----------------------------------------------------------------------===//
// Measuring
//===----------------------------------------------------------------------===//

namespace {

const rt::KernelRegistry &registry() {
  static const rt::KernelRegistry kernels = [] {
    rt::KernelRegistry r;
    rt::cpu::registerCpuKernels(r);
    return r;
  }();
  return kernels;
}

/// One kernel call on owned tensors, as the executor would make it.
struct KernelRun {
  program::Instruction inst;
  std::vector<rt::Tensor> inputs, outputs;

  explicit KernelRun(llvm::StringRef op) { inst.set_op(op.str()); }
  void flag(const std::string &name) {
    (*inst.mutable_attrs())[name].set_b(true);
  }

  llvm::Error run() const {
    rt::KernelFn fn = registry().lookup(inst.op());
    if (!fn)
      return failure("calibrate: the CPU backend has no {0} kernel", inst.op());
    std::vector<rt::TensorRef> in, out;
    for (const rt::Tensor &t : inputs)
      in.push_back(t.ref());
    for (const rt::Tensor &t : outputs)
      out.push_back(t.ref());
    rt::KernelCall call(inst, in, out);
    if (llvm::Error err = fn(call))
      return failure("calibrate: {0}", llvm::toString(std::move(err)));
    return llvm::Error::success();
  }
};

rt::Tensor randomTensor(llvm::ArrayRef<int64_t> shape, uint32_t seed) {
  rt::Tensor t(rt::DType::F32, shape);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  float *data = t.as<float>();
  for (int64_t i = 0; i < t.numElements(); ++i)
    data[i] = dist(rng);
  return t;
}

double median(std::vector<double> values) {
  llvm::sort(values);
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

/// Median seconds of `reps` calls of `body` after one warm-up call.
template <typename Body>
llvm::Expected<double> timeMedian(int reps, Body body) {
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    if (llvm::Error err = body())
      return std::move(err);
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (i > 0)
      times.push_back(seconds);
  }
  return median(std::move(times));
}

struct GemmShape {
  int64_t m, n, k;
  bool transposeLhs; ///< The weight-gradient form X^T dY.
};

/// Shapes of transformer steps at the sizes the CPU runs: square ones for
/// the peak, and ones with one small dimension (few rows, a narrow output,
/// a short reduction) for the half size.
llvm::ArrayRef<GemmShape> gemmShapes(bool quick) {
  static const GemmShape full[] = {
      {128, 128, 128, false},   {256, 256, 256, false},
      {512, 512, 512, false},   {1024, 1024, 1024, false},
      {2048, 768, 768, false},  {2048, 3072, 768, false},
      {2048, 768, 3072, false}, {768, 3072, 2048, true},
      {1024, 8192, 512, false}, {64, 1024, 1024, false},
      {1024, 64, 1024, false},  {1024, 1024, 64, false},
      {2048, 256, 32, false},   {4096, 512, 512, false},
  };
  static const GemmShape fast[] = {
      {64, 64, 64, false},    {128, 128, 128, false},  {256, 256, 256, false},
      {512, 512, 512, false}, {512, 1024, 256, false}, {256, 1024, 512, true},
      {1024, 256, 32, false},
  };
  if (quick)
    return fast;
  return full;
}

llvm::Error measureGemms(bool quick, Measurements &m, llvm::raw_ostream *log) {
  int reps = quick ? 3 : 5;
  uint32_t seed = 1;
  for (const GemmShape &shape : gemmShapes(quick)) {
    KernelRun run("dtc.matmul");
    if (shape.transposeLhs) {
      run.flag("transpose_lhs");
      run.inputs.push_back(randomTensor({shape.k, shape.m}, seed++));
    } else {
      run.inputs.push_back(randomTensor({shape.m, shape.k}, seed++));
    }
    run.inputs.push_back(randomTensor({shape.k, shape.n}, seed++));
    run.outputs.emplace_back(rt::DType::F32,
                             llvm::ArrayRef<int64_t>{shape.m, shape.n});
    auto seconds = timeMedian(reps, [&] { return run.run(); });
    if (!seconds)
      return seconds.takeError();
    m.gemms.push_back({shape.m, shape.n, shape.k, *seconds});
    if (log)
      *log << llvm::formatv("  gemm {0}x{1}x{2}{3}: {4:F1} GFLOP/s\n", shape.m,
                            shape.n, shape.k,
                            shape.transposeLhs ? " (A^T)" : "",
                            m.gemms.back().flops() / *seconds / 1e9);
  }
  return llvm::Error::success();
}

llvm::Error measureMemory(bool quick, Measurements &m) {
  // Three arrays well past the last-level cache (32 MiB on the reference
  // machine), so the add streams from main memory.
  int64_t elements = quick ? (int64_t(8) << 20) : (int64_t(24) << 20);
  KernelRun add("dtc.add");
  add.inputs.push_back(randomTensor({elements}, 11));
  add.inputs.push_back(randomTensor({elements}, 12));
  add.outputs.emplace_back(rt::DType::F32, llvm::ArrayRef<int64_t>{elements});
  auto seconds = timeMedian(quick ? 3 : 7, [&] { return add.run(); });
  if (!seconds)
    return seconds.takeError();
  m.streamBytes = 3.0 * 4 * elements;
  m.streamSeconds = *seconds;

  const rt::Tensor &from = add.inputs[0], &to = add.outputs[0];
  auto copy = timeMedian(quick ? 3 : 7, [&] {
    std::memcpy(to.data(), from.data(), from.bytes());
    return llvm::Error::success();
  });
  if (!copy)
    return copy.takeError();
  m.copyBytes = 2.0 * from.bytes();
  m.copySeconds = *copy;

  // The cost of a kernel call itself: an add of one element.
  KernelRun tiny("dtc.add");
  tiny.inputs.push_back(randomTensor({1}, 13));
  tiny.inputs.push_back(randomTensor({1}, 14));
  tiny.outputs.emplace_back(rt::DType::F32, llvm::ArrayRef<int64_t>{1});
  constexpr int kCalls = 1000;
  auto calls = timeMedian(5, [&]() -> llvm::Error {
    for (int i = 0; i < kCalls; ++i)
      if (llvm::Error err = tiny.run())
        return err;
    return llvm::Error::success();
  });
  if (!calls)
    return calls.takeError();
  m.perOpSeconds = *calls / kCalls;
  return llvm::Error::success();
}

llvm::Error measureAttention(bool quick, Measurements &m) {
  AttentionSample &a = m.attention;
  a.batch = quick ? 1 : 4;
  a.heads = quick ? 4 : 8;
  a.seq = quick ? 128 : 256;
  a.headDim = 64;
  a.causal = true;
  llvm::SmallVector<int64_t, 4> shape{a.batch, a.heads, a.seq, a.headDim};
  KernelRun forward("dtc.attention");
  forward.flag("causal");
  for (uint32_t i = 0; i < 3; ++i)
    forward.inputs.push_back(randomTensor(shape, 21 + i));
  forward.outputs.emplace_back(rt::DType::F32, shape);
  int reps = quick ? 3 : 5;
  auto fwd = timeMedian(reps, [&] { return forward.run(); });
  if (!fwd)
    return fwd.takeError();
  a.forwardSeconds = *fwd;

  KernelRun backward("dtc.attention_grad");
  backward.flag("causal");
  backward.inputs = forward.inputs;
  backward.inputs.push_back(randomTensor(shape, 24));
  for (int i = 0; i < 3; ++i)
    backward.outputs.emplace_back(rt::DType::F32, shape);
  auto bwd = timeMedian(reps, [&] { return backward.run(); });
  if (!bwd)
    return bwd.takeError();
  a.backwardSeconds = *bwd;
  return llvm::Error::success();
}

std::string cpuName() {
  auto buffer = llvm::MemoryBuffer::getFileAsStream("/proc/cpuinfo");
  if (buffer) {
    llvm::SmallVector<llvm::StringRef> lines;
    (*buffer)->getBuffer().split(lines, '\n');
    for (llvm::StringRef line : lines)
      if (line.starts_with("model name")) {
        llvm::StringRef name = line.split(':').second.trim();
        if (!name.empty())
          return name.str();
      }
  }
  return "CPU";
}

std::string loadAverage() {
  auto buffer = llvm::MemoryBuffer::getFileAsStream("/proc/loadavg");
  if (!buffer)
    return "unknown";
  return (*buffer)->getBuffer().split(' ').first.str();
}

} // namespace

llvm::Expected<Measurements> calibrate::measure(const Options &options,
                                                llvm::raw_ostream *log) {
  Measurements m;
  m.cpu = cpuName();
  m.threads = omp_get_max_threads();
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  m.memoryBytes =
      pages > 0 && pageSize > 0 ? static_cast<double>(pages) * pageSize : 16e9;
  if (llvm::Error err = measureGemms(options.quick, m, log))
    return std::move(err);
  if (llvm::Error err = measureMemory(options.quick, m))
    return std::move(err);
  if (llvm::Error err = measureAttention(options.quick, m))
    return std::move(err);
  return m;
}

//===----------------------------------------------------------------------===//
// The end-to-end step
//===----------------------------------------------------------------------===//

double calibrate::fitMemoryEfficiency(double measured, double predictedFull,
                                      double predictedHalf) {
  double streaming = predictedHalf - predictedFull;
  double rest = predictedFull - streaming;
  if (!(streaming > 0) || measured <= predictedFull)
    return 1;
  return std::clamp(streaming / (measured - rest), 0.01, 1.0);
}

namespace {

llvm::Expected<double> predictedStepTime(llvm::StringRef bundle) {
  llvm::SmallString<256> path(bundle);
  llvm::sys::path::append(path, "plan.json");
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return failure("calibrate: cannot read {0}", path);
  auto json = llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return failure("calibrate: {0}: {1}", path,
                   llvm::toString(json.takeError()));
  const llvm::json::Object *predicted =
      json->getAsObject() ? json->getAsObject()->getObject("predicted")
                          : nullptr;
  std::optional<double> seconds =
      predicted ? predicted->getNumber("step_time_s") : std::nullopt;
  if (!seconds)
    return failure("calibrate: {0} has no predicted.step_time_s", path);
  return *seconds;
}

/// Compiles and runs a small GPT (shapes other than bench/cpu_predict.sh's)
/// in a temporary directory; `cluster` is the calibration so far.
llvm::Error fitStep(bool quick, Cluster cluster, StepFit &fit) {
  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("dtc-calibrate", dir))
    return failure("calibrate: cannot create a temporary directory: {0}",
                   ec.message());
  auto cleanup =
      llvm::make_scope_exit([&] { llvm::sys::fs::remove_directories(dir); });
  auto file = [&](llvm::StringRef name) {
    llvm::SmallString<128> path(dir);
    llvm::sys::path::append(path, name);
    return std::string(path);
  };

  int64_t layers = quick ? 1 : 2, hidden = quick ? 128 : 384,
          heads = quick ? 2 : 6, vocab = quick ? 1024 : 4096,
          seq = quick ? 64 : 128, batch = 4, steps = quick ? 4 : 5;
  fit.model = llvm::formatv("{0}/{1}/{2}/{3}/{4}/{5}", layers, hidden, heads,
                            vocab, seq, batch)
                  .str();
  modelgen::ModelConfig config = *modelgen::preset("tiny-gpt");
  config.name = "calibrate-gpt";
  config.layers = layers;
  config.hidden = hidden;
  config.heads = heads;
  config.vocab = vocab;
  config.maxPositions = seq;
  modelgen::GenOptions gen;
  gen.shapeOnly = true;
  gen.externalDataFile = "gpt.weights";
  if (llvm::Error err = modelgen::generate(config, gen, file("gpt.onnx")))
    return err;

  // The prediction at memory efficiency 1 and 0.5 separates the streaming
  // kernels from the rest.
  llvm::raw_null_ostream quiet;
  double predicted[2];
  for (int i = 0; i < 2; ++i) {
    cluster.memoryEfficiency = i == 0 ? 1 : 0.5;
    std::string clusterPath = file(i == 0 ? "full.json" : "half.json");
    std::error_code ec;
    llvm::raw_fd_ostream os(clusterPath, ec);
    if (ec)
      return failure("calibrate: cannot write {0}", clusterPath);
    os << clusterToJson(cluster);
    os.close();
    CompileOptions compile;
    compile.modelPath = file("gpt.onnx");
    compile.gpus = 1;
    compile.cluster = clusterPath;
    compile.globalBatch = batch;
    compile.microBatch = batch;
    compile.seqLen = seq;
    compile.dtype = "fp32";
    compile.recompute = "none";
    compile.outputDir = file(i == 0 ? "full.dtc" : "half.dtc");
    if (llvm::Error err = runCompile(compile, quiet))
      return err;
    auto seconds = predictedStepTime(compile.outputDir);
    if (!seconds)
      return seconds.takeError();
    predicted[i] = *seconds;
  }
  fit.predictedFull = predicted[0];
  fit.predictedHalf = predicted[1];

  // Token ids spread over the vocabulary (uint16, nanoGPT's layout).
  {
    std::error_code ec;
    llvm::raw_fd_ostream os(file("tokens.bin"), ec);
    if (ec)
      return failure("calibrate: cannot write {0}", file("tokens.bin"));
    for (int64_t i = 0; i < 8 * seq * batch; ++i) {
      uint16_t id = static_cast<uint16_t>((i * 7919) % vocab);
      os.write(reinterpret_cast<const char *>(&id), sizeof(id));
    }
  }
  RunOptions run;
  run.bundle = file("full.dtc");
  run.steps = steps;
  run.data = file("tokens.bin");
  run.init = true;
  run.logJson = true;
  run.progress = false;
  std::string log;
  llvm::raw_string_ostream logStream(log);
  if (llvm::Error err = runBundle(run, logStream))
    return err;
  std::vector<double> times;
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(log).split(lines, '\n', -1, false);
  for (llvm::StringRef line : lines.size() > 1
                                  ? llvm::ArrayRef(lines).drop_front()
                                  : llvm::ArrayRef(lines)) {
    auto json = llvm::json::parse(line);
    if (!json) {
      llvm::consumeError(json.takeError());
      continue;
    }
    if (auto *object = json->getAsObject())
      if (auto seconds = object->getNumber("step_time_s"))
        times.push_back(*seconds);
  }
  if (times.empty())
    return failure("calibrate: the calibration GPT's run logged no steps");
  fit.measuredSeconds = median(times);
  fit.memoryEfficiency = fitMemoryEfficiency(
      fit.measuredSeconds, fit.predictedFull, fit.predictedHalf);
  return llvm::Error::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// The cluster file
//===----------------------------------------------------------------------===//

Cluster calibrate::clusterFromMeasurements(const Measurements &m,
                                           const GemmFit &fit,
                                           llvm::StringRef name) {
  Cluster c;
  c.name = name.str();
  c.gpu = llvm::formatv("{0} ({1} threads)", m.cpu, m.threads).str();
  // The CPU backend computes every dtype in fp32 (bf16/f16 converted on
  // load), so every peak is the fp32 GEMM rate; there is no fp8.
  double tflops = fit.peakFlops / 1e12;
  c.peakBf16Tflops = c.peakFp16Tflops = c.peakTf32Tflops = tflops;
  c.peakFp8Tflops = 0;
  c.gemmPeakEfficiency = 1; // The peak is the fitted rate itself.
  c.gemmHalfSize = fit.halfSize;
  c.hbmBytes = m.memoryBytes;
  c.hbmBytesPerSecond = m.streamBytesPerSecond();
  // dtc.add's bandwidth, at the efficiency the runtime's unfused
  // memory-bound kernels reach on a real step (1 until the step is fitted).
  c.memoryEfficiency = m.step.memoryEfficiency;
  // Ranks on one machine exchange data through memory; one "node". The
  // link is what two ranks' all-reduces measured, or else a memory copy's
  // bandwidth with a nominal latency.
  double copy = m.copySeconds > 0 ? m.copyBytes / m.copySeconds / 2
                                  : c.hbmBytesPerSecond / 3;
  bool measured = m.link.bytesPerSecond > 0;
  c.gpusPerNode = 1;
  c.intraNodeGBps = c.interNodeGBps =
      (measured ? m.link.bytesPerSecond : copy) / 1e9;
  c.intraNodeLatencyUs = c.interNodeLatencyUs =
      measured ? 1e6 * m.link.latencySeconds : 10;
  c.intraNodeEfficiency = c.interNodeEfficiency = 1;
  c.gpus = 1;
  // Attention: the factor that makes the model's fused-attention forward
  // take the measured time, and the measured backward / forward ratio.
  const AttentionSample &a = m.attention;
  if (a.forwardSeconds > 0 && a.backwardSeconds > 0) {
    double modelled = a.forwardFlops() /
                      (c.peakFlops(DType::F32) *
                       fusedAttentionEfficiency(a.seq, a.seq, a.headDim, c));
    c.attentionEfficiency = modelled / a.forwardSeconds;
    c.attentionBackwardRatio = a.backwardSeconds / a.forwardSeconds;
  }
  // What every kernel call costs besides its work: plan report --trace
  // prices it per call (the planner's per-layer formulas do not).
  c.kernelOverheadUs = 1e6 * m.perOpSeconds;
  return c;
}

static llvm::Error writeAtomically(llvm::StringRef path, llvm::StringRef text) {
  llvm::SmallString<256> tmp(path);
  tmp += ".partial";
  std::error_code ec;
  {
    llvm::raw_fd_ostream os(tmp, ec);
    if (!ec) {
      os << text;
      os.close();
      ec = os.error();
    }
  }
  if (ec) {
    llvm::sys::fs::remove(tmp);
    return failure("cannot write {0}: {1}", tmp, ec.message());
  }
  if (std::error_code rename = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return failure("cannot move the cluster file into {0}: {1}", path,
                   rename.message());
  }
  return llvm::Error::success();
}

llvm::Error calibrate::runCalibrate(const Options &options,
                                    llvm::StringRef outputPath,
                                    llvm::raw_ostream &out) {
  if (!outputPath.ends_with(".json"))
    return badInput("-o {0}: the cluster file must end in .json (that is how "
                    "--cluster tells a file from a preset)",
                    outputPath);
  std::string loadBefore = loadAverage();
  auto m = measure(options, &out);
  if (!m)
    return m.takeError();
  auto fit = fitGemmCurve(m->gemms);
  if (!fit)
    return fit.takeError();
  // The link between ranks, before the step fit so that nothing else runs
  // meanwhile. A machine where the ranks cannot start still calibrates.
  std::string linkNote;
  if (options.collectives) {
    auto samples = measureCollectives(options);
    auto link = samples ? fitLink(*samples)
                        : llvm::Expected<LinkFit>(samples.takeError());
    if (link) {
      m->collectives = std::move(*samples);
      m->link = *link;
    } else {
      linkNote = llvm::toString(link.takeError());
    }
  }
  if (options.step)
    if (llvm::Error err = fitStep(
            options.quick, clusterFromMeasurements(*m, *fit, "calibrated-cpu"),
            m->step))
      return err;
  Cluster cluster = clusterFromMeasurements(*m, *fit, "calibrated-cpu");

  out << llvm::formatv("machine   {0}, {1} threads, {2:F1} GB memory, load "
                       "average {3} before / {4} after\n",
                       m->cpu, m->threads, m->memoryBytes / 1e9, loadBefore,
                       loadAverage());
  out << llvm::formatv("gemm      peak {0:F1} GFLOP/s, half size {1:F1} "
                       "(dtc.matmul, {2} shapes; fit error median {3:F1}%, "
                       "worst {4:F1}%)\n",
                       fit->peakFlops / 1e9, fit->halfSize, m->gemms.size(),
                       100 * fit->medianError, 100 * fit->worstError);
  out << llvm::formatv("memory    {0:F2} GB/s (dtc.add over 3 x {1:F0} MB), "
                       "memcpy {2:F2} GB/s\n",
                       m->streamBytesPerSecond() / 1e9,
                       m->streamBytes / 3 / 1e6,
                       m->copyBytes / m->copySeconds / 1e9);
  const AttentionSample &a = m->attention;
  out << llvm::formatv(
      "attention b={0} heads={1} seq={2} d={3} causal: forward {4:F2} ms "
      "({5:F1} GFLOP/s), backward {6:F2} ms; efficiency factor {7:F3}, "
      "backward ratio {8:F2} (GPU defaults 1 and 2.5)\n",
      a.batch, a.heads, a.seq, a.headDim, 1e3 * a.forwardSeconds,
      a.forwardFlops() / a.forwardSeconds / 1e9, 1e3 * a.backwardSeconds,
      cluster.attentionEfficiency, cluster.attentionBackwardRatio);
  if (m->link.bytesPerSecond > 0) {
    out << "link      2-rank all-reduce:";
    for (const CollectiveSample &c : m->collectives)
      out << llvm::formatv(" {0} KiB {1:F1} us;", c.bytes / 1024,
                           1e6 * c.seconds);
    out << llvm::formatv("\n          fitted {0:F2} GB/s, latency {1:F1} us "
                         "(fit error median {2:F1}%, worst {3:F1}%)\n",
                         m->link.bytesPerSecond / 1e9,
                         1e6 * m->link.latencySeconds,
                         100 * m->link.medianError, 100 * m->link.worstError);
  } else if (options.collectives) {
    out << "link      not measured (" << linkNote
        << "); memcpy's bandwidth and a 10 us latency instead\n";
  }
  out << llvm::formatv("overhead  {0:F2} us per kernel call\n",
                       1e6 * m->perOpSeconds);
  if (options.step)
    out << llvm::formatv(
        "step      GPT {0} (layers/hidden/heads/vocab/seq/batch): measured "
        "{1:F3} s, predicted {2:F3} s at full bandwidth; memory efficiency "
        "{3:F3}\n",
        m->step.model, m->step.measuredSeconds, m->step.predictedFull,
        m->step.memoryEfficiency);

  if (llvm::Error err = writeAtomically(outputPath, clusterToJson(cluster)))
    return err;
  out << "wrote     " << outputPath << " (use: dtc compile MODEL --gpus 1 "
      << "--dtype fp32 --cluster " << outputPath << ")\n";
  return llvm::Error::success();
}
