//===- Planner.cpp - Search for the fastest parallel plan -----------------===//
//
// The search walks every valid plan and prices it with predict(). Three
// things keep it fast without ever dropping an optimum (PlannerTest checks
// each against an enumeration that prices everything in every mesh order):
//
//  - Mesh orders that place every communication group alike are priced once:
//    predict() sees the mesh order only through the placement of the tp, cp,
//    dp, ep and pp groups.
//  - A plan is first priced on a copy of the cluster whose links are free.
//    Communication only ever adds time, so that is a lower bound for every
//    mesh order, and memory does not depend on links or order at all: a plan
//    that does not fit, or whose bound cannot beat anything still needed (the
//    K+1 fastest plans, and for the explanation the fastest plan with each
//    value of each dimension), is not priced in its mesh orders.
//  - Memory never shrinks as the micro-batch grows (activations, logits and
//    buffers scale with it; fewer micro-batches in flight never outweigh
//    that), so the micro-batch loop stops at the first one that does not fit.
//
//===----------------------------------------------------------------------===//

#include "compiler/planner/Planner.h"

#include "compiler/costmodel/Collectives.h"
#include "compiler/costmodel/Memory.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <set>

using namespace dtc;

static constexpr double kInf = std::numeric_limits<double>::infinity();

llvm::StringRef dtc::planDimName(PlanDim dim) {
  switch (dim) {
  case PlanDim::DP:
    return "dp";
  case PlanDim::TP:
    return "tp";
  case PlanDim::PP:
    return "pp";
  case PlanDim::CP:
    return "cp";
  case PlanDim::EP:
    return "ep";
  case PlanDim::VPP:
    return "vpp";
  case PlanDim::Zero:
    return "zero";
  case PlanDim::MicroBatch:
    return "micro_batch";
  case PlanDim::Recompute:
    return "recompute";
  case PlanDim::SP:
    return "sequence_parallel";
  case PlanDim::Schedule:
    return "schedule";
  }
  return "?";
}

int64_t dtc::planDimValue(const ParallelPlan &plan, PlanDim dim) {
  switch (dim) {
  case PlanDim::DP:
    return plan.dp;
  case PlanDim::TP:
    return plan.tp;
  case PlanDim::PP:
    return plan.pp;
  case PlanDim::CP:
    return plan.cp;
  case PlanDim::EP:
    return plan.ep;
  case PlanDim::VPP:
    return plan.vpp;
  case PlanDim::Zero:
    return plan.zero;
  case PlanDim::MicroBatch:
    return plan.microBatch;
  case PlanDim::Recompute:
    return static_cast<int64_t>(plan.recompute);
  case PlanDim::SP:
    return plan.sequenceParallel ? 1 : 0;
  case PlanDim::Schedule:
    return static_cast<int64_t>(plan.schedule);
  }
  return 0;
}

std::string dtc::planDimSetting(PlanDim dim, int64_t value) {
  std::string text = planDimName(dim).str() + "=";
  if (dim == PlanDim::Recompute)
    return text + recomputeName(static_cast<Recompute>(value)).str();
  if (dim == PlanDim::SP)
    return text + (value ? "on" : "off");
  if (dim == PlanDim::Schedule)
    return text + scheduleName(static_cast<Schedule>(value)).str();
  return text + std::to_string(value);
}

static int64_t powerOfTwoPart(int64_t n) { return n & -n; }

/// Tokens per optimizer step that published runs use at this model size:
/// GPT-3 (Brown et al., Table 2.1) 0.5M up to 760M parameters, 1M at
/// 1.3-2.7B, 2M at 6.7-13B, 3.2M at 175B; LLaMA 4M from 7B up. Powers of two
/// between those.
static int64_t defaultTokensPerStep(const TransformerSpec &spec) {
  double params = totalParamCount(spec);
  int log2Tokens = params < 1e9    ? 19
                   : params < 5e9  ? 20
                   : params < 30e9 ? 21
                                   : 22;
  return int64_t(1) << log2Tokens;
}

int64_t dtc::defaultGlobalBatch(const TransformerSpec &spec, int64_t gpus,
                                const PlanPins &pins) {
  int64_t tokens = defaultTokensPerStep(spec);
  int64_t base =
      spec.seqLen > 0
          ? std::max<int64_t>(1, (tokens + spec.seqLen / 2) / spec.seqLen)
          : 1;
  gpus = std::max<int64_t>(gpus, 1);
  int64_t twos = powerOfTwoPart(gpus);
  int64_t unit = gpus / twos * std::min(twos, powerOfTwoPart(base));
  // Pinned dp and micro-batch must divide it too.
  unit = std::lcm(unit, pins.dp.value_or(1) * pins.microBatch.value_or(1));
  unit = std::lcm(unit, pins.dataRows.value_or(1));
  int64_t rounded = (base + unit / 2) / unit * unit;
  return std::max(unit, rounded);
}

