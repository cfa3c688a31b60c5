//===- Calibrate.cpp - dtc calibrate: measure this machine ----------------===//
//
// Every benchmark calls the registered kernel the runtime itself would call
// (CPU or CUDA, chosen as `dtc run` chooses), on tensors of the shapes a
// transformer step uses on that backend, and keeps the median of several
// runs after a warm-up (the median, not the best, because `dtc run` steps
// are compared by their median too).
//
//===----------------------------------------------------------------------===//

#include "compiler/calibrate/Calibrate.h"

#include "compiler/Driver.h"
#include "compiler/costmodel/Compute.h"
#include "compiler/costmodel/KernelTime.h"
#include "compiler/run/Run.h"
#include "frontends/modelgen/ModelGen.h"
#include "runtime/core/Communicator.h"
#include "runtime/core/Kernel.h"
#include "runtime/cpu/Parallel.h"
#include "runtime/support/Error.h"
#include "runtime/support/Json.h"
#ifdef DTC_HAVE_CUDA
#include "runtime/cuda/CudaPlugin.h"
#endif

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

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

/// Where the benchmarks run: the backend `dtc run --backend` picks, and the
/// dtype models train in there (the CPU computes every dtype in f32).
struct Target {
  RuntimeBackend backend;
  rt::DType dtype = rt::DType::F32;
  bool cuda() const { return backend.cuda; }
  rt::MemorySpace &memory() const { return *backend.memory; }
};

/// Uniform values in [-0.5, 0.5) from a 64-bit LCG: GEMM inputs that are
/// not zeros (a GPU's clocks depend on the bits it multiplies), made fast
/// enough for the 8192 x 8192 operands a GPU is timed on.
void fillRandom(float *data, int64_t count, uint32_t seed) {
  uint64_t state = 0x9E3779B97F4A7C15ull * (seed + 1);
  for (int64_t i = 0; i < count; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    data[i] = static_cast<float>(state >> 40) * (1.0f / (1 << 24)) - 0.5f;
  }
}

/// A tensor of `dtype` in the target's memory: random values (seed > 0) or
/// zeros (seed 0, what bandwidth benchmarks stream).
llvm::Expected<rt::Tensor> makeTensor(const Target &target, rt::DType dtype,
                                      llvm::ArrayRef<int64_t> shape,
                                      uint32_t seed) {
  auto tensor = rt::Tensor::allocate(dtype, shape, target.memory());
  if (!tensor)
    return failure("calibrate: {0}", llvm::toString(tensor.takeError()));
  if (seed == 0)
    return tensor;
  int64_t count = tensor->numElements();
  std::vector<float> values(count);
  fillRandom(values.data(), count, seed);
  const void *bytes = values.data();
  std::vector<uint16_t> bits;
  if (dtype == rt::DType::BF16) {
    bits.resize(count);
    for (int64_t i = 0; i < count; ++i)
      bits[i] = rt::floatToBF16(values[i]);
    bytes = bits.data();
  } else if (dtype != rt::DType::F32) {
    return failure("calibrate: no benchmark inputs of {0}",
                   rt::dtypeName(dtype));
  }
  if (llvm::Error err =
          target.memory().copyToDevice(tensor->data(), bytes, tensor->bytes()))
    return failure("calibrate: {0}", llvm::toString(std::move(err)));
  return tensor;
}

/// One kernel call on owned tensors, as the executor would make it: one of
/// KernelWork.h's calibration kernels, its tensors in `dtype`, random
/// (`seed` > 0, one seed per input from it) or zeros (`seed` 0).
struct KernelRun {
  const Target &target;
  KernelDesc kernel;
  program::Instruction inst;
  std::vector<rt::Tensor> inputs, outputs;

