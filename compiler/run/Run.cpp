//===- Run.cpp - dtc run: execute a plan bundle ---------------------------===//

#include "compiler/run/Run.h"

#include "compiler/support/Error.h"
#include "frontends/onnx/HostTensor.h"
#include "runtime/core/Executor.h"
#include "runtime/cpu/CpuKernels.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"

#include <onnx/onnx_pb.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <random>

namespace dtc {
namespace {

namespace rt = runtime;

/// splitmix64: a well-mixed 64-bit hash, so that every (seed, index) pair
/// gets its own stream regardless of how many ranks or steps came before.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t hashName(llvm::StringRef name) {
  uint64_t h = 1469598103934665603ull; // FNV-1a
  for (char c : name)
    h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return h;
}

llvm::Expected<program::Program> loadProgram(llvm::StringRef bundle) {
  llvm::SmallString<256> path(bundle);
  llvm::sys::path::append(path, "program.pb");
  if (!llvm::sys::fs::is_directory(bundle))
    return badInput("{0}: no such bundle directory; create it with 'dtc "
                    "compile MODEL --gpus 1 -o {0}'",
                    bundle);
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return badInput("{0}: missing; this bundle has no runtime program "
                    "(multi-GPU plans are lowered by issue 7; compile with "
                    "--gpus 1 to run on one device)",
                    path);
  program::Program p;
  if (!p.ParseFromArray((*buffer)->getBufferStart(),
                        static_cast<int>((*buffer)->getBufferSize())) ||
      p.schema() != "dtc.program/1" || p.ranks_size() == 0)
    return badInput("{0}: not a dtc program (corrupt or from another "
                    "version); recompile the bundle",
                    path);
  return p;
}

std::string shapeText(llvm::ArrayRef<int64_t> shape, rt::DType dtype) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? "x" : "") + std::to_string(d);
  return s + "] " + rt::dtypeName(dtype).str();
}

/// Initial values: the model file's initializers, or with --init a seeded
/// draw per variable (its own stream, keyed by name).
llvm::Error initializeVariables(const program::Program &p,
                                rt::Executor &executor, const RunOptions &o) {
  const program::RankProgram &rank = p.ranks(0);
  std::map<std::string, const ::onnx::TensorProto *> initializers;
  ::onnx::ModelProto model;
  bool needModel = !o.init && llvm::any_of(rank.variables(), [](auto &v) {
    return v.init() == "model";
  });
  if (needModel) {
    auto buffer = llvm::MemoryBuffer::getFile(p.model_path());
    if (!buffer)
      return badInput("{0}: cannot read the model's weights ({1}); pass "
                      "--init to start from random weights",
                      p.model_path(), buffer.getError().message());
    if (!model.ParseFromArray((*buffer)->getBufferStart(),
                              static_cast<int>((*buffer)->getBufferSize())))
      return badInput("{0}: not an ONNX model; recompile the bundle",
                      p.model_path());
    for (const auto &init : model.graph().initializer())
      initializers[init.name()] = &init;
  }
  std::string baseDir = llvm::sys::path::parent_path(p.model_path()).str();
  for (const program::Variable &v : rank.variables()) {
    rt::Tensor *t = executor.variable(v.name());
    std::string how = v.init();
    if (how == "model" && o.init)
      how = v.fallback_init();
    if (how == "model") {
      auto it = initializers.find(v.parameter());
      if (it == initializers.end())
        return badInput("{0}: has no initializer '{1}'; recompile the "
                        "bundle or pass --init",
                        p.model_path(), v.parameter());
      std::string error;
      auto host = onnx::decodeTensor(*it->second, baseDir, error);
      if (!host)
        return badInput("{0}: initializer '{1}': {2}; pass --init to start "
                        "from random weights",
                        p.model_path(), v.parameter(), error);
      if (llvm::ArrayRef<int64_t>(host->shape) != t->shape())
        return badInput("{0}: initializer '{1}' is {2}, the program expects "
                        "{3}; recompile the bundle",
                        p.model_path(), v.parameter(),
                        shapeText(host->shape, t->dtype()),
                        shapeText(t->shape(), t->dtype()));
      rt::Tensor value = toRuntimeTensor(*host, t->dtype());
      std::memcpy(t->data(), value.data(), t->bytes());
      continue;
    }
    int64_t n = t->numElements();
    if (how == "normal") {
      std::mt19937_64 rng(mix(o.seed ^ hashName(v.name())));
      std::normal_distribution<float> normal(0.0f,
                                             static_cast<float>(v.init_std()));
      if (t->dtype() != rt::DType::F32)
        return failure("--init: variable '{0}' is {1}; random init supports "
                       "f32",
                       v.name(), rt::dtypeName(t->dtype()));
      for (int64_t i = 0; i < n; ++i)
        t->as<float>()[i] = normal(rng);
    } else if (how == "ones") {
      for (int64_t i = 0; i < n; ++i)
        t->as<float>()[i] = 1.0f;
    } else {
      std::memset(t->data(), 0, t->bytes()); // "zeros"
    }
  }
  return llvm::Error::success();
}