namespace {

struct Degrees {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
};

llvm::SmallVector<int64_t, 32> divisors(int64_t n) {
  llvm::SmallVector<int64_t, 32> small, large;
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) {
      small.push_back(d);
      if (d != n / d)
        large.push_back(n / d);
    }
  small.append(large.rbegin(), large.rend());
  return small;
}

/// All 24 orders, Megatron's (tp, cp, dp, pp innermost first) first so that
/// it wins ties.
const std::vector<MeshOrder> &allMeshOrders() {
  static const std::vector<MeshOrder> orders = [] {
    std::vector<MeshOrder> result;
    MeshOrder order = {MeshAxis::TP, MeshAxis::CP, MeshAxis::DP, MeshAxis::PP};
    std::array<int, 4> index = {0, 1, 2, 3};
    do {
      result.push_back(
          {order[index[0]], order[index[1]], order[index[2]], order[index[3]]});
    } while (std::next_permutation(index.begin(), index.end()));
    return result;
  }();
  return orders;
}

/// Everything predict() derives from the mesh order (CostModel.cpp's
/// Context and the tied-embedding group).
std::array<int64_t, 6> placementSignature(const ParallelPlan &plan,
                                          int64_t gpn) {
  auto members = [&](int64_t size, int64_t stride) {
    return placeGroup(size, stride, gpn).perDomain;
  };
  int64_t ppStride = plan.stride(MeshAxis::PP);
  return {members(plan.tp, plan.stride(MeshAxis::TP)),
          members(plan.cp, plan.stride(MeshAxis::CP)),
          members(plan.dp, plan.stride(MeshAxis::DP)),
          members(plan.ep, plan.stride(MeshAxis::DP)),
          members(2, ppStride),
          members(2, ppStride * std::max<int64_t>(plan.pp - 1, 1))};
}

/// Whether every communication group lies evenly on the NVLink domains:
/// the ranks spanned by each run of inner axes (and by the expert group)
/// fill whole domains or divide one. A tp group of 6 on 8-GPU nodes
/// straddles two nodes for some ranks, which the cost model's placement
/// (members per domain, the same for every group) cannot price, so such
/// orders are not offered. The outermost span is the whole cluster and may
/// end in a partial domain.
bool alignedToDomains(const ParallelPlan &plan, int64_t gpn) {
  auto even = [&](int64_t span) {
    return span >= plan.gpus() || gpn % span == 0 || span % gpn == 0;
  };
  int64_t span = 1;
  for (MeshAxis axis : plan.meshOrder) {
    span *= plan.degree(axis);
    if (!even(span))
      return false;
  }
  return even(plan.stride(MeshAxis::DP) * plan.ep);
}

/// The best plan (and the leanest one that does not fit) with one value of
/// one dimension.
struct Slot {
  int64_t value = 0;
  bool feasible = false;
  PlanChoice best;
  bool haveLeanest = false;
  ParallelPlan leanest;
  double leanestBytes = kInf;
};

class Searcher {
public:
  Searcher(const PlanRequest &request, const SearchOptions &options,
           int64_t globalBatch)
      : request(request), spec(request.spec), pins(request.pins),
        options(options), globalBatch(globalBatch) {
    cluster = request.cluster;
    cluster.gpus = request.gpus;
    // Free links: a lower bound on the step time in any mesh order.
    freeLinks = cluster;
    freeLinks.intraNodeGBps = freeLinks.interNodeGBps = 1e30;
    freeLinks.intraNodeLatencyUs = freeLinks.interNodeLatencyUs = 0;
    freeLinks.intraNodeEfficiency = freeLinks.interNodeEfficiency = 1;
    keep = static_cast<size_t>(std::max(options.explainK, 0)) + 1;
    explain = options.explainK > 0;
  }

  /// Every valid degree combination under the pins.
  std::vector<Degrees> degreeTuples() const;
  /// Prices every plan of `d` that might matter.
  void visit(const Degrees &d);
  /// The first plan that fits, trying each degree combination's leanest
  /// settings only; nullopt if none does.
  std::optional<PlanChoice> findFit();

