//===- TrainingStep.cpp - The training step as dtc functions --------------===//

#include "passes/training/TrainingStep.h"
#include "passes/training/StepParts.h"

#include "dialects/dtc/DtcAttrs.h"
#include "dialects/dtc/DtcCollectiveOps.h"
#include "dialects/dtc/DtcOps.h"
#include "passes/Passes.h"
#include "passes/Pipelines.h"
#include "passes/autodiff/Autodiff.h"
#include "runtime/support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

#include <map>

namespace dtc {
namespace training {

bool isTokenTensor(mlir::Type type) {
  auto t = llvm::dyn_cast<mlir::RankedTensorType>(type);
  return t && t.getRank() == 2 &&
         llvm::isa<mlir::IntegerType>(t.getElementType()) &&
         !t.getElementType().isInteger(1);
}

mlir::Value scalar(mlir::OpBuilder &b, mlir::Location loc, float value) {
  auto type = mlir::RankedTensorType::get({}, b.getF32Type());
  return d::ConstantOp::create(b, loc,
                               mlir::DenseElementsAttr::get(type, value));
}

GradientResult describeGradient(mlir::func::FuncOp grad, unsigned index) {
  auto ret =
      llvm::cast<mlir::func::ReturnOp>(grad.getBody().front().getTerminator());
  GradientResult p;
  p.parameter =
      grad.getResultAttrOfType<mlir::StringAttr>(index, kGradOfAttrName)
          .getValue()
          .str();
  p.type = tensorType(ret.getOperand(index));
  if (auto sharding =
          grad.getResultAttrOfType<d::ShardingAttr>(index, "dtc.sharding")) {
    for (llvm::StringRef axis : sharding.getPartialAxes())
      if (!llvm::is_contained(p.syncAxes, axis.str()))
        p.syncAxes.push_back(axis.str());
    for (unsigned dim = 0; dim < sharding.getDims().size(); ++dim)
      for (llvm::StringRef axis : sharding.getDimAxes(dim))
        p.splitAxes.push_back(axis.str());
    llvm::sort(p.splitAxes);
  }
  grad.walk([&](d::ParameterOp op) {
    if (op.getName() == p.parameter)
      for (llvm::StringRef name : {"dtc.shard", "dtc.global_type"})
        if (mlir::Attribute attr = op->getAttr(name))
          p.shardAttrs.set(name, attr);
  });
  return p;
}

/// Turns the gradient function into `micro_step`: every gradient is added
/// to its accumulator (a `dtc.state` argument updated in place). With
/// ZeRO-2/3 a sharded parameter's gradient is reduce-scattered over dp as
/// soon as it exists and only this rank's flat part is accumulated, so no
/// full gradient buffer outlives the backward pass. Returns the ZeRO layout.
ZeroLayout accumulateGradients(mlir::func::FuncOp grad,
                               llvm::SmallVectorImpl<GradientResult> &params,
                               const TrainingStepOptions &options) {
  mlir::Block &body = grad.getBody().front();
  auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());
  mlir::OpBuilder b(ret);
  mlir::Location loc = grad.getLoc();
  unsigned numArgs = grad.getNumArguments();
  llvm::SmallVector<mlir::Value> results{ret.getOperand(0)};
  llvm::SmallVector<mlir::DictionaryAttr> resultAttrs{
      grad.getResultAttrDict(0)};
  for (unsigned i = 1; i < ret.getNumOperands(); ++i)
    params.push_back(describeGradient(grad, i));
  ZeroLayout zero = zeroLayoutOf(options, params);
  Collectives comm(b, loc);
  for (unsigned i = 1; i < ret.getNumOperands(); ++i) {
    auto of = grad.getResultAttrOfType<mlir::StringAttr>(i, kGradOfAttrName);
    mlir::Value g = ret.getOperand(i);
    const GradientResult &p = params[i - 1];
    bool scatter = zero.shards(p.parameter) && options.zeroStage >= 2;
    mlir::Type accType = scatter ? mlir::RankedTensorType::get(
                                       {p.type.getNumElements() / zero.parts},
                                       p.type.getElementType())
                                 : g.getType();
    std::string state = "grad:" + of.getValue().str();
    (void)grad.insertArgument(numArgs + i - 1, accType, {}, loc);
    mlir::Value acc = body.getArgument(numArgs + i - 1);
    grad.setArgAttr(numArgs + i - 1, "dtc.state", b.getStringAttr(state));
    grad.setArgAttr(numArgs + i - 1, "dtc.state_role", b.getStringAttr("grad"));
    grad.setArgAttr(numArgs + i - 1, "dtc.state_of", of);
    if (scatter)
      grad.setArgAttr(numArgs + i - 1, "dtc.flat_shard", comm.names(zero.axes));
    // Accumulate as soon as the gradient exists, so it dies there instead
    // of every gradient staying alive until the end of the backward pass.
    mlir::OpBuilder::InsertionGuard guard(b);
    if (mlir::Operation *def = g.getDefiningOp())
      b.setInsertionPointAfter(def);
    if (scatter) {
      llvm::SmallVector<std::string> others = p.syncAxes;
      for (const std::string &axis : zero.axes)
        llvm::erase(others, axis);
      if (!others.empty())
        g = comm.allReduce(g, others);
      g = comm.scatterSum(flatten(b, loc, g), zero.axes, zero.parts,
                          p.syncAxes);
    }
    results.push_back(d::AddOp::create(b, loc, acc, g));
    resultAttrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr("dtc.state", b.getStringAttr(state))));
  }
  mlir::func::ReturnOp::create(b, loc, results);
  ret.erase();
  grad.setFunctionType(b.getFunctionType(body.getArgumentTypes(),
                                         mlir::ValueRange(results).getTypes()));
  grad.setAllResultAttrs(resultAttrs);
  return zero;
}

ZeroLayout zeroLayoutOf(const TrainingStepOptions &options,
                        llvm::ArrayRef<GradientResult> params) {
  ZeroLayout layout;
  if (options.zeroStage == 0)
    return layout;
  // In mesh order: dp outside cp.
  for (const runtime::Mesh::Axis &axis : options.mesh.axes())
    if ((axis.name == "dp" || axis.name == "cp") && axis.size > 1) {
      layout.axes.push_back(axis.name);
      layout.parts *= axis.size;
    }
  // A parameter the propagation already split over a data axis (it may,
  // where that is cheaper: BLOOM's fused qkv weight) keeps that split: ZeRO
  // cuts only parameters every data-parallel rank holds whole.
  for (const GradientResult &p : params)
    if (layout.parts > 1 && p.type.getNumElements() % layout.parts == 0 &&
        llvm::none_of(layout.axes, [&](const std::string &axis) {
          return llvm::is_contained(p.splitAxes, axis);
        }))
      layout.sharded.insert(p.parameter);
  return layout;
}

mlir::Value flatten(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v) {
  auto type = tensorType(v);
  auto flat = mlir::RankedTensorType::get({type.getNumElements()},
                                          type.getElementType());
  return d::ReshapeOp::create(b, loc, flat, v);
}

