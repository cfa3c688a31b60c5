//===- GraphPlanner.cpp - Plans for any graph, priced from its IR ---------===//
//
// A profile is the forward function at one micro-batch on one tensor-
// parallel rank: each op's forward and backward kernel seconds, FLOPs,
// the activation bytes it leaves for the backward, and each collective the
// partitioner inserted. Profiles and pipeline cuts are computed once per
// (micro-batch, degree) and reused by every plan the search prices.
//
//===----------------------------------------------------------------------===//

#include "compiler/GraphPlanner.h"

#include "compiler/costmodel/Collectives.h"
#include "compiler/costmodel/Compute.h"
#include "compiler/costmodel/KernelTime.h"
#include "compiler/costmodel/Memory.h"
#include "compiler/costmodel/Pipeline.h"
#include "compiler/costmodel/StepTime.h"
#include "dialects/dtc/DtcOps.h"
#include "passes/OpCost.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "passes/training/TrainingStep.h"
#include "runtime/support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <set>

using namespace dtc;

namespace d = mlir::dtc;

struct GraphPlanner::Profile {
  struct Op {
    double forward = 0, backward = 0; ///< Kernel seconds on one GPU.
    /// The forward again under full recompute: all but what the function
    /// returns (the logits, which the loss reads and the recompute pass
    /// keeps, docs/recompute.md).
    double recompute = 0;
    double weightGrad = 0; ///< The weight-gradient GEMMs within backward.
    double flops = 0, modelFlops = 0;
    double activationBytes = 0; ///< Results the backward reads.
    bool comm = false;
    /// A GEMM or attention: the partitioner keeps each, one for one, so
    /// their order places a per-rank op against the unpartitioned cuts.
    bool anchor = false;
    Collective collective = Collective::AllReduce;
    double commBytes = 0;
  };
  /// Every op of @main's body in order (free ops priced 0), so indices are
  /// those chooseCuts returns on the unpartitioned function.
  std::vector<Op> ops;
  double paramElements = 0; ///< Distinct parameters on one rank.
  /// Of those, the ones the tp ranks each hold whole: where their users are
  /// split (a batch split over tp), the gradients are summed over tp.
  double replicatedParamElements = 0;
  double forward = 0, backward = 0, recompute = 0, weightGrad = 0,
         modelFlops = 0, activationBytes = 0;
  /// Tokens per sample: the elements of a row of the first integer (token
  /// id) input; 1 for other models (images, tables).
  double tokensPerSample = 1;
  std::string error; ///< Why this degree cannot be planned.
};

struct GraphPlanner::Cuts {
  /// Stage s runs ops [begin[s], begin[s + 1]) of @main; begin.back() is
  /// the op count.
  llvm::SmallVector<unsigned> begin;
  /// Per stage: bytes of the activation that crosses into it (0 for the
  /// first) and the elements of the parameters it reads.
  llvm::SmallVector<double> inputBytes, paramElements;
  /// Elements of the parameters more than one stage reads (a tied
  /// embedding): the stages sum their gradients once per step.
  double sharedParamElements = 0;
  std::string error;
};

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// The first error MLIR reports while the guard lives, as one line with
/// the op's location (the ONNX node name).
class FirstError {
public:
  explicit FirstError(mlir::MLIRContext *context)
      : handler(context, [this](mlir::Diagnostic &diag) {
          if (diag.getSeverity() == mlir::DiagnosticSeverity::Error &&
              message.empty()) {
            llvm::raw_string_ostream os(message);
            os << diag.getLocation() << ": " << diag.str();
          }
          return mlir::success();
        }) {}
  std::string message;

private:
  mlir::ScopedDiagnosticHandler handler;
};

std::string tpMesh(int64_t tp) { return llvm::formatv("dp:1,tp:{0}", tp); }

llvm::SmallVector<int64_t, 16> divisorsOf(int64_t n) {
  llvm::SmallVector<int64_t, 16> result;
  for (int64_t d = 1; d <= n; ++d)
    if (n % d == 0)
      result.push_back(d);
  return result;
}

} // namespace