  const PlanRequest &request;
  const TransformerSpec &spec;
  const PlanPins &pins;
  SearchOptions options;
  int64_t globalBatch;
  Cluster cluster, freeLinks;
  size_t keep;
  bool explain;

  std::vector<PlanChoice> top; ///< Fastest first, at most `keep`.
  std::array<llvm::SmallVector<Slot, 8>, kNumPlanDims> slots;
  bool haveLeanest = false;
  ParallelPlan leanest; ///< Least memory of all plans seen.
  double leanestBytes = kInf;
  int64_t evaluated = 0, considered = 0, valid = 0;

private:
  bool tpValid(int64_t tp) const;
  llvm::SmallVector<int64_t, 16> vppValues(int64_t pp) const;
  /// The schedules a pipeline of `pp` stages with `vpp` chunks each can
  /// run, or the pinned one: interleaved with vpp > 1; 1F1B, and ZB-H1
  /// (the backward split in two) with vpp = 1 and pp > 1. GPipe (1F1B's
  /// time at more memory) only when pinned.
  llvm::SmallVector<Schedule, 2> schedules(int64_t pp, int64_t vpp) const;
  std::vector<MeshOrder> meshOrders(const ParallelPlan &plan) const;
  ParallelPlan basePlan(const Degrees &d) const;
  /// Prices `plan` in `orders`; false if it does not fit.
  bool evaluate(ParallelPlan &plan, llvm::ArrayRef<MeshOrder> orders);
  double threshold(const ParallelPlan &plan);
  Slot &slot(PlanDim dim, int64_t value);
  void recordFit(const ParallelPlan &plan, const Prediction &prediction);
  void recordMiss(const ParallelPlan &plan, const Prediction &prediction);
  std::optional<Prediction> price(const ParallelPlan &plan, const Cluster &on) {
    ++evaluated;
    auto p = predict(spec, plan, on);
    if (!p) {
      // Enumeration only builds valid plans; never reached.
      llvm::consumeError(p.takeError());
      return std::nullopt;
    }
    return std::move(*p);
  }
};
} // namespace

/// A priced plan that names the TP blocks the cost model chose (the
/// program splits its collectives the same way).
static PlanChoice choiceOf(const ParallelPlan &plan,
                           const Prediction &prediction) {
  PlanChoice choice{plan, prediction};
  choice.plan.tpCommChunks = prediction.tpCommChunks;
  return choice;
}

bool Searcher::tpValid(int64_t tp) const {
  int64_t kv = spec.kvHeadCount();
  return spec.heads % tp == 0 && spec.ffn() % tp == 0 &&
         (kv % tp == 0 || tp % kv == 0);
}

std::vector<Degrees> Searcher::degreeTuples() const {
  std::vector<Degrees> result;
  int64_t n = request.gpus;
  for (int64_t tp : divisors(n)) {
    if ((pins.tp && tp != *pins.tp) || !tpValid(tp))
      continue;
    for (int64_t cp : divisors(n / tp)) {
      if ((pins.cp && cp != *pins.cp) || spec.seqLen % contextPieces(cp))
        continue;
      for (int64_t pp : divisors(n / tp / cp)) {
        if ((pins.pp && pp != *pins.pp) || pp > spec.layers)
          continue;
        int64_t dp = n / tp / cp / pp;
        if ((pins.dp && dp != *pins.dp) || globalBatch % dp)
          continue;
        for (int64_t ep : divisors(spec.experts)) {
          if ((pins.ep && ep != *pins.ep) ||
              (request.expertsWithinData ? dp : dp * cp) % ep)
            continue;
          result.push_back({dp, tp, pp, cp, ep});
        }
      }
    }
  }
  return result;
}

llvm::SmallVector<Schedule, 2> Searcher::schedules(int64_t pp,
                                                   int64_t vpp) const {
  if (vpp > 1)
    return {Schedule::Interleaved};
  if (pins.schedule && pp > 1)
    return {*pins.schedule};
  if (pp > 1)
    return {Schedule::OneFOneB, Schedule::ZeroBubbleH1};
  return {Schedule::OneFOneB};
}

llvm::SmallVector<int64_t, 16> Searcher::vppValues(int64_t pp) const {
  llvm::SmallVector<int64_t, 16> result;
  // The search interleaves equal chunks only (the cost model also prices
  // uneven ones, for published runs); one chunk per stage may be uneven
  // (the cost model gives the extra layers to the first stages).
  for (int64_t v : divisors(spec.layers / pp))
    if ((v == 1 || (pp > 1 && spec.layers % (pp * v) == 0)) &&
        (!pins.vpp || v == *pins.vpp) &&
        (!pins.schedule ||
         (*pins.schedule == Schedule::Interleaved) == (v > 1)))
      result.push_back(v);
  return result;
}

