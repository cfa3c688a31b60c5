//===- InstructionCost.cpp - The cost model per instruction ---------------===//
//
// Every price goes through the cost model's primitives, so the timeline
// `dtc plan report --trace` predicts is the model's, not a second one:
// gemmTime for matmuls and convolutions (forward, input- and weight-
// gradient GEMMs of the same dims, as linearTimes), the fused attention
// curve for attention (its backward the cluster's attentionBackwardRatio
// times its forward, as CostModel.cpp), streamTime for everything else and
// collectiveTime on the placed group for communication.
//
//===----------------------------------------------------------------------===//

#include "compiler/inspect/InstructionCost.h"

#include "compiler/costmodel/Collectives.h"
#include "compiler/costmodel/Compute.h"
#include "compiler/costmodel/KernelTime.h"
#include "runtime/support/Error.h"

#include "runtime/core/PipelineSchedule.h"
#include "runtime/core/Shard.h"
#include "runtime/core/Tensor.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <set>

using namespace dtc;

namespace {

/// Whether `op` posts a collective or transfer (its `dtc.wait` ends it).
bool isCommStart(llvm::StringRef op) {
  KernelDesc desc;
  desc.op = op;
  return kernelWork(desc).kind == KernelWork::Kind::Comm;
}

/// The cost model's dtype for a tensor's: integers and bools never reach a
/// GEMM, f64 is priced as f32.
DType modelType(program::DType type) {
  switch (type) {
  case program::BF16:
    return DType::BF16;
  case program::F16:
    return DType::F16;
  default:
    return DType::F32;
  }
}

bool flag(const program::Instruction &inst, llvm::StringRef name) {
  auto it = inst.attrs().find(name.str());
  return it != inst.attrs().end() && it->second.b();
}

/// The values of one function by id.
class ValueTable {
public:
  explicit ValueTable(const program::Function &fn) {
    for (const program::Value &value : fn.values())
      byId[value.id()] = &value.type();
  }
  const program::TensorType &type(int32_t id) const {
    static const program::TensorType empty;
    auto it = byId.find(id);
    return it == byId.end() ? empty : *it->second;
  }

private:
  llvm::DenseMap<int32_t, const program::TensorType *> byId;
};

std::vector<std::string> meshAxes(const program::Instruction &inst) {
  std::vector<std::string> axes;
  auto it = inst.attrs().find("mesh_axes");
  if (it != inst.attrs().end())
    for (const std::string &axis : it->second.strings().values())
      axes.push_back(axis);
  return axes;
}

int64_t peerOffset(const program::Instruction &inst) {
  auto it = inst.attrs().find("peer_offset");
  return it == inst.attrs().end() ? 0 : it->second.i();
}

std::optional<int64_t> requestOf(const program::Instruction &inst) {
  auto it = inst.attrs().find("request");
  if (it == inst.attrs().end())
    return std::nullopt;
  return it->second.i();
}

/// Rank distance between neighbours along mesh axis `index`.
int64_t strideOf(const runtime::Mesh &mesh, int index) {
  int64_t stride = 1;
  for (size_t i = index + 1; i < mesh.axes().size(); ++i)
    stride *= mesh.axes()[i].size;
  return stride;
}

llvm::Expected<InstructionCost>
priceWith(const Cluster &cluster, const runtime::Mesh &mesh, double overheadS,
          const ValueTable &values, const program::Function &fn,
          const program::Instruction &inst) {
  InstructionCost cost;
  cost.compute = overheadS;
  auto in = [&](int i) -> const program::TensorType & {
    return values.type(i < inst.inputs_size() ? inst.inputs(i) : -1);
  };
  auto out = [&](int i) -> const program::TensorType & {
    return values.type(i < inst.outputs_size() ? inst.outputs(i) : -1);
  };
  llvm::StringRef op = inst.op();
  if (op == "dtc.wait")
    return cost;
  // The cost model's own definition of each op's work.
  KernelDesc desc;
  desc.op = op;
  auto describe = [](const program::TensorType &type) {
    TensorDesc t;
    t.shape.assign(type.shape().begin(), type.shape().end());
    t.elementBytes = runtime::dtypeSize(type.dtype());
    return t;
  };
  for (int i = 0; i < inst.inputs_size(); ++i)
    desc.inputs.push_back(describe(in(i)));
  for (int i = 0; i < inst.outputs_size(); ++i)
    desc.outputs.push_back(describe(out(i)));
  desc.transposeLhs = flag(inst, "transpose_lhs");
  desc.transposeRhs = flag(inst, "transpose_rhs");
  desc.causal = flag(inst, "causal");
  KernelWork work = kernelWork(desc);
  if (work.kind == KernelWork::Kind::Comm) {
    std::vector<std::string> axes = meshAxes(inst);
    int64_t size = 1, stride = 0;
    for (const std::string &axis : axes) {
      int index = mesh.axisIndex(axis);
      if (index < 0)
        return badInput("{0}: {1} at '{2}': no mesh axis '{3}' in '{4}'",
                        fn.name(), op, inst.loc(), axis, mesh.str());
      size *= mesh.axes()[index].size;
      int64_t s = strideOf(mesh, index);
      stride = stride == 0 ? s : std::min(stride, s);
    }
    GroupPlacement group;
    if (work.collective == Collective::SendRecv) {
      int64_t offset = std::abs(peerOffset(inst));
      group = placeGroup(2, stride * std::max<int64_t>(offset, 1),
                         cluster.gpusPerNode);
    } else {
      group = placeGroup(size, stride, cluster.gpusPerNode);
    }
    cost.communication =
        collectiveTime(work.collective, work.commBytes, group, cluster);
    return cost;
  }

  // GEMMs run in their result's type, attention in its query's.
  const program::TensorType &typed =
      work.kind == KernelWork::Kind::Attention ? in(0) : out(0);
  double seconds = kernelSeconds(work, modelType(typed.dtype()), cluster);
  cost.compute += seconds;
  return cost;
}

} // namespace

