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
#include "compiler/support/Error.h"

#include "runtime/core/Shard.h"
#include "runtime/core/Tensor.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>
#include <optional>
#include <set>

using namespace dtc;

namespace {

double elementsOf(const program::TensorType &type) {
  double n = 1;
  for (int64_t dim : type.shape())
    n *= static_cast<double>(dim);
  return n;
}

double bytesOf(const program::TensorType &type) {
  return elementsOf(type) *
         static_cast<double>(runtime::dtypeSize(type.dtype()));
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

int64_t dim(const program::TensorType &type, int index) {
  int rank = type.shape_size();
  if (index < 0)
    index += rank;
  return index >= 0 && index < rank ? type.shape(index) : 1;
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

/// Seconds of the three GEMMs of a convolution: forward, input and weight
/// gradient, from the input x, weight w and output y shapes.
struct ConvGemm {
  double m = 0, n = 0, k = 0, groups = 1;
};
ConvGemm convGemm(const program::TensorType &x, const program::TensorType &w,
                  const program::TensorType &y) {
  ConvGemm g;
  double spatial = 1, taps = 1;
  for (int i = 2; i < y.shape_size(); ++i)
    spatial *= static_cast<double>(y.shape(i));
  for (int i = 2; i < w.shape_size(); ++i)
    taps *= static_cast<double>(w.shape(i));
  double inPerGroup = static_cast<double>(std::max<int64_t>(dim(w, 1), 1));
  g.groups = std::max(1.0, static_cast<double>(dim(x, 1)) / inPerGroup);
  g.m = static_cast<double>(dim(y, 0)) * spatial;
  g.n = static_cast<double>(dim(w, 0)) / g.groups;
  g.k = inPerGroup * taps;
  return g;
}

/// Which collective a `dtc.X_start` runs, and the bytes Collectives.h
/// prices it on (see there): the gathered output of an all-gather, the
/// input of the others, the message of a send or receive.
struct CommKind {
  Collective kind;
  bool p2p = false;
  bool outputBytes = false;
};
std::optional<CommKind> commKind(llvm::StringRef op) {
  return llvm::StringSwitch<std::optional<CommKind>>(op)
      .Case("dtc.all_reduce_start", CommKind{Collective::AllReduce})
      .Case("dtc.all_gather_start",
            CommKind{Collective::AllGather, false, true})
      .Case("dtc.reduce_scatter_start", CommKind{Collective::ReduceScatter})
      .Case("dtc.all_to_all_start", CommKind{Collective::AllToAll})
      .Case("dtc.send_start", CommKind{Collective::SendRecv, true, false})
      .Case("dtc.recv_start", CommKind{Collective::SendRecv, true, true})
      .Default(std::nullopt);
}

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
  if (std::optional<CommKind> comm = commKind(op)) {
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
    if (comm->p2p) {
      int64_t offset = std::abs(peerOffset(inst));
      group = placeGroup(2, stride * std::max<int64_t>(offset, 1),
                         cluster.gpusPerNode);
    } else {
      group = placeGroup(size, stride, cluster.gpusPerNode);
    }
    double bytes = comm->outputBytes ? bytesOf(out(0)) : bytesOf(in(0));
    cost.communication = collectiveTime(comm->kind, bytes, group, cluster);
    return cost;
  }

  double seconds = 0;
  if (op == "dtc.matmul") {
    const program::TensorType &lhs = in(0), &rhs = in(1), &result = out(0);
    double m = static_cast<double>(dim(lhs, -2)),
           k = static_cast<double>(dim(lhs, -1));
    if (flag(inst, "transpose_lhs"))
      std::swap(m, k);
    double n = static_cast<double>(flag(inst, "transpose_rhs") ? dim(rhs, -2)
                                                               : dim(rhs, -1));
    double batch = m * n > 0 ? elementsOf(result) / (m * n) : 0;
    seconds = gemmTime(m, n, k, batch, modelType(result.dtype()), cluster);
  } else if (op == "dtc.attention" || op == "dtc.attention_grad") {
    // q [b, heads, s, d], k [b, groups, t, d].
    const program::TensorType &q = in(0), &key = in(1);
    double b = static_cast<double>(dim(q, 0)),
           heads = static_cast<double>(dim(q, 1)),
           s = static_cast<double>(dim(q, 2)),
           d = static_cast<double>(dim(q, 3)),
           t = static_cast<double>(dim(key, 2));
    double flops =
        4 * b * heads * s * t * d * (flag(inst, "causal") ? 0.5 : 1.0);
    double rate = cluster.peakFlops(modelType(q.dtype())) *
                  fusedAttentionEfficiency(s, t, d, cluster);
    seconds = rate > 0 ? flops / rate : 0;
    if (op == "dtc.attention_grad")
      seconds *= cluster.attentionBackwardRatio;
  } else if (op == "dtc.conv" || op == "dtc.conv_grad_input" ||
             op == "dtc.conv_grad_weight") {
    bool forward = op == "dtc.conv", inputGrad = op == "dtc.conv_grad_input";
    // The kernels' operands: conv(x, w) -> y; grad_input(dy, w) -> dx;
    // grad_weight(x, dy) -> dw.
    const program::TensorType &x = forward ? in(0) : inputGrad ? out(0) : in(0);
    const program::TensorType &w = forward ? in(1) : inputGrad ? in(1) : out(0);
    const program::TensorType &y = forward ? out(0) : inputGrad ? in(0) : in(1);
    ConvGemm g = convGemm(x, w, y);
    DType type = modelType(y.dtype());
    seconds = forward     ? gemmTime(g.m, g.n, g.k, g.groups, type, cluster)
              : inputGrad ? gemmTime(g.m, g.k, g.n, g.groups, type, cluster)
                          : gemmTime(g.k, g.n, g.m, g.groups, type, cluster);
  } else if (op == "dtc.embedding" || op == "dtc.slice" ||
             op == "dtc.shard_slice") {
    // They read only the rows or the part they return, not the whole
    // table or tensor: the result's bytes in and out, plus the indices.
    double bytes = 2 * bytesOf(out(0));
    if (op == "dtc.embedding")
      bytes += bytesOf(in(1));
    seconds = streamTime(bytes, cluster);
  } else {
    double bytes = 0;
    for (int i = 0; i < inst.inputs_size(); ++i)
      bytes += bytesOf(in(i));
    for (int i = 0; i < inst.outputs_size(); ++i)
      bytes += bytesOf(out(i));
    seconds = streamTime(bytes, cluster);
  }
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
  size_t callIndex = 0, pc = 0;
  double now = 0, trackFree = 0;
  std::map<int64_t, size_t> requests;    ///< Of the current call.
  std::map<std::string, int64_t> counts; ///< Sends/receives/collectives.
  RankTimeline timeline;
  bool done() const { return callIndex == functions.size(); }
};

} // namespace

llvm::Expected<PredictedStep>
dtc::predictStep(const program::Program &program, llvm::ArrayRef<int64_t> ranks,
                 const InstructionPricer &pricer) {
  const runtime::Mesh &mesh = pricer.getMesh();
  std::vector<FunctionCall> calls = stepCalls(program);
  std::vector<RankState> states(ranks.size());
  std::set<int64_t> replayed(ranks.begin(), ranks.end());
  // Prices are per function, shared by every call and rank that runs it.
  std::map<const program::Function *, std::vector<InstructionCost>> priced;
  for (auto [i, rank] : llvm::enumerate(ranks)) {
    RankState &state = states[i];
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
      auto it = priced.find(fn);
      if (it == priced.end()) {
        ValueTable values(*fn);
        std::vector<InstructionCost> costs;
        for (const program::Instruction &inst : fn->instructions()) {
          auto cost =
              priceWith(pricer.getCluster(), mesh, 0, values, *fn, inst);
          if (!cost)
            return cost.takeError();
          costs.push_back(*cost);
        }
        it = priced.emplace(fn, std::move(costs)).first;
      }
      state.functions.push_back(fn);
      state.costs.push_back(it->second);
    }
  }
  // The cache holds kernels only; every call pays the overhead.
  double overheadS = pricer.getOverhead();