GraphPlanner::GraphPlanner(GraphPlanRequest request)
    : request(std::move(request)) {
  this->request.cluster.gpus = this->request.gpus;
}

GraphPlanner::~GraphPlanner() = default;

// The loss the training step binds to returned logits (a model returning
// its own scalar loss has none), priced with the op that returns them, whose
// stage computes it.
static void addBoundLoss(mlir::Operation &op, mlir::Operation *returned,
                         DType dtype, const Cluster &cluster,
                         GraphPlanner::Profile::Op &priced) {
  if (returned->getNumOperands() == 0 ||
      returned->getOperand(0).getDefiningOp() != &op)
    return;
  auto logits =
      llvm::dyn_cast<mlir::RankedTensorType>(returned->getOperand(0).getType());
  if (!logits || logits.getRank() < 2 ||
      !llvm::isa<mlir::FloatType>(logits.getElementType()))
    return;
  double classes = static_cast<double>(logits.getShape().back());
  double rows = static_cast<double>(logits.getNumElements()) / classes;
  KernelWork loss =
      kernelWork(crossEntropyKernel(rows, classes, dtypeBytes(dtype)));
  priced.forward += kernelSeconds(loss, dtype, cluster);
  priced.backward += backwardKernelSeconds(loss, dtype, cluster);
}

llvm::Expected<const GraphPlanner::Profile *>
GraphPlanner::profile(int64_t microBatch, int64_t tp) {
  auto key = std::make_pair(microBatch, tp);
  if (auto it = profiles.find(key); it != profiles.end())
    return it->second.get();
  auto module = request.import(microBatch);
  if (!module)
    return module.takeError();
  auto result = std::make_unique<Profile>();
  if (tp > 1) {
    // Shard and partition the forward as the training step will.
    FirstError error((*module)->getContext());
    mlir::PassManager pm((*module)->getContext());
    ForwardPartitionOptions partition;
    partition.mesh = tpMesh(tp);
    partition.flopsPerByte = request.flopsPerByte;
    buildForwardPartitionPipeline(pm, partition);
    if (mlir::failed(pm.run(**module)))
      result->error = error.message.empty()
                          ? "the partitioner failed over " + tpMesh(tp)
                          : error.message;
  }
  auto main = (*module)->lookupSymbol<mlir::func::FuncOp>("main");
  if (!main)
    return badInput("{0}: no @main function", request.modelName);
  int64_t e = dtypeBytes(request.dtype);
  const Cluster &cluster = request.cluster;
  Profile &p = *result;
  for (mlir::Type type : main.getArgumentTypes())
    if (auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type);
        tensor && llvm::isa<mlir::IntegerType>(tensor.getElementType())) {
      p.tokensPerSample = static_cast<double>(tensor.getNumElements()) /
                          static_cast<double>(microBatch);
      break;
    }
  llvm::StringSet<> params;
  mlir::Operation *returned = main.getBody().front().getTerminator();
  for (mlir::Operation &op : main.getBody().front().without_terminator()) {
    Profile::Op priced;
    if (auto param = llvm::dyn_cast<d::ParameterOp>(op)) {
      if (params.insert(param.getName()).second) {
        double elements = static_cast<double>(param.getType().getNumElements());
        p.paramElements += elements;
        if (tp > 1 && !param->hasAttr("dtc.global_type"))
          p.replicatedParamElements += elements;
      }
    }
    KernelWork work = opWork(&op, e);
    if (work.kind == KernelWork::Kind::Comm) {
      priced.comm = true;
      priced.collective = work.collective;
      priced.commBytes = work.commBytes;
    } else if (work.isCompute()) {
      priced.forward = kernelSeconds(work, request.dtype, cluster);
      bool kept = llvm::any_of(op.getUsers(), [&](mlir::Operation *user) {
        return user == returned;
      });
      priced.recompute = kept ? 0 : priced.forward;
      priced.backward = backwardKernelSeconds(work, request.dtype, cluster);
      if (work.kind == KernelWork::Kind::Gemm)
        priced.weightGrad = gemmTime(work.k, work.n, work.m, work.batch,
                                     request.dtype, cluster);
      priced.flops = work.flops;
      priced.anchor = work.kind == KernelWork::Kind::Gemm ||
                      work.kind == KernelWork::Kind::Attention;
      priced.modelFlops = work.modelFlops();
      for (const TensorDesc &t : kernelDescOf(&op, e).outputs)
        priced.activationBytes += t.bytes();
    }
    addBoundLoss(op, returned, request.dtype, cluster, priced);
    p.forward += priced.forward;
    p.backward += priced.backward;
    p.recompute += priced.recompute;
    p.weightGrad += priced.weightGrad;
    p.modelFlops += priced.modelFlops;
    p.activationBytes += priced.activationBytes;
    p.ops.push_back(priced);
  }
  const Profile *stored = result.get();
  profiles[key] = std::move(result);
  return stored;
}