llvm::Expected<InstructionCost>
InstructionPricer::price(const program::Function &fn,
                         const program::Instruction &inst) const {
  return priceWith(cluster, mesh, overheadS, ValueTable(fn), fn, inst);
}

std::vector<FunctionCall> dtc::stepCalls(const program::Program &program) {
  std::vector<FunctionCall> calls;
  if (program.mode() == "infer") {
    calls.push_back({program.infer_function(), 0});
    return calls;
  }
  const program::Training &train = program.training();
  int64_t accum = std::max<int64_t>(train.grad_accum(), 1);
  llvm::StringMap<int64_t> seen;
  for (int64_t call = 0; call < accum; ++call) {
    const std::string &name =
        call + 1 == accum && !train.last_micro_step().empty()
            ? train.last_micro_step()
            : train.micro_step();
    calls.push_back({name, seen[name]++});
  }
  if (!train.apply().empty())
    calls.push_back({train.apply(), 0});
  return calls;
}

namespace {
/// Writes the instructions a pipeline step runs on one stage, pass by pass
/// and transfer by transfer, as the executor would run them.
class PipelineExpander {
public:
  PipelineExpander(const program::RankProgram &rank,
                   const program::Function &step, runtime::PipelineShape shape)
      : rank(rank), step(step), p(step.pipeline()), shape(shape),
        fn(out.function) {
    fn.set_name(step.name());
  }

  /// Appends what action `a` runs.
  llvm::Error expand(const runtime::PipelineAction &a);
  /// Appends the loss function; the step is then complete.
  llvm::Expected<ExpandedStep> finish();

private:
  /// The rank's function `name` that is not a pipeline step.
  const program::Function *lookup(const std::string &name) const;
  /// Appends `source`'s instructions, its ids moved past those used so far.
  void append(const program::Function &source);
  /// The tensor a message carries, as the executor sizes it.
  llvm::Expected<program::TensorType>
  messageType(const runtime::PipelineMessage &m) const;
  /// Appends a send or receive start of `type`; returns its request.
  int64_t transfer(llvm::StringRef op, const program::TensorType &type,
                   int64_t peer);
  void wait(int64_t request);
  /// Appends a forward or backward pass and notes what it leaves to send.
  llvm::Error runPass(const runtime::PipelineAction &a);