/// Builds `apply`: the data-parallel gradient sync, global-norm clipping of
/// the averaged gradient, AdamW on every parameter, gradients zeroed for
/// the next step. With ZeRO (docs/partition.md) each data-parallel rank
/// owns 1/dp of every parameter's optimizer state (the flattened local
/// tensor, cut in equal parts): stage 1 all-reduces the gradient and keeps
/// its part, stage 2 reduce-scatters it, and both all-gather the updated
/// parameter; stage 3 keeps only the part of the parameter too.
/// ZeRO-3: a sharded parameter is stored as its flat 1/dp part and
/// all-gathered for its uses in the forward pass and again for those in the
/// backward pass, so the whole tensor lives only while the pass that reads
/// it runs. Each gather is waited right before its first use; with
/// `prefetch` it starts early, while the ops before compute: as many
/// gathers ahead as `prefetchElements` holds (at least one, DeepSpeed's
/// prefetch).
void gatherParametersForUse(mlir::func::FuncOp step, const ZeroLayout &layout,
                            bool prefetch, int64_t prefetchElements) {
  mlir::Block &body = step.getBody().front();
  llvm::DenseMap<mlir::Operation *, unsigned> position;
  unsigned forwardEnd = ~0u;
  for (auto [i, op] : llvm::enumerate(body)) {
    position[&op] = i;
    if (op.hasAttr(kForwardEndAttr))
      forwardEnd = i;
  }
  mlir::OpBuilder b(step.getContext());
  Collectives comm(b, step.getLoc());
  for (d::ParameterOp param :
       llvm::make_early_inc_range(body.getOps<d::ParameterOp>())) {
    if (!layout.shards(param.getName()))
      continue;
    auto local = tensorType(param.getOutput());
    llvm::SmallVector<mlir::OpOperand *> passes[2];
    for (mlir::OpOperand &use : param->getUses())
      passes[position.lookup(use.getOwner()) > forwardEnd].push_back(&use);
    param.getOutput().setType(mlir::RankedTensorType::get(
        {local.getNumElements() / layout.parts}, local.getElementType()));
    param->setAttr("dtc.flat_shard", comm.names(layout.axes));
    for (auto &uses : passes) {
      if (uses.empty())
        continue;
      mlir::Operation *first = uses.front()->getOwner();
      for (mlir::OpOperand *use : uses)
        if (position.lookup(use->getOwner()) < position.lookup(first))
          first = use->getOwner();
      b.setInsertionPoint(first);
      mlir::Value whole = d::ReshapeOp::create(
          b, param.getLoc(), local,
          comm.allGather(param, layout.axes, layout.parts));
      for (mlir::OpOperand *use : uses)
        use->set(whole);
    }
  }
  if (!prefetch)
    return;
  // Gathers in program order. Start k moves up to right after the wait of
  // the earliest gather j whose followers j+1..k, gathered and not yet
  // read, fit in `prefetchElements` together (at least one ahead:
  // DeepSpeed's prefetch), or to its parameter if that comes later, and
  // never above the start before it. Compared by their positions before
  // any move (a moved start takes its anchor's): only starts move, so
  // these stay exact (isBeforeInBlock would renumber the whole block after
  // every move: quadratic in a pipeline step of many passes).
  llvm::DenseMap<mlir::Operation *, unsigned> order;
  for (auto [i, op] : llvm::enumerate(body))
    order[&op] = i;
  struct Gather {
    d::AllGatherStartOp start;
    mlir::Operation *wait;
    int64_t elements;
  };
  llvm::SmallVector<Gather> gathers;
  for (auto start : body.getOps<d::AllGatherStartOp>())
    if (start.getInput().getDefiningOp<d::ParameterOp>()) {
      mlir::Operation *wait = *start->getUsers().begin();
      gathers.push_back(
          {start, wait, tensorType(wait->getResult(0)).getNumElements()});
    }
  unsigned previousAnchor = 0;
  for (unsigned k = 1; k < gathers.size(); ++k) {
    unsigned j = k - 1;
    int64_t inFlight = gathers[k].elements;
    while (j > 0 && inFlight + gathers[j].elements <= prefetchElements)
      inFlight += gathers[j--].elements;
    // The anchors only move down as k grows (the window slides); one shared
    // with the previous start goes after that start, keeping their order.
    unsigned anchor = std::max(j, previousAnchor);
    mlir::Operation *after = gathers[anchor].wait;
    if (k > 1 && anchor == previousAnchor)
      after = gathers[k - 1].start;
    previousAnchor = anchor;
    // A parameter has no operands: it moves up with its gather (a pipeline
    // step reads each where its pass needs it first).
    mlir::Operation *input = gathers[k].start.getInput().getDefiningOp();
    if (order.lookup(after) < order.lookup(input)) {
      input->moveAfter(after);
      order[input] = order.lookup(after);
      after = input;
    }
    if (order.lookup(after) < order.lookup(gathers[k].start)) {
      gathers[k].start->moveAfter(after);
      // Where it is now, for the next start placed after it.
      order[gathers[k].start] = order.lookup(after);
    }
  }
}

namespace {

bool isGroupCollective(mlir::Operation *op) {
  return llvm::isa_and_nonnull<d::AllReduceStartOp, d::AllGatherStartOp,
                               d::ReduceScatterStartOp, d::AllToAllStartOp>(op);
}

/// Op positions of a block and its forward-end marks, taken before a batch
/// of moves: moving only starts up (or only waits down), each past ops that
/// keep their order, leaves the positions of the others' neighbours valid.
struct BlockOrder {
  llvm::DenseMap<mlir::Operation *, unsigned> position;
  llvm::SmallVector<unsigned> forwardEnds;
  llvm::SmallVector<mlir::Operation *> forwardEndOps;

  explicit BlockOrder(mlir::Block &body) {
    for (auto [i, op] : llvm::enumerate(body)) {
      position[&op] = i;
      if (op.hasAttr(kForwardEndAttr)) {
        forwardEnds.push_back(i);
        forwardEndOps.push_back(&op);
      }
    }
  }
  unsigned at(mlir::Operation *op) const { return position.lookup(op); }
};

} // namespace