  KernelRun(const Target &target, const KernelDesc &kernel)
      : target(target), kernel(kernel) {
    inst.set_op(kernel.op.str());
    if (kernel.transposeLhs)
      flag("transpose_lhs");
    if (kernel.transposeRhs)
      flag("transpose_rhs");
    if (kernel.causal)
      flag("causal");
  }
  void flag(const std::string &name) {
    (*inst.mutable_attrs())[name].set_b(true);
  }
  void f64(const std::string &name, double value) {
    (*inst.mutable_attrs())[name].set_f(value);
  }
  llvm::Error allocate(rt::DType dtype, uint32_t seed) {
    for (auto [i, desc] : llvm::enumerate(kernel.inputs)) {
      uint32_t inputSeed = seed ? seed + static_cast<uint32_t>(i) : 0;
      auto t = makeTensor(target, dtype, desc.shape, inputSeed);
      if (!t)
        return t.takeError();
      inputs.push_back(std::move(*t));
    }
    for (const TensorDesc &desc : kernel.outputs) {
      auto t = makeTensor(target, dtype, desc.shape, 0);
      if (!t)
        return t.takeError();
      outputs.push_back(std::move(*t));
    }
    return llvm::Error::success();
  }
  /// The FLOPs the cost model counts for this call.
  double flops() const { return kernelWork(kernel).flops; }