llvm::Expected<const GraphPlanner::Cuts *>
GraphPlanner::cuts(int64_t microBatch, int64_t pp) {
  auto key = std::make_pair(microBatch, pp);
  if (auto it = cutCache.find(key); it != cutCache.end())
    return it->second.get();
  auto module = request.import(microBatch);
  if (!module)
    return module.takeError();
  auto main = (*module)->lookupSymbol<mlir::func::FuncOp>("main");
  auto result = std::make_unique<Cuts>();
  Cuts &c = *result;
  llvm::SmallVector<mlir::Operation *> ops;
  for (mlir::Operation &op : main.getBody().front().without_terminator())
    ops.push_back(&op);
  auto chosen = chooseCuts(main, pp);
  if (!chosen) {
    c.error = llvm::toString(chosen.takeError());
  } else {
    int64_t e = dtypeBytes(request.dtype);
    c.begin = chosen->begin;
    c.begin.push_back(static_cast<unsigned>(ops.size()));
    llvm::StringMap<int64_t> stagesReading;
    for (int64_t s = 0; s < pp; ++s) {
      mlir::Value input = chosen->input[s];
      c.inputBytes.push_back(
          input ? kernelDescOf(input.getDefiningOp(), e).outputs.front().bytes()
                : 0);
      // A stage holds every parameter its ops read (the pass clones them).
      llvm::StringSet<> seen;
      double elements = 0;
      for (unsigned i = c.begin[s]; i < c.begin[s + 1]; ++i)
        for (mlir::Value operand : ops[i]->getOperands())
          if (auto param = operand.getDefiningOp<d::ParameterOp>())
            if (seen.insert(param.getName()).second) {
              double size =
                  static_cast<double>(param.getType().getNumElements());
              elements += size;
              if (++stagesReading[param.getName()] == 2)
                c.sharedParamElements += size;
            }
      c.paramElements.push_back(elements);
    }
  }
  const Cuts *stored = result.get();
  cutCache[key] = std::move(result);
  return stored;
}

llvm::Expected<double> GraphPlanner::trainingFlopsPerSample() {
  auto one = profile(1, 1);
  if (!one)
    return one.takeError();
  return 3 * (*one)->modelFlops;
}

int64_t GraphPlanner::defaultGlobalBatch() {
  // Samples per step: 32 per GPU (the ImageNet convention, 256 on 8 GPUs)
  // times the pinned micro-batch and dp, so every dp degree divides it.
  int64_t gpus = std::max<int64_t>(request.gpus, 1);
  int64_t unit =
      std::lcm<int64_t>(gpus, std::lcm(request.pins.dp.value_or(1) *
                                           request.pins.microBatch.value_or(1),
                                       request.pins.dataRows.value_or(1)));
  return std::max<int64_t>(unit, (32 * gpus + unit - 1) / unit * unit);
}