void scheduleCollectives(mlir::func::FuncOp func) {
  mlir::Block &body = func.getBody().front();
  {
    // Starts up, to right after the last op defining an operand (or the
    // last forward end before the start).
    BlockOrder order(body);
    // The last op moved behind each anchor: ops moved behind the same one
    // keep their order (the row blocks of one gather all read one input).
    llvm::DenseMap<mlir::Operation *, mlir::Operation *> lastBehind;
    for (mlir::Operation &op : llvm::make_early_inc_range(body)) {
      // A slice only collectives read (a chunk of a gathered tensor) moves
      // up first, so that its collective can.
      bool chunkSlice = llvm::isa<d::SliceOp>(op) && !op.use_empty() &&
                        llvm::all_of(op.getUsers(), isGroupCollective);
      if (!isGroupCollective(&op) && !chunkSlice)
        continue;
      mlir::Operation *after = nullptr;
      for (mlir::Value operand : op.getOperands())
        if (mlir::Operation *def = operand.getDefiningOp())
          if (!after || order.at(def) > order.at(after))
            after = def;
      const auto *end = llvm::upper_bound(order.forwardEnds, order.at(&op));
      if (end != order.forwardEnds.begin()) {
        mlir::Operation *barrier =
            order.forwardEndOps[end - order.forwardEnds.begin() - 1];
        if (!after || order.at(barrier) > order.at(after))
          after = barrier;
      }
      mlir::Operation *&previous = lastBehind[after];
      if (previous)
        after = previous;
      previous = &op;
      if (!after)
        op.moveBefore(&body.front());
      else if (after->getNextNode() != &op)
        op.moveAfter(after);
    }
  }
  // Waits down, to right before the first op reading the result (or the
  // first forward end after the wait).
  BlockOrder order(body);
  for (d::WaitOp wait : llvm::to_vector(body.getOps<d::WaitOp>())) {
    if (!isGroupCollective(wait.getHandle().getDefiningOp()))
      continue;
    mlir::Operation *first = nullptr;
    for (mlir::Operation *user : wait->getUsers()) {
      user = body.findAncestorOpInBlock(*user);
      if (!first || order.at(user) < order.at(first))
        first = user;
    }
    if (!first)
      continue;
    const auto *end = llvm::upper_bound(order.forwardEnds, order.at(wait));
    mlir::Operation *target = first;
    if (end != order.forwardEnds.end() && *end < order.at(first))
      target = order.forwardEndOps[end - order.forwardEnds.begin()];
    if (target != wait->getNextNode())
      wait->moveBefore(target);
  }
}

/// ZeRO-2/3 overlap: each gradient's reduce-scatter (started as soon as
/// the gradient exists) is waited, and accumulated, only right before the
/// next one starts (the last one before the return), so it runs during the
/// backward compute in between while at most two whole gradients are in
/// flight.
void deferScatterWaits(mlir::func::FuncOp step) {
  mlir::Block &body = step.getBody().front();
  auto starts = llvm::to_vector(body.getOps<d::ReduceScatterStartOp>());
  for (auto [k, start] : llvm::enumerate(starts)) {
    if (!start->hasOneUse())
      continue;
    auto wait = llvm::dyn_cast<d::WaitOp>(*start->getUsers().begin());
    // The accumulation into a state argument, read only by the return.
    auto movable = [&](mlir::Operation *user) {
      return llvm::isa<d::AddOp>(user) &&
             llvm::all_of(user->getOperands(),
                          [&](mlir::Value v) {
                            return v == wait.getOutput() ||
                                   llvm::isa<mlir::BlockArgument>(v);
                          }) &&
             llvm::all_of(user->getUsers(), [&](mlir::Operation *u) {
               return u == body.getTerminator();
             });
    };
    if (!wait || !llvm::all_of(wait->getUsers(), movable))
      continue;
    mlir::Operation *before = k + 1 < starts.size()
                                  ? starts[k + 1].getOperation()
                                  : body.getTerminator();
    wait->moveBefore(before);
    for (mlir::Operation *user : llvm::make_early_inc_range(wait->getUsers()))
      user->moveBefore(before);
  }
}

/// The overlap of the data-parallel gradient sync with the backward pass:
/// `micro_step_sync`, run for the last micro-batch of a step, is
/// `micro_step` with every gradient that `apply` would all-reduce reduced in
/// buckets instead, each bucket started as soon as its last gradient is
/// accumulated (gradients become final in reverse layer order) and waited
/// at the end, so the reductions run while the rest of the backward pass
/// computes. Returns the parameters whose gradients it syncs; `apply` leaves
/// them alone. ZeRO-2/3 gradients keep their reduce-scatter in `apply`.
llvm::StringSet<> buildSyncingMicroStep(mlir::func::FuncOp step,
                                        llvm::ArrayRef<GradientResult> params,
                                        const ZeroLayout &zeroLayout,
                                        const TrainingStepOptions &options) {
  llvm::StringSet<> synced;
  auto module = step->getParentOfType<mlir::ModuleOp>();
  mlir::func::FuncOp sync = step.clone();
  sync.setSymName("micro_step_sync");
  module.push_back(sync);
  mlir::Block &body = sync.getBody().front();
  auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());
  llvm::DenseMap<mlir::Operation *, unsigned> position;
  for (auto [i, op] : llvm::enumerate(body))
    position[&op] = i;

  // Gradients to sync, in the order they become final.
  struct Ready {
    unsigned result, at;
  };
  llvm::SmallVector<Ready> ready;
  for (auto [i, p] : llvm::enumerate(params)) {
    if (p.syncAxes.empty() ||
        (zeroLayout.shards(p.parameter) && options.zeroStage >= 2))
      continue;
    mlir::Operation *def = ret.getOperand(1 + i).getDefiningOp();
    ready.push_back({static_cast<unsigned>(1 + i), def ? position[def] : 0});
  }
  if (ready.empty()) {
    sync.erase(); // nothing to overlap: `micro_step` serves every call
    return synced;
  }
  llvm::stable_sort(ready,
                    [](const Ready &a, const Ready &b) { return a.at < b.at; });
  // Buckets: consecutive ready gradients with the same axes and element
  // type, up to the bucket size.
  llvm::SmallVector<llvm::SmallVector<Ready>> buckets;
  int64_t bucketBytes = 0;
  for (const Ready &r : ready) {
    const GradientResult &p = params[r.result - 1];
    int64_t bytes =
        p.type.getNumElements() * (p.type.getElementTypeBitWidth() / 8);
    bool fits =
        !buckets.empty() && bucketBytes + bytes <= options.gradBucketBytes &&
        params[buckets.back().front().result - 1].syncAxes == p.syncAxes &&
        params[buckets.back().front().result - 1].type.getElementType() ==
            p.type.getElementType();
    if (!fits) {
      buckets.emplace_back();
      bucketBytes = 0;
    }
    buckets.back().push_back(r);
    bucketBytes += bytes;
  }
  mlir::OpBuilder b(sync.getContext());
  mlir::Location loc = sync.getLoc();
  Collectives comm(b, loc);
  llvm::SmallVector<std::pair<d::AllReduceStartOp, llvm::SmallVector<Ready>>>
      started;
  for (llvm::SmallVector<Ready> &bucket : buckets) {
    mlir::Operation *last =
        ret.getOperand(bucket.back().result).getDefiningOp();
    if (last)
      b.setInsertionPointAfter(last);
    else
      b.setInsertionPoint(ret);
    llvm::SmallVector<mlir::Value> flat;
    for (const Ready &r : bucket)
      flat.push_back(flatten(b, loc, ret.getOperand(r.result)));
    mlir::Value joined = flat.size() == 1
                             ? flat.front()
                             : d::ConcatOp::create(b, loc, flat, 0).getResult();
    started.push_back({comm.startAllReduce(
                           joined, params[bucket.front().result - 1].syncAxes),
                       bucket});
    for (const Ready &r : bucket)
      synced.insert(params[r.result - 1].parameter);
  }
  b.setInsertionPoint(ret);
  for (auto &[start, bucket] : started) {
    mlir::Value reduced = comm.wait(start);
    int64_t offset = 0;
    for (const Ready &r : bucket) {
      auto type = tensorType(ret.getOperand(r.result));
      int64_t n = type.getNumElements();
      mlir::Value part = reduced;
      if (bucket.size() > 1)
        part = d::SliceOp::create(
            b, loc, mlir::RankedTensorType::get({n}, type.getElementType()),
            reduced, b.getDenseI64ArrayAttr({offset}),
            b.getDenseI64ArrayAttr({offset + n}), b.getDenseI64ArrayAttr({1}));
      ret->setOperand(r.result, d::ReshapeOp::create(b, loc, type, part));
      offset += n;
    }
  }
  return synced;
}

