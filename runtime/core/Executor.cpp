//===- Executor.cpp - Interprets one rank's program -----------------------===//

#include "runtime/core/Executor.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MathExtras.h"

#include <cstring>

namespace dtc::runtime {

namespace {

llvm::Error programError(const llvm::Twine &message) {
  return dtc::failureText("invalid program: " + message);
}

TensorRef viewOf(const program::TensorType &type, void *data) {
  TensorRef ref;
  ref.data = data;
  ref.dtype = type.dtype();
  ref.shape.assign(type.shape().begin(), type.shape().end());
  return ref;
}

std::string shapeString(llvm::ArrayRef<int64_t> shape, DType dtype) {
  std::string s;
  for (int64_t d : shape)
    s += std::to_string(d) + "x";
  return s + dtypeName(dtype).str();
}

/// The bytes a tensor of `type` occupies, or an error when its dtype is
/// unknown, a dimension is negative or the size overflows: kernels and
/// allocations trust these sizes.
llvm::Expected<int64_t> bytesOf(const program::TensorType &type,
                                const llvm::Twine &what) {
  int64_t bytes = static_cast<int64_t>(dtypeSize(type.dtype()));
  if (bytes == 0)
    return programError(what + " has no dtype");
  for (int64_t d : type.shape())
    if (d < 0 || llvm::MulOverflow(bytes, d, bytes))
      return programError(what + " has an invalid shape");
  return bytes;
}

} // namespace

llvm::Expected<std::unique_ptr<Executor>>
Executor::create(const program::RankProgram &program,
                 const KernelRegistry &kernels, Communicator *communicator) {
  return create(program, kernels, communicator, hostMemory());
}

llvm::Expected<std::unique_ptr<Executor>>
Executor::create(const program::RankProgram &program,
                 const KernelRegistry &kernels, Communicator *communicator,
                 MemorySpace &memory) {
  std::unique_ptr<Executor> executor(new Executor(program, kernels, memory));
  executor->context_.communicator = communicator;
  if (llvm::Error e = executor->prepare())
    return std::move(e);
  return std::move(executor);
}

llvm::Error Executor::prepare() {
  if (llvm::Error e = allocateVariables())
    return e;
  if (llvm::Error e = loadConstants())
    return e;
  if (llvm::Error e = allocateArena())
    return e;
  for (auto [functionIndex, f] : llvm::enumerate(program_.functions()))
    if (llvm::Error e = prepareFunction(f, static_cast<int32_t>(functionIndex)))
      return e;
  for (auto &entry : functions_)
    if (entry.second.function->has_pipeline())
      if (llvm::Error e = checkPipeline(entry.second))
        return e;
  return llvm::Error::success();
}

llvm::Error Executor::allocateVariables() {
  for (const program::Variable &v : program_.variables()) {
    llvm::Expected<int64_t> bytes =
        bytesOf(v.type(), "variable '" + v.name() + "'");
    if (!bytes)
      return bytes.takeError();
    // A size from the program file, not allocated blindly: an out-of-memory
    // kill (or a failed allocation) is not an answer.
    if (memory_.isHost() && *bytes > hostMemoryBytes())
      return programError("variable '" + v.name() + "' needs " +
                          llvm::Twine(*bytes) +
                          " bytes, more than this machine's " +
                          llvm::Twine(hostMemoryBytes()) + " bytes of memory");
    llvm::Expected<Tensor> t = Tensor::allocate(
        v.type().dtype(),
        llvm::ArrayRef<int64_t>(v.type().shape().data(), v.type().shape_size()),
        memory_);
    if (!t)
      return dtc::failureText("variable '" + v.name() +
                              "': " + llvm::toString(t.takeError()));
    variables_[v.name()] = std::move(*t);
  }
  return llvm::Error::success();
}

llvm::Error Executor::loadConstants() {
  for (const program::Constant &c : program_.constants()) {
    if (llvm::Expected<int64_t> bytes = bytesOf(c.type(), "a constant"); !bytes)
      return bytes.takeError();
    llvm::ArrayRef<int64_t> shape(c.type().shape().data(),
                                  c.type().shape_size());
    Tensor t(c.type().dtype(), shape);
    size_t width = dtypeSize(c.type().dtype());
    size_t expected = c.splat() ? width : t.bytes();
    if (width == 0 || c.data().size() != expected)
      return programError("constant of " +
                          shapeString(shape, c.type().dtype()) + " holds " +
                          std::to_string(c.data().size()) + " bytes");
    auto *dst = static_cast<char *>(t.data());
    if (c.splat())
      for (int64_t i = 0; i < t.numElements(); ++i)
        std::memcpy(dst + i * width, c.data().data(), width);
    else
      std::memcpy(dst, c.data().data(), expected);
    if (!memory_.isHost()) {
      llvm::Expected<Tensor> device =
          Tensor::allocate(t.dtype(), t.shape(), memory_);
      if (!device)
        return device.takeError();
      if (llvm::Error e =
              memory_.copyToDevice(device->data(), t.data(), t.bytes()))
        return e;
      t = std::move(*device);
    }
    constants_.push_back(std::move(t));
  }
  return llvm::Error::success();
}

llvm::Error Executor::allocateArena() {
  // One arena, the largest function's: functions run one at a time and keep
  // nothing in it between calls (what outlives a call is a variable or a
  // result, copied out; a call waits for all its communication), so the
  // temporaries of micro_step, its synchronizing twin and apply share it.
  int64_t arenaBytes = 1;
  for (const program::Function &f : program_.functions()) {
    if (f.arena_bytes() < 0)
      return programError("function '" + f.name() + "' has a negative arena");
    arenaBytes = std::max(arenaBytes, f.arena_bytes());
  }
  llvm::Expected<Tensor> arenaTensor =
      Tensor::allocate(DType::I8, {arenaBytes}, memory_);
  if (!arenaTensor)
    return dtc::failureText("the functions' arena: " +
                            llvm::toString(arenaTensor.takeError()));
  arena_ = std::move(*arenaTensor);
  return llvm::Error::success();
}

llvm::Error Executor::prepareFunction(const program::Function &f,
                                      int32_t functionIndex) {
  PreparedFunction &prepared = functions_[f.name()];
  prepared.function = &f;
  prepared.index = functionIndex;
  if (llvm::Error e = placeValues(prepared))
    return e;
  markCommunication(prepared);
  if (llvm::Error e = lookupKernels(prepared))
    return e;
  if (llvm::Error e = prepareArguments(prepared))
    return e;
  return checkResults(prepared);
}

llvm::Error Executor::placeValues(PreparedFunction &prepared) {
  const program::Function &f = *prepared.function;
  auto *arena = static_cast<char *>(arena_.data());
  for (const program::Value &v : f.values()) {
    if (v.id() != static_cast<int>(prepared.views.size()))
      return programError("function '" + f.name() +
                          "': value ids are not dense");
    llvm::Expected<int64_t> checkedBytes =
        bytesOf(v.type(),
                "function '" + f.name() + "': value " + std::to_string(v.id()));
    if (!checkedBytes)
      return checkedBytes.takeError();
    int64_t bytes = *checkedBytes;
    void *data = nullptr;
    switch (v.storage_case()) {
    case program::Value::kArenaOffset:
      // Written so that no sum overflows: both sizes are >= 0.
      if (v.arena_offset() < 0 || bytes > f.arena_bytes() ||
          v.arena_offset() > f.arena_bytes() - bytes)
        return programError("function '" + f.name() + "': value " +
                            std::to_string(v.id()) + " lies outside the arena");
      data = arena + v.arena_offset();
      break;
    case program::Value::kState: {
      Tensor *var = storage(v.state());
      if (!var)
        return programError("function '" + f.name() +
                            "' reads unknown variable '" + v.state() + "'");
      if (static_cast<int64_t>(var->bytes()) != bytes)
        return programError("value of variable '" + v.state() +
                            "' has the wrong size");
      data = var->data();
      break;
    }
    case program::Value::kConstant:
      if (v.constant() < 0 ||
          v.constant() >= static_cast<int>(constants_.size()) ||
          static_cast<int64_t>(constants_[v.constant()].bytes()) != bytes)
        return programError("function '" + f.name() +
                            "': bad constant reference");
      data = constants_[v.constant()].data();
      break;
    case program::Value::kArgument:
      break; // bound per call
    default:
      return programError("function '" + f.name() + "': value " +
                          std::to_string(v.id()) + " has no storage");
    }
    prepared.views.push_back(viewOf(v.type(), data));
  }
  return llvm::Error::success();
}

void Executor::markCommunication(PreparedFunction &prepared) {
  const program::Function &f = *prepared.function;
  // A wait is for a pipeline transfer when its start (same `request`)
  // is a send or a receive.
  llvm::DenseMap<int64_t, WaitKind> requestKind;
  for (const program::Instruction &inst : f.instructions()) {
    auto request = inst.attrs().find("request");
    if (request == inst.attrs().end())
      continue;
    llvm::StringRef op = inst.op();
    if (op == "dtc.wait")
      continue;
    requestKind[request->second.i()] =
        op == "dtc.send_start" || op == "dtc.recv_start" ? WaitKind::Pipeline
                                                         : WaitKind::Collective;
  }
  prepared.waits.assign(f.instructions_size(), WaitKind::None);
  prepared.communicates.assign(f.instructions_size(), false);
  for (auto [index, inst] : llvm::enumerate(f.instructions())) {
    auto request = inst.attrs().find("request");
    prepared.communicates[index] = request != inst.attrs().end();
    if (inst.op() != "dtc.wait" || request == inst.attrs().end())
      continue;
    auto kind = requestKind.find(request->second.i());
    prepared.waits[index] =
        kind == requestKind.end() ? WaitKind::Collective : kind->second;
  }
}

llvm::Error Executor::lookupKernels(PreparedFunction &prepared) {
  for (const program::Instruction &inst : prepared.function->instructions()) {
    KernelFn fn = kernels_.lookup(inst.op());
    if (!fn)
      return dtc::failureText(
          "the " + llvm::Twine(memory_.isHost() ? "CPU" : memory_.name()) +
          " backend has no kernel for " + inst.op() +
          (inst.loc().empty() ? "" : " (at '" + inst.loc() + "')"));
    for (int id : inst.inputs())
      if (!prepared.hasValue(id))
        return programError(inst.op() + " reads an unknown value");
    for (int id : inst.outputs())
      if (!prepared.hasValue(id))
        return programError(inst.op() + " writes an unknown value");
    prepared.kernels.push_back(fn);
  }
  return llvm::Error::success();
}

llvm::Error Executor::prepareArguments(PreparedFunction &prepared) {
  const program::Function &f = *prepared.function;
  llvm::DenseMap<int, int> argumentIndex; // Value.argument -> position
  for (auto [index, a] : llvm::enumerate(f.arguments())) {
    if (!prepared.hasValue(a.value()) || !f.values(a.value()).has_argument())
      return programError("function '" + f.name() + "': bad argument");
    argumentIndex[f.values(a.value()).argument()] = index;
    if (memory_.isHost())
      continue;
    const TensorRef &view = prepared.views[a.value()];
    llvm::Expected<Tensor> buffer =
        Tensor::allocate(view.dtype, view.shape, memory_);
    if (!buffer)
      return buffer.takeError();
    prepared.arguments.push_back(std::move(*buffer));
  }
  for (const program::Value &v : f.values()) {
    if (!v.has_argument())
      continue;
    auto it = argumentIndex.find(v.argument());
    if (it == argumentIndex.end())
      return programError("function '" + f.name() + "': value " +
                          std::to_string(v.id()) +
                          " reads an argument the function does not have");
    // A view (reshape) of an argument reads exactly the argument's bytes.
    int argumentValue = f.arguments(it->second).value();
    if (prepared.views[v.id()].bytes() != prepared.views[argumentValue].bytes())
      return programError("function '" + f.name() + "': value " +
                          std::to_string(v.id()) +
                          " views an argument of another size");
    prepared.argumentViews.emplace_back(v.id(), it->second);
  }
  return llvm::Error::success();
}

llvm::Error Executor::checkResults(const PreparedFunction &prepared) {
  const program::Function &f = *prepared.function;
  for (const program::Result &r : f.results()) {
    if (!prepared.hasValue(r.value()))
      return programError("function '" + f.name() + "': bad result");
    if (r.state().empty())
      continue;
    Tensor *var = storage(r.state());
    if (!var)
      return programError("function '" + f.name() +
                          "' writes unknown variable '" + r.state() + "'");
    if (var->bytes() != prepared.views[r.value()].bytes())
      return programError("function '" + f.name() + "' writes variable '" +
                          r.state() + "' with a value of another size");
  }
  return llvm::Error::success();
}

Tensor *Executor::storage(llvm::StringRef name) {
  auto it = variables_.find(name);
  return it == variables_.end() ? nullptr : &it->second;
}

Tensor *Executor::variable(llvm::StringRef name) {
  return memory_.isHost() ? storage(name) : nullptr;
}

llvm::Expected<Tensor> Executor::readVariable(llvm::StringRef name) {
  Tensor *var = storage(name);
  if (!var)
    return dtc::failureText("the program has no variable '" + name + "'");
  Tensor host(var->dtype(), var->shape());
  if (llvm::Error e = readVariable(name, host))
    return std::move(e);
  return host;
}

llvm::Expected<Tensor *> Executor::variableLike(llvm::StringRef name,
                                                const Tensor &host) {
  Tensor *var = storage(name);
  if (!var)
    return dtc::failureText("the program has no variable '" + name + "'");
  if (host.dtype() != var->dtype() || host.shape() != var->shape())
    return dtc::failureText("variable '" + name + "' is " +
                            shapeString(var->shape(), var->dtype()) + ", got " +
                            shapeString(host.shape(), host.dtype()));
  return var;
}

llvm::Error Executor::readVariable(llvm::StringRef name, Tensor &host) {
  auto var = variableLike(name, host);
  if (!var)
    return var.takeError();
  return memory_.copyToHost(host.data(), (*var)->data(), (*var)->bytes());
}

llvm::Error Executor::writeVariable(llvm::StringRef name, const Tensor &host) {
  auto var = variableLike(name, host);
  if (!var)
    return var.takeError();
  return memory_.copyToDevice((*var)->data(), host.data(), (*var)->bytes());
}

int64_t Executor::allocatedBytes() const {
  int64_t bytes = variableBytes();
  for (const Tensor &c : constants_)
    bytes += c.bytes();
  bytes += arena_.bytes() + pooledBytes_;
  for (const auto &entry : functions_) {
    for (const Tensor &a : entry.second.arguments)
      bytes += a.bytes();
  }
  return bytes;
}

int64_t Executor::variableBytes() const {
  int64_t bytes = 0;
  for (const auto &entry : variables_)
    bytes += entry.second.bytes();
  return bytes;
}

int64_t Executor::arenaBytes(llvm::StringRef function) const {
  auto it = functions_.find(function);
  return it == functions_.end() ? 0 : it->second.function->arena_bytes();
}

llvm::Expected<std::vector<Tensor>> Executor::run(llvm::StringRef name,
                                                  llvm::ArrayRef<Tensor> args) {
  auto it = functions_.find(name);
  if (it == functions_.end())
    return dtc::failureText("the program has no function '" + name + "'");
  PreparedFunction &prepared = it->second;
  if (prepared.function->has_pipeline())
    return runPipeline(prepared, args);
  if (llvm::Error e = bindArguments(prepared, args))
    return std::move(e);
  if (llvm::Error e = execute(prepared))
    return std::move(e);
  return hostResults(prepared);
}

llvm::Error Executor::bindArguments(PreparedFunction &prepared,
                                    llvm::ArrayRef<Tensor> args) {
  const program::Function &f = *prepared.function;
  if (args.size() != static_cast<size_t>(f.arguments_size()))
    return dtc::failureText(llvm::formatv("'{0}' takes {1} inputs, {2} given",
                                          f.name(), f.arguments_size(),
                                          args.size()));
  const bool stacked = f.has_pipeline();
  for (auto [index, arg] : llvm::enumerate(f.arguments())) {
    TensorRef &view = prepared.views[arg.value()];
    const Tensor &given = args[index];
    llvm::ArrayRef<int64_t> expected(view.shape), got = given.shape();
    // A pipeline step's arguments stack micro-batches: any number of them.
    bool sameShape = stacked
                         ? !expected.empty() && expected.size() == got.size() &&
                               expected.drop_front() == got.drop_front()
                         : expected == got;
    if (given.dtype() != view.dtype || !sameShape) {
      std::string what = arg.name().empty() ? "input " + std::to_string(index)
                                            : "input '" + arg.name() + "'";
      return dtc::failureText(
          what + " must be " +
          (stacked ? "[micro-batches] x " +
                         shapeString(expected.drop_front(), view.dtype)
                   : shapeString(expected, view.dtype)) +
          ", got " + shapeString(got, given.dtype()));
    }
    if (memory_.isHost()) {
      view.data = given.data();
      continue;
    }
    Tensor &buffer = prepared.arguments[index];
    if (buffer.shape() != got) {
      llvm::Expected<Tensor> resized =
          Tensor::allocate(given.dtype(), got, memory_);
      if (!resized)
        return resized.takeError();
      buffer = std::move(*resized);
    }
    if (llvm::Error e =
            memory_.copyToDevice(buffer.data(), given.data(), given.bytes()))
      return e;
    view.data = buffer.data();
  }
  if (!stacked) // Views of an argument (reshapes) read the bytes bound to it.
    for (auto [valueId, argIndex] : prepared.argumentViews)
      prepared.views[valueId].data = memory_.isHost()
                                         ? args[argIndex].data()
                                         : prepared.arguments[argIndex].data();
  return llvm::Error::success();
}

llvm::Error Executor::bindViews(PreparedFunction &prepared,
                                llvm::ArrayRef<TensorRef> args) {
  const program::Function &f = *prepared.function;
  if (args.size() != static_cast<size_t>(f.arguments_size()))
    return programError(llvm::formatv("'{0}' takes {1} inputs, the pipeline "
                                      "step passes {2}",
                                      f.name(), f.arguments_size(), args.size())
                            .str());
  for (auto [index, arg] : llvm::enumerate(f.arguments())) {
    TensorRef &view = prepared.views[arg.value()];
    if (view.bytes() != args[index].bytes())
      return programError(llvm::formatv("'{0}' input {1} is {2} bytes, the "
                                        "pipeline step passes {3}",
                                        f.name(), index, view.bytes(),
                                        args[index].bytes())
                              .str());
    view.data = args[index].data;
  }
  for (auto [valueId, argIndex] : prepared.argumentViews)
    prepared.views[valueId].data = args[argIndex].data;
  return llvm::Error::success();
}

llvm::Error Executor::execute(PreparedFunction &prepared) {
  const program::Function &f = *prepared.function;
  llvm::SmallVector<TensorRef, 8> inputs, outputs;
  for (auto [index, inst] : llvm::enumerate(f.instructions())) {
    inputs.clear();
    outputs.clear();
    for (int id : inst.inputs())
      inputs.push_back(prepared.views[id]);
    for (int id : inst.outputs())
      outputs.push_back(prepared.views[id]);
    KernelCall call(inst, inputs, outputs, &context_);
    WaitKind wait = prepared.waits[index];
    if (!context_.pending.empty() && !prepared.communicates[index] &&
        context_.communicator)
      context_.communicator->computing();
    if (!trace_ && wait == WaitKind::None) {
      if (llvm::Error e = prepared.kernels[index](call))
        return e;
      continue;
    }
    auto begin = TraceClock::now();
    if (trace_)
      memory_.pushRange(inst.op());
    if (llvm::Error e = prepared.kernels[index](call))
      return e;
    if (trace_) {
      if (!memory_.isHost())
        if (llvm::Error e = memory_.synchronize())
          return e;
      memory_.popRange();
    }
    auto end = TraceClock::now();
    if (wait != WaitKind::None) {
      double seconds = std::chrono::duration<double>(end - begin).count();
      (wait == WaitKind::Pipeline ? waits_.pipelineSeconds
                                  : waits_.collectiveSeconds) += seconds;
    }
    if (trace_) {
      TraceClock::time_point completed = end;
      if (wait != WaitKind::None && context_.communicator)
        if (auto at = context_.communicator->lastWaitCompletion())
          completed = std::min(*at, end);
      trace_->push_back({prepared.index, static_cast<int32_t>(index), begin,
                         end, completed, microBatch_});
    }
  }
  if (!context_.pending.empty())
    return programError("function '" + f.name() + "' ends with " +
                        std::to_string(context_.pending.size()) +
                        " communication(s) started and never waited");
  for (const program::Result &r : f.results()) {
    if (r.state().empty())
      continue;
    const TensorRef &view = prepared.views[r.value()];
    Tensor *var = storage(r.state());
    if (var->data() != view.data)
      if (llvm::Error e =
              memory_.copyOnDevice(var->data(), view.data, var->bytes()))
        return e;
  }
  return llvm::Error::success();
}

llvm::Expected<std::vector<Tensor>>
Executor::hostResults(PreparedFunction &prepared) {
  std::vector<Tensor> results;
  for (const program::Result &r : prepared.function->results()) {
    if (!r.state().empty())
      continue;
    const TensorRef &view = prepared.views[r.value()];
    Tensor out(view.dtype, view.shape);
    if (llvm::Error e = memory_.copyToHost(out.data(), view.data, out.bytes()))
      return std::move(e);
    results.push_back(std::move(out));
  }
  // Device kernels run asynchronously: their failures surface here.
  if (llvm::Error e = memory_.synchronize())
    return std::move(e);
  return results;
}

} // namespace dtc::runtime