  auto replay = [&](bool match) -> bool {
    std::vector<CommOp> ops;
    std::map<std::string, std::vector<size_t>> rendezvous;
    for (RankState &s : states) {
      s.callIndex = s.pc = 0;
      s.now = s.trackFree = 0;
      s.requests.clear();
      s.counts.clear();
      s.timeline.events.clear();
      s.timeline.end = 0;
    }
    // The key under which the sides of one operation meet, and how many.
    auto keyOf = [&](RankState &s, const program::Instruction &inst)
        -> std::pair<std::string, size_t> {
      if (!match)
        return {"", 1};
      std::vector<std::string> axes = meshAxes(inst);
      llvm::StringRef op = inst.op();
      if (op == "dtc.send_start" || op == "dtc.recv_start") {
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
    };

    // An operation of this rank alone runs on its communication track in
    // post order; one with sides on other replayed ranks (a transfer
    // between stages, a collective across them) starts once every side
    // posted it, on links of its own, so receives posted ahead never hold
    // up the track.
    auto schedule = [&](size_t id) {
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
    };

    while (true) {
      bool progress = false;
      // Each compute track runs until it waits on an operation that has
      // not started yet (a side on another rank has not posted it).
      for (auto [index, s] : llvm::enumerate(states)) {
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
          TimelineEvent event;
          event.function = fn.name();
          event.index = static_cast<int64_t>(s.pc);
          event.call = calls[s.callIndex].call;
          event.op = inst.op();
          event.loc = inst.loc();
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
          if (commKind(inst.op())) {
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
          ++s.pc;
          progress = true;
        }
      }
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
  };

  PredictedStep step;
  if (!replay(true)) {
    step.matched = false;
    if (!replay(false))
      return failure(
          "the step of ranks {0} could not be replayed: a wait "
          "never finds its start",
          llvm::join(llvm::map_range(
                         ranks, [](int64_t r) { return std::to_string(r); }),
                     ","));
  }
  for (RankState &s : states) {
    step.stepTimeS = std::max(step.stepTimeS, s.timeline.end);
    step.ranks.push_back(std::move(s.timeline));
  }
  return step;
}