namespace {

/// Builds `apply`: the step's gradient sync, the clipped global norm and
/// one AdamW update per parameter, in that order, each phase one method.
class ApplyBuilder {
public:
  ApplyBuilder(mlir::ModuleOp module, llvm::ArrayRef<GradientResult> params,
               const TrainingStepOptions &options, const ZeroLayout &zeroLayout,
               const llvm::StringSet<> &syncedInStep, bool scatteredInStep)
      : params(params), options(options), zeroLayout(zeroLayout),
        syncedInStep(syncedInStep), scatteredInStep(scatteredInStep),
        b(module.getBodyRegion()), loc(module.getLoc()), comm(b, loc),
        dpAxes(zeroLayout.axes), dp(zeroLayout.parts) {
    b.setInsertionPointToEnd(module.getBody());
    dpAxesAttr = b.getStrArrayAttr(
        llvm::SmallVector<llvm::StringRef>(dpAxes.begin(), dpAxes.end()));
  }

  void build(llvm::ArrayRef<std::string> extraNormAxes,
             llvm::ArrayRef<StageSharedGradient> sharedOverStages) {
    createFunction();
    startGradientSyncs(sharedOverStages);
    sumOverStages(sharedOverStages);
    finishGradientSyncs();
    mlir::Value norm = gradientNorm(extraNormAxes);
    writeUpdates(norm, gradScale(norm));
  }

private:
  /// The signature: lr, step, each parameter's gradient accumulator and
  /// AdamW moments, and 1 / the micro-batches accumulated.
  void createFunction();
  /// Starts the all-reduce of each gradient over the axes it is a partial
  /// sum over that the step did not reduce.
  void startGradientSyncs(llvm::ArrayRef<StageSharedGradient> shared);
  /// Sums the gradients of parameters several pipeline stages read.
  void sumOverStages(llvm::ArrayRef<StageSharedGradient> shared);
  /// Waits for the syncs and takes each ZeRO-sharded gradient's part.
  void finishGradientSyncs();
  /// ||g / A|| over all parameters.
  mlir::Value gradientNorm(llvm::ArrayRef<std::string> extraNormAxes);
  /// The factor AdamW applies to g: 1 / A, clipped by the norm.
  mlir::Value gradScale(mlir::Value norm);
  /// One dtc.adamw per parameter, its results and the zeroed accumulator
  /// returned as the new state.
  void writeUpdates(mlir::Value norm, mlir::Value scale);

  /// Whether `p`'s gradient is reduce-scattered over the ZeRO axes here.
  bool scatters(const GradientResult &p) const {
    return zeroLayout.shards(p.parameter) && options.zeroStage >= 2 &&
           !sharedHere.contains(p.parameter);
  }
  void addStateArg(mlir::Type type, const std::string &role,
                   const std::string &param, bool flat);

  llvm::ArrayRef<GradientResult> params;
  const TrainingStepOptions &options;
  const ZeroLayout &zeroLayout;
  const llvm::StringSet<> &syncedInStep;
  bool scatteredInStep;
  mlir::OpBuilder b;
  mlir::Location loc;
  Collectives comm;
  /// ZeRO's replica axes (dp, and cp inside it) and their rank count.
  llvm::ArrayRef<std::string> dpAxes;
  const int64_t dp;
  mlir::ArrayAttr dpAxesAttr;