namespace {
/// Prices one plan from the profiles of its tp rank (`P`) and of the whole
/// function (`W`, where the stage cuts `C` are).
class GraphStepPricer {
public:
  using Profile = GraphPlanner::Profile;
  using Cuts = GraphPlanner::Cuts;

  GraphStepPricer(const GraphPlanRequest &request, const ParallelPlan &plan,
                  const Profile &P, const Profile &W, const Cuts &C);

  /// Stage `s`'s time per micro-batch, communication and memory.
  StageCost stage(int64_t s) const;
  /// The data-parallel reduction and ZeRO's gathers, the tp sum of
  /// replicated gradients, the optimizer step.
  void addOncePerStep(StepCost &step) const;
  /// Tokens and FLOPs per step.
  void setFlops(StepCost &step) const;

private:
  /// Stage `s`'s share of the whole function's `field`, in the
  /// proportions of the unpartitioned ops it runs.
  double share(int64_t s, double Profile::Op::*field) const;
  /// Parameters of a stage on one tp rank: its unpartitioned parameters in
  /// the proportion the partitioner left on the rank.
  double stageParams(int64_t s) const { return C.paramElements[s] * rankShare; }
  double p2pSeconds(int64_t s) const;
  MemoryBreakdown stageMemory(int64_t s) const;

  const GraphPlanRequest &request;
  const ParallelPlan &plan;
  const Cluster &cluster;
  const Profile &P, &W;
  const Cuts &C;
  const double e;
  const bool full;
  GroupPlacement tpGroup, dpGroup, ppPair;
  double rankShare = 1;
  /// Per stage: its tensor-parallel collectives of one forward, and what
  /// the backward's leave exposed.
  llvm::SmallVector<double, 8> tpForward, tpBackwardExposed;
};
} // namespace

GraphStepPricer::GraphStepPricer(const GraphPlanRequest &request,
                                 const ParallelPlan &plan, const Profile &P,
                                 const Profile &W, const Cuts &C)
    : request(request), plan(plan), cluster(request.cluster), P(P), W(W), C(C),
      e(dtypeBytes(request.dtype)), full(plan.recompute == Recompute::Full) {
  int64_t gpn = cluster.gpusPerNode;
  tpGroup = placeGroup(plan.tp, plan.stride(MeshAxis::TP), gpn);
  dpGroup = placeGroup(plan.dp, plan.stride(MeshAxis::DP), gpn);
  ppPair = placeGroup(2, plan.stride(MeshAxis::PP), gpn);
  rankShare = W.paramElements > 0 ? P.paramElements / W.paramElements : 1;
  // The tensor-parallel collectives of one micro-batch's forward; the
  // backward runs their transposes (an all-reduce's is an all-reduce, an
  // all-gather's a reduce-scatter), priced alike. When the plan overlaps
  // them, each backward one hides behind the weight gradients of the GEMMs
  // that open its segment (the ops since the previous collective), all but
  // the last, whose partial result it sums: the column-parallel linears
  // whose input gradient it reduces, as Megatron-LM overlaps them and the
  // transformer cost model prices them.
  // A collective belongs to the stage of the GEMM or attention before it.
  llvm::SmallVector<int64_t, 8> anchorsBefore(plan.pp + 1, 0);
  for (auto [i, op] : llvm::enumerate(W.ops))
    if (op.anchor)
      for (int64_t s = 0; s < plan.pp; ++s)
        if (i < C.begin[s + 1])
          ++anchorsBefore[s + 1];
  tpForward.assign(plan.pp, 0);
  tpBackwardExposed.assign(plan.pp, 0);
  int64_t anchors = 0, stage = 0;
  double segmentWgrad = 0, lastWgrad = 0;
  for (const Profile::Op &op : P.ops) {
    if (op.anchor) {
      while (stage + 1 < plan.pp && anchors >= anchorsBefore[stage + 1])
        ++stage;
      ++anchors;
    }
    if (op.weightGrad > 0) {
      segmentWgrad += lastWgrad;
      lastWgrad = op.weightGrad;
    }
    if (!op.comm)
      continue;
    double time = collectiveTime(op.collective, op.commBytes, tpGroup, cluster);
    tpForward[stage] += time;
    tpBackwardExposed[stage] +=
        plan.overlapTpComm ? std::max(0.0, time - segmentWgrad) : time;
    segmentWgrad = lastWgrad = 0;
  }
}