  const program::RankProgram &rank;
  const program::Function &step;
  const program::Pipeline &p;
  runtime::PipelineShape shape;
  ExpandedStep out;
  program::Function &fn;
  int32_t nextValue = 0;
  int64_t nextRequest = 0;
  llvm::StringMap<int64_t> runs;
  // What the previous pass left to send: its results that write no
  // variable (after the loss on the last chunk), in order.
  std::vector<program::TensorType> outgoing;
  std::map<runtime::PipelineMessage, int64_t> receiving;
  std::vector<int64_t> sending;
};
} // namespace

const program::Function *
PipelineExpander::lookup(const std::string &name) const {
  for (const program::Function &f : rank.functions())
    if (f.name() == name && !f.has_pipeline())
      return &f;
  return nullptr;
}

void PipelineExpander::append(const program::Function &source) {
  int32_t valueBase = nextValue, maxValue = -1;
  for (const program::Value &v : source.values()) {
    program::Value *copy = fn.add_values();
    *copy = v;
    copy->set_id(v.id() + valueBase);
    maxValue = std::max(maxValue, v.id());
  }
  nextValue += maxValue + 1;
  int64_t requestBase = nextRequest, maxRequest = -1;
  int64_t call = runs[source.name()]++;
  for (auto [index, inst] : llvm::enumerate(source.instructions())) {
    program::Instruction *copy = fn.add_instructions();
    *copy = inst;
    for (int i = 0; i < copy->inputs_size(); ++i)
      copy->set_inputs(i, copy->inputs(i) + valueBase);
    for (int i = 0; i < copy->outputs_size(); ++i)
      copy->set_outputs(i, copy->outputs(i) + valueBase);
    if (auto request = copy->mutable_attrs()->find("request");
        request != copy->mutable_attrs()->end()) {
      maxRequest = std::max(maxRequest, request->second.i());
      request->second.set_i(request->second.i() + requestBase);
    }
    out.origins.push_back({&source, static_cast<int64_t>(index), call});
  }
  nextRequest += maxRequest + 1;
}

llvm::Expected<program::TensorType>
PipelineExpander::messageType(const runtime::PipelineMessage &m) const {
  runtime::MessageReader to = runtime::messageReader(p, shape, m);
  const program::Function *reader = lookup(*to.function);
  if (!reader || reader->arguments_size() == 0)
    return badInput("program.pb: {0}: model chunk {1} lacks its pass "
                    "functions",
                    step.name(), m.chunk);
  int index = to.lastArgument ? reader->arguments_size() - 1 : 0;
  int32_t id = reader->arguments(index).value();
  for (const program::Value &v : reader->values())
    if (v.id() == id)
      return v.type();
  return badInput("program.pb: {0}: no value {1}", reader->name(), id);
}

int64_t PipelineExpander::transfer(llvm::StringRef op,
                                   const program::TensorType &type,
                                   int64_t peer) {
  program::Value *value = fn.add_values();
  value->set_id(nextValue++);
  *value->mutable_type() = type;
  program::Instruction *inst = fn.add_instructions();
  inst->set_op(op.str());
  (op == "dtc.send_start" ? inst->add_inputs(value->id())
                          : inst->add_outputs(value->id()));
  auto &attrs = *inst->mutable_attrs();
  attrs["mesh_axes"].mutable_strings()->add_values(p.axis());
  attrs["peer_offset"].set_i(peer);
  attrs["request"].set_i(nextRequest);
  out.origins.push_back({});
  return nextRequest++;
}

void PipelineExpander::wait(int64_t request) {
  program::Instruction *inst = fn.add_instructions();
  inst->set_op("dtc.wait");
  (*inst->mutable_attrs())["request"].set_i(request);
  out.origins.push_back({});
}

