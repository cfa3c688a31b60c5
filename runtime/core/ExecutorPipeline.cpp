//===- ExecutorPipeline.cpp - Runs a pipeline stage's schedule ------------===//
//
// A pipeline step holds no instructions: its stage's action list
// (PipelineSchedule.h) says which chunk function runs for which
// micro-batch, and when activations and gradients move between stages.
// What a forward pass keeps for its backward pass, and the messages in
// flight, live in pooled buffers of the executor's memory, outside the
// arena (each chunk function's temporaries are gone when it returns).
//
//===----------------------------------------------------------------------===//

#include "runtime/core/Executor.h"
#include "runtime/core/PipelineSchedule.h"
#include "runtime/support/Error.h"
#include "runtime/support/ParallelPlan.h"

#include "llvm/Support/FormatVariadic.h"

namespace dtc::runtime {

namespace {

llvm::Error pipelineError(const llvm::Twine &message) {
  return dtc::failureText("invalid program: pipeline step: " + message);
}

/// Micro-batch `i` of a stacked argument: a view, no copy.
TensorRef sliceOf(const TensorRef &stacked, int64_t i) {
  TensorRef slice;
  slice.dtype = stacked.dtype;
  slice.shape.assign(stacked.shape.begin() + 1, stacked.shape.end());
  slice.data = static_cast<char *>(stacked.data) + i * slice.bytes();
  return slice;
}

} // namespace

llvm::Expected<Tensor> Executor::acquire(DType dtype,
                                         llvm::ArrayRef<int64_t> shape) {
  std::vector<Tensor> &free = pool_[{dtype, shape.vec()}];
  if (!free.empty()) {
    Tensor t = std::move(free.back());
    free.pop_back();
    return t;
  }
  llvm::Expected<Tensor> t = Tensor::allocate(dtype, shape, memory_);
  if (t)
    pooledBytes_ += t->bytes();
  return t;
}

void Executor::release(Tensor tensor) {
  if (tensor.empty())
    return;
  pool_[{tensor.dtype(), tensor.shape().vec()}].push_back(std::move(tensor));
}

llvm::Error Executor::keepResults(PreparedFunction &prepared,
                                  std::vector<Tensor> &results,
                                  std::vector<Tensor> *owned) {
  for (const program::Result &r : prepared.function->results()) {
    if (!r.state().empty())
      continue;
    const TensorRef &view = prepared.views[r.value()];
    if (owned) {
      auto input = llvm::find_if(*owned, [&](const Tensor &t) {
        return !t.empty() && t.data() == view.data && t.bytes() == view.bytes();
      });
      if (input != owned->end()) {
        results.push_back(std::move(*input));
        *input = Tensor();
        continue;
      }
    }
    llvm::Expected<Tensor> kept = acquire(view.dtype, view.shape);
    if (!kept)
      return kept.takeError();
    if (llvm::Error e =
            memory_.copyOnDevice(kept->data(), view.data, kept->bytes()))
      return e;
    results.push_back(std::move(*kept));
  }
  return llvm::Error::success();
}

llvm::Error Executor::checkPipeline(const PreparedFunction &step) {
  const program::Function &f = *step.function;
  const program::Pipeline &p = f.pipeline();
  if (f.instructions_size() || f.results_size())
    return pipelineError("'" + f.name() +
                         "' has instructions or results of its own");
  if (p.stages() < 2 || p.stage() < 0 || p.stage() >= p.stages() ||
      p.chunks_size() != std::max(1, p.virtual_stages()) || p.axis().empty())
    return pipelineError(llvm::formatv("'{0}': stage {1} of {2} with {3} "
                                       "chunks for {4} virtual stages",
                                       f.name(), p.stage(), p.stages(),
                                       p.chunks_size(), p.virtual_stages())
                             .str());
  PipelineShape shape = pipelineShapeOf(p, p.micro_batches());
  if (llvm::Error e = checkPipelineShape(shape))
    return e;
  const bool split = splitsBackward(
      parseSchedule(shape.schedule).value_or(Schedule::OneFOneB));
  auto known = [&](const std::string &name) {
    auto it = functions_.find(name);
    return it != functions_.end() && !it->second.function->has_pipeline();
  };
  if (!known(p.loss()))
    return pipelineError("no loss function '" + p.loss() + "'");
  const int64_t chunks = p.stages() * std::max(1, p.virtual_stages());
  for (auto [k, chunk] : llvm::enumerate(p.chunks())) {
    int64_t model = static_cast<int64_t>(k) * p.stages() + p.stage();
    bool first = model == 0, last = model == chunks - 1;
    if ((last != chunk.forward().empty()) ||
        (!last && !known(chunk.forward())) || !known(chunk.backward()) ||
        (split != !chunk.weight().empty()) || (split && !known(chunk.weight())))
      return pipelineError(llvm::formatv("model chunk {0} lacks its pass "
                                         "functions",
                                         model)
                               .str());
    const program::Function &reads =
        *functions_.find(last ? chunk.backward() : chunk.forward())
             ->second.function;
    int dataArgs = reads.arguments_size() - (first ? 0 : 1);
    if (dataArgs != chunk.data_size())
      return pipelineError(llvm::formatv("'{0}' takes {1} data arguments, "
                                         "the chunk names {2}",
                                         reads.name(), dataArgs,
                                         chunk.data_size())
                               .str());
    for (auto [j, arg] : llvm::enumerate(chunk.data())) {
      if (arg < 0 || arg >= f.arguments_size())
        return pipelineError("a chunk reads an argument the step lacks");
      const TensorRef &whole = step.views[f.arguments(arg).value()];
      const program::Argument &into =
          reads.arguments(static_cast<int>(j) + (first ? 0 : 1));
      const program::TensorType &part = reads.values(into.value()).type();
      llvm::ArrayRef<int64_t> partShape(part.shape().data(), part.shape_size());
      if (whole.dtype != part.dtype() || whole.shape.empty() ||
          llvm::ArrayRef<int64_t>(whole.shape).drop_front() != partShape)
        return pipelineError("'" + reads.name() +
                             "' reads a micro-batch of another shape than "
                             "the step's arguments stack");
    }
  }
  return llvm::Error::success();
}

/// One run of a pipeline step: the state its actions share (kept
/// activations, messages in flight, the loss so far), and one method per
/// kind of action.
class Executor::PipelineRun {
public:
  PipelineRun(Executor &executor, PreparedFunction &step,
              const PipelineShape &shape);
  /// Runs one action of the stage's schedule.
  llvm::Error perform(const PipelineAction &a);
  /// After an error: completes what is in flight so no buffer is freed
  /// under a transfer, then recycles the buffers.
  void abandon();
  /// Whether the schedule left messages or kept activations unread.
  bool leftovers() const {
    return !receiving.empty() || !arrived.empty() || !kept.empty() ||
           !keptForWeight.empty();
  }
  /// Gives every buffer the step holds back to the pool.
  void recycle();
  /// The mean loss over `micro` micro-batches (0 on the stages that have
  /// none).
  float meanLoss(int64_t micro) const {
    return haveLoss ? lossSum * (1.0f / static_cast<float>(micro)) : 0.0f;
  }

private:
  struct ChunkFunctions {
    PreparedFunction *forward = nullptr, *backward = nullptr;
    PreparedFunction *weight = nullptr; ///< zero-bubble schedules only
    bool first = false, last = false;
  };