std::vector<MeshOrder> Searcher::meshOrders(const ParallelPlan &plan) const {
  // A pinned order is priced as it is, aligned to the NVLink domains or not.
  if (pins.meshOrder)
    return {*pins.meshOrder};
  std::vector<MeshOrder> result;
  llvm::SmallVector<std::array<int64_t, 6>, 24> seen;
  ParallelPlan probe = plan;
  for (const MeshOrder &order : allMeshOrders()) {
    probe.meshOrder = order;
    if (!alignedToDomains(probe, cluster.gpusPerNode))
      continue;
    if (!options.prune) {
      result.push_back(order);
      continue;
    }
    auto signature = placementSignature(probe, cluster.gpusPerNode);
    if (llvm::is_contained(seen, signature))
      continue;
    seen.push_back(signature);
    result.push_back(order);
  }
  return result;
}

ParallelPlan Searcher::basePlan(const Degrees &d) const {
  ParallelPlan plan;
  plan.fusedAttention = request.execution.fusedAttention;
  plan.overlapGradReduce = request.execution.overlapGradReduce;
  plan.overlapTpComm = request.execution.overlapTpComm;
  plan.overlapParamGather = request.execution.overlapParamGather;
  plan.tpCommChunks = request.execution.tpCommChunks;
  plan.dp = d.dp;
  plan.tp = d.tp;
  plan.pp = d.pp;
  plan.cp = d.cp;
  plan.ep = d.ep;
  plan.globalBatch = globalBatch;
  return plan;
}

Slot &Searcher::slot(PlanDim dim, int64_t value) {
  auto &list = slots[static_cast<int>(dim)];
  for (Slot &s : list)
    if (s.value == value)
      return s;
  list.emplace_back();
  list.back().value = value;
  return list.back();
}

double Searcher::threshold(const ParallelPlan &plan) {
  double limit = top.size() < keep ? kInf : top.back().prediction.stepTimeS;
  if (!explain)
    return limit;
  for (int i = 0; i < kNumPlanDims && limit < kInf; ++i) {
    PlanDim dim = static_cast<PlanDim>(i);
    Slot &s = slot(dim, planDimValue(plan, dim));
    limit = std::max(limit, s.feasible ? s.best.prediction.stepTimeS : kInf);
  }
  return limit;
}

void Searcher::recordFit(const ParallelPlan &plan,
                         const Prediction &prediction) {
  double time = prediction.stepTimeS;
  if (top.size() < keep || time < top.back().prediction.stepTimeS) {
    auto at = llvm::upper_bound(top, time, [](double t, const PlanChoice &c) {
      return t < c.prediction.stepTimeS;
    });
    top.insert(at, choiceOf(plan, prediction));
    if (top.size() > keep)
      top.pop_back();
  }
  if (!explain)
    return;
  for (int i = 0; i < kNumPlanDims; ++i) {
    PlanDim dim = static_cast<PlanDim>(i);
    Slot &s = slot(dim, planDimValue(plan, dim));
    if (!s.feasible || time < s.best.prediction.stepTimeS) {
      s.feasible = true;
      s.best = choiceOf(plan, prediction);
    }
  }
}

void Searcher::recordMiss(const ParallelPlan &plan,
                          const Prediction &prediction) {
  double bytes = prediction.memoryPerGpuBytes;
  if (bytes < leanestBytes) {
    haveLeanest = true;
    leanest = plan;
    leanestBytes = bytes;
  }
  if (!explain)
    return;
  for (int i = 0; i < kNumPlanDims; ++i) {
    PlanDim dim = static_cast<PlanDim>(i);
    Slot &s = slot(dim, planDimValue(plan, dim));
    if (bytes < s.leanestBytes) {
      s.haveLeanest = true;
      s.leanest = plan;
      s.leanestBytes = bytes;
    }
  }
}