llvm::Error PipelineExpander::runPass(const runtime::PipelineAction &a) {
  const program::PipelineChunk &chunk = p.chunks(a.chunk);
  bool last = shape.modelChunk(p.stage(), a.chunk) == shape.chunks() - 1;
  const program::Function *pass = lookup(
      a.kind == runtime::PipelineAction::Forward && !last ? chunk.forward()
      : a.kind == runtime::PipelineAction::BackwardWeight ? chunk.weight()
                                                          : chunk.backward());
  if (!pass)
    return badInput("program.pb: {0}: local chunk {1} lacks its pass "
                    "functions",
                    step.name(), a.chunk);
  append(*pass);
  outgoing.clear();
  for (const program::Result &r : pass->results())
    if (r.state().empty())
      for (const program::Value &v : pass->values())
        if (v.id() == r.value())
          outgoing.push_back(v.type());
  bool first = shape.modelChunk(p.stage(), a.chunk) == 0;
  if (a.kind != runtime::PipelineAction::Forward && last && !outgoing.empty())
    outgoing.erase(outgoing.begin()); // the loss stays
  if (a.kind == runtime::PipelineAction::BackwardWeight)
    outgoing.clear();
  else if (a.kind == runtime::PipelineAction::Forward)
    outgoing.resize(std::min<size_t>(outgoing.size(), 1)); // kept: stay
  else if (a.kind == runtime::PipelineAction::BackwardInput)
    outgoing.resize(std::min<size_t>(outgoing.size(), first ? 0 : 1));
  return llvm::Error::success();
}

llvm::Error PipelineExpander::expand(const runtime::PipelineAction &a) {
  switch (a.kind) {
  case runtime::PipelineAction::PostReceive: {
    auto type = messageType(a.message);
    if (!type)
      return type.takeError();
    receiving[a.message] = transfer("dtc.recv_start", *type, a.peer);
    break;
  }
  case runtime::PipelineAction::Send:
    if (outgoing.empty())
      return badInput("program.pb: {0}: a send has nothing to send",
                      step.name());
    sending.push_back(transfer("dtc.send_start", outgoing.front(), a.peer));
    outgoing.erase(outgoing.begin());
    break;
  case runtime::PipelineAction::WaitReceive:
    wait(receiving.at(a.message));
    break;
  case runtime::PipelineAction::WaitSends:
    for (int64_t request : sending)
      wait(request);
    sending.clear();
    break;
  case runtime::PipelineAction::Forward:
  case runtime::PipelineAction::Backward:
  case runtime::PipelineAction::BackwardInput:
  case runtime::PipelineAction::BackwardWeight:
    return runPass(a);
  }
  return llvm::Error::success();
}

llvm::Expected<ExpandedStep> PipelineExpander::finish() {
  const program::Function *loss = lookup(p.loss());
  if (!loss)
    return badInput("program.pb: {0}: no loss function '{1}'", step.name(),
                    p.loss());
  append(*loss);
  return std::move(out);
}

llvm::Expected<ExpandedStep>
dtc::expandPipelineStep(const program::RankProgram &rank,
                        const program::Function &step, int64_t microBatches) {
  const program::Pipeline &p = step.pipeline();
  runtime::PipelineShape shape = runtime::pipelineShapeOf(p, microBatches);
  auto actions = runtime::pipelineActions(shape, p.overlap());
  if (!actions)
    return badInput("program.pb: {0}: {1}", step.name(),
                    llvm::toString(actions.takeError()));
  if (p.stage() < 0 || p.stage() >= static_cast<int>(actions->size()) ||
      p.chunks_size() != shape.virtualStages)
    return badInput("program.pb: {0}: stage {1} of {2} with {3} chunks",
                    step.name(), p.stage(), p.stages(), p.chunks_size());
  PipelineExpander expander(rank, step, shape);
  for (const runtime::PipelineAction &a : (*actions)[p.stage()])
    if (llvm::Error e = expander.expand(a))
      return std::move(e);
  return expander.finish();
}