/// Writes `tensor` as a serialized ONNX TensorProto.
llvm::Error writeTensorProto(const rt::Tensor &tensor, llvm::StringRef name,
                             llvm::StringRef path) {
  ::onnx::TensorProto proto;
  proto.set_name(name.str());
  for (int64_t d : tensor.shape())
    proto.add_dims(d);
  static const std::map<rt::DType, int> types = {
      {rt::DType::F32, ::onnx::TensorProto::FLOAT},
      {rt::DType::F16, ::onnx::TensorProto::FLOAT16},
      {rt::DType::BF16, ::onnx::TensorProto::BFLOAT16},
      {rt::DType::F64, ::onnx::TensorProto::DOUBLE},
      {rt::DType::I64, ::onnx::TensorProto::INT64},
      {rt::DType::I32, ::onnx::TensorProto::INT32},
      {rt::DType::I8, ::onnx::TensorProto::INT8},
      {rt::DType::BOOL, ::onnx::TensorProto::BOOL}};
  proto.set_data_type(types.at(tensor.dtype()));
  proto.set_raw_data(tensor.data(), tensor.bytes());
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (!ec) {
    os << proto.SerializeAsString();
    os.close();
    ec = os.error();
  }
  if (ec)
    return failure("cannot write {0}: {1}", path, ec.message());
  return llvm::Error::success();
}