double GraphStepPricer::share(int64_t s, double Profile::Op::*field) const {
  double part = 0, total = 0;
  for (auto [i, op] : llvm::enumerate(W.ops)) {
    total += op.*field;
    if (i >= C.begin[s] && i < C.begin[s + 1])
      part += op.*field;
  }
  return total > 0 ? part / total : 1.0 / static_cast<double>(plan.pp);
}

// Per micro-batch a stage receives its input and its output's gradient and
// sends their counterparts (the boundary activation, whole on every tp
// rank).
double GraphStepPricer::p2pSeconds(int64_t s) const {
  double p2p = 0;
  if (s > 0)
    p2p += 2 * collectiveTime(Collective::SendRecv, C.inputBytes[s], ppPair,
                              cluster);
  if (s + 1 < plan.pp)
    p2p += 2 * collectiveTime(Collective::SendRecv, C.inputBytes[s + 1], ppPair,
                              cluster);
  return p2p;
}

// Model states, and the activations of the micro-batches in flight (under
// full recompute only each one's stage input, plus one micro-batch's whole
// set while its backward recomputes it).
MemoryBreakdown GraphStepPricer::stageMemory(int64_t s) const {
  MemoryBreakdown mem;
  StateBytes states = modelStateBytes(request.dtype, plan, stageParams(s), 0);
  mem.params = states.params;
  mem.grads = states.grads;
  mem.optimizer = states.optimizer;
  double inFlight =
      microBatchesInFlight(plan.schedule, plan.pp, plan.microBatches(), 1, s);
  double activations =
      P.activationBytes * share(s, &Profile::Op::activationBytes);
  double input = s > 0 ? C.inputBytes[s] : 0;
  mem.activations = full ? inFlight * input : inFlight * activations;
  mem.workspace = kRuntimeBytes + (full ? activations : 0);
  if (plan.zero >= 3) // The gathered parameters of the stage.
    mem.workspace += e * stageParams(s);
  mem.reserveForFragmentation();
  return mem;
}

StageCost GraphStepPricer::stage(int64_t s) const {
  StageCost stage;
  double forward = P.forward * share(s, &Profile::Op::forward);
  double backward = P.backward * share(s, &Profile::Op::backward);
  double recompute = full ? P.recompute * share(s, &Profile::Op::recompute) : 0;
  stage.forward = forward;
  // The weight gradient (W, which zero-bubble schedules defer): the
  // weight-gradient GEMMs of the stage's share.
  stage.weightGrad = P.weightGrad * share(s, &Profile::Op::weightGrad);
  stage.kernels = forward + backward + recompute;
  // A full recompute runs the forward's collectives again.
  double forwardPasses = full ? 2 : 1;
  stage.comm.tp = (forwardPasses + 1) * tpForward[s];
  stage.exposed.tp = forwardPasses * tpForward[s] + tpBackwardExposed[s];
  stage.comm.pp = stage.exposed.pp = p2pSeconds(s);
  stage.time = stage.kernels + stage.exposed.total();
  stage.memory = stageMemory(s);
  return stage;
}