bool Searcher::evaluate(ParallelPlan &plan, llvm::ArrayRef<MeshOrder> orders) {
  ++valid;
  considered += static_cast<int64_t>(orders.size());
  if (options.prune && orders.size() > 1) {
    std::optional<Prediction> bound = price(plan, freeLinks);
    if (!bound)
      return true;
    if (!bound->fits) {
      recordMiss(plan, *bound);
      return false;
    }
    if (bound->stepTimeS >= threshold(plan))
      return true;
  }
  std::optional<Prediction> best;
  MeshOrder bestOrder = orders.front();
  for (const MeshOrder &order : orders) {
    plan.meshOrder = order;
    std::optional<Prediction> p = price(plan, cluster);
    if (!p)
      continue;
    if (!p->fits) {
      // Memory does not depend on the mesh order.
      recordMiss(plan, *p);
      return false;
    }
    if (!best || p->stepTimeS < best->stepTimeS) {
      best = std::move(p);
      bestOrder = order;
    }
  }
  if (best) {
    plan.meshOrder = bestOrder;
    recordFit(plan, *best);
  }
  return true;
}

void Searcher::visit(const Degrees &d) {
  ParallelPlan plan = basePlan(d);
  std::vector<MeshOrder> orders = meshOrders(plan);
  if (orders.empty())
    return;

  llvm::SmallVector<bool, 2> sps;
  if (pins.sequenceParallel)
    sps = {*pins.sequenceParallel};
  else if (d.tp == 1)
    sps = {false};
  else
    sps = {false, true};

  llvm::SmallVector<Recompute, 3> recomputes;
  if (pins.recompute)
    recomputes = {*pins.recompute};
  else if (request.execution.fusedAttention)
    // A fused kernel already recomputes the scores: selective == none.
    recomputes = {Recompute::None, Recompute::Full};
  else
    recomputes = {Recompute::None, Recompute::Selective, Recompute::Full};

  llvm::SmallVector<int, 4> zeros;
  if (pins.zero)
    zeros = {*pins.zero};
  else if (d.dp * d.cp == 1)
    zeros = {0}; // Nothing to shard over; higher stages only add work.
  else
    zeros = {0, 1, 2, 3};

  llvm::SmallVector<int64_t, 16> vpps = vppValues(d.pp);
  llvm::SmallVector<int64_t, 32> microBatches;
  for (int64_t b : divisors(globalBatch / d.dp))
    if (pins.allowsMicroBatch(d.dp, b))
      microBatches.push_back(b);

  for (bool sp : sps) {
    plan.sequenceParallel = sp;
    for (Recompute recompute : recomputes) {
      plan.recompute = recompute;
      for (int zero : zeros) {
        plan.zero = zero;
        for (int64_t v : vpps) {
          plan.vpp = v;
          for (Schedule schedule : schedules(d.pp, v)) {
            plan.schedule = schedule;
            for (int64_t b : microBatches) {
              plan.microBatch = b;
              if (v > 1 && plan.microBatches() % d.pp)
                continue;
              if (!evaluate(plan, orders) && options.prune)
                break; // Larger micro-batches need at least as much memory.
            }
          }
        }
      }
    }
  }
}