llvm::Error runInference(const program::Program &p, rt::Executor &executor,
                         const RunOptions &o, llvm::raw_ostream &out) {
  const program::RankProgram &rank = p.ranks(0);
  const program::Function *fn = nullptr;
  for (const program::Function &f : rank.functions())
    if (f.name() == p.infer_function())
      fn = &f;
  if (!fn)
    return badInput("the program has no inference function; recompile with "
                    "--mode infer");
  if (o.inputs.empty())
    return badInput("--inputs DIR is required for an inference bundle "
                    "(input_0.pb, ... as serialized ONNX TensorProtos)");
  std::vector<rt::Tensor> args;
  for (auto [i, arg] : llvm::enumerate(fn->arguments())) {
    const program::TensorType &type = fn->values(arg.value()).type();
    llvm::ArrayRef<int64_t> shape(type.shape().data(), type.shape_size());
    std::string file = (o.inputs + "/input_" + std::to_string(i) + ".pb");
    std::string what = arg.name().empty() ? "input " + std::to_string(i)
                                          : "input '" + arg.name() + "'";
    auto buffer = llvm::MemoryBuffer::getFile(file);
    if (!buffer)
      return badInput("{0}: missing ({1}); the model expects {2} here", file,
                      what, shapeText(shape, type.dtype()));
    ::onnx::TensorProto proto;
    std::string error;
    std::optional<onnx::HostTensor> host;
    if (proto.ParseFromArray((*buffer)->getBufferStart(),
                             static_cast<int>((*buffer)->getBufferSize())))
      host = onnx::decodeTensor(proto, o.inputs, error);
    if (!host)
      return badInput("{0}: not a valid TensorProto for {1}{2}", file, what,
                      error.empty() ? "" : ": " + error);
    if (llvm::ArrayRef<int64_t>(host->shape) != shape ||
        host->isFloat() != rt::isFloat(type.dtype()))
      return badInput("{0}: {1} must be {2}, the file holds {3} of {4}", file,
                      what, shapeText(shape, type.dtype()),
                      onnx::shapeString(host->shape),
                      onnx::dataTypeName(host->dataType));
    args.push_back(toRuntimeTensor(*host, type.dtype()));
  }
  auto results = executor.run(fn->name(), args);
  if (!results)
    return failure("{0}", llvm::toString(results.takeError()));
  if (!o.outputs.empty()) {
    // Written next to the target, then renamed: no half-written outputs.
    std::string tmp = o.outputs + ".partial";
    llvm::sys::fs::remove_directories(tmp);
    if (std::error_code ec = llvm::sys::fs::create_directories(tmp))
      return failure("cannot create {0}: {1}", tmp, ec.message());
    for (auto [i, t] : llvm::enumerate(*results))
      if (llvm::Error e =
              writeTensorProto(t, fn->results(i).name(),
                               tmp + "/output_" + std::to_string(i) + ".pb"))
        return e;
    llvm::sys::fs::remove_directories(o.outputs);
    if (std::error_code ec = llvm::sys::fs::rename(tmp, o.outputs))
      return failure("cannot move outputs into {0}: {1}", o.outputs,
                     ec.message());
  }
  for (auto [i, t] : llvm::enumerate(*results)) {
    out << "output " << i;
    if (!fn->results(i).name().empty())
      out << " '" << fn->results(i).name() << "'";
    out << " " << shapeText(t.shape(), t.dtype());
    if (rt::isFloat(t.dtype()) && t.numElements() > 0) {
      out << ":";
      for (int64_t j = 0; j < std::min<int64_t>(4, t.numElements()); ++j)
        out << llvm::formatv(" {0:g}", rt::loadAsFloat(t.ref(), j));
      if (t.numElements() > 4)
        out << " ...";
    }
    out << "\n";
  }
  return llvm::Error::success();
}

/// A token file (nanoGPT's train.bin layout: flat little-endian ids).
struct TokenData {
  std::unique_ptr<llvm::MemoryBuffer> buffer;
  int64_t count = 0;
  bool wide = false; // uint32 ids
  int64_t at(int64_t i) const {
    const char *base = buffer->getBufferStart();
    if (wide) {
      uint32_t v;
      std::memcpy(&v, base + 4 * i, 4);
      return v;
    }
    uint16_t v;
    std::memcpy(&v, base + 2 * i, 2);
    return v;
  }
};

llvm::Expected<TokenData> loadTokens(const RunOptions &o, int64_t seqLen,
                                     int64_t vocab) {
  if (o.data.empty())
    return badInput("--data FILE is required for training (flat "
                    "little-endian uint16 token ids, nanoGPT's train.bin)");
  if (o.dataDtype != "uint16" && o.dataDtype != "uint32")
    return badInput("--data-dtype {0}: use uint16 or uint32", o.dataDtype);
  auto buffer = llvm::MemoryBuffer::getFile(o.data, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer)
    return badInput("--data {0}: {1}", o.data, buffer.getError().message());
  TokenData data;
  data.wide = o.dataDtype == "uint32";
  int64_t width = data.wide ? 4 : 2;
  data.buffer = std::move(*buffer);
  if (data.buffer->getBufferSize() % width)
    return badInput("--data {0}: {1} bytes is not a whole number of {2} ids",
                    o.data, data.buffer->getBufferSize(), o.dataDtype);
  data.count = data.buffer->getBufferSize() / width;
  if (data.count < seqLen + 1)
    return badInput("--data {0}: {1} tokens; a training window needs at "
                    "least {2} (seq len + 1)",
                    o.data, data.count, seqLen + 1);
  if (vocab > 0)
    for (int64_t i = 0; i < data.count; ++i)
      if (data.at(i) >= vocab)
        return badInput("--data {0}: token {1} at position {2} is outside "
                        "the model's vocabulary of {3}",
                        o.data, data.at(i), i, vocab);
  return data;
}