  llvm::SmallVector<mlir::Type> argTypes;
  llvm::SmallVector<mlir::DictionaryAttr> argAttrs;
  mlir::func::FuncOp apply;
  mlir::Block *body = nullptr;
  mlir::Value lr, step, inverseAccum;
  /// Per parameter: its gradient, the sync in flight, the axes its norm's
  /// partial sum of squares is reduced over.
  llvm::SmallVector<mlir::Value> grads;
  llvm::SmallVector<d::AllReduceStartOp> syncs;
  llvm::SmallVector<llvm::SmallVector<std::string>> normAxes;
  /// Stage-shared parameters held here, and those whose norm another
  /// stage counts.
  llvm::StringSet<> sharedHere, countedElsewhere;
};

void ApplyBuilder::addStateArg(mlir::Type type, const std::string &role,
                               const std::string &param, bool flat) {
  argTypes.push_back(type);
  std::string name = role == "grad" ? "grad:" + param : role + ":" + param;
  llvm::SmallVector<mlir::NamedAttribute> attrs = {
      b.getNamedAttr("dtc.state", b.getStringAttr(name)),
      b.getNamedAttr("dtc.state_role", b.getStringAttr(role)),
      b.getNamedAttr("dtc.state_of", b.getStringAttr(param))};
  // A ZeRO moment: this rank's flat part of the parameter's shard.
  if (flat)
    attrs.push_back(b.getNamedAttr("dtc.flat_shard", dpAxesAttr));
  argAttrs.push_back(b.getDictionaryAttr(attrs));
}

void ApplyBuilder::createFunction() {
  auto f32Scalar = mlir::RankedTensorType::get({}, b.getF32Type());
  argTypes = {f32Scalar, f32Scalar};
  argAttrs = {
      b.getDictionaryAttr(b.getNamedAttr("dtc.feed", b.getStringAttr("lr"))),
      b.getDictionaryAttr(b.getNamedAttr("dtc.feed", b.getStringAttr("step")))};
  for (const GradientResult &p : params) {
    // Optimizer moments of a ZeRO-sharded parameter: its flat part.
    mlir::Type stateType = p.type;
    if (zeroLayout.shards(p.parameter))
      stateType = mlir::RankedTensorType::get({p.type.getNumElements() / dp},
                                              p.type.getElementType());
    bool flat = zeroLayout.shards(p.parameter);
    // ZeRO-2/3 accumulate the reduce-scattered part (micro_step).
    bool scattered = flat && options.zeroStage >= 2 && scatteredInStep;
    addStateArg(scattered ? stateType : mlir::Type(p.type), "grad", p.parameter,
                scattered);
    addStateArg(stateType, "exp_avg", p.parameter, flat);
    addStateArg(stateType, "exp_avg_sq", p.parameter, flat);
  }
  // Last: 1 / the micro-batches accumulated this step, fed by the runtime
  // so that a run may accumulate another number than compiled (`dtc run
  // --global-batch`).
  argTypes.push_back(f32Scalar);
  argAttrs.push_back(b.getDictionaryAttr(
      b.getNamedAttr("dtc.feed", b.getStringAttr("inverse_micro_batches"))));
  apply = mlir::func::FuncOp::create(b, loc, "apply",
                                     b.getFunctionType(argTypes, {}));
  body = apply.addEntryBlock();
  b.setInsertionPointToStart(body);
  lr = body->getArgument(0);
  step = body->getArgument(1);
  inverseAccum = body->getArguments().back();
  if (!options.mesh.axes().empty())
    apply->setAttr(mlir::dtc::kMeshAttrName,
                   mlir::dtc::MeshAttr::get(b.getContext(), options.mesh));
}

// The gradient sync: each accumulated gradient is reduced over the axes it
// is a partial sum over, once per step. All-reduces start before the first
// wait, so the norm of one gradient is computed while the next is on the
// wire. A ZeRO-2/3 gradient is reduce-scattered over dp instead (after an
// all-reduce over any other axis it is partial over). A gradient summed
// over pipeline stages is reduced whole first, its ZeRO part sliced
// afterwards: each stage's part must be complete before they are added,
// and stages may differ in what their step reduced.
void ApplyBuilder::startGradientSyncs(
    llvm::ArrayRef<StageSharedGradient> shared) {
  for (const StageSharedGradient &s : shared)
    if (s.held)
      sharedHere.insert(s.parameter);
  syncs.assign(params.size(), nullptr);
  for (auto [i, p] : llvm::enumerate(params)) {
    mlir::Value g = body->getArgument(2 + 3 * i);
    llvm::SmallVector<std::string> axes = p.syncAxes;
    bool scattered = zeroLayout.shards(p.parameter) && options.zeroStage >= 2 &&
                     scatteredInStep;
    if (syncedInStep.contains(p.parameter) || scattered)
      axes.clear(); // reduced by micro_step_sync or micro_step
    if (scatters(p))
      for (const std::string &axis : dpAxes)
        llvm::erase(axes, axis);
    if (!axes.empty())
      syncs[i] = comm.startAllReduce(g, axes);
    grads.push_back(g);
  }
}

// Each stage's part complete (synced above), summed over those stages.
void ApplyBuilder::sumOverStages(llvm::ArrayRef<StageSharedGradient> shared) {
  for (const StageSharedGradient &s : shared) {
    if (!s.held) {
      comm.allReduce(d::ConstantOp::create(
                         b, loc,
                         mlir::DenseElementsAttr::get(
                             s.type, b.getZeroAttr(s.type.getElementType()))),
                     {s.axis});
      continue;
    }
    size_t i = llvm::find_if(params,
                             [&](const GradientResult &p) {
                               return p.parameter == s.parameter;
                             }) -
               params.begin();
    if (syncs[i])
      grads[i] = comm.wait(syncs[i]);
    syncs[i] = nullptr;
    // Whole on every stage for the sum (stages may split their copies
    // differently), then this rank's part again.
    struct Split {
      int64_t dim, block;
      std::string axis;
    };
    llvm::SmallVector<Split> splits;
    if (auto sharding = llvm::dyn_cast_or_null<d::ShardingAttr>(s.shard))
      for (unsigned dim = 0; dim < sharding.getDims().size(); ++dim)
        for (llvm::StringRef axis : sharding.getDimAxes(dim))
          splits.push_back({dim, sharding.getBlocks()[dim], axis.str()});
    llvm::SmallVector<mlir::RankedTensorType> partTypes;
    mlir::Value g = grads[i];
    for (const Split &split : splits) {
      auto part = tensorType(g);
      llvm::SmallVector<int64_t> shape(part.getShape());
      shape[split.dim] = s.type.getDimSize(split.dim);
      partTypes.push_back(part);
      g = comm.allGather(g, split.axis, split.dim, split.block,
                         part.clone(shape));
    }
    g = comm.allReduce(g, {s.axis});
    for (size_t k = splits.size(); k-- > 0;)
      g = comm.slice(g, splits[k].axis, splits[k].dim, splits[k].block,
                     partTypes[k]);
    grads[i] = g;
    if (!s.countsInNorm)
      countedElsewhere.insert(s.parameter);
  }
}

void ApplyBuilder::finishGradientSyncs() {
  for (auto [i, p] : llvm::enumerate(params)) {
    if (syncs[i])
      grads[i] = comm.wait(syncs[i]);
    normAxes.push_back(p.splitAxes);
    llvm::sort(normAxes.back());
    if (!zeroLayout.shards(p.parameter))
      continue;
    if (options.zeroStage < 2 || !scatteredInStep) {
      mlir::Value flat = flatten(b, loc, grads[i]);
      grads[i] = scatters(p) ? comm.scatterSum(flat, dpAxes, dp, p.syncAxes)
                             : comm.slice(flat, dpAxes, dp);
    }
    llvm::append_range(normAxes.back(), dpAxes);
    llvm::sort(normAxes.back());
  }
}

// A split gradient's local sum of squares is summed over its split axes
// (once per distinct set of axes); a replicated one counts once.
mlir::Value
ApplyBuilder::gradientNorm(llvm::ArrayRef<std::string> extraNormAxes) {
  std::map<llvm::SmallVector<std::string>, mlir::Value> sumSquaresByAxes;
  for (auto [i, p] : llvm::enumerate(params)) {
    if (countedElsewhere.contains(p.parameter))
      continue;
    mlir::Value g = grads[i];
    llvm::SmallVector<int64_t> all;
    for (int64_t dim = 0; dim < tensorType(g).getRank(); ++dim)
      all.push_back(dim);
    mlir::Value squares = d::MulOp::create(b, loc, g, g);
    mlir::Value s =
        d::ReduceSumOp::create(b, loc, squares, b.getDenseI64ArrayAttr(all));
    if (!p.type.getElementType().isF32())
      s = d::CastOp::create(b, loc, s, mlir::TypeAttr::get(b.getF32Type()));
    mlir::Value &partial = sumSquaresByAxes[normAxes[i]];
    partial = partial ? d::AddOp::create(b, loc, partial, s) : s;
  }
  mlir::Value sumSquares;
  for (auto &[axes, partial] : sumSquaresByAxes) {
    mlir::Value s = axes.empty() ? partial : comm.allReduce(partial, axes);
    sumSquares = sumSquares ? d::AddOp::create(b, loc, sumSquares, s) : s;
  }
  // Then over the pipeline stages, in one all-reduce of their totals: the
  // sets of split axes differ from stage to stage, and a collective over
  // both the stage axes and "pp" would wait for a peer stage that has none.
  if (!extraNormAxes.empty())
    sumSquares = comm.allReduce(sumSquares, extraNormAxes);
  return d::MulOp::create(b, loc, d::SqrtOp::create(b, loc, sumSquares),
                          inverseAccum);
}

mlir::Value ApplyBuilder::gradScale(mlir::Value norm) {
  mlir::Value scale = inverseAccum;
  if (options.optimizer.gradClip <= 0)
    return scale;
  mlir::Value clip = d::MinOp::create(
      b, loc, scalar(b, loc, 1.0f),
      d::DivOp::create(
          b, loc,
          scalar(b, loc, static_cast<float>(options.optimizer.gradClip)),
          d::AddOp::create(b, loc, norm, scalar(b, loc, 1e-6f))));
  return d::MulOp::create(b, loc, clip, scale);
}

void ApplyBuilder::writeUpdates(mlir::Value norm, mlir::Value scale) {
  llvm::SmallVector<mlir::Value> results{norm};
  llvm::SmallVector<mlir::DictionaryAttr> resultAttrs{b.getDictionaryAttr(
      b.getNamedAttr("dtc.name", b.getStringAttr("grad_norm")))};
  auto writes = [&](mlir::Value v, const std::string &state) {
    results.push_back(v);
    resultAttrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr("dtc.state", b.getStringAttr(state))));
  };
  const OptimizerConfig &opt = options.optimizer;
  for (auto [i, p] : llvm::enumerate(params)) {
    mlir::Value g = grads[i];
    mlir::Value m = body->getArgument(3 + 3 * i);
    mlir::Value v = body->getArgument(4 + 3 * i);
    bool sharded = zeroLayout.shards(p.parameter);
    bool stage3 = sharded && options.zeroStage >= 3;
    mlir::Type storedType = stage3 ? tensorType(g) : mlir::Type(p.type);
    auto parameterOp = d::ParameterOp::create(b, loc, storedType, p.parameter);
    for (const mlir::NamedAttribute &attr : p.shardAttrs)
      parameterOp->setAttr(attr.getName(), attr.getValue());
    if (stage3)
      parameterOp->setAttr("dtc.flat_shard", dpAxesAttr);
    mlir::Value param = parameterOp;
    if (sharded && !stage3)
      param = comm.slice(flatten(b, loc, param), dpAxes, dp);
    // Megatron and nanoGPT decay matrices only, not biases and norm scales.
    double decay = p.type.getRank() >= 2 ? opt.weightDecay : 0.0;
    mlir::Type type = param.getType();
    mlir::OperationState state(loc, "dtc.adamw");
    state.addOperands({param, g, m, v, lr, step, scale});
    state.addTypes({type, type, type});
    state.addAttribute("beta1", b.getF64FloatAttr(opt.beta1));
    state.addAttribute("beta2", b.getF64FloatAttr(opt.beta2));
    state.addAttribute("epsilon", b.getF64FloatAttr(opt.epsilon));
    state.addAttribute("weight_decay", b.getF64FloatAttr(decay));
    mlir::Operation *adamw = b.create(state);
    mlir::Value updated = adamw->getResult(0);
    if (sharded && !stage3)
      updated = d::ReshapeOp::create(b, loc, p.type,
                                     comm.allGather(updated, dpAxes, dp));
    writes(updated, p.parameter);
    writes(adamw->getResult(1), "exp_avg:" + p.parameter);
    writes(adamw->getResult(2), "exp_avg_sq:" + p.parameter);
    auto accType = llvm::cast<mlir::RankedTensorType>(
        body->getArgument(2 + 3 * i).getType());
    auto zero = mlir::DenseElementsAttr::get(
        accType, b.getZeroAttr(accType.getElementType()));
    writes(d::ConstantOp::create(b, loc, zero), "grad:" + p.parameter);
  }
  mlir::func::ReturnOp::create(b, loc, results);
  apply.setFunctionType(
      b.getFunctionType(argTypes, mlir::ValueRange(results).getTypes()));
  apply.setAllArgAttrs(argAttrs);
  apply.setAllResultAttrs(resultAttrs);
}

} // namespace