  /// Queues the call (a CUDA kernel returns before it runs).
  llvm::Error run() const {
    rt::KernelFn fn = target.backend.kernels->lookup(inst.op());
    if (!fn)
      return failure("calibrate: the {0} backend has no {1} kernel",
                     target.cuda() ? "CUDA" : "CPU", inst.op());
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

double median(std::vector<double> values) {
  llvm::sort(values);
  size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

/// Median seconds per call of `reps` blocks of `calls` calls of `body`,
/// after one warm-up block; each block ends when the device has finished
/// its work (a GPU's queued kernels), so it times what ran.
template <typename Body>
llvm::Expected<double> timeMedian(const Target &target, int reps, int calls,
                                  Body body) {
  std::vector<double> times;
  for (int i = 0; i <= reps; ++i) {
    auto start = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c)
      if (llvm::Error err = body())
        return std::move(err);
    if (llvm::Error err = target.memory().synchronize())
      return failure("calibrate: {0}", llvm::toString(std::move(err)));
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (i > 0)
      times.push_back(seconds / calls);
  }
  return median(std::move(times));
}

/// Calls that make a GPU benchmark block last about 20 ms at `rate` (a
/// launch and a synchronize are then noise); one call on the CPU, whose
/// kernels run when called.
int callsPerBlock(const Target &target, double work, double rate) {
  if (!target.cuda())
    return 1;
  return static_cast<int>(std::clamp(0.02 * rate / work, 1.0, 200.0));
}

struct GemmShape {
  int64_t m, n, k;
  bool transposeLhs; ///< The weight-gradient form X^T dY.
};

/// Shapes of transformer steps at the sizes each backend runs: square ones
/// for the peak, and ones with one small dimension (few rows, a narrow
/// output, a short reduction) for the half size.
llvm::ArrayRef<GemmShape> gemmShapes(const Target &target, bool quick) {
  static const GemmShape cpuFull[] = {
      {128, 128, 128, false},   {256, 256, 256, false},
      {512, 512, 512, false},   {1024, 1024, 1024, false},
      {2048, 768, 768, false},  {2048, 3072, 768, false},
      {2048, 768, 3072, false}, {768, 3072, 2048, true},
      {1024, 8192, 512, false}, {64, 1024, 1024, false},
      {1024, 64, 1024, false},  {1024, 1024, 64, false},
      {2048, 256, 32, false},   {4096, 512, 512, false},
  };
  static const GemmShape cpuQuick[] = {
      {64, 64, 64, false},    {128, 128, 128, false},  {256, 256, 256, false},
      {512, 512, 512, false}, {512, 1024, 256, false}, {256, 1024, 512, true},
      {1024, 256, 32, false},
  };
  // Llama-8B/70B-sized layers at 8192 tokens: the QKV, MLP and output
  // projections and a weight gradient, with small-M (a micro-batch of few
  // tokens), narrow and short-K ones.
  static const GemmShape gpuFull[] = {
      {1024, 1024, 1024, false},  {2048, 2048, 2048, false},
      {4096, 4096, 4096, false},  {8192, 8192, 8192, false},
      {8192, 6144, 4096, false},  {8192, 4096, 4096, false},
      {8192, 28672, 4096, false}, {8192, 4096, 14336, false},
      {4096, 14336, 8192, true},  {256, 8192, 8192, false},
      {8192, 256, 8192, false},   {8192, 8192, 256, false},
      {16384, 1024, 128, false},
  };
  static const GemmShape gpuQuick[] = {
      {512, 512, 512, false},    {1024, 1024, 1024, false},
      {4096, 4096, 4096, false}, {4096, 11008, 4096, false},
      {4096, 4096, 8192, true},  {256, 4096, 4096, false},
      {4096, 4096, 256, false},
  };
  if (target.cuda())
    return quick ? llvm::ArrayRef(gpuQuick) : llvm::ArrayRef(gpuFull);
  return quick ? llvm::ArrayRef(cpuQuick) : llvm::ArrayRef(cpuFull);
}

/// One GEMM of `shape` in `dtype`, timed.
llvm::Expected<double> timeGemm(const Target &target, const GemmShape &shape,
                                rt::DType dtype, int reps, uint32_t &seed) {
  KernelRun run(target,
                gemmProbe(shape.m, shape.n, shape.k, shape.transposeLhs));
  if (llvm::Error err = run.allocate(dtype, seed))
    return std::move(err);
  seed += 2;
  // A first call sizes the block (cuBLASLt chooses its algorithm then).
  double flops = run.flops();
  auto first = timeMedian(target, 1, 1, [&] { return run.run(); });
  if (!first)
    return first.takeError();
  return timeMedian(target, reps, callsPerBlock(target, flops, flops / *first),
                    [&] { return run.run(); });
}

llvm::Error measureGemms(const Target &target, bool quick, Measurements &m,
                         llvm::raw_ostream *log) {
  int reps = quick ? 3 : 5;
  uint32_t seed = 1;
  llvm::ArrayRef<GemmShape> shapes = gemmShapes(target, quick);
  for (const GemmShape &shape : shapes) {
    auto seconds = timeGemm(target, shape, target.dtype, reps, seed);
    if (!seconds)
      return seconds.takeError();
    m.gemms.push_back({shape.m, shape.n, shape.k, *seconds});
    if (log)
      *log << llvm::formatv("  gemm {0}x{1}x{2}{3}: {4:F1} GFLOP/s\n", shape.m,
                            shape.n, shape.k,
                            shape.transposeLhs ? " (A^T)" : "",
                            m.gemms.back().flops() / *seconds / 1e9);
  }
  if (!target.cuda())
    return llvm::Error::success();
  // The largest square shape once more in f32, for the tf32 peak.
  const GemmShape *square = nullptr;
  for (const GemmShape &shape : shapes)
    if (shape.m == shape.n && shape.n == shape.k &&
        (!square || shape.m > square->m))
      square = &shape;
  auto f32 = timeGemm(target, *square, rt::DType::F32, reps, seed);
  if (!f32)
    return f32.takeError();
  double bf16 = m.gemms[square - shapes.data()].seconds;
  m.f32OverBf16 = bf16 / *f32;
  if (log)
    *log << llvm::formatv("  gemm {0}x{0}x{0} f32: {1:F1} GFLOP/s\n", square->m,
                          2.0 * square->m * square->m * square->m / *f32 / 1e9);
  return llvm::Error::success();
}

llvm::Error measureMemory(const Target &target, bool quick, Measurements &m) {
  // Three arrays well past the last-level cache (32 MiB on the reference
  // CPU, 50-126 MB of L2 on a GPU), so the add streams from main memory.
  int64_t elements = target.cuda() ? (int64_t(quick ? 64 : 256) << 20)
                                   : (int64_t(quick ? 8 : 24) << 20);
  int reps = quick ? 3 : 7;
  KernelRun add(target, streamProbe(elements));
  if (llvm::Error err = add.allocate(target.dtype, 0))
    return err;
  double bytes = 3.0 * add.inputs[0].bytes();
  auto seconds = timeMedian(target, reps, 1, [&] { return add.run(); });
  if (!seconds)
    return seconds.takeError();
  // On a GPU, again in blocks long enough that launches do not count.
  int calls = callsPerBlock(target, bytes, bytes / *seconds);
  if (calls > 1)
    seconds = timeMedian(target, reps, calls, [&] { return add.run(); });
  if (!seconds)
    return seconds.takeError();
  m.streamBytes = bytes;
  m.streamSeconds = *seconds;

  const rt::Tensor &from = add.inputs[0], &to = add.outputs[0];
  auto copy = timeMedian(target, reps, calls, [&] {
    return target.memory().copyOnDevice(to.data(), from.data(), from.bytes());
  });
  if (!copy)
    return copy.takeError();
  m.copyBytes = 2.0 * from.bytes();
  m.copySeconds = *copy;

  // The cost of a kernel call itself: an add of one element.
  KernelRun tiny(target, streamProbe(1));
  if (llvm::Error err = tiny.allocate(target.dtype, 13))
    return err;
  constexpr int kCalls = 1000;
  auto calls1 = timeMedian(target, 5, kCalls, [&] { return tiny.run(); });
  if (!calls1)
    return calls1.takeError();
  m.perOpSeconds = *calls1;
  return llvm::Error::success();
}

llvm::Error measureAttention(const Target &target, bool quick,
                             Measurements &m) {
  AttentionSample &a = m.attention;
  if (target.cuda()) {
    a.batch = quick ? 1 : 2;
    a.heads = quick ? 8 : 16;
    a.seq = quick ? 1024 : 4096;
    a.headDim = 128;
  } else {
    a.batch = quick ? 1 : 4;
    a.heads = quick ? 4 : 8;
    a.seq = quick ? 128 : 256;
    a.headDim = 64;
  }
  a.causal = true;
  // The scale a program states (the lowering writes the 1/sqrt(d) default).
  double scale = 1 / std::sqrt(static_cast<double>(a.headDim));
  KernelRun forward(target, attentionProbe(a.batch, a.heads, a.seq, a.headDim,
                                           a.causal, false));
  forward.f64("scale", scale);
  if (llvm::Error err = forward.allocate(target.dtype, 21))
    return err;
  int reps = quick ? 3 : 5;
  auto fwd = timeMedian(target, reps, 1, [&] { return forward.run(); });
  if (!fwd)
    return fwd.takeError();
  a.forwardSeconds = *fwd;

  KernelRun backward(target, attentionProbe(a.batch, a.heads, a.seq, a.headDim,
                                            a.causal, true));
  backward.f64("scale", scale);
  if (llvm::Error err = backward.allocate(target.dtype, 21))
    return err;
  auto bwd = timeMedian(target, reps, 1, [&] { return backward.run(); });
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

/// The machine's description: the CPU's, or the GPU the backend set up.
void describeDevice(const Target &target, Measurements &m) {
  m.cuda = target.cuda();
  m.threads = rt::cpu::threadCount();
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGE_SIZE);
  m.memoryBytes =
      pages > 0 && pageSize > 0 ? static_cast<double>(pages) * pageSize : 16e9;
  m.device = cpuName();
#ifdef DTC_HAVE_CUDA
  if (target.cuda()) {
    ::dtc::cuda::ProbeResult probe = target.backend.plugin->probe();
    int device = rt::launcherLocalRank().value_or(0) % probe.deviceCount;
    m.gpus = probe.deviceCount;
    m.device = probe.deviceNames.at(device);
    m.memoryBytes = probe.deviceMemoryBytes.at(device);
  }
#endif
}

} // namespace

llvm::Expected<Measurements> calibrate::measure(const Options &options,
                                                llvm::raw_ostream *log) {
  auto backend = selectRuntimeBackend(options.backend);
  if (!backend)
    return backend.takeError();
  Target target{*backend, backend->cuda ? rt::DType::BF16 : rt::DType::F32};
  Measurements m;
  describeDevice(target, m);
  if (llvm::Error err = measureGemms(target, options.quick, m, log))
    return std::move(err);
  if (llvm::Error err = measureMemory(target, options.quick, m))
    return std::move(err);
  if (llvm::Error err = measureAttention(target, options.quick, m))
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
  auto json = rt::parseJson((*buffer)->getBuffer());
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
/// in a temporary directory on the backend measured (f32 on the CPU, bf16
/// on a GPU); `cluster` is the calibration so far.
llvm::Error fitStep(const Options &options, bool cuda, Cluster cluster,
                    StepFit &fit) {
  bool quick = options.quick;
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
  if (cuda) { // Big enough that the GPU's kernels, not launches, dominate.
    layers = quick ? 2 : 4;
    hidden = quick ? 1024 : 2048;
    heads = quick ? 8 : 16;
    vocab = 32768;
    seq = quick ? 512 : 1024;
    batch = 8;
    steps = quick ? 6 : 10;
  }
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
    compile.dtype = cuda ? "bf16" : "fp32";
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
    for (int64_t i = 0; i < (steps + 4) * seq * batch; ++i) {
      uint16_t id = static_cast<uint16_t>((i * 7919) % vocab);
      os.write(reinterpret_cast<const char *>(&id), sizeof(id));
    }
  }
  RunOptions run;
  run.backend = cuda ? "cuda" : "cpu";
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
    auto json = rt::parseJson(line);
    if (!json) {
      llvm::consumeError(json.takeError());
      continue;
    }
    if (auto *object = json->getAsObject())
      if (auto seconds = object->getNumber("step_time_s"))
        times.push_back(*seconds);
  }
  // A GPU's first steps also choose cuBLASLt algorithms and fill the
  // allocator's pools.
  if (cuda && times.size() > 3)
    times.erase(times.begin(), times.begin() + 2);
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

/// PCIe 4.0 x16, one direction: the links of a GPU without a preset when
/// two GPUs could not measure them.
constexpr double kNominalPcieGBps = 32;

llvm::StringRef calibrate::presetForGpu(llvm::StringRef device) {
  std::string name = device.lower();
  llvm::StringRef n(name);
  // Longest names first: "gb200" contains "b200".
  if (n.contains("gb200"))
    return "gb200-nvl72";
  for (llvm::StringRef gpu : {"b200", "h200", "h100"})
    if (n.contains(gpu))
      return gpu;
  if (n.contains("a100"))
    return "a100-80g";
  return "";
}

Cluster calibrate::clusterFromMeasurements(const Measurements &m,
                                           const GemmFit &fit,
                                           llvm::StringRef name) {
  Cluster c;
  llvm::StringRef preset = m.cuda ? presetForGpu(m.device) : "";
  if (!preset.empty())
    c = cantFail(lookupClusterPreset(preset, 1));
  c.name = name.str();
  double tflops = fit.peakFlops / 1e12;
  if (m.cuda) {
    c.gpu = m.device;
    // The runtime has no fp8 GEMM to time: the datasheet's fp8 / bf16
    // ratio on the measured bf16 rate.
    double fp8PerBf16 =
        c.peakBf16Tflops > 0 ? c.peakFp8Tflops / c.peakBf16Tflops : 0;
    c.peakBf16Tflops = c.peakFp16Tflops = tflops;
    c.peakTf32Tflops = tflops * m.f32OverBf16;
    c.peakFp8Tflops = tflops * fp8PerBf16;
  } else {
    c.gpu = llvm::formatv("{0} ({1} threads)", m.device, m.threads).str();
    // The CPU backend computes every dtype in fp32 (bf16/f16 converted on
    // load), so every peak is the fp32 GEMM rate; there is no fp8.
    c.peakBf16Tflops = c.peakFp16Tflops = c.peakTf32Tflops = tflops;
    c.peakFp8Tflops = 0;
  }
  c.gemmPeakEfficiency = 1; // The peak is the fitted rate itself.
  c.gemmHalfSize = fit.halfSize;
  c.hbmBytes = m.memoryBytes;
  c.hbmBytesPerSecond = m.streamBytesPerSecond();
  // dtc.add's bandwidth, at the efficiency the runtime's unfused
  // memory-bound kernels reach on a real step (1 until the step is fitted).
  c.memoryEfficiency = m.step.memoryEfficiency;
  bool measured = m.link.bytesPerSecond > 0;
  if (m.cuda) {
    // Two GPUs' all-reduces measure the NVLink (or PCIe) link; the node's
    // size and the scale-out network are the preset's, which one machine
    // cannot see.
    if (preset.empty()) {
      c.gpusPerNode = std::max(m.gpus, 1);
      c.intraNodeGBps = c.interNodeGBps = kNominalPcieGBps;
      c.intraNodeLatencyUs = c.interNodeLatencyUs = 10;
      c.intraNodeEfficiency = c.interNodeEfficiency = 1;
    }
    if (measured) {
      c.intraNodeGBps = m.link.bytesPerSecond / 1e9;
      c.intraNodeLatencyUs = 1e6 * m.link.latencySeconds;
      c.intraNodeEfficiency = 1;
    }
  } else {
    // Ranks on one machine exchange data through memory; one "node". The
    // link is what two ranks' all-reduces measured, or else a memory
    // copy's bandwidth with a nominal latency.
    double copy = m.copySeconds > 0 ? m.copyBytes / m.copySeconds / 2
                                    : c.hbmBytesPerSecond / 3;
    c.gpusPerNode = 1;
    c.intraNodeGBps = c.interNodeGBps =
        (measured ? m.link.bytesPerSecond : copy) / 1e9;
    c.intraNodeLatencyUs = c.interNodeLatencyUs =
        measured ? 1e6 * m.link.latencySeconds : 10;
    c.intraNodeEfficiency = c.interNodeEfficiency = 1;
  }
  c.gpus = 1;
  // Attention: the factor that makes the model's fused-attention forward
  // take the measured time, and the measured backward / forward ratio.
  const AttentionSample &a = m.attention;
  DType attention = m.cuda ? DType::BF16 : DType::F32;
  if (a.forwardSeconds > 0 && a.backwardSeconds > 0) {
    double modelled = a.forwardFlops() /
                      (c.peakFlops(attention) *
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
  if (options.collectives && m->cuda && m->gpus < 2) {
    linkNote = "this machine has one GPU; NVLink needs two";
  } else if (options.collectives) {
    Options ranks = options;
    ranks.backend = m->cuda ? "cuda" : "cpu";
    auto samples = measureCollectives(ranks);
    auto link = samples ? fitLink(*samples)
                        : llvm::Expected<LinkFit>(samples.takeError());
    if (link) {
      m->collectives = std::move(*samples);
      m->link = *link;
    } else {
      linkNote = llvm::toString(link.takeError());
    }
  }
  llvm::StringRef name = m->cuda ? "calibrated-cuda" : "calibrated-cpu";
  if (options.step)
    if (llvm::Error err = fitStep(
            options, m->cuda, clusterFromMeasurements(*m, *fit, name), m->step))
      return err;
  Cluster cluster = clusterFromMeasurements(*m, *fit, name);

  if (m->cuda)
    out << llvm::formatv("machine   {0} (1 of {1} GPUs), {2:F1} GB memory, "
                         "preset {3}, load average {4} before / {5} after\n",
                         m->device, m->gpus, m->memoryBytes / 1e9,
                         presetForGpu(m->device).empty()
                             ? llvm::StringRef("none")
                             : presetForGpu(m->device),
                         loadBefore, loadAverage());
  else
    out << llvm::formatv("machine   {0}, {1} threads, {2:F1} GB memory, load "
                         "average {3} before / {4} after\n",
                         m->device, m->threads, m->memoryBytes / 1e9,
                         loadBefore, loadAverage());
  out << llvm::formatv("gemm      peak {0:F1} GFLOP/s, half size {1:F1} "
                       "({6}, {2} shapes {3}; fit error median {4:F1}%, "
                       "worst {5:F1}%)\n",
                       fit->peakFlops / 1e9, fit->halfSize, m->gemms.size(),
                       m->cuda ? "bf16" : "f32", 100 * fit->medianError,
                       100 * fit->worstError, gemmProbe(1, 1, 1, false).op);
  if (m->cuda)
    out << llvm::formatv("          f32 at {0:F3}x the bf16 rate: tf32 peak "
                         "{1:F1} TFLOP/s; fp8 {2:F1} (datasheet ratio)\n",
                         m->f32OverBf16, cluster.peakTf32Tflops,
                         cluster.peakFp8Tflops);
  out << llvm::formatv(
      "memory    {0:F2} GB/s (dtc.add over 3 x {1:F0} MB), "
      "{2} {3:F2} GB/s\n",
      m->streamBytesPerSecond() / 1e9, m->streamBytes / 3 / 1e6,
      m->cuda ? "device copy" : "memcpy", m->copyBytes / m->copySeconds / 1e9);
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
  } else if (options.collectives && m->cuda) {
    out << llvm::formatv(
        "link      not measured ({0}); intra-node {1:F1} GB/s, "
        "{2:F1} us from {3}\n",
        linkNote, cluster.intraNodeGBps, cluster.intraNodeLatencyUs,
        presetForGpu(m->device).empty()
            ? llvm::StringRef("PCIe 4.0's nominal figures")
            : llvm::StringRef("the preset"));
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
  out << "wrote     " << outputPath << " (use: dtc compile MODEL --gpus "
      << (m->cuda ? "N --dtype bf16" : "1 --dtype fp32") << " --cluster "
      << outputPath << ")\n";
  return llvm::Error::success();
}