/// Warmup, then cosine or linear decay to min_lr over decay_steps.
double learningRate(const program::Optimizer &opt, int64_t step) {
  if (opt.warmup_steps() > 0 && step <= opt.warmup_steps())
    return opt.lr() * static_cast<double>(step) / opt.warmup_steps();
  if (opt.decay_steps() <= 0 || opt.schedule() == "constant")
    return opt.lr();
  double progress =
      std::min(1.0, static_cast<double>(step - opt.warmup_steps()) /
                        static_cast<double>(opt.decay_steps()));
  double factor = opt.schedule() == "linear"
                      ? 1.0 - progress
                      : 0.5 * (1.0 + std::cos(M_PI * progress));
  return opt.min_lr() + factor * (opt.lr() - opt.min_lr());
}

rt::Tensor scalarF32(float value) {
  rt::Tensor t(rt::DType::F32, {});
  *t.as<float>() = value;
  return t;
}

llvm::Error runTraining(const program::Program &p, rt::Executor &executor,
                        const RunOptions &o, llvm::raw_ostream &out) {
  const program::Training &train = p.training();
  if (!o.steps)
    return badInput("--steps N is required for training");
  auto data = loadTokens(o, train.seq_len(), train.vocab());
  if (!data)
    return data.takeError();
  const int64_t mb = train.micro_batch(), seq = train.seq_len();
  const int64_t windows = data->count - seq; // valid window starts
  bool terminal = o.progress.value_or(
      llvm::sys::Process::StandardErrIsDisplayed() && !o.logJson);
  int64_t logEvery = std::max<int64_t>(1, *o.steps / 10);
  auto start = std::chrono::steady_clock::now();
  double firstLoss = 0, lastLoss = 0;
  for (int64_t step = 1; step <= *o.steps; ++step) {
    auto stepStart = std::chrono::steady_clock::now();
    double lossSum = 0;
    for (int64_t micro = 0; micro < train.grad_accum(); ++micro) {
      rt::Tensor tokens(rt::DType::I64, {mb, seq}),
          labels(rt::DType::I64, {mb, seq});
      for (int64_t row = 0; row < mb; ++row) {
        // The global sample index decides the window, so the sequence of
        // samples does not depend on how the batch is split.
        uint64_t sample = static_cast<uint64_t>(
            ((step - 1) * train.grad_accum() + micro) * mb + row);
        int64_t begin = static_cast<int64_t>(mix(mix(o.seed) ^ sample) %
                                             static_cast<uint64_t>(windows));
        for (int64_t j = 0; j < seq; ++j) {
          tokens.as<int64_t>()[row * seq + j] = data->at(begin + j);
          labels.as<int64_t>()[row * seq + j] = data->at(begin + j + 1);
        }
      }
      auto loss = executor.run(train.micro_step(), {tokens, labels});
      if (!loss)
        return failure("step {0}: {1}", step, llvm::toString(loss.takeError()));
      lossSum += (*loss)[0].as<float>()[0];
    }
    double loss = lossSum / static_cast<double>(train.grad_accum());
    if (!std::isfinite(loss))
      return failure("step {0}: the loss is {1}; training diverged (lower "
                     "the learning rate or check the data)",
                     step, loss);
    double lr = learningRate(train.optimizer(), step);
    auto applied =
        executor.run(train.apply(), {scalarF32(static_cast<float>(lr)),
                                     scalarF32(static_cast<float>(step))});
    if (!applied)
      return failure("step {0}: {1}", step,
                     llvm::toString(applied.takeError()));
    double gradNorm = (*applied)[0].as<float>()[0];
    if (!std::isfinite(gradNorm))
      return failure("step {0}: the gradient norm is {1}; training diverged",
                     step, gradNorm);
    auto now = std::chrono::steady_clock::now();
    double stepS = std::chrono::duration<double>(now - stepStart).count();
    double elapsed = std::chrono::duration<double>(now - start).count();
    double tokensPerS =
        static_cast<double>(train.grad_accum() * mb * seq) / stepS;
    if (step == 1)
      firstLoss = loss;
    lastLoss = loss;
    if (o.logJson) {
      llvm::json::Object line{{"step", step},
                              {"loss", loss},
                              {"grad_norm", gradNorm},
                              {"lr", lr},
                              {"tokens_per_s", tokensPerS},
                              {"step_time_s", stepS}};
      out << llvm::json::Value(std::move(line)) << "\n";
      out.flush();
    }
    double eta = elapsed / step * (*o.steps - step);
    std::string progress =
        llvm::formatv("step {0}/{1}  loss {2:f4}  grad norm {3:f3}  lr "
                      "{4:e2}  {5:f0} tokens/s  ETA {6:f0} s",
                      step, *o.steps, loss, gradNorm, lr, tokensPerS, eta)
            .str();
    if (terminal) {
      llvm::errs() << "\r" << progress << "\x1b[K";
      if (step == *o.steps)
        llvm::errs() << "\n";
    } else if (!o.logJson && (step % logEvery == 0 || step == 1)) {
      llvm::errs() << progress << "\n";
    }
  }
  if (!o.logJson)
    out << llvm::formatv("trained {0} steps: loss {1:f4} -> {2:f4}\n", *o.steps,
                         firstLoss, lastLoss);
  return llvm::Error::success();
}

} // namespace