void buildApply(mlir::ModuleOp module, llvm::ArrayRef<GradientResult> params,
                const TrainingStepOptions &options,
                const ZeroLayout &zeroLayout,
                llvm::ArrayRef<std::string> extraNormAxes,
                const llvm::StringSet<> &syncedInStep, bool scatteredInStep,
                llvm::ArrayRef<StageSharedGradient> sharedOverStages) {
  ApplyBuilder(module, params, options, zeroLayout, syncedInStep,
               scatteredInStep)
      .build(extraNormAxes, sharedOverStages);
}

//===----------------------------------------------------------------------===//
// What one training pass leaves for a later one, on the module.
//===----------------------------------------------------------------------===//

void writeStepInfo(mlir::ModuleOp module, const TrainingStepInfo &info) {
  mlir::Builder b(module.getContext());
  auto i64 = [&](llvm::StringRef name, int64_t v) {
    return b.getNamedAttr(name, b.getI64IntegerAttr(v));
  };
  llvm::SmallVector<mlir::NamedAttribute> fields{
      i64("micro_batch", info.microBatch), i64("seq_len", info.seqLen),
      i64("vocab", info.vocab), i64("moe_layers", info.moeLayers),
      i64("moe_experts", info.moeExperts)};
  if (!info.objective.empty())
    fields.push_back(
        b.getNamedAttr("objective", b.getStringAttr(info.objective)));
  if (info.lossSumsCountedLabels)
    fields.push_back(
        b.getNamedAttr("loss_sums_counted_labels", b.getUnitAttr()));
  // What the runtime needs to make the objective's data.
  if (info.objective == "masked-lm") {
    fields.push_back(i64("mask_token_id", info.maskTokenId));
    fields.push_back(b.getNamedAttr("mask_probability",
                                    b.getF64FloatAttr(info.maskProbability)));
  }
  if (info.objective == "seq2seq")
    fields.push_back(i64("decoder_start_token_id", info.decoderStartTokenId));
  // A pipeline step's (dtc-pipeline-split): all micro-batches per call.
  if (info.stackedMicroBatches) {
    fields.push_back(i64("micro_batches_per_call", info.microBatchesPerCall));
    fields.push_back(b.getNamedAttr("stacked", b.getUnitAttr()));
  }
  module->setAttr(kStepInfoAttr, b.getDictionaryAttr(fields));
}

llvm::Expected<TrainingStepInfo> readStepInfo(mlir::ModuleOp module) {
  auto dict = module->getAttrOfType<mlir::DictionaryAttr>(kStepInfoAttr);
  if (!dict)
    return failure("training step: the module has no {0} (run dtc-bind-loss "
                   "first)",
                   kStepInfoAttr);
  auto get = [&](llvm::StringRef name) -> int64_t {
    auto v = dict.getAs<mlir::IntegerAttr>(name);
    return v ? v.getInt() : 0;
  };
  TrainingStepInfo info;
  info.microBatch = get("micro_batch");
  info.seqLen = get("seq_len");
  info.vocab = get("vocab");
  info.moeLayers = get("moe_layers");
  info.moeExperts = get("moe_experts");
  if (auto objective = dict.getAs<mlir::StringAttr>("objective"))
    info.objective = objective.getValue().str();
  info.lossSumsCountedLabels =
      static_cast<bool>(dict.get("loss_sums_counted_labels"));
  if (auto v = dict.getAs<mlir::IntegerAttr>("mask_token_id"))
    info.maskTokenId = v.getInt();
  if (auto v = dict.getAs<mlir::FloatAttr>("mask_probability"))
    info.maskProbability = v.getValueAsDouble();
  if (auto v = dict.getAs<mlir::IntegerAttr>("decoder_start_token_id"))
    info.decoderStartTokenId = v.getInt();
  if (dict.get("stacked")) {
    info.stackedMicroBatches = true;
    info.microBatchesPerCall = get("micro_batches_per_call");
  }
  return info;
}

/// The gradient table `dtc-micro-step` hands to `dtc-build-apply`.
static mlir::ArrayAttr stringArray(mlir::Builder &b,
                                   llvm::ArrayRef<std::string> strings) {
  llvm::SmallVector<llvm::StringRef> refs(strings.begin(), strings.end());
  return b.getStrArrayAttr(refs);
}

static llvm::SmallVector<std::string> stringsOf(mlir::Attribute attr) {
  llvm::SmallVector<std::string> strings;
  if (auto array = llvm::dyn_cast_or_null<mlir::ArrayAttr>(attr))
    for (auto s : array.getAsRange<mlir::StringAttr>())
      strings.push_back(s.getValue().str());
  return strings;
}