namespace {

/// A posted collective or transfer while the step is replayed.
struct CommOp {
  size_t rank = 0;  ///< Index into the replayed ranks.
  size_t event = 0; ///< Its communication event.
  double post = 0, duration = 0;
  /// Empty: no other replayed rank takes part. Else every side's op has the
  /// same key and `sides` of them must be ready to start.
  std::string key;
  size_t sides = 1;
  bool started = false;
  double end = 0;
};

struct RankState {
  int64_t rank = 0;
  const program::RankProgram *program = nullptr;
  std::vector<const program::Function *> functions; ///< One per call.
  std::vector<std::vector<InstructionCost>> costs;  ///< Per call.
  /// Per call: null, or the origins of an expanded pipeline step.
  std::vector<const std::vector<InstructionOrigin> *> origins;
  size_t callIndex = 0, pc = 0;
  double now = 0, trackFree = 0;
  std::map<int64_t, size_t> requests;    ///< Of the current call.
  std::map<std::string, int64_t> counts; ///< Sends/receives/collectives.
  RankTimeline timeline;
  bool done() const { return callIndex == functions.size(); }
};

/// Replays one step of some ranks on the instruction prices: each rank's
/// compute track in program order, its communication on a track of its own,
/// operations with sides on other replayed ranks matched across them.
class StepReplay {
public:
  StepReplay(const program::Program &program, llvm::ArrayRef<int64_t> ranks,
             const InstructionPricer &pricer)
      : program(program), ranks(ranks), pricer(pricer), mesh(pricer.getMesh()),
        calls(stepCalls(program)), replayed(ranks.begin(), ranks.end()),
        // The cache holds kernels only; every call pays the overhead.
        overheadS(pricer.getOverhead()) {}

  /// Finds, expands and prices each replayed rank's functions.
  llvm::Error load();
  /// Replays the step; with `match`, operations meet their sides on other
  /// replayed ranks. False when a wait never finds its start.
  bool replay(bool match);
  /// The replayed timelines.
  PredictedStep result(bool matched);

private:
  /// Rank `rank`'s functions of the step, priced.
  llvm::Error loadRank(RankState &state, int64_t rank);
  /// The prices of `fn`'s instructions, computed once per function.
  llvm::Expected<const std::vector<InstructionCost> *>
  pricesOf(const program::Function &fn);
  /// Runs `s`'s compute track until it waits on an operation that has not
  /// started yet; returns whether it ran anything.
  bool advance(size_t index, RankState &s);
  /// The timeline event of `s`'s current instruction, not yet timed.
  TimelineEvent eventAt(const RankState &s,
                        const program::Instruction &inst) const;
  /// Posts the operation `inst` starts at `s`'s current time.
  void post(size_t index, RankState &s, const program::Instruction &inst,
            const InstructionCost &cost, const TimelineEvent &event);
  /// The key under which the sides of one operation meet, and how many.
  std::pair<std::string, size_t> keyOf(RankState &s,
                                       const program::Instruction &inst);
  std::pair<std::string, size_t> transferKey(RankState &s,
                                             const program::Instruction &inst,
                                             llvm::StringRef op);
  void schedule(size_t id);

  const program::Program &program;
  llvm::ArrayRef<int64_t> ranks;
  const InstructionPricer &pricer;
  const runtime::Mesh &mesh;
  std::vector<FunctionCall> calls;
  std::vector<RankState> states;
  std::set<int64_t> replayed;
  double overheadS;
  // Prices are per function, shared by every call and rank that runs it.
  std::map<const program::Function *, std::vector<InstructionCost>> priced;
  // Pipeline steps written out for replay, per rank (stable addresses).
  std::deque<ExpandedStep> expanded;
  // Of the current replay.
  bool match = true;
  std::vector<CommOp> ops;
  std::map<std::string, std::vector<size_t>> rendezvous;
};

} // namespace

llvm::Expected<const std::vector<InstructionCost> *>
StepReplay::pricesOf(const program::Function &fn) {
  auto it = priced.find(&fn);
  if (it != priced.end())
    return &it->second;
  ValueTable values(fn);
  std::vector<InstructionCost> costs;
  for (const program::Instruction &inst : fn.instructions()) {
    auto cost = priceWith(pricer.getCluster(), mesh, 0, values, fn, inst);
    if (!cost)
      return cost.takeError();
    costs.push_back(*cost);
  }
  return &priced.emplace(&fn, std::move(costs)).first->second;
}