rt::Tensor toRuntimeTensor(const onnx::HostTensor &host, rt::DType dtype) {
  rt::Tensor t(dtype, host.shape);
  for (int64_t i = 0, e = host.size(); i < e; ++i) {
    double v = host.getDouble(i);
    int64_t n = host.getInt(i);
    switch (dtype) {
    case rt::DType::F32:
      t.as<float>()[i] = static_cast<float>(v);
      break;
    case rt::DType::F64:
      t.as<double>()[i] = v;
      break;
    case rt::DType::F16:
      t.as<uint16_t>()[i] = rt::floatToHalf(static_cast<float>(v));
      break;
    case rt::DType::BF16:
      t.as<uint16_t>()[i] = rt::floatToBF16(static_cast<float>(v));
      break;
    case rt::DType::I64:
      t.as<int64_t>()[i] = n;
      break;
    case rt::DType::I32:
      t.as<int32_t>()[i] = static_cast<int32_t>(n);
      break;
    case rt::DType::I8:
      t.as<int8_t>()[i] = static_cast<int8_t>(n);
      break;
    default:
      t.as<uint8_t>()[i] = n != 0;
      break;
    }
  }
  return t;
}

llvm::Error runBundle(const RunOptions &o, llvm::raw_ostream &out) {
  if (!o.backend.empty() && o.backend != "cpu" && o.backend != "cuda")
    return badInput("--backend {0}: use cpu or cuda", o.backend);
  if (o.backend == "cuda")
    return badInput("--backend cuda: the CUDA backend is built by issue 8; "
                    "use --backend cpu");
  auto p = loadProgram(o.bundle);
  if (!p)
    return p.takeError();
  if (p->world_size() > 1)
    return badInput("{0}: a plan of {1} ranks; multi-rank execution is built "
                    "by issue 8 (compile with --gpus 1 to run here)",
                    o.bundle, p->world_size());
  static const rt::KernelRegistry kernels = [] {
    rt::KernelRegistry registry;
    rt::cpu::registerCpuKernels(registry);
    return registry;
  }();
  auto executor = rt::Executor::create(p->ranks(0), kernels);
  if (!executor)
    return badInput("{0}: {1}", o.bundle, llvm::toString(executor.takeError()));
  if (llvm::Error e = initializeVariables(*p, **executor, o))
    return e;
  if (p->mode() == "train")
    return runTraining(*p, **executor, o, out);
  return runInference(*p, **executor, o, out);
}

} // namespace dtc