std::optional<PlanChoice> Searcher::findFit() {
  for (const Degrees &d : degreeTuples()) {
    ParallelPlan plan = basePlan(d);
    std::vector<MeshOrder> orders = meshOrders(plan);
    if (orders.empty())
      continue;
    plan.meshOrder = orders.front();
    plan.sequenceParallel = pins.sequenceParallel.value_or(d.tp > 1);
    plan.recompute = pins.recompute.value_or(Recompute::Full);
    llvm::SmallVector<int64_t, 16> vpps = vppValues(d.pp);
    if (vpps.empty())
      continue;
    plan.vpp = vpps.front();
    plan.schedule = schedules(d.pp, plan.vpp).front();
    // The smallest valid micro-batch needs the least memory.
    std::optional<int64_t> micro;
    for (int64_t b : divisors(globalBatch / d.dp)) {
      plan.microBatch = b;
      if (pins.allowsMicroBatch(d.dp, b) &&
          (plan.vpp == 1 || plan.microBatches() % d.pp == 0)) {
        micro = b;
        break;
      }
    }
    if (!micro)
      continue;
    plan.microBatch = *micro;
    for (int zero : {3, 2, 1, 0}) {
      if (pins.zero ? zero != *pins.zero : zero > 0 && d.dp * d.cp == 1)
        continue;
      plan.zero = zero;
      std::optional<Prediction> p = price(plan, cluster);
      if (!p)
        continue;
      if (p->fits)
        return choiceOf(plan, *p);
      recordMiss(plan, *p);
    }
  }
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Requests that cannot be planned
//===----------------------------------------------------------------------===//

static std::string pinFlags(const PlanPins &pins) {
  llvm::SmallVector<std::string> flags;
  auto add = [&](const char *flag, auto value) {
    if (value)
      flags.push_back(llvm::formatv("--{0} {1}", flag, *value).str());
  };
  add("dp", pins.dp);
  add("tp", pins.tp);
  add("pp", pins.pp);
  add("cp", pins.cp);
  add("ep", pins.ep);
  add("vpp", pins.vpp);
  add("zero", pins.zero);
  add("micro-batch", pins.microBatch);
  if (pins.recompute)
    flags.push_back("--recompute " + recomputeName(*pins.recompute).str());
  if (pins.schedule)
    flags.push_back("--schedule " + scheduleName(*pins.schedule).str());
  if (pins.sequenceParallel)
    flags.push_back(std::string("sequence parallelism ") +
                    (*pins.sequenceParallel ? "on" : "off"));
  if (pins.meshOrder)
    flags.push_back("--mesh-order " + meshOrderName(*pins.meshOrder));
  if (pins.dataRows)
    flags.push_back(llvm::formatv("the graph's fixed batch of {0} (dp x "
                                  "micro-batch)",
                                  *pins.dataRows)
                        .str());
  return llvm::join(flags, " ");
}

/// Each pin on its own, as a copy of `pins` without it, with its flag.
static llvm::SmallVector<std::pair<std::string, PlanPins>>
withoutEachPin(const PlanPins &pins) {
  llvm::SmallVector<std::pair<std::string, PlanPins>> result;
  auto drop = [&](const char *flag, auto member) {
    if (pins.*member) {
      PlanPins copy = pins;
      (copy.*member).reset();
      result.push_back({std::string("--") + flag, copy});
    }
  };
  drop("dp", &PlanPins::dp);
  drop("tp", &PlanPins::tp);
  drop("pp", &PlanPins::pp);
  drop("cp", &PlanPins::cp);
  drop("ep", &PlanPins::ep);
  drop("vpp", &PlanPins::vpp);
  drop("zero", &PlanPins::zero);
  drop("micro-batch", &PlanPins::microBatch);
  drop("recompute", &PlanPins::recompute);
  drop("schedule", &PlanPins::schedule);
  drop("mesh-order", &PlanPins::meshOrder);
  return result;
}

/// Checks the pins that are wrong whatever else is chosen.
static llvm::Error checkPins(const PlanRequest &r, int64_t globalBatch) {
  const PlanPins &p = r.pins;
  const TransformerSpec &spec = r.spec;
  for (auto [flag, value] :
       {std::pair<const char *, std::optional<int64_t>>{"dp", p.dp},
        {"tp", p.tp},
        {"pp", p.pp},
        {"cp", p.cp},
        {"ep", p.ep},
        {"vpp", p.vpp},
        {"micro-batch", p.microBatch}})
    if (value && *value < 1)
      return badInput("--{0} {1}: must be at least 1", flag, *value);
  if (p.zero && (*p.zero < 0 || *p.zero > 3))
    return badInput("--zero {0}: the ZeRO stage must be 0, 1, 2 or 3", *p.zero);
  if (p.tp) {
    int64_t kv = spec.kvHeadCount();
    if (spec.heads % *p.tp)
      return badInput("--tp {0} does not divide the {1} attention heads of {2}",
                      *p.tp, spec.heads, spec.name);
    if (kv % *p.tp && *p.tp % kv)
      return badInput("--tp {0} and the {1} kv heads of {2} must divide one "
                      "another",
                      *p.tp, kv, spec.name);
    if (spec.ffn() % *p.tp)
      return badInput("--tp {0} does not divide the FFN width {1}", *p.tp,
                      spec.ffn());
  }
  if (p.cp && spec.seqLen % contextPieces(*p.cp))
    return badInput("--cp {0}: the sequence length {1} does not split into "
                    "{2} zigzag halves (two per rank)",
                    *p.cp, spec.seqLen, contextPieces(*p.cp));
  if (p.pp && *p.pp > spec.layers)
    return badInput("--pp {0} is more pipeline stages than the {1} layers",
                    *p.pp, spec.layers);
  if (p.ep && *p.ep > 1 && !spec.moe())
    return badInput("--ep {0} needs a mixture-of-experts model; {1} has none",
                    *p.ep, spec.name);
  if (p.ep && spec.experts % *p.ep)
    return badInput("--ep {0} does not divide the {1} experts", *p.ep,
                    spec.experts);
  if (p.vpp && *p.vpp > 1) {
    if (p.pp && *p.pp < 2)
      return badInput("--vpp {0} needs --pp 2 or more", *p.vpp);
    if (p.pp && spec.layers % (*p.pp * *p.vpp))
      return badInput("--vpp {0}: the {1} layers do not split into pp x vpp "
                      "= {2} equal chunks",
                      *p.vpp, spec.layers, *p.pp * *p.vpp);
  }
  int64_t pinned =
      p.dp.value_or(1) * p.tp.value_or(1) * p.pp.value_or(1) * p.cp.value_or(1);
  if (r.gpus % pinned)
    return badInput("the pinned degrees (dp x tp x pp x cp = {0}) do not "
                    "divide --gpus {1}",
                    pinned, r.gpus);
  if (p.dp && p.tp && p.pp && p.cp && pinned != r.gpus)
    return badInput("dp x tp x pp x cp = {0} x {1} x {2} x {3} = {4}, but "
                    "--gpus is {5}; unpin one of them",
                    *p.dp, *p.tp, *p.pp, *p.cp, pinned, r.gpus);
  int64_t perStep = p.dp.value_or(1) * p.microBatch.value_or(1);
  if (globalBatch % perStep)
    return badInput("global batch {0} is not a multiple of the pinned dp x "
                    "micro-batch = {1}",
                    globalBatch, perStep);
  return llvm::Error::success();
}

static std::string gb(double bytes) {
  return llvm::formatv("{0:F1} GB", bytes / 1e9).str();
}

/// The smallest GPU count above `gpus` with a plan that fits: every count
/// up to one NVLink domain, then whole domains. Domains are tried one by
/// one up to twice the request, then by doubling up to 64 times it, and the
/// last doubling is refined domain by domain.
static std::optional<std::pair<int64_t, PlanChoice>>
smallestFittingCount(const PlanRequest &request, int64_t gpn) {
  auto fitsOn = [&](int64_t n) {
    PlanRequest larger = request;
    larger.gpus = n;
    int64_t batch = request.globalBatch
                        ? *request.globalBatch
                        : defaultGlobalBatch(request.spec, n, request.pins);
    Searcher s(larger, {}, batch);
    return s.findFit();
  };
  auto next = [&](int64_t n) { return n < gpn ? n + 1 : (n / gpn + 1) * gpn; };
  int64_t linear = std::max(2 * request.gpus, gpn);
  for (int64_t n = request.gpus + 1; n <= linear; n = next(n))
    if (std::optional<PlanChoice> fit = fitsOn(n))
      return std::make_pair(n, *fit);
  for (int64_t high = 2 * linear; high <= 64 * request.gpus; high *= 2) {
    if (!fitsOn(high))
      continue;
    for (int64_t n = next(high / 2);; n = next(n))
      if (std::optional<PlanChoice> fit = fitsOn(n))
        return std::make_pair(n, *fit);
  }
  return std::nullopt;
}

/// The error for a request where no plan fits: which pins to drop, or the
/// smallest GPU count that fits.
static llvm::Error noFitError(const PlanRequest &request,
                              const Searcher &search) {
  const Cluster &cluster = search.cluster;
  std::string what = llvm::formatv("{0} does not fit on {1} x {2} ({3} per "
                                   "GPU)",
                                   request.spec.name, request.gpus, cluster.gpu,
                                   gb(cluster.hbmBytes))
                         .str();
  if (search.valid == 0) {
    // Is it the global batch? Every dp divides a batch of `gpus` sequences.
    int64_t micro = request.pins.microBatch.value_or(1);
    Searcher any(request, {}, request.gpus * micro);
    std::set<int64_t> dps;
    for (const Degrees &d : any.degreeTuples())
      dps.insert(d.dp * micro);
    if (!dps.empty()) {
      llvm::SmallVector<std::string> list;
      for (int64_t dp : dps)
        list.push_back(std::to_string(dp));
      return badInput("global batch {0} is not a multiple of dp x "
                      "micro-batch for any split of {1} over {2} GPUs (dp x "
                      "micro-batch can be {3}); use a multiple of {4}",
                      search.globalBatch, request.spec.name, request.gpus,
                      llvm::join(list, ", "), *dps.begin());
    }
    what = llvm::formatv("no split of {0} over {1} GPUs meets the "
                         "divisibility rules (heads by tp, layers by pp x "
                         "vpp, experts by ep, {3}sequence by cp, global "
                         "batch {2} by dp x micro-batch)",
                         request.spec.name, request.gpus, search.globalBatch,
                         request.expertsWithinData
                             ? "dp by ep (the program carves the expert "
                               "groups out of the data-parallel ranks), "
                             : "")
               .str();
  } else if (search.haveLeanest) {
    what += llvm::formatv(": the leanest plan ({0}) needs {1}",
                          planSummary(search.leanest), gb(search.leanestBytes))
                .str();
  }
  if (request.pins.any()) {
    what += " with " + pinFlags(request.pins);
    llvm::SmallVector<std::string> drops;
    for (auto &[flag, pins] : withoutEachPin(request.pins)) {
      PlanRequest relaxed = request;
      relaxed.pins = pins;
      Searcher s(relaxed, {}, search.globalBatch);
      if (s.findFit())
        drops.push_back(flag);
    }
    if (!drops.empty()) {
      std::string list = drops.back();
      if (drops.size() > 1)
        list =
            llvm::join(llvm::ArrayRef(drops).drop_back(), ", ") + " or " + list;
      return badInput("{0}; unpinning {1} alone lets a plan fit", what, list);
    }
    PlanRequest relaxed = request;
    relaxed.pins = {};
    Searcher s(relaxed, {}, search.globalBatch);
    if (std::optional<PlanChoice> fit = s.findFit())
      return badInput("{0}; without the pins it fits (for example {1}): "
                      "drop them",
                      what, planSummary(fit->plan));
  }
  if (auto fit = smallestFittingCount(request, cluster.gpusPerNode))
    return badInput("{0}; the smallest GPU count that fits is {1} (for "
                    "example {2})",
                    what, fit->first, planSummary(fit->second.plan));
  int64_t limit = 64 * request.gpus;
  if (search.valid == 0)
    return badInput("{0}, nor does any GPU count up to {1}", what, limit);
  return badInput("{0}; it does not fit on up to {1} GPUs either: use GPUs "
                  "with more memory or a shorter sequence",
                  what, limit);
}

//===----------------------------------------------------------------------===//
// The search
//===----------------------------------------------------------------------===//

llvm::Expected<PlanResult> dtc::searchPlan(const PlanRequest &request,
                                           const SearchOptions &options) {
  auto start = std::chrono::steady_clock::now();
  if (request.gpus < 1)
    return badInput("--gpus must be at least 1, got {0}", request.gpus);
  {
    // The model and cluster checks of the cost model, on a trivial plan.
    ParallelPlan trivial;
    Cluster one = request.cluster;
    one.gpus = 1;
    if (llvm::Error err = validatePlan(request.spec, trivial, one))
      return std::move(err);
  }
  if (request.globalBatch && *request.globalBatch < 1)
    return badInput("--global-batch must be at least 1, got {0}",
                    *request.globalBatch);
  int64_t globalBatch =
      request.globalBatch
          ? *request.globalBatch
          : defaultGlobalBatch(request.spec, request.gpus, request.pins);
  if (llvm::Error err = checkPins(request, globalBatch))
    return std::move(err);

  Searcher search(request, options, globalBatch);
  for (const Degrees &d : search.degreeTuples())
    search.visit(d);
  if (search.top.empty())
    return noFitError(request, search);

  PlanResult result;
  result.globalBatch = globalBatch;
  result.globalBatchDefaulted = !request.globalBatch;
  result.best = search.top.front();
  const Prediction &best = result.best.prediction;
  for (size_t i = 1; i < search.top.size(); ++i)
    result.runnersUp.push_back({search.top[i], std::nullopt, 0,
                                verdict(best, search.top[i].prediction)});

  if (search.explain) {
    for (int i = 0; i < kNumPlanDims; ++i) {
      PlanDim dim = static_cast<PlanDim>(i);
      auto list = search.slots[i];
      llvm::sort(
          list, [](const Slot &a, const Slot &b) { return a.value < b.value; });
      int64_t chosen = planDimValue(result.best.plan, dim);
      for (const Slot &s : list) {
        if (s.value == chosen || (!s.feasible && !s.haveLeanest))
          continue;
        Alternative alt;
        alt.dim = dim;
        alt.value = s.value;
        if (s.feasible) {
          alt.choice = s.best;
        } else {
          // Priced on free links and possibly never in a real mesh order;
          // its memory is what matters.
          auto p = predict(request.spec, s.leanest, search.cluster);
          if (!p) {
            llvm::consumeError(p.takeError());
            continue;
          }
          ++search.evaluated;
          alt.choice = choiceOf(s.leanest, *p);
        }
        alt.verdict = verdict(best, alt.choice.prediction);
        result.counterfactuals.push_back(std::move(alt));
      }
    }
  }
  result.candidatesEvaluated = search.evaluated;
  result.plansConsidered = search.considered;
  result.searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}