llvm::Error StepReplay::loadRank(RankState &state, int64_t rank) {
  const int64_t microBatches =
      program.mode() == "infer"
          ? 1
          : std::max<int64_t>(1, program.training().micro_batches_per_call());
  state.rank = rank;
  state.timeline.rank = rank;
  state.program = runtime::rankProgramOf(program, static_cast<int>(rank));
  if (!state.program)
    return badInput("program.pb holds no program for rank {0}", rank);
  for (const FunctionCall &call : calls) {
    const program::Function *fn = nullptr;
    for (const program::Function &f : state.program->functions())
      if (f.name() == call.function)
        fn = &f;
    if (!fn)
      return badInput("program.pb: rank {0} has no function '{1}'", rank,
                      call.function);
    const std::vector<InstructionOrigin> *origins = nullptr;
    if (fn->has_pipeline()) {
      auto step = expandPipelineStep(*state.program, *fn, microBatches);
      if (!step)
        return step.takeError();
      expanded.push_back(std::move(*step));
      fn = &expanded.back().function;
      origins = &expanded.back().origins;
    }
    auto costs = pricesOf(*fn);
    if (!costs)
      return costs.takeError();
    state.functions.push_back(fn);
    state.costs.push_back(**costs);
    state.origins.push_back(origins);
  }
  return llvm::Error::success();
}

llvm::Error StepReplay::load() {
  states.resize(ranks.size());
  for (auto [i, rank] : llvm::enumerate(ranks))
    if (llvm::Error e = loadRank(states[i], rank))
      return e;
  return llvm::Error::success();
}

std::pair<std::string, size_t>
StepReplay::transferKey(RankState &s, const program::Instruction &inst,
                        llvm::StringRef op) {
  std::vector<std::string> axes = meshAxes(inst);
  if (axes.size() != 1)
    return {"", 1};
  std::optional<int> peer =
      mesh.peer(static_cast<int>(s.rank), axes.front(), peerOffset(inst));
  if (!peer || !replayed.count(*peer))
    return {"", 1};
  bool send = op == "dtc.send_start";
  int64_t from = send ? s.rank : *peer, to = send ? *peer : s.rank;
  std::string base = llvm::formatv("p2p {0}->{1}", from, to).str();
  int64_t k = s.counts[base + (send ? " send" : " recv")]++;
  return {base + " #" + std::to_string(k), 2};
}

std::pair<std::string, size_t>
StepReplay::keyOf(RankState &s, const program::Instruction &inst) {
  if (!match)
    return {"", 1};
  llvm::StringRef op = inst.op();
  if (op == "dtc.send_start" || op == "dtc.recv_start")
    return transferKey(s, inst, op);
  std::vector<std::string> axes = meshAxes(inst);
  auto group = mesh.group(static_cast<int>(s.rank), axes);
  if (!group) {
    llvm::consumeError(group.takeError());
    return {"", 1};
  }
  std::vector<int64_t> members;
  for (int member : *group)
    if (replayed.count(member))
      members.push_back(member);
  if (members.size() <= 1)
    return {"", 1};
  std::string base = llvm::join(axes, ",") + " over";
  for (int64_t member : members)
    base += " " + std::to_string(member);
  int64_t k = s.counts[base]++;
  return {base + " #" + std::to_string(k), members.size()};
}

// An operation of this rank alone runs on its communication track in post
// order; one with sides on other replayed ranks (a transfer between stages,
// a collective across them) starts once every side posted it, on links of
// its own, so receives posted ahead never hold up the track.
void StepReplay::schedule(size_t id) {
  CommOp &op = ops[id];
  auto start = [&](CommOp &side, double at) {
    side.started = true;
    side.end = at + side.duration;
    TimelineEvent &e = states[side.rank].timeline.events[side.event];
    e.start = at;
    e.end = side.end;
  };
  if (op.key.empty()) {
    RankState &owner = states[op.rank];
    start(op, std::max(op.post, owner.trackFree));
    owner.trackFree = op.end;
    return;
  }
  std::vector<size_t> &sides = rendezvous[op.key];
  sides.push_back(id);
  if (sides.size() < op.sides)
    return;
  double at = 0;
  for (size_t side : sides)
    at = std::max(at, ops[side].post);
  for (size_t side : sides)
    start(ops[side], at);
  rendezvous.erase(op.key);
}

TimelineEvent StepReplay::eventAt(const RankState &s,
                                  const program::Instruction &inst) const {
  TimelineEvent event;
  event.function = s.functions[s.callIndex]->name();
  event.index = static_cast<int64_t>(s.pc);
  event.call = calls[s.callIndex].call;
  if (const auto *origins = s.origins[s.callIndex]) {
    // A pipeline pass's instruction is its chunk function's; a transfer
    // the schedule adds has no instruction (index -1).
    const InstructionOrigin &from = (*origins)[s.pc];
    event.index = -1;
    if (from.function) {
      event.function = from.function->name();
      event.index = from.index;
      event.call = from.call;
    }
  }
  event.op = inst.op();
  event.loc = inst.loc();
  return event;
}