  /// The tensor a message fills (checkPipeline found every chunk's pass
  /// functions).
  const TensorRef &messageType(const PipelineMessage &m) const;
  /// Runs `wait`, counting its time as time waited for the pipeline.
  template <typename Wait> llvm::Error timed(Wait &&wait);
  llvm::Error postReceive(const PipelineAction &a);
  llvm::Error waitReceive(const PipelineAction &a);
  llvm::Error send(const PipelineAction &a);
  llvm::Error waitSends();
  /// Runs a forward or backward pass of a chunk on a micro-batch.
  llvm::Error runPass(const PipelineAction &a);
  /// The message of `kind` that model chunk `model` reads for micro-batch
  /// `micro`, taken from the arrived ones.
  llvm::Expected<Tensor> takeMessage(PipelineMessage::Kind kind, int64_t model,
                                     int64_t micro);
  /// The function a pass calls, with its arguments in `callArgs` (the
  /// buffers it owns for the call in `inputs`).
  llvm::Expected<PreparedFunction *>
  passInputs(const PipelineAction &a,
             llvm::SmallVectorImpl<TensorRef> &callArgs,
             std::vector<Tensor> &inputs);
  /// Keeps what a backward pass returns: the loss on the last chunk, the
  /// input's gradient to send, and (its input-gradient part) what the
  /// weight-gradient part reads.
  llvm::Error takeBackwardResults(const PipelineAction &a,
                                  const PreparedFunction &fn,
                                  std::vector<Tensor> &results);