// Data parallelism on stage 0, whose last backward ends the step.
void GraphStepPricer::addOncePerStep(StepCost &step) const {
  const StageCost &first = step.stages.front();
  const double md = static_cast<double>(plan.microBatches());
  DataParallelCost dp =
      dataParallelCost(plan, e * stageParams(0), 0, e, dpGroup, dpGroup,
                       first.kernels - first.forward, first.forward, cluster);
  if (plan.zero >= 3 && plan.dp > 1) {
    // ZeRO-3 gathers the stage's parameters for every micro-batch's forward
    // and again for its backward, and scatters its gradients; prefetching
    // hides them behind that micro-batch's kernels.
    double bytes = e * stageParams(0);
    double perMicroBatch =
        2 * collectiveTime(Collective::AllGather, bytes, dpGroup, cluster) +
        collectiveTime(Collective::ReduceScatter, bytes, dpGroup, cluster);
    dp.time += md * perMicroBatch;
    dp.exposed += md * (plan.overlapParamGather
                            ? std::max(0.0, perMicroBatch - first.kernels)
                            : perMicroBatch);
  }
  step.comm.dp = dp.time;
  step.exposed.dp = dp.exposed;
  // A parameter on two stages (a tied embedding): they sum its gradients,
  // the first and last stage as the transformer cost model has it.
  if (plan.pp > 1 && C.sharedParamElements > 0) {
    GroupPlacement ends = placeGroup(
        2, plan.stride(MeshAxis::PP) * (plan.pp - 1), cluster.gpusPerNode);
    step.comm.pp = step.exposed.pp =
        collectiveTime(Collective::AllReduce,
                       e * C.sharedParamElements * rankShare, ends, cluster);
  }
  // The replicated parameters' gradients, summed over tp once per step
  // (with dp's, behind the last backward when it overlaps). An upper
  // bound: a gradient the ranks computed alike needs no sum.
  double tpGradSync =
      plan.tp > 1
          ? collectiveTime(Collective::AllReduce, e * P.replicatedParamElements,
                           tpGroup, cluster)
          : 0;
  step.comm.tp = tpGradSync;
  step.exposed.tp =
      plan.overlapGradReduce
          ? std::max(0.0, tpGradSync - (first.kernels - first.forward))
          : tpGradSync;
  step.optimizerS = optimizerStepSeconds(
      plan.zero >= 1 ? stageParams(0) / static_cast<double>(plan.dp)
                     : stageParams(0),
      e, cluster);
}

void GraphStepPricer::setFlops(StepCost &step) const {
  double sequences = static_cast<double>(plan.globalBatch);
  double samplesPerMicroBatch = static_cast<double>(plan.microBatch);
  step.tokens = sequences * W.tokensPerSample;
  step.modelFlops = 3 * W.modelFlops / samplesPerMicroBatch * sequences;
  step.hwFlops = step.modelFlops * (full ? 4.0 / 3.0 : 1.0);
  step.gpus = static_cast<double>(plan.gpus());
  step.peakFlops = cluster.peakFlops(request.dtype);
}

llvm::Expected<Prediction>
GraphPlanner::predict(const ParallelPlan &plan,
                      std::vector<StageDetail> *stages) {
  const int64_t p = plan.pp, m = plan.microBatches();
  if (plan.cp != 1 || plan.ep != 1 || plan.vpp != 1)
    return badInput("plan {0}: the IR-priced planner prices dp, tp and pp "
                    "only",
                    planSummary(plan));
  if (m < 1 || plan.globalBatch % (plan.dp * plan.microBatch))
    return badInput("--global-batch {0} is not a multiple of dp x "
                    "micro-batch = {1}",
                    plan.globalBatch, plan.dp * plan.microBatch);
  auto tpProfile = profile(plan.microBatch, plan.tp);
  if (!tpProfile)
    return tpProfile.takeError();
  if (!(*tpProfile)->error.empty())
    return badInput("--tp {0}: {1}; pin --tp 1", plan.tp, (*tpProfile)->error);
  // Stage shares come from the unpartitioned function, where the cuts are.
  auto whole = profile(plan.microBatch, 1);
  if (!whole)
    return whole.takeError();
  auto stageCuts = cuts(plan.microBatch, p);
  if (!stageCuts)
    return stageCuts.takeError();
  if (!(*stageCuts)->error.empty())
    return badInput("--pp {0}: {1}", p, (*stageCuts)->error);

  GraphStepPricer pricer(request, plan, **tpProfile, **whole, **stageCuts);
  StepCost step;
  step.microBatches = m;
  step.schedule = plan.schedule;
  for (int64_t s = 0; s < p; ++s)
    step.stages.push_back(pricer.stage(s));
  pricer.addOncePerStep(step);
  pricer.setFlops(step);
  return composeStep(step, request.cluster, stages);
}