void StepReplay::post(size_t index, RankState &s,
                      const program::Instruction &inst,
                      const InstructionCost &cost, const TimelineEvent &event) {
  CommOp posted;
  posted.rank = index;
  posted.post = s.now;
  posted.duration = cost.communication;
  std::tie(posted.key, posted.sides) = keyOf(s, inst);
  TimelineEvent comm = event;
  comm.track = 1;
  posted.event = s.timeline.events.size();
  s.timeline.events.push_back(comm);
  size_t id = ops.size();
  if (std::optional<int64_t> request = requestOf(inst))
    s.requests[*request] = id;
  ops.push_back(std::move(posted));
  schedule(id);
}

bool StepReplay::advance(size_t index, RankState &s) {
  bool progress = false;
  while (!s.done()) {
    const program::Function &fn = *s.functions[s.callIndex];
    if (s.pc == static_cast<size_t>(fn.instructions_size())) {
      ++s.callIndex;
      s.pc = 0;
      s.requests.clear();
      progress = true;
      continue;
    }
    const program::Instruction &inst = fn.instructions(s.pc);
    const InstructionCost &cost = s.costs[s.callIndex][s.pc];
    TimelineEvent event = eventAt(s, inst);
    event.start = s.now;
    double compute = cost.compute + overheadS;
    if (inst.op() == "dtc.wait") {
      std::optional<int64_t> request = requestOf(inst);
      auto it = request ? s.requests.find(*request) : s.requests.end();
      if (it != s.requests.end()) {
        const CommOp &posted = ops[it->second];
        if (!posted.started)
          break; // blocked until it is scheduled
        s.now = std::max(s.now, posted.end);
      }
    }
    s.now += compute;
    event.end = s.now;
    s.timeline.events.push_back(event);
    if (isCommStart(inst.op()))
      post(index, s, inst, cost, event);
    ++s.pc;
    progress = true;
  }
  return progress;
}

bool StepReplay::replay(bool matchSides) {
  match = matchSides;
  ops.clear();
  rendezvous.clear();
  for (RankState &s : states) {
    s.callIndex = s.pc = 0;
    s.now = s.trackFree = 0;
    s.requests.clear();
    s.counts.clear();
    s.timeline.events.clear();
    s.timeline.end = 0;
  }
  while (true) {
    bool progress = false;
    for (auto [index, s] : llvm::enumerate(states))
      progress = advance(index, s) || progress;
    if (llvm::all_of(states, [](const RankState &s) { return s.done(); }))
      break;
    if (!progress)
      return false;
  }
  // Operations never waited on still end the step.
  if (!rendezvous.empty())
    return false; // a side never posted its part
  for (RankState &s : states) {
    s.timeline.end = s.now;
    for (const TimelineEvent &e : s.timeline.events)
      s.timeline.end = std::max(s.timeline.end, e.end);
  }
  return true;
}

PredictedStep StepReplay::result(bool matched) {
  PredictedStep step;
  step.matched = matched;
  for (RankState &s : states) {
    step.stepTimeS = std::max(step.stepTimeS, s.timeline.end);
    step.ranks.push_back(std::move(s.timeline));
  }
  return step;
}

llvm::Expected<PredictedStep>
dtc::predictStep(const program::Program &program, llvm::ArrayRef<int64_t> ranks,
                 const InstructionPricer &pricer) {
  StepReplay replay(program, ranks, pricer);
  if (llvm::Error e = replay.load())
    return std::move(e);
  if (replay.replay(/*match=*/true))
    return replay.result(/*matched=*/true);
  if (!replay.replay(/*match=*/false))
    return failure(
        "the step of ranks {0} could not be replayed: a wait never finds its "
        "start",
        llvm::join(
            llvm::map_range(ranks, [](int64_t r) { return std::to_string(r); }),
            ","));
  return replay.result(/*matched=*/false);
}