void writeGradientTable(mlir::ModuleOp module, const StepGradients &table) {
  mlir::Builder b(module.getContext());
  llvm::SmallVector<mlir::Attribute> gradients;
  for (const GradientResult &p : table.params) {
    llvm::SmallVector<mlir::NamedAttribute> fields{
        b.getNamedAttr("parameter", b.getStringAttr(p.parameter)),
        b.getNamedAttr("type", mlir::TypeAttr::get(p.type)),
        b.getNamedAttr("sync_axes", stringArray(b, p.syncAxes)),
        b.getNamedAttr("split_axes", stringArray(b, p.splitAxes)),
        b.getNamedAttr("parameter_attrs",
                       p.shardAttrs.getDictionary(module.getContext()))};
    if (table.syncedInStep.contains(p.parameter))
      fields.push_back(b.getNamedAttr("synced_in_step", b.getUnitAttr()));
    gradients.push_back(b.getDictionaryAttr(fields));
  }
  llvm::SmallVector<std::string> sharded;
  for (const GradientResult &p : table.params)
    if (table.zero.sharded.contains(p.parameter))
      sharded.push_back(p.parameter);
  module->setAttr(
      kGradientTableAttr,
      b.getDictionaryAttr(
          {b.getNamedAttr("mesh", mlir::dtc::MeshAttr::get(module.getContext(),
                                                           table.mesh)),
           b.getNamedAttr("zero_stage", b.getI64IntegerAttr(table.zeroStage)),
           b.getNamedAttr("zero_axes", stringArray(b, table.zero.axes)),
           b.getNamedAttr("zero_parts", b.getI64IntegerAttr(table.zero.parts)),
           b.getNamedAttr("zero_sharded", stringArray(b, sharded)),
           b.getNamedAttr("gradients", b.getArrayAttr(gradients))}));
}

llvm::Expected<StepGradients> readGradientTable(mlir::ModuleOp module) {
  auto dict = module->getAttrOfType<mlir::DictionaryAttr>(kGradientTableAttr);
  auto gradients =
      dict ? dict.getAs<mlir::ArrayAttr>("gradients") : mlir::ArrayAttr();
  if (!gradients)
    return failure("training step: the module has no {0} (run dtc-micro-step "
                   "first)",
                   kGradientTableAttr);
  StepGradients table;
  if (auto mesh = dict.getAs<mlir::dtc::MeshAttr>("mesh"))
    table.mesh = mesh.getMesh();
  if (auto stage = dict.getAs<mlir::IntegerAttr>("zero_stage"))
    table.zeroStage = static_cast<int>(stage.getInt());
  for (const std::string &axis : stringsOf(dict.get("zero_axes")))
    table.zero.axes.push_back(axis);
  if (auto parts = dict.getAs<mlir::IntegerAttr>("zero_parts"))
    table.zero.parts = parts.getInt();
  for (const std::string &name : stringsOf(dict.get("zero_sharded")))
    table.zero.sharded.insert(name);
  for (auto entry : gradients.getAsRange<mlir::DictionaryAttr>()) {
    GradientResult p;
    auto name = entry.getAs<mlir::StringAttr>("parameter");
    auto type = entry.getAs<mlir::TypeAttr>("type");
    if (!name || !type || !llvm::isa<mlir::RankedTensorType>(type.getValue()))
      return failure("training step: malformed {0} entry {1}",
                     kGradientTableAttr, entry);
    p.parameter = name.getValue().str();
    p.type = llvm::cast<mlir::RankedTensorType>(type.getValue());
    p.syncAxes = stringsOf(entry.get("sync_axes"));
    p.splitAxes = stringsOf(entry.get("split_axes"));
    if (auto attrs = entry.getAs<mlir::DictionaryAttr>("parameter_attrs"))
      p.shardAttrs = mlir::NamedAttrList(attrs);
    if (entry.get("synced_in_step"))
      table.syncedInStep.insert(p.parameter);
    table.params.push_back(std::move(p));
  }
  return table;
}

//===----------------------------------------------------------------------===//
// The stages of the data/tensor-parallel step (TrainingPasses.cpp wraps
// each as a pass).
//===----------------------------------------------------------------------===//

mlir::LogicalResult buildStepGradient(mlir::ModuleOp module,
                                      llvm::StringRef stepName) {
  auto funcs = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
  if (funcs.size() != 1)
    return module.emitError("training step: expected one forward function, "
                            "found ")
           << funcs.size();
  mlir::func::FuncOp forward = funcs.front();
  auto grad = buildGradientFunction(forward, 0, stepName);
  if (mlir::failed(grad))
    return mlir::failure();
  forward.erase();
  // The loss ends the forward pass (ZeRO-3 gathers parameters again after
  // it); the mark survives recompute and partitioning.
  if (mlir::Operation *lossOp = grad->getBody()
                                    .front()
                                    .getTerminator()
                                    ->getOperand(0)
                                    .getDefiningOp())
    lossOp->setAttr(kForwardEndAttr, mlir::UnitAttr::get(module.getContext()));
  return mlir::success();
}

llvm::Error buildMicroStep(mlir::ModuleOp module,
                           const TrainingStepOptions &options) {
  auto grad = module.lookupSymbol<mlir::func::FuncOp>("micro_step");
  if (!grad)
    return failure("training step: the module has no @micro_step (run "
                   "dtc-step-gradient first)");
  StepGradients table;
  table.mesh = options.mesh;
  table.zeroStage = options.zeroStage;
  table.zero = accumulateGradients(grad, table.params, options);
  if (table.params.empty())
    return badInput("the model has no trainable parameters (no float "
                    "initializer reaches the loss)");
  if (options.zeroStage >= 3)
    gatherParametersForUse(grad, table.zero, options.overlap,
                           options.zeroPrefetchElements);
  if (options.zeroStage >= 2 && options.overlap)
    deferScatterWaits(grad);
  if (options.overlap)
    table.syncedInStep =
        buildSyncingMicroStep(grad, table.params, table.zero, options);
  writeGradientTable(module, table);
  return llvm::Error::success();
}

llvm::Error buildApplyFromGradientTable(mlir::ModuleOp module,
                                        const OptimizerConfig &optimizer) {
  auto table = readGradientTable(module);
  if (!table)
    return table.takeError();
  TrainingStepOptions options;
  options.mesh = table->mesh;
  options.zeroStage = table->zeroStage;
  options.optimizer = optimizer;
  buildApply(module, table->params, options, table->zero, {},
             table->syncedInStep, /*scatteredInStep=*/true);
  module->removeAttr(kGradientTableAttr);
  return llvm::Error::success();
}

} // namespace training

using namespace training;

/// Sets the AdamW options of a pass (members beta1 ... gradClip).
template <typename PassOptions>
static void setOptimizerOptions(PassOptions &o, const OptimizerConfig &c) {
  o.beta1 = c.beta1;
  o.beta2 = c.beta2;
  o.epsilon = c.epsilon;
  o.weightDecay = c.weightDecay;
  o.gradClip = c.gradClip;
}

