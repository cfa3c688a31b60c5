//===- Run.cpp - dtc run: execute a plan bundle ---------------------------===//

#include "compiler/run/Run.h"

#include "compiler/run/Checkpointing.h"
#include "compiler/run/Elastic.h"
#include "compiler/run/Launch.h"
#include "compiler/run/ShardData.h"
#include "compiler/run/Telemetry.h"
#include "compiler/support/ProgramFile.h"
#include "frontends/onnx/HostTensor.h"
#include "runtime/core/Executor.h"
#include "runtime/core/PipelineSchedule.h"
#include "runtime/core/Shard.h"
#include "runtime/cpu/CpuKernels.h"
#include "runtime/mpi/MpiCommunicator.h"
#include "runtime/support/Error.h"
#include "runtime/support/Json.h"
#include "runtime/support/OutputDir.h"
#ifdef DTC_HAVE_CUDA
#include "runtime/cuda/CudaPlugin.h"
#endif

#include "llvm/ADT/ScopeExit.h"
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
#include <csignal>
#include <cstring>
#include <map>
#include <random>
#include <thread>

namespace dtc {
namespace {

namespace rt = runtime;

/// Where this process sits in the plan: its rank, the mesh, its program
/// and its part of the data.
struct RankContext {
  int rank = 0;
  rt::Mesh mesh;
  const program::RankProgram *program = nullptr;
  /// Rank 0 prints progress, logs and results; the others stay quiet.
  bool reports() const { return rank == 0; }
};

llvm::Expected<RankContext> rankContext(const program::Program &p, int rank) {
  RankContext context;
  context.rank = rank;
  auto mesh = rt::Mesh::parse(p.mesh());
  if (!mesh)
    return badInput("program.pb: {0}; recompile the bundle",
                    llvm::toString(mesh.takeError()));
  context.mesh = std::move(*mesh);
  if (context.mesh.worldSize() != p.world_size())
    return badInput("program.pb: mesh '{0}' has {1} ranks, the program {2}; "
                    "recompile the bundle",
                    p.mesh(), context.mesh.worldSize(), p.world_size());
  context.program = rt::rankProgramOf(p, rank);
  if (!context.program)
    return badInput("program.pb: no program for rank {0}; recompile the "
                    "bundle",
                    rank);
  return context;
}

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

llvm::Expected<program::Program>
loadProgram(llvm::StringRef bundle, llvm::StringRef file = "program.pb") {
  if (!llvm::sys::fs::is_directory(bundle))
    return badInput("{0}: no such bundle directory; create it with 'dtc "
                    "compile MODEL --gpus 1 -o {0}'",
                    bundle);
  return readBundleProgram(bundle, file,
                           "this bundle has no runtime program (the "
                           "'program' line of dtc compile says why: pin a "
                           "plan the partitioner lowers, or compile with "
                           "--gpus 1)");
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
                                const RankContext &context,
                                rt::Executor &executor, const RunOptions &o) {
  const program::RankProgram &rank = *context.program;
  // Each initializer with the number of variables still to read it: its
  // bytes are dropped after the last, so that the parsed model shrinks as
  // the executor's variables fill.
  std::map<std::string, std::pair<::onnx::TensorProto *, int>> initializers;
  ::onnx::ModelProto model;
  // --init draws parameters; buffers (positions, masks) come from the model
  // all the same, as PyTorch computes them in a freshly built model.
  auto fromModel = [&](const program::Variable &v) {
    return v.init() == "model" &&
           (!o.init || v.role() == "buffer" || v.role() == "constant");
  };
  bool needModel = llvm::any_of(rank.variables(), fromModel);
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
    for (::onnx::TensorProto &init :
         *model.mutable_graph()->mutable_initializer())
      initializers[init.name()] = {&init, 0};
    for (const program::Variable &v : rank.variables())
      if (fromModel(v)) {
        for (const std::string &member : v.stack())
          if (auto it = initializers.find(member); it != initializers.end())
            ++it->second.second;
        if (auto it = initializers.find(v.parameter());
            it != initializers.end() && v.stack().empty())
          ++it->second.second;
      }
  }
  std::string baseDir = llvm::sys::path::parent_path(p.model_path()).str();
  for (const program::Variable &v : rank.variables()) {
    // A shard is cut from the whole tensor, so that every plan starts from
    // the weights one device would. The whole value is filled on the host
    // and freed as soon as its shard is in the executor's memory: one
    // tensor-sized buffer alive at a time, not the three a model's largest
    // table used to cost at startup.
    auto layout = rt::ShardLayout::of(v, context.mesh, context.rank);
    if (!layout)
      return badInput("program.pb: {0}; recompile the bundle",
                      llvm::toString(layout.takeError()));
    llvm::SmallVector<int64_t> wholeShape =
        layout->isWhole() ? llvm::SmallVector<int64_t>(v.type().shape().begin(),
                                                       v.type().shape().end())
                          : llvm::SmallVector<int64_t>(layout->globalShape());
    rt::DType dtype = v.type().dtype();
    auto store = [&](rt::Tensor whole) -> llvm::Error {
      if (layout->isWhole())
        return executor.writeVariable(v.name(), whole);
      rt::Tensor local(dtype,
                       llvm::SmallVector<int64_t>(v.type().shape().begin(),
                                                  v.type().shape().end()));
      layout->extract(whole.ref(), local.ref());
      whole = rt::Tensor();
      return executor.writeVariable(v.name(), local);
    };
    std::string how = fromModel(v) ? std::string("model") : v.init();
    if (how == "model" && !fromModel(v))
      how = v.fallback_init();
    if (how == "model") {
      auto lookup = [&](llvm::StringRef name) -> const ::onnx::TensorProto * {
        auto it = initializers.find(name.str());
        return it == initializers.end() ? nullptr : it->second.first;
      };
      // After decoding: the initializers this variable was the last to read.
      auto release = [&](llvm::ArrayRef<std::string> names) {
        for (const std::string &name : names)
          if (auto it = initializers.find(name);
              it != initializers.end() && --it->second.second == 0)
            std::string().swap(*it->second.first->mutable_raw_data());
      };
      std::vector<std::string> members(v.stack().begin(), v.stack().end());
      if (members.empty() && !lookup(v.parameter()))
        return badInput("{0}: has no initializer '{1}'; recompile the "
                        "bundle or pass --init",
                        p.model_path(), v.parameter());
      std::string error;
      auto host =
          members.empty()
              ? onnx::decodeTensor(*lookup(v.parameter()), baseDir, error)
              : onnx::decodeStacked(members, v.stack_transposed(), lookup,
                                    baseDir, error);
      if (!host)
        return badInput("{0}: initializer '{1}': {2}; pass --init to start "
                        "from random weights",
                        p.model_path(), v.parameter(), error);
      release(members.empty() ? llvm::ArrayRef<std::string>(v.parameter())
                              : llvm::ArrayRef<std::string>(members));
      if (llvm::ArrayRef<int64_t>(host->shape) !=
          llvm::ArrayRef<int64_t>(wholeShape))
        return badInput("{0}: initializer '{1}' is {2}, the program expects "
                        "{3}; recompile the bundle",
                        p.model_path(), v.parameter(),
                        shapeText(host->shape, dtype),
                        shapeText(wholeShape, dtype));
      rt::Tensor whole = toRuntimeTensor(*host, dtype);
      host.reset();
      if (llvm::Error e = store(std::move(whole)))
        return e;
      continue;
    }
    rt::Tensor whole(dtype, wholeShape);
    int64_t n = whole.numElements();
    if (how == "normal") {
      std::mt19937_64 rng(mix(o.seed ^ hashName(v.name())));
      std::normal_distribution<float> normal(0.0f,
                                             static_cast<float>(v.init_std()));
      if (dtype != rt::DType::F32)
        return failure("--init: variable '{0}' is {1}; random init supports "
                       "f32",
                       v.name(), rt::dtypeName(dtype));
      for (int64_t i = 0; i < n; ++i)
        whole.as<float>()[i] = normal(rng);
    } else if (how == "ones") {
      for (int64_t i = 0; i < n; ++i)
        whole.as<float>()[i] = 1.0f;
    } // else "zeros": a new tensor is zero-filled
    if (llvm::Error e = store(std::move(whole)))
      return e;
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

/// `--trace DIR`: this rank's trace, recording from now on (null without
/// --trace). Collective: every rank agrees on the time zero.
llvm::Expected<std::unique_ptr<TraceWriter>>
startTrace(const RankContext &context, rt::Executor &executor,
           rt::Communicator *communicator,
           std::vector<rt::InstructionEvent> &events, const RunOptions &o) {
  if (o.traceDir.empty())
    return nullptr;
  auto zero = agreeOnTimeZero(communicator, executor.memory());
  if (!zero)
    return zero.takeError();
  auto trace = TraceWriter::open(
      o.traceDir, *context.program,
      {context.rank, &context.mesh, o.bundle,
       executor.memory().isHost() ? "cpu" : executor.memory().name().str()},
      *zero);
  if (trace)
    executor.recordTrace(&events);
  return trace;
}

llvm::Error runInference(const program::Program &p, const RankContext &context,
                         rt::Executor &executor, rt::Communicator *communicator,
                         const RunOptions &o, llvm::raw_ostream &out) {
  const program::RankProgram &rank = *context.program;
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
    // The file holds the whole input; a rank of a data-parallel plan keeps
    // its part (the same cut as for variables).
    std::optional<rt::ShardLayout> part;
    if (arg.shard_size()) {
      program::Variable asVariable;
      asVariable.set_name(arg.name().empty() ? "input " + std::to_string(i)
                                             : arg.name());
      *asVariable.mutable_type() = type;
      *asVariable.mutable_global_shape() = arg.global_shape();
      *asVariable.mutable_shard() = arg.shard();
      auto layout = rt::ShardLayout::of(asVariable, context.mesh, context.rank);
      if (!layout)
        return badInput("program.pb: {0}; recompile the bundle",
                        llvm::toString(layout.takeError()));
      part = std::move(*layout);
    }
    llvm::ArrayRef<int64_t> shape =
        part ? part->globalShape()
             : llvm::ArrayRef<int64_t>(type.shape().data(), type.shape_size());
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
    rt::Tensor whole = toRuntimeTensor(*host, type.dtype());
    if (part) {
      rt::Tensor local(type.dtype(), part->localShape());
      part->extract(whole.ref(), local.ref());
      whole = std::move(local);
    }
    args.push_back(std::move(whole));
  }
  std::vector<rt::InstructionEvent> events;
  auto trace = startTrace(context, executor, communicator, events, o);
  if (!trace)
    return trace.takeError();
  auto begin = rt::TraceClock::now();
  auto results = executor.run(fn->name(), args);
  if (*trace) {
    // One call: the trace's step 1.
    executor.recordTrace(nullptr);
    if (results)
      if (llvm::Error e =
              (*trace)->writeStep(1, begin, rt::TraceClock::now(), std::nan(""),
                                  events, {{0, events.size(), 0, -1}}))
        return e;
    if (llvm::Error e = (*trace)->close(results ? "complete" : "failed"))
      return e;
  }
  if (!results)
    return failure("{0}", llvm::toString(results.takeError()));
  // Every rank holds the whole outputs (the partitioner returns whole
  // values); rank 0 reports them.
  if (!context.reports())
    return llvm::Error::success();
  if (!o.outputs.empty()) {
    // Whole or not at all, nothing of the user's deleted (OutputDir.h).
    if (llvm::Error e = writeOutputDirectory(
            o.outputs, OutputKind::RunOutputs, o.force,
            [&](llvm::StringRef dir) -> llvm::Error {
              for (auto [i, t] : llvm::enumerate(*results))
                if (llvm::Error e = writeTensorProto(
                        t, fn->results(i).name(),
                        (dir + "/output_" + llvm::Twine(i) + ".pb").str()))
                  return e;
              return llvm::Error::success();
            }))
      return e;
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
    return badInput("--data FILE|DIR is required for training (a token "
                    "file of flat little-endian uint16 ids, nanoGPT's "
                    "train.bin, or a directory of safetensors shards)");
  if (o.dataDtype != "uint16" && o.dataDtype != "uint32")
    return badInput("--data-dtype {0}: use uint16 or uint32", o.dataDtype);
  // A FIFO would block the read forever, a device never end.
  llvm::sys::fs::file_status status;
  if (std::error_code ec = llvm::sys::fs::status(o.data, status))
    return badInput("--data {0}: {1}", o.data, ec.message());
  if (status.type() != llvm::sys::fs::file_type::regular_file)
    return badInput("--data {0}: not a regular file; name the token file",
                    o.data);
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

/// One data argument of the step function ("tokens", "labels" or a
/// classifier's "input") and this rank's part of it: its local shape and
/// how each dim of one micro-batch is cut. The rows are cut by the data
/// axes (dp and the ep inside it, in mesh order), the sequence of tokens
/// and labels by context parallelism (into zigzag chunks when the argument
/// says so); a classifier's sample dims are whole unless the plan splits
/// them.
struct DataPart {
  std::string name; ///< the graph input's, if any
  std::string feed;
  int64_t input = 0; ///< of the "input" arguments, which
  rt::DType dtype = rt::DType::F32;
  /// [rows, ...], or [calls, rows, ...] when the step stacks its
  /// micro-batches (a pipeline step).
  llvm::SmallVector<int64_t, 6> shape;
  bool stacked = false;
  /// Per dim of one micro-batch (dims[0]: the rows).
  llvm::SmallVector<rt::ShardLayout::DimPart, 6> dims;
  bool zigzag = false;
  /// Where this rank's part of one row lies in the whole row, when the plan
  /// splits a classifier input's sample dims.
  std::optional<rt::ShardLayout> rowLayout;

  int64_t calls() const { return stacked ? shape[0] : 1; }
  /// The local shape of one micro-batch.
  llvm::ArrayRef<int64_t> microShape() const {
    return llvm::ArrayRef<int64_t>(shape).drop_front(stacked ? 1 : 0);
  }
  int64_t rows() const { return microShape()[0]; }
  /// This rank's first row of the global micro-batch.
  int64_t firstRow() const { return dims[0].index * rows(); }
  /// The local elements of one row, and the whole row's shape.
  int64_t rowElements() const {
    int64_t n = 1;
    for (int64_t d : microShape().drop_front())
      n *= d;
    return n;
  }
  llvm::SmallVector<int64_t, 6> wholeRowShape() const {
    llvm::SmallVector<int64_t, 6> whole;
    for (size_t d = 1; d < dims.size(); ++d)
      whole.push_back(microShape()[d] * dims[d].parts);
    return whole;
  }
  /// The window position of this rank's column `j` of `columns` (dim 1).
  int64_t column(int64_t j, int64_t columns) const {
    const rt::ShardLayout::DimPart &cut = dims[1];
    if (!zigzag)
      return cut.index * columns + j;
    // Halves index and 2n - 1 - index of the 2n.
    int64_t half = columns / 2;
    return j < half ? cut.index * half + j
                    : (2 * cut.parts - 1 - cut.index) * half + j - half;
  }
};

bool isDataFeed(llvm::StringRef feed) {
  return feed == "tokens" || feed == "labels" || feed == "input" ||
         feed == "decoder_tokens" || feed == "attention_mask";
}

/// The data arguments of the step function, in argument order, each with
/// this rank's part.
llvm::Expected<std::vector<DataPart>>
localDataParts(const program::Program &p, const RankContext &context) {
  const program::Function *step = nullptr;
  for (const program::Function &f : context.program->functions())
    if (f.name() == p.training().micro_step())
      step = &f;
  if (!step)
    return badInput("program.pb: no step function '{0}'; recompile the "
                    "bundle",
                    p.training().micro_step());
  std::vector<DataPart> parts;
  for (const program::Argument &a : step->arguments()) {
    if (!isDataFeed(a.feed()))
      continue;
    const program::TensorType &type = step->values(a.value()).type();
    DataPart part;
    part.name = a.name();
    part.feed = a.feed();
    part.input = llvm::count_if(
        parts, [](const DataPart &other) { return other.feed == "input"; });
    bool tokens = llvm::any_of(step->arguments(), [](const auto &arg) {
      return arg.feed() == "tokens";
    });
    part.dtype = type.dtype();
    part.shape.assign(type.shape().begin(), type.shape().end());
    // Bundles before stacked_micro_batches: a pipeline's tokens are rank 3.
    part.stacked = p.training().stacked_micro_batches() ||
                   (tokens && part.shape.size() == 3);
    part.zigzag = a.zigzag();
    size_t rank = part.shape.size() - (part.stacked ? 1 : 0);
    if (rank < 1)
      return badInput("program.pb: the {0} argument of '{1}' has no rows; "
                      "recompile the bundle",
                      a.feed(), step->name());
    part.dims.assign(rank, {});
    if (a.shard_size() == 0) {
      // A pipeline stage's data carries no shard: the data axes cut the
      // rows in mesh order, the context axis the columns of tokens and
      // labels.
      std::vector<int64_t> at = context.mesh.coordinates(context.rank);
      for (auto [i, axis] : llvm::enumerate(context.mesh.axes())) {
        if (axis.name == "dp" || axis.name == "ep") {
          part.dims[0].index = part.dims[0].index * axis.size + at[i];
          part.dims[0].parts *= axis.size;
        }
        if (axis.name == "cp" && rank >= 2 && a.feed() != "input")
          part.dims[1] = {axis.size, at[i], 0};
      }
    } else {
      program::Variable whole;
      whole.set_name(a.feed());
      *whole.mutable_type() = type;
      *whole.mutable_global_shape() = a.global_shape();
      *whole.mutable_shard() = a.shard();
      auto layout = rt::ShardLayout::of(whole, context.mesh, context.rank);
      if (!layout)
        return badInput("program.pb: the {0} argument: {1}; recompile the "
                        "bundle",
                        a.feed(), llvm::toString(layout.takeError()));
      auto cuts = layout->dimParts().drop_front(part.stacked ? 1 : 0);
      part.dims.assign(cuts.begin(), cuts.end());
    }
    if (part.dims[0].block != 0)
      return badInput("program.pb: the {0} argument's rows are interleaved; "
                      "recompile the bundle",
                      a.feed());
    llvm::ArrayRef<rt::ShardLayout::DimPart> rowCuts =
        llvm::ArrayRef(part.dims).drop_front();
    if (part.feed == "input" &&
        llvm::any_of(rowCuts, [](const auto &cut) { return cut.parts > 1; })) {
      auto layout = rt::ShardLayout::fromParts(part.wholeRowShape(), rowCuts);
      if (!layout)
        return badInput("program.pb: the input argument: {0}; recompile the "
                        "bundle",
                        llvm::toString(layout.takeError()));
      part.rowLayout = std::move(*layout);
    }
    parts.push_back(std::move(part));
  }
  if (parts.empty())
    return badInput("program.pb: '{0}' has no data argument (tokens, labels "
                    "or input); recompile the bundle",
                    step->name());
  for (const DataPart &part : parts)
    if (part.calls() != parts.front().calls())
      return badInput("program.pb: the data arguments of '{0}' stack "
                      "different numbers of micro-batches; recompile the "
                      "bundle",
                      step->name());
  return parts;
}

/// Whether the step reads token windows (else: a classifier, trained on
/// synthetic samples).
bool readsTokens(const program::Program &p) {
  if (p.ranks().empty())
    return false;
  for (const program::Function &f : p.ranks(0).functions())
    if (f.name() == p.training().micro_step())
      for (const program::Argument &a : f.arguments())
        if (a.feed() == "tokens")
          return true;
  return false;
}

/// Synthetic samples of a model without token inputs (a classifier), a
/// pure function of (seed, global sample index, element) so that every
/// split of the batch over ranks and micro-batches computes what one
/// device computes. Sample g's class is splitmix64(splitmix64(seed ^ salt)
/// ^ g) mod classes (every label position of the sample holds it); its
/// inputs are the class's template plus N(0, 1) noise. Random labels on
/// never-repeated random inputs could not be learned (no sample is seen
/// twice), so the template makes the task learnable: the class's mean,
/// N(0, 1) per index of the input's dim 1 (a channel of an image [C, H,
/// W], a feature of [F]), is shared by all its samples.
struct SyntheticSamples {
  uint64_t seed = 0;
  int64_t classes = 1;

  static double uniform(uint64_t key) { // in (0, 1)
    return (static_cast<double>(mix(key) >> 11) + 0.5) * 0x1.0p-53;
  }
  static float normal(uint64_t key) { // Box-Muller
    double r = std::sqrt(-2.0 * std::log(uniform(key)));
    return static_cast<float>(r *
                              std::cos(2 * M_PI * uniform(key ^ 0x5bd1e995)));
  }
  int64_t classOf(uint64_t sample) const {
    return static_cast<int64_t>(mix(mix(seed ^ 0x636c617373ull) ^ sample) %
                                static_cast<uint64_t>(classes));
  }
  /// The id at `position` of integer input `input`'s sample (a speech
  /// model's decoder tokens), one of the `classes` (the vocabulary).
  int64_t tokenOf(uint64_t sample, int64_t input, int64_t position) const {
    uint64_t stream =
        mix(seed ^ 0x746f6b656eull ^ static_cast<uint64_t>(input));
    return static_cast<int64_t>(
        mix(mix(stream ^ sample) ^ static_cast<uint64_t>(position)) %
        static_cast<uint64_t>(classes));
  }
  /// Element `e` of input `input`'s sample (whole row of shape `row`).
  float value(uint64_t sample, int64_t input, llvm::ArrayRef<int64_t> row,
              int64_t e) const {
    int64_t inner = 1;
    for (int64_t d : row.drop_front())
      inner *= d;
    uint64_t stream = mix(seed ^ mix(static_cast<uint64_t>(input)));
    uint64_t template_ =
        mix(stream ^ mix(static_cast<uint64_t>(classOf(sample)) + 1));
    float mean = normal(template_ ^ static_cast<uint64_t>(e / inner));
    return mean + normal(mix(stream ^ sample) ^ static_cast<uint64_t>(e));
  }
};

/// What the metrics need from the bundle's plan.json: the model's training
/// FLOPs per token and the cluster's peak per GPU (0 when absent).
struct PlanFigures {
  double flopsPerToken = 0, peakFlopsPerRank = 0;
};

PlanFigures readPlanFigures(llvm::StringRef bundle) {
  PlanFigures figures;
  llvm::SmallString<256> path(bundle);
  llvm::sys::path::append(path, "plan.json");
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return figures;
  auto json = rt::parseJson((*buffer)->getBuffer());
  if (!json) {
    llvm::consumeError(json.takeError());
    return figures;
  }
  const llvm::json::Object *plan = json->getAsObject();
  if (!plan)
    return figures;
  if (const llvm::json::Object *model = plan->getObject("model"))
    figures.flopsPerToken = model->getNumber("flops_per_token").value_or(0);
  if (const llvm::json::Object *cluster = plan->getObject("cluster"))
    figures.peakFlopsPerRank =
        1e12 * cluster->getNumber("peak_tflops").value_or(0);
  return figures;
}

/// One step's job-wide figures, from every rank's [step seconds,
/// collective waits, pipeline waits, peak memory] (gatherFromRanks).
struct StepMetrics {
  double tflops = 0, mfu = 0;
  /// Means over ranks: the share of the rank's own step blocked on
  /// collectives (a mean of waits over one rank's step could pass 1), and
  /// on pipeline transfers (bubbles, measured).
  double exposedCommFraction = 0, bubbleFraction = 0;
  int64_t peakMemoryBytes = 0;
  int peakMemoryRank = 0;
  /// Per rank: the step minus its waits.
  std::vector<double> computeSeconds;
};

StepMetrics summarize(llvm::ArrayRef<double> figures, int worldSize,
                      const PlanFigures &plan, double tokensPerS) {
  StepMetrics m;
  constexpr size_t kFields = 4;
  int ranks = static_cast<int>(figures.size() / kFields);
  for (int r = 0; r < ranks; ++r) {
    const double *f = figures.data() + r * kFields;
    m.exposedCommFraction +=
        (f[0] > 0 ? std::min(1.0, f[1] / f[0]) : 0) / ranks;
    m.bubbleFraction += (f[0] > 0 ? f[2] / f[0] : 0) / ranks;
    if (static_cast<int64_t>(f[3]) > m.peakMemoryBytes) {
      m.peakMemoryBytes = static_cast<int64_t>(f[3]);
      m.peakMemoryRank = r;
    }
    m.computeSeconds.push_back(std::max(0.0, f[0] - f[1] - f[2]));
  }
  double flops = plan.flopsPerToken * tokensPerS;
  m.tflops = flops / 1e12;
  if (plan.peakFlopsPerRank > 0)
    m.mfu = flops / (plan.peakFlopsPerRank * worldSize);
  return m;
}

/// Fault injection for tests (docs/testing.md): "RANK:MS" sleeps MS
/// milliseconds before each micro-step on that rank (a straggler);
/// "STEP:VARIABLE" writes a NaN into element 0 of that variable at that
/// step, where a rank holds it in host memory (a parameter before the
/// micro-steps, any other variable after them); "RANK:STEP" kills that
/// rank (SIGKILL, no word) halfway through that step's micro-steps, a
/// lost node as `dtc run --elastic` sees one.
struct TrainingFaults {
  int slowRank = -1;
  int64_t slowMillis = 0;
  int64_t nanStep = -1;
  std::string nanVariable;
  int killRank = -1;
  int64_t killStep = -1;

  static TrainingFaults fromEnvironment() {
    TrainingFaults faults;
    if (const char *slow = std::getenv("DTC_FAULT_SLOW_RANK")) {
      auto [rank, ms] = llvm::StringRef(slow).split(':');
      if (rank.getAsInteger(10, faults.slowRank) ||
          ms.getAsInteger(10, faults.slowMillis))
        faults.slowRank = -1;
    }
    if (const char *kill = std::getenv(kKillRankFault)) {
      auto [rank, step] = llvm::StringRef(kill).split(':');
      if (rank.getAsInteger(10, faults.killRank) ||
          step.getAsInteger(10, faults.killStep))
        faults.killRank = -1;
    }
    if (const char *nan = std::getenv("DTC_FAULT_NAN")) {
      auto [step, name] = llvm::StringRef(nan).split(':');
      if (!step.getAsInteger(10, faults.nanStep))
        faults.nanVariable = name.str();
    }
    return faults;
  }
  void poison(rt::Executor &executor, int64_t step, bool parameters) const {
    if (step != nanStep)
      return;
    for (const program::Variable &v : executor.program().variables())
      if (v.name() == nanVariable && (v.role() == "parameter") == parameters)
        if (rt::Tensor *t = executor.variable(v.name());
            t && t->dtype() == rt::DType::F32 && t->numElements() > 0)
          t->as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
  }
};

/// Stops a diverged run with the tensor to blame: the first NaN/Inf in a
/// parameter when the loss is not finite, else (host memory, where the scan
/// is cheap) in a gradient before the optimizer spreads it. Every rank
/// learns every rank's finding (one all-gather), so all stop together and
/// report the same culprit, the lowest rank's.
llvm::Error checkDivergence(const program::Program &p,
                            const RankContext &context, rt::Executor &executor,
                            rt::Communicator *communicator, int64_t step,
                            double loss) {
  bool lossFinite = std::isfinite(loss);
  std::optional<NonFinite> culprit;
  llvm::StringRef role = lossFinite ? "grad" : "parameter";
  if (!lossFinite || executor.memory().isHost()) {
    auto found = findNonFinite(executor, role);
    if (!found)
      return found.takeError();
    culprit = *found;
  }
  // Per rank: [loss finite, culprit variable (-1: none), element, value].
  std::vector<double> mine = {
      lossFinite ? 1.0 : 0.0, culprit ? double(culprit->variable) : -1.0,
      culprit ? double(culprit->element) : 0.0, culprit ? culprit->value : 0.0};
  auto all = gatherFromRanks(communicator, executor.memory(), mine);
  if (!all)
    return all.takeError();
  const size_t fields = mine.size();
  bool anyLossBad = false;
  int blamed = -1;
  for (size_t r = 0; r * fields < all->size(); ++r) {
    const double *f = all->data() + r * fields;
    anyLossBad |= f[0] == 0.0;
    if (blamed < 0 && f[1] >= 0)
      blamed = static_cast<int>(r);
  }
  if (!anyLossBad && blamed < 0)
    return llvm::Error::success();
  std::string where = "no parameter holds a NaN or Inf";
  if (blamed >= 0) {
    const double *f = all->data() + blamed * fields;
    const program::RankProgram *owner = rt::rankProgramOf(p, blamed);
    int index = static_cast<int>(f[1]);
    std::string name = owner && index < owner->variables_size()
                           ? owner->variables(index).name()
                           : "variable " + std::to_string(index);
    const program::Variable *v = owner && index < owner->variables_size()
                                     ? &owner->variables(index)
                                     : nullptr;
    bool gradient = v && v->role() == "grad";
    where = llvm::formatv("{0} '{1}' holds {2} at element {3} on rank {4}",
                          gradient ? "the gradient of" : "parameter",
                          gradient ? v->parameter() : name, f[3],
                          static_cast<int64_t>(f[2]), blamed)
                .str();
  }
  if (anyLossBad)
    return failure("step {0}: the loss is {1}; {2}; training diverged (lower "
                   "the learning rate or check the data)",
                   step, lossFinite ? std::nan("") : loss, where);
  return failure("step {0}: {1}; training diverged (lower the learning rate, "
                 "clip gradients or check the data)",
                 step, where);
}

/// Whether the step function of `p` has a data argument of role `feed`.
bool hasFeed(const program::Program &p, llvm::StringRef feed) {
  for (const program::RankProgram &rank : p.ranks())
    for (const program::Function &f : rank.functions())
      if (f.name() == p.training().micro_step())
        for (const program::Argument &a : f.arguments())
          if (a.feed() == feed)
            return true;
  return false;
}

/// The training data: a token file (--data FILE), safetensors shards
/// (--data DIR) with the binding of every data argument to them, or
/// neither (a model without token inputs trains on synthetic samples).
struct TrainingData {
  std::optional<TokenData> tokens;
  std::shared_ptr<const ShardSet> shards;
  std::optional<ShardFeeder> feeder;
};

/// The data parts of every distinct rank program's step, in rank order:
/// what the whole run reads, whichever rank reads it.
llvm::Expected<std::vector<DataPart>>
everyRanksDataParts(const program::Program &p) {
  std::vector<DataPart> all;
  std::vector<const program::RankProgram *> seen;
  for (int rank = 0; rank < p.world_size(); ++rank) {
    const program::RankProgram *program = rt::rankProgramOf(p, rank);
    if (!program || llvm::is_contained(seen, program))
      continue;
    seen.push_back(program);
    auto context = rankContext(p, rank);
    if (!context)
      return context.takeError();
    auto parts = localDataParts(p, *context);
    if (!parts)
      return parts.takeError();
    llvm::append_range(all, *parts);
  }
  return all;
}

/// Binds the data arguments of every rank's step (deduplicated) to
/// `shards`, so that bad shards are refused before any rank starts.
llvm::Expected<ShardFeeder> bindShards(const program::Program &p,
                                       std::shared_ptr<const ShardSet> shards) {
  auto parts = everyRanksDataParts(p);
  if (!parts)
    return parts.takeError();
  std::vector<DataArgument> arguments;
  for (const DataPart &part : *parts) {
    if (llvm::any_of(arguments, [&](const DataArgument &a) {
          return a.name == part.name && a.feed == part.feed;
        }))
      continue;
    arguments.push_back(
        {part.name, part.feed, part.dtype, part.wholeRowShape()});
  }
  return ShardFeeder::bind(std::move(shards), arguments, p.training());
}

llvm::Expected<TrainingData> loadTrainingData(const program::Program &p,
                                              const RunOptions &o) {
  TrainingData data;
  if (!o.data.empty() && llvm::sys::fs::is_directory(o.data)) {
    auto shards = ShardSet::open(o.data);
    if (!shards)
      return shards.takeError();
    data.shards = std::move(*shards);
    auto feeder = bindShards(p, data.shards);
    if (!feeder)
      return feeder.takeError();
    data.feeder = std::move(*feeder);
    return data;
  }
  if (!readsTokens(p)) {
    if (!o.data.empty())
      return badInput("--data {0}: this model has no token input (a "
                      "classifier, labels in [0, {1})); pass a directory of "
                      "safetensors shards, or leave --data out to train on "
                      "synthetic samples drawn from --seed",
                      o.data, p.training().vocab());
    return data;
  }
  if (p.training().objective() == "seq2seq" || hasFeed(p, "decoder_tokens")) {
    if (!o.data.empty())
      return badInput("--data {0}: a token file cannot feed a seq2seq model; "
                      "seq2seq needs --data DIR shards with input_ids and "
                      "labels",
                      o.data);
    // No --data: synthetic ids and labels drawn from --seed, as a
    // classifier's samples (what dtc verify feeds both runs).
    return data;
  }
  // A classifier's vocab is its classes, which bound its labels, not the
  // token ids (the embedding's kernel checks those).
  auto tokens = loadTokens(
      o, p.training().seq_len(),
      p.training().objective() == "classify" ? 0 : p.training().vocab());
  if (!tokens)
    return tokens.takeError();
  data.tokens = std::move(*tokens);
  return data;
}

/// Where the samples of a run come from, for fillData.
struct SampleSource {
  const TrainingData *data = nullptr;
  int64_t windows = 0; ///< valid window starts of the token file
  SyntheticSamples synthetic;
  /// masked-lm from a token file: the masking of its windows.
  std::optional<MaskedLm> masking;
};

/// Copies this rank's part of one sample's whole row `whole` into `t` at
/// element `at`: the plan's cut of a classifier input's sample dims, the
/// context-parallel columns (zigzag chunks) of a sequence, or all of it.
void copyLocalRow(const DataPart &part, const rt::Tensor &whole,
                  const rt::Tensor &t, int64_t at) {
  const size_t width = rt::dtypeSize(part.dtype);
  char *dst = static_cast<char *>(t.data()) + at * width;
  llvm::ArrayRef<int64_t> micro = part.microShape();
  if (part.rowLayout) {
    rt::TensorRef local = t.ref();
    local.data = dst;
    local.shape.assign(micro.begin() + 1, micro.end());
    part.rowLayout->extract(whole.ref(), local);
    return;
  }
  const int64_t perRow = part.rowElements();
  if (micro.size() < 2 || part.dims[1].parts == 1) {
    std::memcpy(dst, whole.data(), perRow * width);
    return;
  }
  const int64_t columns = micro[1], inner = perRow / columns;
  const char *src = static_cast<const char *>(whole.data());
  for (int64_t j = 0; j < columns; ++j)
    std::memcpy(dst + j * inner * width,
                src + part.column(j, columns) * inner * width, inner * width);
}

/// This rank's part of data argument `part` for one call of the step
/// function, whose first micro-batch is the run's `firstMicro`-th (of `mb`
/// rows). The global sample index decides the shard row, the window or the
/// synthetic sample, so the samples do not depend on how the batch is
/// split. Shard rows are read whole and cut here.
llvm::Expected<rt::Tensor> fillData(const DataPart &part, int64_t firstMicro,
                                    int64_t mb, const SampleSource &source) {
  rt::Tensor t(part.dtype, part.shape);
  const int64_t rows = part.rows(), perRow = part.rowElements();
  const llvm::SmallVector<int64_t, 6> wholeRow = part.wholeRowShape();
  const TokenData *tokens =
      source.data && source.data->tokens ? &*source.data->tokens : nullptr;
  const ShardFeeder *feeder =
      source.data && source.data->feeder ? &*source.data->feeder : nullptr;
  const int shardArgument = feeder ? feeder->indexOf(part.name, part.feed) : -1;
  if (feeder && shardArgument < 0)
    return failure("--data: the {0} argument '{1}' was not bound to the "
                   "shards",
                   part.feed, part.name);
  const uint64_t seed = source.synthetic.seed;
  // One sample's whole row, when this rank holds only part of it.
  rt::Tensor whole;
  if (part.rowLayout || feeder)
    whole = rt::Tensor(part.dtype, wholeRow);
  for (int64_t k = 0; k < part.calls(); ++k) {
    for (int64_t row = 0; row < rows; ++row) {
      const uint64_t sample =
          static_cast<uint64_t>((firstMicro + k) * mb + part.firstRow() + row);
      const int64_t at = (k * rows + row) * perRow;
      if (feeder) {
        if (llvm::Error e =
                feeder->fill(shardArgument, seed, sample, whole.ref()))
          return std::move(e);
        copyLocalRow(part, whole, t, at);
      } else if (tokens &&
                 !(part.feed == "labels" && part.microShape().size() < 2)) {
        // A window of the token file: labels are the window shifted by
        // one, or for masked-lm the masked window's labels. A classifier's
        // labels (one per sample) are synthetic classes below.
        const int64_t columns = perRow;
        int64_t begin = static_cast<int64_t>(
            mix(mix(seed) ^ sample) % static_cast<uint64_t>(source.windows));
        bool labels = part.feed == "labels";
        int64_t shift = labels && !source.masking ? 1 : 0;
        for (int64_t j = 0; j < columns; ++j) {
          int64_t position = part.column(j, columns);
          int64_t id = tokens->at(begin + position + shift);
          if (part.feed == "attention_mask")
            id = 1;
          else if (source.masking) {
            MaskedLm::Token m = source.masking->at(sample, position, id);
            id = labels ? m.label : m.input;
          }
          if (rt::isFloat(part.dtype))
            storeFloat(t.ref(), at + j, static_cast<float>(id));
          else
            storeInt(t.ref(), at + j, id);
        }
      } else if (!rt::isFloat(part.dtype) && part.feed != "labels") {
        // Integer inputs with no token file (a speech model's decoder
        // tokens): ids drawn per global position; masks keep everything.
        for (int64_t j = 0; j < perRow; ++j)
          storeInt(t.ref(), at + j,
                   part.feed == "attention_mask"
                       ? 1
                       : source.synthetic.tokenOf(sample, part.input,
                                                  part.column(j, perRow)));
      } else if (part.feed == "labels") {
        int64_t label = source.synthetic.classOf(sample);
        for (int64_t j = 0; j < perRow; ++j)
          storeInt(t.ref(), at + j, label);
      } else if (part.rowLayout) {
        for (int64_t e = 0; e < whole.numElements(); ++e)
          storeFloat(whole.ref(), e,
                     source.synthetic.value(sample, part.input, wholeRow, e));
        copyLocalRow(part, whole, t, at);
      } else {
        for (int64_t e = 0; e < perRow; ++e)
          storeFloat(t.ref(), at + e,
                     source.synthetic.value(sample, part.input, wholeRow, e));
      }
    }
  }
  return t;
}

/// One whole global micro-batch of the labels (every row and position,
/// however the plan splits them), described from the first rank whose step
/// function reads labels: with it every rank counts the labels of a step,
/// pipeline stages without labels included (countedLabels).
llvm::Expected<DataPart> wholeLabelsPart(const program::Program &p,
                                         int64_t mb) {
  auto parts = everyRanksDataParts(p);
  if (!parts)
    return parts.takeError();
  for (const DataPart &part : *parts) {
    if (part.feed != "labels")
      continue;
    DataPart whole = part;
    whole.stacked = false;
    whole.zigzag = false;
    whole.rowLayout.reset();
    whole.shape.assign({mb});
    llvm::append_range(whole.shape, part.wholeRowShape());
    for (rt::ShardLayout::DimPart &cut : whole.dims)
      cut = {};
    return whole;
  }
  return badInput("program.pb: the loss sums over counted labels, but no "
                  "rank reads labels; recompile the bundle");
}

/// The labels of step `step` that count (not -100): what the step's summed
/// loss and gradients are divided by (Training.loss_sums_counted_labels).
llvm::Expected<int64_t> countedLabels(const DataPart &whole, int64_t step,
                                      int64_t microPerStep, int64_t mb,
                                      const SampleSource &source) {
  int64_t counted = 0;
  for (int64_t m = 0; m < microPerStep; ++m) {
    auto labels = fillData(whole, (step - 1) * microPerStep + m, mb, source);
    if (!labels)
      return labels.takeError();
    for (int64_t i = 0; i < labels->numElements(); ++i)
      counted += loadInt(labels->ref(), i) != -100;
  }
  if (counted == 0)
    return badInput("step {0}: every label of the step is -100 (ignored): "
                    "there is nothing to learn from; check the data",
                    step);
  return counted;
}

/// `dtc run --global-batch`: `globalBatch` sequences per step instead of
/// the compiled count, as more or fewer calls of the micro-step
/// (`accum`), or as more or fewer micro-batches stacked into each call of
/// a pipeline step, whose schedule is checked for the new count here (the
/// executor re-proves it deadlock-free when it runs).
llvm::Error setGlobalBatch(const program::RankProgram &rank,
                           int64_t globalBatch, int64_t mb, int64_t &accum,
                           std::vector<DataPart> &parts) {
  if (mb <= 0 || globalBatch % mb != 0)
    return badInput("--global-batch {0}: not a multiple of the plan's "
                    "micro-batch of {1} sequences (micro-batch x data-"
                    "parallel ranks); pick a multiple of {1}",
                    globalBatch, mb);
  const int64_t micro = globalBatch / mb;
  if (!parts.front().stacked) {
    accum = micro;
    return llvm::Error::success();
  }
  if (micro % accum != 0)
    return badInput("--global-batch {0}: {1} micro-batches do not split "
                    "into the plan's {2} calls per step; pick a multiple of "
                    "{3}",
                    globalBatch, micro, accum, accum * mb);
  for (const program::Function &f : rank.functions()) {
    if (!f.has_pipeline())
      continue;
    if (llvm::Error e = rt::checkPipelineShape(
            rt::pipelineShapeOf(f.pipeline(), micro / accum)))
      return badInput("--global-batch {0}: {1}", globalBatch,
                      llvm::toString(std::move(e)));
  }
  for (DataPart &part : parts)
    part.shape[0] = micro / accum;
  return llvm::Error::success();
}

/// One optimizer step's micro-step calls (gradient accumulation): each
/// call's data filled from `source`, run, and its events recorded for the
/// trace. Returns the sum of the calls' losses, each a mean over its
/// micro-batches times their number.
static llvm::Expected<double>
runMicroSteps(const program::Training &train, const RankContext &context,
              rt::Executor &executor, llvm::ArrayRef<DataPart> parts,
              const SampleSource &source, const TrainingFaults &faults,
              int64_t step, int64_t accum, int64_t mb,
              std::vector<rt::InstructionEvent> &events,
              std::vector<TraceWriter::Call> &calls) {
  const int64_t perCall = parts.front().calls();
  const int64_t microPerStep = accum * perCall;
  double lossSum = 0;
  for (int64_t call = 0; call < accum; ++call) {
    std::vector<rt::Tensor> inputs;
    const int64_t firstMicro = (step - 1) * microPerStep + call * perCall;
    for (const DataPart &part : parts) {
      auto filled = fillData(part, firstMicro, mb, source);
      if (!filled)
        return filled.takeError();
      inputs.push_back(std::move(*filled));
    }
    const std::string &function =
        call + 1 == accum && !train.last_micro_step().empty()
            ? train.last_micro_step()
            : train.micro_step();
    if (context.rank == faults.slowRank)
      std::this_thread::sleep_for(std::chrono::milliseconds(faults.slowMillis));
    if (context.rank == faults.killRank && step == faults.killStep &&
        call + 1 == accum)
      ::raise(SIGKILL);
    size_t firstEvent = events.size();
    auto loss = executor.run(function, inputs);
    if (!loss)
      return failure("step {0}: {1}", step, llvm::toString(loss.takeError()));
    calls.push_back({firstEvent, events.size(), call, call * perCall});
    // A pipeline call returns the mean over its micro-batches.
    lossSum += (*loss)[0].as<float>()[0] * static_cast<double>(perCall);
  }
  return lossSum;
}

namespace {
/// What a training step reports.
struct StepLine {
  int64_t step;
  double loss, gradNorm, lr, tokensPerS, stepS, etaS;
  std::optional<MoeStepFigures> moe;
};
} // namespace

/// The reporting rank's line for a step, from every rank's `figures`: one
/// JSON line per step (--log-json), the progress line (in place on a
/// terminal, else every `logged` step), and straggler warnings.
static void printStep(const program::Program &p, const RunOptions &o,
                      const PlanFigures &planFigures,
                      llvm::ArrayRef<double> figures, const StepLine &s,
                      StragglerWatch &stragglers, bool terminal, bool logged,
                      llvm::raw_ostream &out) {
  StepMetrics m = summarize(figures, p.world_size(), planFigures, s.tokensPerS);
  // Each line goes out in one write: mpirun forwards stdout and stderr
  // separately, and a line written in pieces can be split by the other.
  for (const std::string &warning :
       stragglers.addStep(s.step, m.computeSeconds))
    llvm::errs() << ("warning: " + warning + "\n");
  if (o.logJson) {
    llvm::json::Object line{{"step", s.step},
                            {"loss", s.loss},
                            {"grad_norm", s.gradNorm},
                            {"lr", s.lr},
                            {"tokens_per_s", s.tokensPerS},
                            {"step_time_s", s.stepS},
                            {"tflops", m.tflops},
                            {"mfu", m.mfu},
                            {"peak_memory_bytes", m.peakMemoryBytes},
                            {"peak_memory_rank", m.peakMemoryRank},
                            {"exposed_comm_s", m.exposedCommFraction * s.stepS},
                            {"exposed_comm_fraction", m.exposedCommFraction},
                            {"bubble_fraction", m.bubbleFraction}};
    if (s.moe)
      line["moe"] = s.moe->toJson();
    std::string text;
    llvm::raw_string_ostream(text)
        << llvm::json::Value(std::move(line)) << "\n";
    out << text;
    out.flush();
  }
  std::string progress =
      llvm::formatv("step {0}/{1}  loss {2:f4}  grad norm {3:f3}  lr "
                    "{4:e2}  {5:f0} {10}/s  {6:f3} TFLOP/s  MFU {7:f1}%  "
                    "comm {8:f0}%  ETA {9:f0} s",
                    s.step, *o.steps, s.loss, s.gradNorm, s.lr, s.tokensPerS,
                    m.tflops, 100 * m.mfu, 100 * m.exposedCommFraction, s.etaS,
                    readsTokens(p) ? "tokens" : "samples")
          .str();
  if (s.moe)
    progress += llvm::formatv("  MoE imbalance {0:f0}% drops {1:f1}%",
                              100 * s.moe->imbalance, 100 * s.moe->dropRate)
                    .str();
  if (terminal) {
    llvm::errs() << "\r" << progress << "\x1b[K";
    if (s.step == *o.steps)
      llvm::errs() << "\n";
  } else if (!o.logJson && logged) {
    llvm::errs() << progress << "\n";
  }
}

/// Loads the newest checkpoint under --ckpt-dir when --resume asks for it;
/// `position` is where training starts otherwise.
static llvm::Expected<TrainingPosition>
resumePosition(const RankContext &context, rt::Executor &executor,
               const RunOptions &o, TrainingPosition position) {
  if (!o.resume)
    return position;
  bool reports = context.reports();
  auto loadStart = std::chrono::steady_clock::now();
  auto resumed =
      resumeTraining(*context.program, context.mesh, context.rank, executor,
                     o.ckptDir, position.globalBatch, position.shards);
  if (!resumed)
    return resumed.takeError();
  if (*resumed) {
    if (reports)
      llvm::errs() << llvm::formatv(
          "resumed at step {0} from {1} (saved under {2}) in {3:f2} s\n",
          (*resumed)->position.step, (*resumed)->directory,
          (*resumed)->savedPlan,
          std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                        loadStart)
              .count());
    return (*resumed)->position;
  }
  if (reports)
    llvm::errs() << "no checkpoint in " << o.ckptDir
                 << " yet: training from step 0\n";
  return position;
}

/// Where the samples come from: windows of a token file (masked for
/// masked-lm), rows of a shard set, or synthetic samples drawn from `seed`.
static llvm::Expected<SampleSource>
sampleSourceFor(const program::Training &train, const TrainingData &data,
                uint64_t seed) {
  SampleSource source;
  source.data = &data;
  source.synthetic = {seed, std::max<int64_t>(1, train.vocab())};
  if (!data.tokens)
    return source;
  source.windows = data.tokens->count - train.seq_len();
  if (train.objective() == "masked-lm") {
    auto masking = MaskedLm::of(train, seed);
    if (!masking)
      return masking.takeError();
    source.masking = *masking;
  }
  return source;
}

/// The reporting rank's straggler check: each rank against the ranks that
/// run the same program.
static StragglerWatch stragglerWatchFor(const program::Program &p,
                                        const RunOptions &o) {
  std::vector<std::vector<int>> peers(p.world_size());
  for (int r = 0; r < p.world_size(); ++r)
    for (int q = 0; q < p.world_size(); ++q)
      if (rt::rankProgramOf(p, q) == rt::rankProgramOf(p, r))
        peers[r].push_back(q);
  return StragglerWatch(o.stragglerFactor, std::move(peers));
}

/// Whether this rank counts MoE routing figures: the ranks that route their
/// own tokens (the first of each group of replicas: coordinate 0 on the
/// axes other than dp, ep and pp).
static bool countsMoeRouting(const RankContext &context) {
  std::vector<int64_t> at = context.mesh.coordinates(context.rank);
  bool counts = true;
  for (auto [i, axis] : llvm::enumerate(context.mesh.axes()))
    if (axis.name != "dp" && axis.name != "ep" && axis.name != "pp")
      counts = counts && at[i] == 0;
  return counts;
}

namespace {
/// One training run on this rank: its data, its position, its saves and
/// traces; `run` trains the steps left up to --steps.
class TrainingLoop {
public:
  TrainingLoop(const program::Program &p, const RankContext &context,
               rt::Executor &executor, rt::Communicator *communicator,
               const RunOptions &o, llvm::raw_ostream &out)
      : p(p), train(p.training()), context(context), executor(executor),
        communicator(communicator), o(o), out(out), reports(context.reports()),
        mb(train.micro_batch()),
        accum(std::max<int64_t>(1, train.grad_accum())) {}

  llvm::Error run();

private:
  /// Data parts, the global batch, the resume point, the sample source.
  llvm::Error prepareData();
  /// The checkpoint saver, traces, straggler and MoE routing figures.
  llvm::Error prepareTelemetry();
  /// Trains `step` and reports it; returns its loss.
  llvm::Expected<double> trainStep(int64_t step,
                                   std::chrono::steady_clock::time_point start);
  /// Runs `apply` (the optimizer) for `step`; returns the gradient norm.
  llvm::Expected<double> applyOptimizer(int64_t step, double lr,
                                        double divisor);
  /// Every rank's figures and the MoE routing of `step`, then its line.
  llvm::Error reportStep(int64_t step, double loss, double gradNorm, double lr,
                         double stepS, double elapsedS);
  /// Closes the traces and prints the run's summary.
  llvm::Error finish(double firstLoss, double lastLoss);

  const program::Program &p;
  const program::Training &train;
  const RankContext &context;
  rt::Executor &executor;
  rt::Communicator *communicator;
  const RunOptions &o;
  llvm::raw_ostream &out;
  const bool reports;
  bool terminal = false;
  // `mb` rows of the global micro-batch, of which each data argument holds
  // rows [firstRow, firstRow + rows) on this rank.
  const int64_t mb;
  int64_t accum, perCall = 1, microPerStep = 1;
  std::vector<DataPart> parts;
  std::optional<DataPart> wholeLabels;
  TrainingData data;
  SampleSource source;
  TrainingPosition position;
  int64_t firstStep = 1;

  std::unique_ptr<TrainingSaver> saver;
  // Traces, figures and guard rails (docs/observability.md).
  TrainingFaults faults;
  PlanFigures planFigures;
  std::vector<rt::InstructionEvent> events;
  std::vector<TraceWriter::Call> calls;
  std::unique_ptr<TraceWriter> trace;
  std::optional<StragglerWatch> stragglers;
  rt::MoeRoutingStats moeRouting;
  bool countsRouting = true;
};
} // namespace

llvm::Error TrainingLoop::prepareData() {
  auto localParts = localDataParts(p, context);
  if (!localParts)
    return localParts.takeError();
  parts = std::move(*localParts);
  // Token models read windows of --data FILE, any model rows of --data
  // DIR; without --data, classifiers train on synthetic samples.
  if (llvm::Error e = loadTrainingData(p, o).moveInto(data))
    return e;
  std::optional<llvm::json::Array> shardIdentity;
  if (data.shards)
    shardIdentity = data.shards->identity();
  if (o.globalBatch)
    if (llvm::Error e =
            setGlobalBatch(*context.program, *o.globalBatch, mb, accum, parts))
      return e;
  perCall = parts.front().calls();
  microPerStep = accum * perCall;
  if (train.loss_sums_counted_labels()) {
    auto whole = wholeLabelsPart(p, mb);
    if (!whole)
      return whole.takeError();
    wholeLabels = std::move(*whole);
  }
  auto resumed = resumePosition(context, executor, o,
                                {0, microPerStep * mb, o.seed, shardIdentity});
  if (!resumed)
    return resumed.takeError();
  position = std::move(*resumed);
  auto sampled = sampleSourceFor(train, data, position.seed);
  if (!sampled)
    return sampled.takeError();
  source = std::move(*sampled);
  return llvm::Error::success();
}

llvm::Error TrainingLoop::prepareTelemetry() {
  terminal = reports &&
             o.progress.value_or(llvm::sys::Process::StandardErrIsDisplayed() &&
                                 !o.logJson);
  if (!o.ckptDir.empty()) {
    auto created = TrainingSaver::create(p, context.mesh, context.rank,
                                         o.ckptDir, o.bundle);
    if (!created)
      return created.takeError();
    saver = std::move(*created);
  }
  faults = TrainingFaults::fromEnvironment();
  planFigures = readPlanFigures(o.bundle);
  auto startedTrace = startTrace(context, executor, communicator, events, o);
  if (!startedTrace)
    return startedTrace.takeError();
  trace = std::move(*startedTrace);
  if (reports)
    stragglers.emplace(stragglerWatchFor(p, o));
  countsRouting = countsMoeRouting(context);
  if (train.moe_layers() > 0)
    executor.collectMoeRouting(&moeRouting);
  return llvm::Error::success();
}

llvm::Expected<double> TrainingLoop::applyOptimizer(int64_t step, double lr,
                                                    double divisor) {
  size_t firstEvent = events.size();
  auto applied = executor.run(train.apply(),
                              {scalarF32(static_cast<float>(lr)),
                               scalarF32(static_cast<float>(step)),
                               scalarF32(static_cast<float>(1.0 / divisor))});
  if (!applied)
    return failure("step {0}: {1}", step, llvm::toString(applied.takeError()));
  calls.push_back({firstEvent, events.size(), 0, -1});
  double gradNorm = (*applied)[0].as<float>()[0];
  if (!std::isfinite(gradNorm))
    return failure("step {0}: the gradient norm is {1}; training diverged",
                   step, gradNorm);
  return gradNorm;
}

llvm::Error TrainingLoop::reportStep(int64_t step, double loss, double gradNorm,
                                     double lr, double stepS, double elapsedS) {
  double tokensPerS =
      static_cast<double>(microPerStep * mb * train.seq_len()) / stepS;
  // Every rank's figures, for the metrics and the straggler check:
  // [step seconds, collective waits, pipeline waits, peak memory].
  const rt::WaitTimes &waits = executor.waitTimes();
  auto figures =
      gatherFromRanks(communicator, executor.memory(),
                      {stepS, waits.collectiveSeconds, waits.pipelineSeconds,
                       static_cast<double>(executor.memory().isHost()
                                               ? peakResidentBytes()
                                               : executor.allocatedBytes())});
  if (!figures)
    return failure("step {0}: gathering the ranks' figures: {1}", step,
                   llvm::toString(figures.takeError()));
  std::optional<MoeStepFigures> moe;
  const int64_t moeLayers = train.moe_layers(), experts = train.moe_experts();
  if (moeLayers > 0) {
    auto all = gatherFromRanks(
        communicator, executor.memory(),
        flattenMoeRouting(moeRouting, moeLayers, experts, countsRouting));
    if (!all)
      return failure("step {0}: gathering the MoE routing figures: {1}", step,
                     llvm::toString(all.takeError()));
    moe = summarizeMoeRouting(*all, moeLayers, experts);
    moeRouting.layers.clear();
  }
  if (!reports)
    return llvm::Error::success();
  int64_t logEvery = std::max<int64_t>(1, *o.steps / 10);
  StepLine line{step,
                loss,
                gradNorm,
                lr,
                tokensPerS,
                stepS,
                elapsedS / static_cast<double>(step - firstStep + 1) *
                    static_cast<double>(*o.steps - step),
                std::move(moe)};
  printStep(p, o, planFigures, *figures, line, *stragglers, terminal,
            step % logEvery == 0 || step == firstStep, out);
  // The recovery time of an elastic run: from the lost rank to the end
  // of the new plan's first step (re-plan, start, restore, one step).
  if (const char *failedAt = std::getenv(kElasticFailedAt);
      failedAt && step == firstStep) {
    double since = std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count() -
                   std::atof(failedAt);
    llvm::errs() << llvm::formatv("elastic: recovered in {0:f2} s (from the "
                                  "lost rank to the end of step {1} under "
                                  "{2} ranks)\n",
                                  since, step, p.world_size());
  }
  return llvm::Error::success();
}

llvm::Expected<double>
TrainingLoop::trainStep(int64_t step,
                        std::chrono::steady_clock::time_point start) {
  auto stepStart = std::chrono::steady_clock::now();
  executor.resetWaitTimes();
  events.clear();
  calls.clear();
  faults.poison(executor, step, /*parameters=*/true);
  // What the step's loss and gradients are divided by: its micro-batches
  // (each returns a mean), or the labels it counts (each returns a sum).
  double divisor = static_cast<double>(microPerStep);
  if (wholeLabels) {
    auto counted = countedLabels(*wholeLabels, step, microPerStep, mb, source);
    if (!counted)
      return counted.takeError();
    divisor = static_cast<double>(*counted);
  }
  auto lossSum = runMicroSteps(train, context, executor, parts, source, faults,
                               step, accum, mb, events, calls);
  if (!lossSum)
    return lossSum.takeError();
  double loss = *lossSum / divisor;
  faults.poison(executor, step, /*parameters=*/false);
  if (llvm::Error e =
          checkDivergence(p, context, executor, communicator, step, loss))
    return std::move(e);
  double lr = learningRate(train.optimizer(), step);
  auto gradNorm = applyOptimizer(step, lr, divisor);
  if (!gradNorm)
    return gradNorm.takeError();
  // The snapshot is taken here; the files are written while the next
  // steps train.
  position.step = step;
  if (saver &&
      ((o.saveEvery > 0 && step % o.saveEvery == 0) || step == *o.steps))
    if (llvm::Error e = saver->save(executor, position))
      return std::move(e);
  if (saver)
    if (llvm::Error e = o.ckptSync ? saver->finish() : saver->poll())
      return std::move(e);
  // Writing the trace counts in the step time (what tracing costs).
  if (trace)
    if (llvm::Error e =
            trace->writeStep(step, stepStart, std::chrono::steady_clock::now(),
                             loss, events, calls))
      return std::move(e);
  auto now = std::chrono::steady_clock::now();
  if (llvm::Error e =
          reportStep(step, loss, *gradNorm, lr,
                     std::chrono::duration<double>(now - stepStart).count(),
                     std::chrono::duration<double>(now - start).count()))
    return std::move(e);
  return loss;
}

llvm::Error TrainingLoop::finish(double firstLoss, double lastLoss) {
  if (trace) {
    executor.recordTrace(nullptr);
    if (llvm::Error e = trace->close("complete"))
      return e;
    if (reports)
      llvm::errs() << llvm::formatv("wrote {0} trace(s) to {1}\n",
                                    p.world_size(), o.traceDir);
  }
  if (reports && !o.logJson)
    out << llvm::formatv("trained {0} steps: loss {1:f4} -> {2:f4}\n",
                         *o.steps - firstStep + 1, firstLoss, lastLoss);
  return llvm::Error::success();
}

llvm::Error TrainingLoop::run() {
  if (!o.steps)
    return badInput("--steps N is required for training");
  if (llvm::Error e = prepareData())
    return e;
  firstStep = position.step + 1;
  if (firstStep > *o.steps) {
    if (reports)
      out << llvm::formatv("already at step {0}: nothing to train up to "
                           "--steps {1}\n",
                           position.step, *o.steps);
    return llvm::Error::success();
  }
  if (llvm::Error e = prepareTelemetry())
    return e;
  int64_t failedStep = firstStep;
  auto closeTrace = llvm::make_scope_exit([&] {
    if (trace)
      llvm::consumeError(
          trace->close(llvm::formatv("failed at step {0}", failedStep).str()));
  });
  auto start = std::chrono::steady_clock::now();
  double firstLoss = 0, lastLoss = 0;
  for (int64_t step = firstStep; step <= *o.steps; ++step) {
    failedStep = step;
    auto loss = trainStep(step, start);
    if (!loss)
      return loss.takeError();
    if (step == firstStep)
      firstLoss = *loss;
    lastLoss = *loss;
  }
  // Rank 0 returns once the last save is committed.
  if (saver)
    if (llvm::Error e = saver->finish())
      return e;
  closeTrace.release();
  return finish(firstLoss, lastLoss);
}

llvm::Error runTraining(const program::Program &p, const RankContext &context,
                        rt::Executor &executor, rt::Communicator *communicator,
                        const RunOptions &o, llvm::raw_ostream &out) {
  return TrainingLoop(p, context, executor, communicator, o, out).run();
}

/// Writes this rank's parameters (its shards) as the initializers of an
/// ONNX GraphProto, for `dtc verify` to gather and compare.
llvm::Error dumpParameters(const RankContext &context, rt::Executor &executor,
                           llvm::StringRef dir) {
  ::onnx::GraphProto graph;
  for (const program::Variable &v : context.program->variables()) {
    if (v.role() != "parameter")
      continue;
    auto value = executor.readVariable(v.name());
    if (!value)
      return value.takeError();
    const rt::Tensor *t = &*value;
    ::onnx::TensorProto *proto = graph.add_initializer();
    proto->set_name(v.name());
    for (int64_t d : t->shape())
      proto->add_dims(d);
    proto->set_data_type(::onnx::TensorProto::FLOAT);
    if (t->dtype() != rt::DType::F32)
      return failure("--dump-state: parameter '{0}' is {1}; f32 only", v.name(),
                     rt::dtypeName(t->dtype()));
    proto->set_raw_data(t->data(), t->bytes());
  }
  std::string path = (dir + "/rank-" + llvm::Twine(context.rank) + ".pb").str();
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (!ec) {
    os << graph.SerializeAsString();
    os.close();
    ec = os.error();
  }
  if (ec)
    return failure("cannot write {0}: {1}", path, ec.message());
  return llvm::Error::success();
}

const rt::KernelRegistry &cpuKernels() {
  static const rt::KernelRegistry kernels = [] {
    rt::KernelRegistry registry;
    rt::cpu::registerCpuKernels(registry);
    return registry;
  }();
  return kernels;
}

} // namespace

llvm::Expected<RuntimeBackend> selectRuntimeBackend(llvm::StringRef name) {
  if (!name.empty() && name != "cpu" && name != "cuda")
    return badInput("--backend {0}: use cpu or cuda", name);
#ifdef DTC_HAVE_CUDA
  // Without --backend, a machine without NVIDIA's driver runs on the CPU
  // without loading the CUDA module.
  bool wantCuda =
      name == "cuda" || (name.empty() && rt::cuda::nvidiaDriverPresent());
  if (wantCuda) {
    llvm::Expected<rt::cuda::CudaPlugin *> plugin = rt::cuda::loadCudaPlugin();
    if (!plugin && name == "cuda")
      return failure("--backend cuda: {0}", llvm::toString(plugin.takeError()));
    int devices = 0;
    if (plugin)
      devices = (*plugin)->probe().deviceCount;
    else
      llvm::consumeError(plugin.takeError()); // automatic choice: the CPU
    if (name == "cuda" && devices == 0)
      return badInput("--backend cuda: no GPU found; use --backend cpu");
    if (devices > 0) {
      int device = rt::launcherLocalRank().value_or(0) % devices;
      if (llvm::Error e = (*plugin)->initialize(device))
        return failure("--backend cuda: {0}", llvm::toString(std::move(e)));
      static rt::KernelRegistry kernels = [&] {
        rt::KernelRegistry registry;
        (*plugin)->registerKernels(registry);
        return registry;
      }();
      return RuntimeBackend{&kernels, &(*plugin)->memory(), true, *plugin};
    }
  }
#else
  if (name == "cuda")
    return badInput("--backend cuda: this dtc was built without the CUDA "
                    "toolkit (nvcc, cuBLASLt, NCCL); rebuild where it is "
                    "installed, or use --backend cpu");
#endif
  return RuntimeBackend{&cpuKernels(), &rt::hostMemory(), false};
}

namespace {

using Backend = RuntimeBackend;

/// Runs this process's rank of `p` (with `communicator` for a multi-rank
/// program) to the end.
llvm::Error runRank(const program::Program &p, const RankContext &context,
                    const Backend &backend, rt::Communicator *communicator,
                    const RunOptions &o, llvm::raw_ostream &out,
                    std::unique_ptr<rt::Executor> *keep = nullptr) {
  auto executor = rt::Executor::create(*context.program, *backend.kernels,
                                       communicator, *backend.memory);
  if (!executor)
    return badInput("{0}: {1}", o.bundle, llvm::toString(executor.takeError()));
  auto keepExecutor = llvm::make_scope_exit([&] {
    if (keep)
      *keep = std::move(*executor);
  });
  if (llvm::Error e = initializeVariables(p, context, **executor, o))
    return e;
  llvm::Error e =
      p.mode() == "train"
          ? runTraining(p, context, **executor, communicator, o, out)
          : runInference(p, context, **executor, communicator, o, out);
  if (e)
    return e;
  if (!o.dumpState.empty())
    return dumpParameters(context, **executor, o.dumpState);
  return llvm::Error::success();
}

/// Set in the environment of the ranks a `dtc run` starts, which holds the
/// checkpoint root's lock for them.
constexpr const char *kCheckpointLockHeld = "DTC_CKPT_LOCK_HELD";

/// Whether this process takes the checkpoint root's lock: a run started by
/// hand, or rank 0 of a job a user's mpirun/srun started; not the ranks of
/// dtc's own launcher.
bool takesCheckpointLock() {
  if (std::getenv(kCheckpointLockHeld))
    return false;
  if (!rt::mpi::launchedByMpi())
    return true;
  for (const char *name :
       {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char *rank = std::getenv(name))
      return llvm::StringRef(rank) == "0";
  return false;
}

/// The flags a run needs, checked before its buffers are allocated.
llvm::Error checkRunFlags(const program::Program &p, const RunOptions &o) {
  if (o.steps && (*o.steps < 1 || *o.steps > (int64_t(1) << 40)))
    return badInput("--steps: must be between 1 and 2^40, got {0}", *o.steps);
  if (o.saveEvery < 0)
    return badInput("--save-every: must be >= 0, got {0}", o.saveEvery);
  if (p.mode() != "train")
    return llvm::Error::success();
  if (!o.steps)
    return badInput("--steps N is required for training");
  if (readsTokens(p) && o.data.empty())
    return badInput("--data FILE|DIR is required for training (a token "
                    "file of flat little-endian uint16 ids, nanoGPT's "
                    "train.bin, or a directory of safetensors shards)");
  return llvm::Error::success();
}

/// Checks what can be checked before ranks start, so that bad input is
/// reported once, by the launcher.
/// Bytes the ranks of `p` hold at once on one host: each rank program's
/// variables and its largest function's arena, times the ranks running it
/// (double: the sizes come from the file and may be absurd).
double hostBytesOfRanks(const program::Program &p) {
  double total = 0;
  for (const program::RankProgram &rank : p.ranks()) {
    double bytes = 0, arena = 0;
    for (const program::Variable &v : rank.variables()) {
      double elements = 1;
      for (int64_t d : v.type().shape())
        elements *= static_cast<double>(std::max<int64_t>(d, 0));
      bytes += elements * static_cast<double>(rt::dtypeSize(v.type().dtype()));
    }
    for (const program::Function &f : rank.functions())
      arena = std::max(arena, static_cast<double>(f.arena_bytes()));
    total += (bytes + arena) * std::max(1, rank.ranks_size());
  }
  return total;
}

/// Every rank of a local CPU run is a process on this machine: a plan sized
/// for GPUs (a micro-batch of thousands) would be killed for memory part
/// way; it is refused first, saying what to change.
llvm::Error checkHostMemory(const program::Program &p, const RunOptions &o) {
  if (o.backend == "cuda")
    return llvm::Error::success();
  double need = hostBytesOfRanks(p);
  double have = static_cast<double>(rt::hostMemoryBytes());
  if (need <= have)
    return llvm::Error::success();
  return badInput("{0}: its {1} rank{2} need about {3:f1} GB of memory on "
                  "this machine (variables and the largest step's buffers), "
                  "more than its {4:f1} GB; compile it for this machine with "
                  "a smaller --micro-batch (or --global-batch), or run the "
                  "ranks across machines",
                  o.bundle, p.world_size(), p.world_size() == 1 ? "" : "s",
                  need / 1e9, have / 1e9);
}

llvm::Error preflight(const program::Program &p, const RunOptions &o) {
  if (llvm::Error e = checkRunFlags(p, o))
    return e;
  if (llvm::Error e = checkHostMemory(p, o))
    return e;
  if (p.mode() != "train")
    return llvm::Error::success();
  return loadTrainingData(p, o).takeError();
}

#ifdef DTC_HAVE_CUDA
/// The mesh axes any rank's program sends or receives along, in mesh order:
/// the same list on every rank, as NCCL's collective set-up needs.
std::vector<std::string> pointToPointAxes(const program::Program &p,
                                          const rt::Mesh &mesh) {
  std::vector<bool> used(mesh.axes().size());
  for (const program::RankProgram &rank : p.ranks())
    for (const program::Function &f : rank.functions()) {
      // A pipeline step's schedule sends and receives along its axis.
      if (f.has_pipeline())
        if (int index = mesh.axisIndex(f.pipeline().axis()); index >= 0)
          used[index] = true;
      for (const program::Instruction &inst : f.instructions()) {
        if (inst.op() != "dtc.send_start" && inst.op() != "dtc.recv_start")
          continue;
        auto it = inst.attrs().find("mesh_axes");
        if (it == inst.attrs().end())
          continue;
        for (const std::string &axis : it->second.strings().values())
          if (int index = mesh.axisIndex(axis); index >= 0)
            used[index] = true;
      }
    }
  std::vector<std::string> axes;
  for (size_t a = 0; a < used.size(); ++a)
    if (used[a])
      axes.push_back(mesh.axes()[a].name);
  return axes;
}
#endif

/// One rank of a job started by mpirun/srun (or by runBundle itself).
llvm::Error runMpiRank(const program::Program &p, const RunOptions &o,
                       llvm::raw_ostream &out) {
  if (llvm::Error e = rt::mpi::initializeMpi(nullptr, nullptr))
    return failure("{0}", llvm::toString(std::move(e)));
  auto mesh = rt::Mesh::parse(p.mesh());
  if (!mesh)
    return badInput("program.pb: {0}; recompile the bundle",
                    llvm::toString(mesh.takeError()));
  auto backend = selectRuntimeBackend(o.backend);
  if (!backend)
    return backend.takeError();
  // Host memory talks through MPI, device memory through NCCL.
  std::unique_ptr<rt::Communicator> communicator;
#ifdef DTC_HAVE_CUDA
  if (backend->cuda) {
    auto nccl =
        backend->plugin->createNcclWithMpi(*mesh, pointToPointAxes(p, *mesh));
    if (!nccl)
      return failure("{0}", llvm::toString(nccl.takeError()));
    communicator = std::move(*nccl);
  }
#endif
  if (!communicator) {
    auto mpi = rt::mpi::MpiCommunicator::create(*mesh);
    if (!mpi)
      return failure("{0}", llvm::toString(mpi.takeError()));
    communicator = std::move(*mpi);
  }
  int rank = communicator->rank();
  auto context = rankContext(p, rank);
  llvm::Error e =
      context ? runRank(p, *context, *backend, communicator.get(), o, out)
              : context.takeError();
  if (e) {
    // Peers may be blocked in a collective with this rank: do not wait for
    // them (no communicator teardown, no MPI_Finalize); exiting non-zero
    // makes the launcher stop every rank.
    (void)communicator.release();
    ErrorKind kind = ErrorKind::Failure;
    std::string message;
    llvm::handleAllErrors(
        std::move(e),
        [&](const DtcError &err) {
          kind = err.getKind();
          message = err.getMessage();
        },
        [&](const llvm::ErrorInfoBase &err) { message = err.message(); });
    return llvm::make_error<DtcError>(
        kind, llvm::formatv("rank {0}: {1}", rank, message).str());
  }
  communicator.reset();
  rt::mpi::finalizeMpi();
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

/// The ranks a launcher (mpirun, srun) started, from its environment.
static std::optional<int64_t> launcherWorldSize() {
  for (const char *name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"})
    if (const char *value = std::getenv(name)) {
      int64_t size = 0;
      if (!llvm::StringRef(value).getAsInteger(10, size) && size > 0)
        return size;
    }
  return std::nullopt;
}

/// This rank's index among them.
static int launcherRank() {
  for (const char *name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"})
    if (const char *value = std::getenv(name)) {
      int rank = 0;
      if (!llvm::StringRef(value).getAsInteger(10, rank))
        return rank;
    }
  return 0;
}

/// `--elastic MIN:MAX`, which resumes from checkpoints.
static llvm::Expected<ElasticRange> elasticRange(const RunOptions &o) {
  if (o.ckptDir.empty() || !o.saveEvery)
    return badInput("--elastic resumes from checkpoints: give --ckpt-dir DIR "
                    "and --save-every K");
  return parseElasticRange(o.elastic);
}

/// `--elastic` under a launcher that started another number of ranks than
/// the bundle's: re-plan for them (rank 0 compiles, the others wait) and
/// resume under the new plan.
static llvm::Error runGrownRank(const program::Program &p, const RunOptions &o,
                                int64_t world, llvm::raw_ostream &out) {
  auto range = elasticRange(o);
  if (!range)
    return range.takeError();
  auto bundle =
      replanForLauncher(o.bundle, o.ckptDir, o.command.front(), *range,
                        p.world_size(), world, launcherRank());
  if (!bundle)
    return bundle.takeError();
  auto grown = loadProgram(*bundle);
  if (!grown)
    return grown.takeError();
  RunOptions resumed = o;
  resumed.bundle = *bundle;
  resumed.resume = true;
  return runMpiRank(*grown, resumed, out);
}

/// `--elastic`: the ranks under the supervisor of compiler/run/Elastic.h.
static llvm::Error runElastic(const program::Program &p, const RunOptions &o,
                              llvm::raw_ostream &out) {
  auto range = elasticRange(o);
  if (!range)
    return range.takeError();
  ElasticRun run;
  run.range = *range;
  run.bundle = o.bundle;
  run.ckptDir = o.ckptDir;
  run.command = o.command;
  run.worldSize = p.world_size();
  run.launch = [](int64_t ranks, const std::vector<std::string> &command,
                  RankLaunch &outcome) {
    LaunchOptions launch;
    launch.ranks = static_cast<int>(ranks);
    launch.command = command;
    return launchRanks(launch, &outcome.deadRank);
  };
  // stderr: stdout may be --log-json's one object per line.
  return superviseElastic(run, llvm::errs());
}

llvm::Error runBundle(const RunOptions &o, llvm::raw_ostream &out) {
  if (!o.backend.empty() && o.backend != "cpu" && o.backend != "cuda")
    return badInput("--backend {0}: use cpu or cuda", o.backend);
  // Before any work: --outputs must be new, empty or dtc's own outputs.
  if (!o.outputs.empty())
    if (llvm::Error e = checkOutputDirectory(o.outputs, "--outputs",
                                             OutputKind::RunOutputs, o.force))
      return e;
  auto p = loadProgram(o.bundle);
  if (!p)
    return p.takeError();
  // One writer per checkpoint root, held for the whole run.
  std::optional<DirectoryLock> ckptLock;
  if (!o.ckptDir.empty() && takesCheckpointLock()) {
    auto lock = DirectoryLock::acquire(o.ckptDir, "--ckpt-dir",
                                       /*exclusive=*/true);
    if (!lock)
      return lock.takeError();
    ckptLock.emplace(std::move(*lock));
    // The ranks this process starts run under its lock.
    ::setenv(kCheckpointLockHeld, "1", 1);
  }
  if (p->world_size() > 1 || rt::mpi::launchedByMpi()) {
    if (rt::mpi::launchedByMpi() && !o.elastic.empty())
      if (auto world = launcherWorldSize(); world && *world != p->world_size())
        return runGrownRank(*p, o, *world, out);
    if (rt::mpi::launchedByMpi())
      return runMpiRank(*p, o, out);
    // Started by hand: check the input once, then start one process per
    // rank (each re-runs this command under mpirun).
    if (llvm::Error e = preflight(*p, o))
      return e;
    if (!o.elastic.empty())
      return runElastic(*p, o, out);
    LaunchOptions launch;
    launch.ranks = p->world_size();
    launch.command = o.command;
    return launchRanks(launch);
  }
  // The flags first: the program's buffers can be large.
  if (llvm::Error e = checkRunFlags(*p, o))
    return e;
  if (llvm::Error e = checkHostMemory(*p, o))
    return e;
  auto context = rankContext(*p, 0);
  if (!context)
    return context.takeError();
  auto backend = selectRuntimeBackend(o.backend);
  if (!backend)
    return backend.takeError();
  return runRank(*p, *context, *backend, nullptr, o, out);
}

} // namespace dtc

namespace dtc {
namespace {

/// The per-step losses of a `--log-json` stream.
llvm::Expected<std::vector<double>> parseLosses(llvm::StringRef text,
                                                llvm::StringRef what) {
  std::vector<double> losses;
  llvm::SmallVector<llvm::StringRef> lines;
  text.split(lines, '\n', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef line : lines) {
    auto json = runtime::parseJson(line);
    if (!json) {
      llvm::consumeError(json.takeError());
      return failure("verify: {0} printed a line that is not JSON: {1}", what,
                     line);
    }
    auto loss = json->getAsObject() ? json->getAsObject()->getNumber("loss")
                                    : std::nullopt;
    if (!loss)
      return failure("verify: {0} logged a step without a loss", what);
    losses.push_back(*loss);
  }
  return losses;
}

/// A small token file for `dtc verify` without --data: ids drawn from the
/// seed, below the model's vocabulary.
llvm::Error writeSyntheticTokens(llvm::StringRef path, int64_t count,
                                 int64_t vocab, uint64_t seed) {
  std::string bytes(count * 2, '\0');
  for (int64_t i = 0; i < count; ++i) {
    uint16_t id = static_cast<uint16_t>(mix(seed ^ mix(i)) %
                                        static_cast<uint64_t>(vocab));
    std::memcpy(&bytes[2 * i], &id, 2);
  }
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec);
  if (!ec) {
    os << bytes;
    os.close();
    ec = os.error();
  }
  if (ec)
    return failure("cannot write {0}: {1}", path, ec.message());
  return llvm::Error::success();
}

/// Reassembles every parameter of the multi-rank run from the shards the
/// ranks dumped into `dir` (rank-R.pb).
llvm::Expected<std::map<std::string, rt::Tensor>>
gatherParameters(const program::Program &p, llvm::StringRef dir) {
  auto mesh = rt::Mesh::parse(p.mesh());
  if (!mesh)
    return mesh.takeError();
  std::map<std::string, rt::Tensor> whole;
  for (int rank = 0; rank < p.world_size(); ++rank) {
    auto context = rankContext(p, rank);
    if (!context)
      return context.takeError();
    std::string path = (dir + "/rank-" + llvm::Twine(rank) + ".pb").str();
    auto buffer = llvm::MemoryBuffer::getFile(path);
    ::onnx::GraphProto graph;
    if (!buffer ||
        !graph.ParseFromArray((*buffer)->getBufferStart(),
                              static_cast<int>((*buffer)->getBufferSize())))
      return failure("verify: rank {0} left no parameters ({1})", rank, path);
    std::map<std::string, const ::onnx::TensorProto *> shards;
    for (const ::onnx::TensorProto &t : graph.initializer())
      shards[t.name()] = &t;
    for (const program::Variable &v : context->program->variables()) {
      if (v.role() != "parameter")
        continue;
      auto it = shards.find(v.name());
      if (it == shards.end())
        return failure("verify: rank {0} did not dump parameter '{1}'", rank,
                       v.name());
      auto layout = rt::ShardLayout::of(v, context->mesh, rank);
      if (!layout)
        return layout.takeError();
      rt::Tensor shard(rt::DType::F32, layout->localShape());
      if (it->second->raw_data().size() != shard.bytes())
        return failure("verify: rank {0} dumped '{1}' with the wrong size",
                       rank, v.name());
      std::memcpy(shard.data(), it->second->raw_data().data(), shard.bytes());
      auto [slot, inserted] = whole.try_emplace(v.name());
      if (inserted)
        slot->second = rt::Tensor(rt::DType::F32, layout->globalShape());
      layout->insert(shard.ref(), slot->second.ref());
    }
  }
  return whole;
}

/// The float values of an output file (a TensorProto with raw data).
llvm::Expected<std::vector<float>> readOutput(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  ::onnx::TensorProto proto;
  if (!buffer ||
      !proto.ParseFromArray((*buffer)->getBufferStart(),
                            static_cast<int>((*buffer)->getBufferSize())) ||
      proto.data_type() != ::onnx::TensorProto::FLOAT)
    return failure("verify: {0} is missing or not an f32 tensor", path);
  std::vector<float> values(proto.raw_data().size() / sizeof(float));
  std::memcpy(values.data(), proto.raw_data().data(),
              values.size() * sizeof(float));
  return values;
}

/// `dtc verify` of an inference bundle: the same inputs (--inputs, or
/// synthetic ones) through the plan and through one device; every output
/// compared.
llvm::Error verifyInference(const VerifyOptions &v, const program::Program &p,
                            const program::Program &reference,
                            llvm::StringRef dir, llvm::raw_ostream &out) {
  auto context = rankContext(reference, 0);
  if (!context)
    return context.takeError();
  const program::Function *fn = nullptr;
  for (const program::Function &f : context->program->functions())
    if (f.name() == reference.infer_function())
      fn = &f;
  if (!fn)
    return badInput("reference.pb: no inference function; recompile");
  std::string inputs = v.inputs;
  if (inputs.empty()) {
    // Synthetic inputs: floats N(0, 1), integers (token ids) in [0, 16).
    inputs = (dir + "/inputs").str();
    llvm::sys::fs::create_directories(inputs);
    for (auto [i, arg] : llvm::enumerate(fn->arguments())) {
      const program::TensorType &type = fn->values(arg.value()).type();
      rt::Tensor t(type.dtype(), llvm::SmallVector<int64_t>(
                                     type.shape().begin(), type.shape().end()));
      std::mt19937_64 rng(mix(v.seed ^ mix(i)));
      std::normal_distribution<float> normal(0.0f, 1.0f);
      for (int64_t j = 0; j < t.numElements(); ++j) {
        if (type.dtype() == rt::DType::F32)
          t.as<float>()[j] = normal(rng);
        else if (type.dtype() == rt::DType::I64)
          t.as<int64_t>()[j] = static_cast<int64_t>(rng() % 16);
        else if (type.dtype() == rt::DType::I32)
          t.as<int32_t>()[j] = static_cast<int32_t>(rng() % 16);
        else
          return badInput("verify: input {0} is {1}; pass --inputs DIR", i,
                          rt::dtypeName(type.dtype()));
      }
      if (llvm::Error e = writeTensorProto(
              t, arg.name(), inputs + "/input_" + std::to_string(i) + ".pb"))
        return e;
    }
  }
  LaunchOptions launch;
  launch.ranks = p.world_size();
  std::string planOut = (dir + "/plan-out").str();
  launch.command = {v.executable, "run",       v.bundle, "--inputs",
                    inputs,       "--outputs", planOut};
  launch.stdoutPath = (dir + "/ranks.txt").str();
  if (llvm::Error e = launchRanks(launch))
    return e;
  RunOptions single;
  single.bundle = v.bundle;
  single.inputs = inputs;
  single.outputs = (dir + "/ref-out").str();
  std::string ignored;
  llvm::raw_string_ostream ignoredOs(ignored);
  Backend cpu{&cpuKernels(), &rt::hostMemory(), false};
  if (llvm::Error e =
          runRank(reference, *context, cpu, nullptr, single, ignoredOs))
    return failure("verify: the single-device run failed: {0}",
                   llvm::toString(std::move(e)));
  double worstAbs = 0, worstRel = 0;
  for (int i = 0; i < fn->results_size(); ++i) {
    std::string file = "/output_" + std::to_string(i) + ".pb";
    auto planValues = readOutput(planOut + file);
    if (!planValues)
      return planValues.takeError();
    auto refValues = readOutput(single.outputs + file);
    if (!refValues)
      return refValues.takeError();
    if (planValues->size() != refValues->size())
      return failure("verify: output {0} has {1} values from the plan, {2} "
                     "from one device",
                     i, planValues->size(), refValues->size());
    double scale = 0, maxDiff = 0;
    for (size_t j = 0; j < refValues->size(); ++j) {
      scale = std::max(scale, std::abs(double((*refValues)[j])));
      double diff = std::abs(double((*planValues)[j]) - (*refValues)[j]);
      maxDiff = std::isnan(diff) ? INFINITY : std::max(maxDiff, diff);
    }
    worstAbs = std::max(worstAbs, maxDiff);
    worstRel = std::max(worstRel, maxDiff / std::max(scale, 1e-12));
  }
  bool pass = worstRel <= v.lossTolerance * 10;
  out << llvm::formatv("verify   {0} ranks (mesh {1}) vs one device, "
                       "inference, {2} outputs\n",
                       p.world_size(), p.mesh(), fn->results_size());
  out << llvm::formatv("outputs  worst absolute error {0:e2}, relative to the "
                       "largest value {1:e2} (tolerance {2:e1})\n",
                       worstAbs, worstRel, v.lossTolerance * 10);
  out << "result   " << (pass ? "PASS" : "FAIL") << "\n";
  if (!pass)
    return failure("verify: the plan does not compute what one device "
                   "computes (errors above the tolerance)");
  return llvm::Error::success();
}

} // namespace

namespace {
/// The multi-rank run of the plan: its losses and wall time.
struct PlanRun {
  std::vector<double> losses;
  double seconds = 0;
};

/// The one-device run of the reference program: its losses, its executor
/// after training and one holding the parameters before it.
struct DeviceRun {
  std::vector<double> losses;
  std::unique_ptr<rt::Executor> trained, initial;
};

/// How far the plan's parameters are from one device's, each judged
/// against its own update.
struct ParameterComparison {
  double worstUpdate = -1, worstAbs = 0;
  std::string worstParam, worstAbsParam;
  /// Elements whose gradient is rounding noise, their bound, and the first
  /// parameter where one exceeded it.
  int64_t noiseElements = 0;
  double noiseBound = 0;
  std::string noiseBroken;
};

/// An element whose gradient second moment on one device is below this
/// fraction of the model's RMS gradient has a gradient of rounding noise.
constexpr double kRoundoffGradient = 1e-4;
} // namespace

/// Runs the plan at its rank count, one process per rank, dumping each
/// rank's parameters into `dir`.
static llvm::Expected<PlanRun> runPlanRanks(const VerifyOptions &v,
                                            const program::Program &p,
                                            const std::string &data,
                                            llvm::StringRef dir) {
  LaunchOptions launch;
  launch.ranks = p.world_size();
  launch.command = {v.executable,
                    "run",
                    v.bundle,
                    "--steps",
                    std::to_string(v.steps),
                    "--seed",
                    std::to_string(v.seed),
                    "--log-json",
                    "--dump-state",
                    std::string(dir)};
  if (!data.empty())
    launch.command.insert(launch.command.end(), {"--data", data});
  if (v.init)
    launch.command.push_back("--init");
  launch.stdoutPath = (dir + "/ranks.jsonl").str();
  auto runStart = std::chrono::steady_clock::now();
  if (llvm::Error e = launchRanks(launch))
    return std::move(e);
  PlanRun run;
  run.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - runStart)
          .count();
  auto planLog = llvm::MemoryBuffer::getFile(launch.stdoutPath);
  if (!planLog)
    return failure("verify: the ranks wrote no log");
  auto losses = parseLosses((*planLog)->getBuffer(), "the multi-rank run");
  if (!losses)
    return losses.takeError();
  run.losses = std::move(*losses);
  return run;
}

/// Trains the reference program on one device (in this process, on the
/// CPU kernels, the numbers every backend is checked against) on the same
/// data: the same global micro-batches.
static llvm::Expected<DeviceRun> runOneDevice(const VerifyOptions &v,
                                              const program::Program &reference,
                                              const std::string &data) {
  RunOptions single;
  single.bundle = v.bundle;
  single.steps = v.steps;
  single.data = data;
  single.seed = v.seed;
  single.init = v.init;
  single.logJson = true;
  single.progress = false;
  auto context = rankContext(reference, 0);
  if (!context)
    return context.takeError();
  std::string refLog;
  llvm::raw_string_ostream refOs(refLog);
  DeviceRun run;
  Backend cpu{&cpuKernels(), &rt::hostMemory(), false};
  // The parameters before training, to measure each one's update.
  auto initial = rt::Executor::create(*context->program, cpuKernels(), nullptr,
                                      rt::hostMemory());
  if (!initial)
    return failure("verify: {0}", llvm::toString(initial.takeError()));
  run.initial = std::move(*initial);
  if (llvm::Error e =
          initializeVariables(reference, *context, *run.initial, single))
    return std::move(e);
  if (llvm::Error e = runRank(reference, *context, cpu, nullptr, single, refOs,
                              &run.trained))
    return failure("verify: the single-device run failed: {0}",
                   llvm::toString(std::move(e)));
  auto losses = parseLosses(refLog, "the single-device run");
  if (!losses)
    return losses.takeError();
  run.losses = std::move(*losses);
  return run;
}

/// The gradient RMS below which (times kRoundoffGradient) an element's
/// gradient is rounding noise, from one device's second moments.
static double
gradientNoiseFloor(const std::map<std::string, rt::Tensor> &params,
                   rt::Executor &trained) {
  double meanSquares = 0;
  int64_t moments = 0;
  for (auto &[name, tensor] : params)
    if (rt::Tensor *v = trained.variable("exp_avg_sq:" + name);
        v && v->dtype() == rt::DType::F32) {
      for (int64_t i = 0; i < v->numElements(); ++i)
        meanSquares += v->as<float>()[i];
      moments += v->numElements();
    }
  return moments ? kRoundoffGradient * std::sqrt(meanSquares / moments) : 0;
}

// Each parameter is judged against its own update: the L2 norm of the
// plan's difference from one device over the norm of what training moved
// it (an absolute bound failed on another CPU's GEMM kernels, where Adam
// turned rounding noise in gradients that are zero in exact arithmetic
// into lr-sized steps of a few elements).
//
// An element whose gradient is zero in exact arithmetic (a bias the
// softmax cancels, a dimension rotary leaves out) has a gradient of pure
// rounding noise on both sides, and Adam's m / sqrt(v) turns that noise
// into a step of about lr in either direction: its value is not
// comparable. Such elements are those whose gradient second moment on
// one device is below kRoundoffGradient of the model's RMS gradient;
// they are held to the bound of two opposite Adam steps per step
// instead, and counted.
static llvm::Expected<ParameterComparison>
compareParameters(const std::map<std::string, rt::Tensor> &params,
                  const DeviceRun &device, double lrMax, int64_t steps) {
  ParameterComparison c;
  const double noiseFloor = gradientNoiseFloor(params, *device.trained);
  c.noiseBound = 2 * 2 * lrMax * static_cast<double>(steps);
  for (auto &[name, tensor] : params) {
    rt::Tensor *ref = device.trained->variable(name);
    rt::Tensor *start = device.initial->variable(name);
    if (!ref || !start || ref->shape() != tensor.shape() ||
        ref->dtype() != rt::DType::F32 || start->shape() != ref->shape())
      return failure("verify: parameter '{0}' has no counterpart of its shape "
                     "on one device",
                     name);
    rt::Tensor *moment = device.trained->variable("exp_avg_sq:" + name);
    if (moment && (moment->dtype() != rt::DType::F32 ||
                   moment->numElements() != ref->numElements()))
      moment = nullptr; // sharded differently: compare every element
    double diffSq = 0, updateSq = 0, maxDiff = 0;
    for (int64_t i = 0; i < ref->numElements(); ++i) {
      double a = tensor.as<float>()[i], b = ref->as<float>()[i];
      double diff = std::abs(a - b), moved = b - start->as<float>()[i];
      maxDiff = std::isnan(diff) ? INFINITY : std::max(maxDiff, diff);
      if (moment && std::sqrt(moment->as<float>()[i]) < noiseFloor) {
        ++c.noiseElements;
        if (!(diff <= c.noiseBound) && c.noiseBroken.empty())
          c.noiseBroken = name;
        continue;
      }
      diffSq += diff * diff;
      updateSq += moved * moved;
    }
    // A parameter training did not move must come out the same.
    double relative = std::sqrt(diffSq) / std::max(std::sqrt(updateSq), 1e-30);
    if (std::isnan(relative))
      relative = INFINITY;
    if (!(maxDiff <= c.worstAbs)) {
      c.worstAbs = maxDiff;
      c.worstAbsParam = name;
    }
    if (!(relative <= c.worstUpdate)) {
      c.worstUpdate = relative;
      c.worstParam = name;
    }
  }
  return c;
}

/// Prints the comparison and returns whether it passes.
static bool printVerifyReport(const VerifyOptions &v, const program::Program &p,
                              const PlanRun &plan, const DeviceRun &device,
                              size_t parameters, const ParameterComparison &c,
                              llvm::raw_ostream &out) {
  double worstLoss = 0;
  int64_t worstStep = 0;
  for (size_t i = 0; i < device.losses.size(); ++i) {
    double rel = std::abs(plan.losses[i] - device.losses[i]) /
                 std::max(std::abs(device.losses[i]), 1e-12);
    if (!(rel <= worstLoss)) {
      worstLoss = rel;
      worstStep = static_cast<int64_t>(i) + 1;
    }
  }
  bool pass = worstLoss <= v.lossTolerance &&
              c.worstUpdate <= v.paramTolerance && c.noiseBroken.empty();
  out << llvm::formatv("verify   {0} ranks (mesh {1}) vs one device, {2} "
                       "steps, {3} parameters ({4:f1} s)\n",
                       p.world_size(), p.mesh(), v.steps, parameters,
                       plan.seconds);
  out << llvm::formatv("loss     {0:f6} -> {1:f6}; worst relative error "
                       "{2:e2} at step {3} (tolerance {4:e1})\n",
                       device.losses.front(), device.losses.back(), worstLoss,
                       worstStep, v.lossTolerance);
  out << llvm::formatv("params   worst error {0:e2} of the update in '{1}' "
                       "(L2 norms, tolerance {2:e1}); worst absolute {3:e2} "
                       "in '{4}'\n",
                       std::max(c.worstUpdate, 0.0), c.worstParam,
                       v.paramTolerance, c.worstAbs, c.worstAbsParam);
  if (c.noiseElements)
    out << llvm::formatv(
        "         {0} element{1} with a gradient of rounding noise (below "
        "{2:e0} of the model's RMS gradient) held to two Adam steps per step "
        "({3:e1}){4}\n",
        c.noiseElements, c.noiseElements == 1 ? "" : "s", kRoundoffGradient,
        c.noiseBound,
        c.noiseBroken.empty() ? std::string()
                              : ": exceeded in '" + c.noiseBroken + "'");
  out << "result   " << (pass ? "PASS" : "FAIL") << "\n";
  return pass;
}

llvm::Error verifyBundle(const VerifyOptions &v, llvm::raw_ostream &out) {
  auto p = loadProgram(v.bundle);
  if (!p)
    return p.takeError();
  if (p->world_size() < 2)
    return badInput("{0}: a one-rank plan; dtc verify compares a multi-rank "
                    "plan with one device",
                    v.bundle);
  llvm::SmallString<256> refPath(v.bundle);
  llvm::sys::path::append(refPath, "reference.pb");
  if (!llvm::sys::fs::exists(refPath))
    return badInput("{0}: missing; the model is too large to run on a CPU "
                    "(over 1 GiB of parameters) or the bundle predates dtc "
                    "verify (recompile it)",
                    refPath);
  auto reference = loadProgram(v.bundle, "reference.pb");
  if (!reference)
    return reference.takeError();
  // Both runs happen here: the plan's ranks, then one device (in this
  // process) on the whole global micro-batch.
  RunOptions here;
  here.bundle = v.bundle;
  for (const program::Program *each : {&*p, &*reference})
    if (llvm::Error e = checkHostMemory(*each, here))
      return e;

  llvm::SmallString<128> dir;
  if (std::error_code ec =
          llvm::sys::fs::createUniqueDirectory("dtc-verify", dir))
    return failure("verify: cannot create a temporary directory: {0}",
                   ec.message());
  auto cleanup =
      llvm::make_scope_exit([&] { llvm::sys::fs::remove_directories(dir); });
  if (p->mode() != "train")
    return verifyInference(v, *p, *reference, dir, out);
  std::string data = v.data;
  const program::Training &train = p->training();
  // A model without token inputs, or a seq2seq model (which a token file
  // cannot feed), trains on synthetic samples of --seed.
  if (data.empty() && readsTokens(*p) && train.objective() != "seq2seq") {
    data = (dir + "/tokens.bin").str();
    int64_t count = std::max<int64_t>(8192, 16 * (train.seq_len() + 1));
    if (llvm::Error e = writeSyntheticTokens(
            data, count, train.vocab() > 0 ? train.vocab() : 256, v.seed))
      return e;
  }
  auto plan = runPlanRanks(v, *p, data, dir);
  if (!plan)
    return plan.takeError();
  auto device = runOneDevice(v, *reference, data);
  if (!device)
    return device.takeError();
  if (device->losses.size() != plan->losses.size())
    return failure("verify: {0} losses from the plan, {1} from one device",
                   plan->losses.size(), device->losses.size());
  auto gathered = gatherParameters(*p, dir);
  if (!gathered)
    return gathered.takeError();
  auto compared = compareParameters(
      *gathered, *device, reference->training().optimizer().lr(), v.steps);
  if (!compared)
    return compared.takeError();
  if (!printVerifyReport(v, *p, *plan, *device, gathered->size(), *compared,
                         out))
    return failure("verify: the plan does not compute what one device "
                   "computes (errors above the tolerance)");
  return llvm::Error::success();
}

} // namespace dtc