  Executor &executor;
  const program::Pipeline &p;
  const PipelineShape &shape;
  Communicator *comm;
  const std::string &axis;
  std::vector<TensorRef> stacked;
  std::vector<ChunkFunctions> chunks;

  // The step's state; every buffer goes back to the pool at the end, also
  // on an error (the step's partial results are lost either way).
  std::map<std::pair<int64_t, int64_t>, std::vector<Tensor>> kept;
  /// What each input-gradient pass left its weight-gradient pass.
  std::map<std::pair<int64_t, int64_t>, std::vector<Tensor>> keptForWeight;
  std::map<PipelineMessage, std::pair<Request, Tensor>> receiving;
  std::map<PipelineMessage, Tensor> arrived;
  std::vector<std::pair<Request, Tensor>> sending;
  std::vector<Tensor> outgoing; // what the last pass left to send
  float lossSum = 0;
  bool haveLoss = false;
};

Executor::PipelineRun::PipelineRun(Executor &executor, PreparedFunction &step,
                                   const PipelineShape &shape)
    : executor(executor), p(step.function->pipeline()), shape(shape),
      comm(executor.context_.communicator), axis(p.axis()) {
  for (const program::Argument &a : step.function->arguments())
    stacked.push_back(step.views[a.value()]);
  for (auto [k, chunk] : llvm::enumerate(p.chunks())) {
    ChunkFunctions c;
    int64_t model = shape.modelChunk(p.stage(), k);
    c.first = model == 0;
    c.last = model == shape.chunks() - 1;
    if (!c.last)
      c.forward = &executor.functions_.find(chunk.forward())->second;
    c.backward = &executor.functions_.find(chunk.backward())->second;
    if (!chunk.weight().empty())
      c.weight = &executor.functions_.find(chunk.weight())->second;
    chunks.push_back(c);
  }
}

const TensorRef &
Executor::PipelineRun::messageType(const PipelineMessage &m) const {
  MessageReader to = messageReader(p, shape, m);
  const PreparedFunction &reader =
      executor.functions_.find(*to.function)->second;
  const program::Function &fn = *reader.function;
  int index = to.lastArgument ? fn.arguments_size() - 1 : 0;
  return reader.views[fn.arguments(index).value()];
}

void Executor::PipelineRun::recycle() {
  for (auto *stash : {&kept, &keptForWeight})
    for (auto &entry : *stash)
      for (Tensor &t : entry.second)
        executor.release(std::move(t));
  keptForWeight.clear();
  for (auto &entry : arrived)
    executor.release(std::move(entry.second));
  for (Tensor &t : outgoing)
    executor.release(std::move(t));
  kept.clear();
  arrived.clear();
  outgoing.clear();
  executor.microBatch_ = -1;
}

void Executor::PipelineRun::abandon() {
  for (auto &entry : receiving)
    llvm::consumeError(comm->wait(entry.second.first));
  for (auto &entry : sending)
    llvm::consumeError(comm->wait(entry.first));
  receiving.clear();
  sending.clear();
  recycle();
}

template <typename Wait> llvm::Error Executor::PipelineRun::timed(Wait &&wait) {
  auto begin = TraceClock::now();
  llvm::Error e = wait();
  executor.waits_.pipelineSeconds +=
      std::chrono::duration<double>(TraceClock::now() - begin).count();
  return e;
}

llvm::Error Executor::PipelineRun::perform(const PipelineAction &a) {
  switch (a.kind) {
  case PipelineAction::PostReceive:
    return postReceive(a);
  case PipelineAction::WaitReceive:
    return waitReceive(a);
  case PipelineAction::Send:
    return send(a);
  case PipelineAction::WaitSends:
    return waitSends();
  case PipelineAction::Forward:
  case PipelineAction::Backward:
  case PipelineAction::BackwardInput:
  case PipelineAction::BackwardWeight:
    break;
  }
  return runPass(a);
}

llvm::Error Executor::PipelineRun::postReceive(const PipelineAction &a) {
  if (!comm)
    return pipelineError("it receives over '" + axis +
                         "' but the rank has no communicator");
  const TensorRef &type = messageType(a.message);
  llvm::Expected<Tensor> buffer = executor.acquire(type.dtype, type.shape);
  if (!buffer)
    return buffer.takeError();
  TensorRef into = buffer->ref();
  llvm::Expected<Request> request = comm->recv(axis, a.peer, into);
  if (!request)
    return request.takeError();
  receiving[a.message] = {*request, std::move(*buffer)};
  return llvm::Error::success();
}

llvm::Error Executor::PipelineRun::waitReceive(const PipelineAction &a) {
  auto it = receiving.find(a.message);
  if (it == receiving.end())
    return pipelineError("a message is waited for but never received");
  Request request = it->second.first;
  arrived[a.message] = std::move(it->second.second);
  receiving.erase(it);
  return timed([&] { return comm->wait(request); });
}

llvm::Error Executor::PipelineRun::send(const PipelineAction &a) {
  if (!comm || outgoing.empty())
    return pipelineError("a send has nothing to send or no communicator");
  Tensor payload = std::move(outgoing.front());
  outgoing.erase(outgoing.begin());
  llvm::Expected<Request> request = comm->send(axis, a.peer, payload.ref());
  if (!request)
    return request.takeError();
  sending.emplace_back(*request, std::move(payload));
  return llvm::Error::success();
}

llvm::Error Executor::PipelineRun::waitSends() {
  for (auto &[request, payload] : sending) {
    Request r = request;
    if (llvm::Error e = timed([&] { return comm->wait(r); }))
      return e;
    executor.release(std::move(payload));
  }
  sending.clear();
  return llvm::Error::success();
}

llvm::Expected<Tensor>
Executor::PipelineRun::takeMessage(PipelineMessage::Kind kind, int64_t model,
                                   int64_t micro) {
  auto it = arrived.find({kind, model, micro});
  if (it == arrived.end())
    return pipelineError("a pass reads a message not yet received");
  Tensor t = std::move(it->second);
  arrived.erase(it);
  return t;
}

llvm::Expected<Executor::PreparedFunction *>
Executor::PipelineRun::passInputs(const PipelineAction &a,
                                  llvm::SmallVectorImpl<TensorRef> &callArgs,
                                  std::vector<Tensor> &inputs) {
  const ChunkFunctions &c = chunks[a.chunk];
  const program::PipelineChunk &chunk = p.chunks(a.chunk);
  const int64_t model = shape.modelChunk(p.stage(), a.chunk);
  const bool forward = a.kind == PipelineAction::Forward;
  if (a.kind == PipelineAction::BackwardWeight) {
    auto node = keptForWeight.extract({a.chunk, a.micro});
    if (node.empty() || !c.weight)
      return pipelineError("a weight-gradient pass runs before its "
                           "input-gradient pass");
    inputs = std::move(node.mapped());
    for (const Tensor &t : inputs)
      callArgs.push_back(t.ref());
    return c.weight;
  }
  if (forward || c.last) {
    if (!c.first) {
      auto activation =
          takeMessage(PipelineMessage::Activation, model, a.micro);
      if (!activation)
        return activation.takeError();
      inputs.push_back(std::move(*activation));
      callArgs.push_back(inputs.back().ref());
    }
    for (int32_t arg : chunk.data())
      callArgs.push_back(sliceOf(stacked[arg], a.micro));
    return forward ? c.forward : c.backward;
  }
  auto node = kept.extract({a.chunk, a.micro});
  if (node.empty())
    return pipelineError("a backward pass runs before its forward pass");
  inputs = std::move(node.mapped());
  auto gradient = takeMessage(PipelineMessage::Gradient, model, a.micro);
  if (!gradient)
    return gradient.takeError();
  inputs.push_back(std::move(*gradient));
  for (const Tensor &t : inputs)
    callArgs.push_back(t.ref());
  return c.backward;
}

llvm::Error Executor::PipelineRun::runPass(const PipelineAction &a) {
  const bool forward = a.kind == PipelineAction::Forward;
  if (comm && (!receiving.empty() || !sending.empty()))
    comm->computing();
  // Outgoing buffers were handed to their sends; what remains of the
  // previous pass was not sent (an objective nobody reads).
  for (Tensor &t : outgoing)
    executor.release(std::move(t));
  outgoing.clear();
  llvm::SmallVector<TensorRef, 16> callArgs;
  std::vector<Tensor> inputs; // owned for the call, recycled after it
  llvm::Expected<PreparedFunction *> fn = passInputs(a, callArgs, inputs);
  if (!fn)
    return fn.takeError();
  executor.microBatch_ = static_cast<int32_t>(a.micro);
  if (llvm::Error e = executor.bindViews(**fn, callArgs))
    return e;
  if (llvm::Error e = executor.execute(**fn))
    return e;
  std::vector<Tensor> results;
  if (llvm::Error e = executor.keepResults(**fn, results, &inputs))
    return e;
  executor.microBatch_ = -1;
  for (Tensor &t : inputs)
    executor.release(std::move(t));
  if (!forward)
    return takeBackwardResults(a, **fn, results);
  if (results.empty())
    return pipelineError("'" + (*fn)->function->name() + "' returns no output");
  outgoing.push_back(std::move(results.front()));
  kept[{a.chunk, a.micro}].assign(std::make_move_iterator(results.begin() + 1),
                                  std::make_move_iterator(results.end()));
  return llvm::Error::success();
}

llvm::Error
Executor::PipelineRun::takeBackwardResults(const PipelineAction &a,
                                           const PreparedFunction &fn,
                                           std::vector<Tensor> &results) {
  const ChunkFunctions &c = chunks[a.chunk];
  if (a.kind == PipelineAction::BackwardWeight) {
    // Only the accumulators (variables) are written.
    for (Tensor &t : results)
      executor.release(std::move(t));
    return llvm::Error::success();
  }
  auto resultIt = results.begin();
  if (c.last) {
    if (results.empty() || results.front().numElements() != 1 ||
        results.front().dtype() != DType::F32)
      return pipelineError("'" + fn.function->name() +
                           "' returns no f32 loss first");
    float loss = 0;
    if (llvm::Error e = executor.memory_.copyToHost(
            &loss, results.front().data(), sizeof(float)))
      return e;
    lossSum = haveLoss ? lossSum + loss : loss;
    haveLoss = true;
    executor.release(std::move(results.front()));
    ++resultIt;
  }
  // The input's gradient, except on the first model chunk.
  if (!c.first) {
    if (resultIt == results.end())
      return pipelineError("'" + fn.function->name() +
                           "' returns no input gradient");
    outgoing.push_back(std::move(*resultIt++));
  }
  if (a.kind == PipelineAction::BackwardInput)
    keptForWeight[{a.chunk, a.micro}].assign(
        std::make_move_iterator(resultIt),
        std::make_move_iterator(results.end()));
  else
    for (; resultIt != results.end(); ++resultIt)
      outgoing.push_back(std::move(*resultIt));
  return llvm::Error::success();
}

llvm::Expected<std::vector<Tensor>>
Executor::runPipeline(PreparedFunction &step, llvm::ArrayRef<Tensor> args) {
  const program::Function &f = *step.function;
  const program::Pipeline &p = f.pipeline();
  if (llvm::Error e = bindArguments(step, args))
    return std::move(e);
  int64_t micro = p.micro_batches();
  for (const Tensor &arg : args) {
    if (&arg == &args.front())
      micro = arg.shape().front();
    else if (arg.shape().front() != micro)
      return dtc::failureText(
          llvm::formatv("'{0}': its inputs stack {1} and {2} micro-batches",
                        f.name(), micro, arg.shape().front()));
  }
  PipelineShape shape = pipelineShapeOf(p, micro);
  // The schedule for this many micro-batches, proved again like the
  // compiler proved its own (the result is the same for the same count).
  auto actions = pipelineActions(shape, p.overlap());
  if (!actions)
    return actions.takeError();
  const std::vector<PipelineAction> &mine = (*actions)[p.stage()];

  PipelineRun pipeline(*this, step, shape);
  for (const PipelineAction &a : mine)
    if (llvm::Error e = pipeline.perform(a)) {
      pipeline.abandon();
      return std::move(e);
    }
  if (pipeline.leftovers())
    return pipelineError("the schedule leaves messages or kept activations "
                         "unused");
  pipeline.recycle();

  // The mean loss over the micro-batches (the last stage has it; the others
  // give 0), summed over the stages by the loss function.
  Tensor mean(DType::F32, {});
  mean.as<float>()[0] = pipeline.meanLoss(micro);
  return run(p.loss(), {mean});
}

} // namespace dtc::runtime