/// With overlap: TP collectives in row blocks (with chunks > 1), then every
/// collective started early and waited for late, on each function.
static void addCollectiveOverlap(mlir::OpPassManager &pm,
                                 const TrainingStepOptions &options) {
  namespace md = mlir::dtc;
  if (!options.overlap)
    return;
  if (options.tpCommChunks > 1) {
    md::DtcChunkTpCollectivesOptions chunk;
    chunk.chunks = options.tpCommChunks;
    pm.addNestedPass<mlir::func::FuncOp>(
        md::createDtcChunkTpCollectives(chunk));
  }
  pm.addNestedPass<mlir::func::FuncOp>(md::createDtcScheduleCollectives());
}

/// The pipeline-parallel step: the forward function cut into chunk
/// modules, on each of which the data/tensor-parallel step's registered
/// passes run nested (sharding, the chunk's gradient, recompute, its
/// boundary layouts, partitioning, collective chunking and scheduling),
/// then the chunks grouped into stages.
static void addPipelineStep(mlir::OpPassManager &pm,
                            const TrainingStepOptions &options) {
  namespace md = mlir::dtc;
  md::DtcPipelineSplitOptions split;
  // Nested passes take the mesh as their (textual) option.
  split.mesh = options.mesh.str();
  split.stages = options.pipelineStages;
  split.virtualStages = options.virtualStages;
  split.schedule = scheduleName(options.schedule).str();
  split.microBatches = options.gradAccum;
  split.overlap = options.overlap;
  pm.addPass(md::createDtcPipelineSplit(split));

  mlir::OpPassManager &chunk = pm.nest<mlir::ModuleOp>();
  ForwardPartitionOptions shard;
  shard.mesh = training::stageMesh(options.mesh).str();
  shard.sequenceParallel = options.sequenceParallel;
  shard.flopsPerByte = options.flopsPerByte;
  shard.partition = false;
  bool sharded = !shard.mesh.empty();
  // The objective is sharded first; the parameters keep these layouts in
  // both passes of the chunk.
  if (sharded)
    buildForwardPartitionPipeline(chunk, shard);
  chunk.addPass(md::createDtcChunkGradient());
  if (options.recompute != Recompute::None) {
    md::DtcRecomputeOptions recompute;
    recompute.mode = recomputeName(options.recompute).str();
    chunk.addPass(md::createDtcRecompute(recompute));
  }
  md::DtcChunkBoundaryOptions boundary;
  boundary.mesh = shard.mesh;
  chunk.addPass(md::createDtcChunkBoundary(boundary));
  if (sharded) {
    shard.partition = true;
    shard.deferGradientSync = true;
    buildForwardPartitionPipeline(chunk, shard);
  }
  addCollectiveOverlap(chunk, options);

  md::DtcPipelineAssembleOptions assemble;
  assemble.zeroStage = options.zeroStage;
  assemble.zeroPrefetchElements = options.zeroPrefetchElements;
  setOptimizerOptions(assemble, options.optimizer);
  pm.addPass(md::createDtcPipelineAssemble(assemble));
}

void buildTrainingPipeline(mlir::OpPassManager &pm,
                           const TrainingStepOptions &options) {
  namespace md = mlir::dtc;
  md::DtcPropagateShardingOptions propagate;
  // Nested passes take the mesh as their (textual) option.
  propagate.mesh = options.mesh.str();
  propagate.sequenceParallel = options.sequenceParallel;
  propagate.flopsPerByte = options.flopsPerByte;
  bool sharded = !options.mesh.axes().empty();

  md::DtcBindLossOptions bind;
  bind.objective = options.loss.objective;
  bind.lossOutput = options.loss.lossOutput;
  bind.feeds = llvm::to_vector(options.loss.feeds);
  bind.maskTokenId = options.loss.maskTokenId;
  bind.maskProbability = options.loss.maskProbability;
  bind.decoderStartTokenId = options.loss.decoderStartTokenId;
  pm.addPass(md::createDtcBindLoss(bind));
  if (options.pipelineStages > 1) {
    addPipelineStep(pm, options);
    return;
  }
  // Multi-rank: shard the forward pass first (the model propagation is
  // built for: it prices each forward choice with its backward), so that
  // the gradient function, whose parameters keep these annotations, is
  // sharded around the same parameter layouts.
  if (sharded)
    pm.addPass(md::createDtcPropagateSharding(propagate));
  pm.addPass(md::createDtcStepGradient());
  // Recompute hook (docs/recompute.md): the loss (result 0) ends the
  // forward part of the gradient function.
  if (options.recompute != Recompute::None) {
    md::DtcRecomputeOptions recompute;
    recompute.mode = recomputeName(options.recompute).str();
    pm.addPass(md::createDtcRecompute(recompute));
  }
  // Partitioned after recompute, so that recomputed forward ops are
  // partitioned like the originals; its gradients stay partial sums,
  // reduced once per step.
  if (sharded) {
    pm.addPass(md::createDtcPropagateSharding(propagate));
    md::DtcPartitionOptions partition;
    partition.mesh = options.mesh.str();
    partition.deferGradientSync = true;
    pm.addPass(md::createDtcPartition(partition));
  }
  addCollectiveOverlap(pm, options);
  md::DtcMicroStepOptions micro;
  micro.mesh = options.mesh.str();
  micro.zeroStage = options.zeroStage;
  micro.overlap = options.overlap;
  micro.gradBucketBytes = options.gradBucketBytes;
  micro.zeroPrefetchElements = options.zeroPrefetchElements;
  pm.addPass(md::createDtcMicroStep(micro));
  md::DtcBuildApplyOptions apply;
  setOptimizerOptions(apply, options.optimizer);
  pm.addPass(md::createDtcBuildApply(apply));
}

namespace {
/// Which pass of a pipeline failed.
struct FailedPass : mlir::PassInstrumentation {
  std::string *argument;
  explicit FailedPass(std::string *argument) : argument(argument) {}
  void runAfterPassFailed(mlir::Pass *pass, mlir::Operation *) override {
    if (argument->empty())
      *argument = pass->getArgument().str();
  }
};
} // namespace

llvm::Expected<TrainingStepInfo>
buildTrainingStep(mlir::ModuleOp module, const TrainingStepOptions &options) {
  mlir::MLIRContext *context = module.getContext();
  mlir::PassManager pm(context, mlir::ModuleOp::getOperationName());
  buildTrainingPipeline(pm, options);
  std::string failedPass, message;
  pm.addInstrumentation(std::make_unique<FailedPass>(&failedPass));
  // The first error is this function's; it still reaches the caller's
  // handler (the driver names the model with it).
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic &diag) {
    if (diag.getSeverity() == mlir::DiagnosticSeverity::Error &&
        message.empty())
      message = diag.str();
    return mlir::failure();
  });
  if (mlir::failed(pm.run(module))) {
    // A pass that failed on the model itself (binding its data, finding
    // its parameters, cutting it into stages) said so on the module.
    if (module->hasAttr(kBadInputAttr))
      return badInput("{0}", message);
    return failure("training step: {0} failed: {1}", failedPass,
                   message.empty() ? "see the error above" : message);
  }
  auto info = readStepInfo(module);
  module->removeAttr(kStepInfoAttr);
  return info;
}

} // namespace dtc