llvm::Expected<PlanResult> GraphPlanner::search(const SearchOptions &options) {
  auto start = std::chrono::steady_clock::now();
  const PlanPins &pins = request.pins;
  const std::string &name = request.modelName;
  // What needs attention or a stack of blocks: pins the transformer
  // planner takes, refused with the reason it did not take this model.
  const std::string &why = request.unrecognized;
  if (pins.cp && *pins.cp > 1)
    return badInput("--cp {0}: context parallelism splits a recognized "
                    "attention over the sequence, and {1} is not a "
                    "recognized transformer ({2}; docs/compatibility.md); "
                    "pin --cp 1",
                    *pins.cp, name, why);
  if (pins.ep && *pins.ep > 1)
    return badInput("--ep {0}: expert parallelism is planned for recognized "
                    "transformers, and {1} is not one ({2}; "
                    "docs/compatibility.md); pin --ep 1",
                    *pins.ep, name, why);
  if (pins.vpp && *pins.vpp > 1)
    return badInput("--vpp {0}: interleaved pipeline chunks need a stack of "
                    "identical transformer blocks, and {1} is not a "
                    "recognized transformer ({2}); pin --vpp 1",
                    *pins.vpp, name, why);
  if (pins.recompute && *pins.recompute == Recompute::Selective)
    return badInput("--recompute selective recomputes attention's core, and "
                    "{0} is not a recognized transformer ({1}); pin none or "
                    "full",
                    name, why);
  if (pins.sequenceParallel && *pins.sequenceParallel)
    return badInput("--sequence-parallel on splits a transformer's norm and "
                    "dropout regions by sequence, and {0} is not a recognized "
                    "transformer ({1}); pin off",
                    name, why);

  PlanResult result;
  result.globalBatchDefaulted = !request.globalBatch;
  result.globalBatch = request.globalBatch.value_or(defaultGlobalBatch());
  const int64_t gpus = request.gpus, global = result.globalBatch;

  auto pinnedOr = [](const std::optional<int64_t> &pin, int64_t value) {
    return !pin || *pin == value;
  };
  std::vector<PlanChoice> priced;
  std::string firstError;
  int64_t gpn = std::max<int64_t>(request.cluster.gpusPerNode, 1);
  for (int64_t tp : divisorsOf(gpus)) {
    // Tensor parallelism stays inside an NVLink domain unless pinned.
    if (!pinnedOr(pins.tp, tp) || (!pins.tp && tp > gpn))
      continue;
    for (int64_t pp : divisorsOf(gpus / tp)) {
      int64_t dp = gpus / tp / pp;
      if (!pinnedOr(pins.pp, pp) || !pinnedOr(pins.dp, dp) || global % dp)
        continue;
      for (int zero = 0; zero <= 3; ++zero) {
        if (pins.zero ? *pins.zero != zero : (dp == 1 && zero > 0))
          continue;
        for (Recompute recompute : {Recompute::None, Recompute::Full}) {
          if (pins.recompute && *pins.recompute != recompute)
            continue;
          for (int64_t mb : divisorsOf(global / dp)) {
            // Powers of two up to 8 are searched; a pin may ask for more.
            bool searched = mb <= 8 && (mb & (mb - 1)) == 0;
            if (pins.microBatch || pins.dataRows
                    ? !pins.allowsMicroBatch(dp, mb)
                    : !searched)
              continue;
            ParallelPlan plan = request.execution;
            plan.meshOrder = pins.meshOrder.value_or(plan.meshOrder);
            plan.dp = dp;
            plan.tp = tp;
            plan.pp = pp;
            plan.cp = plan.ep = plan.vpp = 1;
            plan.zero = zero;
            plan.microBatch = mb;
            plan.globalBatch = global;
            plan.recompute = recompute;
            plan.sequenceParallel = false;
            plan.schedule = pp > 1 ? pins.schedule.value_or(Schedule::OneFOneB)
                                   : Schedule::OneFOneB;
            plan.tpCommChunks = 1;
            ++result.plansConsidered;
            ++result.candidatesEvaluated;
            auto prediction = predict(plan);
            if (!prediction) {
              std::string message = llvm::toString(prediction.takeError());
              if (firstError.empty())
                firstError = message;
              break; // A degree the graph cannot take fails at every mb.
            }
            bool fits = prediction->fits;
            priced.push_back({plan, std::move(*prediction)});
            if (!fits)
              break; // Memory grows with the micro-batch.
          }
        }
      }
    }
  }
  auto fitsFirst = [](const PlanChoice &a, const PlanChoice &b) {
    if (a.prediction.fits != b.prediction.fits)
      return a.prediction.fits;
    return a.prediction.fits ? a.prediction.stepTimeS < b.prediction.stepTimeS
                             : a.prediction.memoryPerGpuBytes <
                                   b.prediction.memoryPerGpuBytes;
  };
  std::stable_sort(priced.begin(), priced.end(), fitsFirst);
  if (priced.empty())
    return badInput("{0}: no plan for {1} GPUs and global batch {2}{3}", name,
                    gpus, global, firstError.empty() ? "" : ": " + firstError);
  if (!priced.front().prediction.fits && pins.any())
    return badInput("{0}: the pinned plan does not fit: {1}", name,
                    priced.front().prediction.reason);
  if (!priced.front().prediction.fits)
    return badInput("{0}: no plan fits on {1} GPUs: the smallest needs {2}",
                    name, gpus, priced.front().prediction.reason);
  result.best = priced.front();
  for (size_t i = 1;
       i < priced.size() &&
       static_cast<int>(result.runnersUp.size()) < options.explainK;
       ++i)
    if (priced[i].prediction.fits)
      result.runnersUp.push_back(
          {priced[i], std::nullopt, 0,
           verdict(result.best.prediction, priced[i].prediction)});
  if (options.explainK > 0)
    for (PlanDim dim : {PlanDim::DP, PlanDim::TP, PlanDim::PP, PlanDim::Zero,
                        PlanDim::MicroBatch, PlanDim::Recompute}) {
      std::set<int64_t> done{planDimValue(result.best.plan, dim)};
      for (const PlanChoice &choice : priced) {
        int64_t value = planDimValue(choice.plan, dim);
        if (!done.insert(value).second)
          continue;
        result.counterfactuals.push_back(
            {choice, dim, value,
             verdict(result.best.prediction, choice.prediction)});
      }
    }
  result.searchSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

llvm::Expected<llvm::json::Array>
GraphPlanner::stagesJson(const ParallelPlan &plan) {
  auto stageCuts = cuts(plan.microBatch, plan.pp);
  if (!stageCuts)
    return stageCuts.takeError();
  const Cuts &C = **stageCuts;
  llvm::json::Array stages;
  int64_t ppStride = plan.stride(MeshAxis::PP);
  for (int64_t s = 0; s < plan.pp && C.error.empty(); ++s) {
    llvm::json::Array ranks;
    for (int64_t rank = 0; rank < plan.gpus(); ++rank)
      if (rank / ppStride % plan.pp == s)
        ranks.push_back(rank);
    stages.push_back(llvm::json::Object{
        {"index", s},
        {"ops", llvm::json::Array{C.begin[s], C.begin[s + 1] - 1}},
        {"ranks", std::move(ranks)}});
  }
  return stages;
}
