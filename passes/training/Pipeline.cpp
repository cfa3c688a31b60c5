//===- Pipeline.cpp - The pipeline-parallel training step -----------------===//
//
// Splits the loss-bound forward function into pipeline stages and builds,
// per stage, one module that a group of ranks runs (docs/partition.md,
// "Pipeline stages"):
//
//   @pipeline_step(tokens[m], labels[m] (or a classifier's inputs[m],
//                  labels[m]), grad accumulators...)
//       -> (loss, accumulators + this stage's gradients over m micro-batches)
//   @apply(lr, step, grad accumulators...)  (as without pipelining)
//
// The model is cut into pp x vpp chunks at points where exactly one
// activation (the residual stream) crosses, balancing their estimated
// work; chunk c runs on stage c % pp (with vpp > 1, Megatron-LM's
// interleaved placement). Each chunk has one gradient function: the
// gradient of sum(output * d output) (or of the loss on the last chunk),
// with `--recompute` applied as in `micro_step`, sharded and partitioned
// over the data/tensor-parallel mesh. Its ops are split into the forward
// pass (up to the objective, plus the output's boundary layout) and the
// backward pass (the rest), which reads the forward values a micro-batch's
// forward pass left alive, as Megatron-LM's 1F1B does. The passes are
// inlined into `pipeline_step` in the order of the schedule (GPipe, 1F1B
// or interleaved 1F1B), joined by send/recv over the "pp" mesh axis. The
// schedules are simulated against each other at compile time: that fixes
// the order each pair of stages posts its messages in, and proves the
// step cannot deadlock.
//
//===----------------------------------------------------------------------===//

#include "compiler/support/Error.h"
#include "dialects/dtc/DtcAttrs.h"
#include "dialects/dtc/DtcCollectiveOps.h"
#include "passes/OpCost.h"
#include "passes/TransformerBlocks.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/training/StepParts.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <set>
#include <tuple>

namespace dtc {
namespace training {
namespace {

constexpr llvm::StringLiteral kPipelineAxis = "pp";

/// The FLOPs stages are balanced on: the cost model's count (OpCost.h),
/// the one the planner prices stage cuts with.
double workOf(mlir::Operation *op) { return opWork(op).flops; }

} // namespace
} // namespace training

llvm::Expected<StageCuts> chooseCuts(mlir::func::FuncOp forward,
                                     int64_t stages) {
  using training::workOf;
  mlir::Block &body = forward.getBody().front();
  llvm::SmallVector<mlir::Operation *> ops;
  for (mlir::Operation &op : body.without_terminator())
    ops.push_back(&op);
  const unsigned n = ops.size();
  llvm::SmallVector<double> workBefore(n + 1, 0);
  for (unsigned k = 0; k < n; ++k)
    workBefore[k + 1] = workBefore[k] + (isFree(ops[k]) ? 0 : workOf(ops[k]));
  // The cut points: where only the residual stream crosses.
  llvm::SmallVector<std::pair<unsigned, mlir::Value>> candidates;
  for (const SingleCrossing &point : findSingleCrossings(ops))
    candidates.push_back({point.index, point.value});
  StageCuts cuts;
  cuts.begin.push_back(0);
  cuts.input.push_back(nullptr);
  double total = workBefore[n];
  for (int64_t s = 1; s < stages; ++s) {
    double target = total * static_cast<double>(s) / stages;
    const std::pair<unsigned, mlir::Value> *best = nullptr;
    for (const auto &c : candidates)
      if (c.first > cuts.begin.back() &&
          (!best || std::abs(workBefore[c.first] - target) <
                        std::abs(workBefore[best->first] - target)))
        best = &c;
    if (!best)
      return badInput("pipeline: cannot cut the model into {0} stages: it "
                      "has {1} points where only one activation flows "
                      "from one part to the next (the residual stream "
                      "between layers); use fewer stages",
                      stages, candidates.size());
    cuts.begin.push_back(best->first);
    cuts.input.push_back(best->second);
  }
  return cuts;
}

namespace training {
namespace {

/// Builds stage function `name` from ops [begin, end) of `forward`:
/// arguments are the crossing activation (when `input` is set) and the
/// forward's arguments the ops read; parameters and constants are cloned
/// where used. Returns `output`, or the forward's loss when it is null.
/// `usedArgs` receives the forward argument numbers, in order.
mlir::func::FuncOp buildStage(mlir::ModuleOp into, mlir::func::FuncOp forward,
                              unsigned begin, unsigned end, mlir::Value input,
                              mlir::Value output, llvm::StringRef name,
                              llvm::SmallVectorImpl<unsigned> &usedArgs) {
  mlir::Block &body = forward.getBody().front();
  llvm::SmallVector<mlir::Operation *> ops;
  for (mlir::Operation &op : body.without_terminator())
    ops.push_back(&op);
  llvm::SmallVector<mlir::Operation *> range(ops.begin() + begin,
                                             ops.begin() + end);
  llvm::SetVector<unsigned> args;
  for (mlir::Operation *op : range)
    for (mlir::Value operand : op->getOperands())
      if (auto arg = llvm::dyn_cast<mlir::BlockArgument>(operand))
        args.insert(arg.getArgNumber());
  usedArgs.assign(args.begin(), args.end());
  llvm::sort(usedArgs);

  llvm::SmallVector<mlir::Type> argTypes;
  llvm::SmallVector<mlir::DictionaryAttr> argAttrs;
  mlir::OpBuilder b(into.getBodyRegion());
  b.setInsertionPointToEnd(into.getBody());
  if (input) {
    argTypes.push_back(input.getType());
    argAttrs.push_back(b.getDictionaryAttr({}));
  }
  for (unsigned a : usedArgs) {
    argTypes.push_back(forward.getArgumentTypes()[a]);
    argAttrs.push_back(forward.getArgAttrDict(a) ? forward.getArgAttrDict(a)
                                                 : b.getDictionaryAttr({}));
  }
  mlir::Value result = output ? output : body.getTerminator()->getOperand(0);
  auto func = b.create<mlir::func::FuncOp>(
      forward.getLoc(), name, b.getFunctionType(argTypes, {result.getType()}));
  mlir::Block *entry = func.addEntryBlock();
  func.setAllArgAttrs(argAttrs);
  mlir::IRMapping map;
  unsigned next = 0;
  if (input)
    map.map(input, entry->getArgument(next++));
  for (unsigned a : usedArgs)
    map.map(body.getArgument(a), entry->getArgument(next++));
  b.setInsertionPointToStart(entry);
  for (mlir::Operation *op : range) {
    for (mlir::Value operand : op->getOperands())
      if (!map.contains(operand))
        if (mlir::Operation *def = operand.getDefiningOp(); def && isFree(def))
          b.clone(*def, map);
    if (!isFree(op))
      b.clone(*op, map);
  }
  b.create<mlir::func::ReturnOp>(forward.getLoc(), map.lookup(result));
  return func;
}

/// The layout of a stage boundary activation: rows split over the data
/// axes the mesh has ("dp", then the "ep" inside it), the sequence over
/// "cp" (as propagation splits a stage's inputs), everything else whole.
mlir::Attribute activationLayout(mlir::Builder &b, mlir::Type type,
                                 llvm::StringRef mesh) {
  llvm::SmallVector<llvm::StringRef> dataAxes, contextAxes;
  std::string error;
  std::optional<d::DeviceMesh> parsed = d::DeviceMesh::parse(mesh, error);
  for (const d::DeviceMesh::Axis &axis :
       parsed ? llvm::ArrayRef(parsed->axes)
              : llvm::ArrayRef<d::DeviceMesh::Axis>()) {
    if (axis.name == "dp" || axis.name == "ep")
      dataAxes.push_back(axis.name);
    if (axis.name == "cp")
      contextAxes.push_back(axis.name);
  }
  auto rank = llvm::cast<mlir::RankedTensorType>(type).getRank();
  llvm::SmallVector<mlir::Attribute> dims;
  for (int64_t d = 0; d < rank; ++d)
    dims.push_back(d == 0   ? b.getStrArrayAttr(dataAxes)
                   : d == 1 ? b.getStrArrayAttr(contextAxes)
                            : b.getArrayAttr({}));
  llvm::SmallVector<int64_t> blocks(rank, 0);
  return d::ShardingAttr::get(b.getContext(), b.getArrayAttr(dims), blocks,
                              b.getArrayAttr({}));
}

/// Clones `callee`'s body at the builder with `args`; returns its results.
/// Tags `op` with the micro-batch of the pipeline step it computes for,
/// which the program keeps for traces (Instruction.micro_batch).
void tagMicroBatch(mlir::Operation *op, int64_t micro) {
  op->setAttr(d::kMicroBatchAttrName,
              mlir::IntegerAttr::get(
                  mlir::IntegerType::get(op->getContext(), 64), micro));
}

llvm::SmallVector<mlir::Value> inlineCall(mlir::OpBuilder &b,
                                          mlir::func::FuncOp callee,
                                          mlir::ValueRange args) {
  mlir::Block &body = callee.getBody().front();
  mlir::IRMapping map;
  map.map(body.getArguments(), args);
  for (mlir::Operation &op : body.without_terminator())
    b.clone(op, map);
  llvm::SmallVector<mlir::Value> results;
  for (mlir::Value v : body.getTerminator()->getOperands())
    results.push_back(map.lookup(v));
  return results;
}

/// Removes what the inlined stage functions computed for nothing (a
/// stage's objective value, all-reduced but never read): pure ops without
/// users and all-reduces whose result nobody waits for.
void eraseUnusedResults(mlir::func::FuncOp step) {
  llvm::SmallVector<mlir::Operation *> ops;
  for (mlir::Operation &op : step.getBody().front().without_terminator())
    ops.push_back(&op);
  // Backwards, erasing only the op visited: its operands' producers come
  // later and see it gone.
  for (mlir::Operation *opPtr : llvm::reverse(ops)) {
    mlir::Operation &op = *opPtr;
    if (!op.use_empty())
      continue;
    // A wait is unused only when its result is; its start, visited later
    // (walking backwards), then has no user either.
    auto wait = llvm::dyn_cast<d::WaitOp>(op);
    bool unusedReduction = (wait && wait.getNumResults() == 1 &&
                            llvm::isa_and_nonnull<d::AllReduceStartOp>(
                                wait.getHandle().getDefiningOp())) ||
                           llvm::isa<d::AllReduceStartOp>(op);
    if (unusedReduction || mlir::isOpTriviallyDead(&op))
      op.erase();
  }
}

/// One pass of a stage's schedule: the forward ('F') or backward ('B') of
/// micro-batch `micro` through the stage's model chunk `chunk` (its index
/// among the stage's virtual stages; 0 without interleaving).
struct PassStep {
  char pass;
  int64_t chunk, micro;
};

/// The order stage `stage` runs its passes in. Model chunk c (of
/// stages * virtualStages) lives on stage c % stages as its chunk
/// c / stages.
llvm::SmallVector<PassStep> scheduleOf(llvm::StringRef schedule, int64_t stage,
                                       int64_t stages, int64_t virtualStages,
                                       int64_t micro) {
  llvm::SmallVector<PassStep> order;
  if (schedule == "gpipe") {
    for (int64_t i = 0; i < micro; ++i)
      order.push_back({'F', 0, i});
    for (int64_t i = 0; i < micro; ++i)
      order.push_back({'B', 0, i});
    return order;
  }
  // 1F1B, and its interleaved form (Megatron-LM's): the passes go through
  // micro-batches in groups of `stages`, each group through every chunk in
  // turn (backward in reverse chunk order). The warmup fills the pipeline,
  // then one forward and one backward alternate, so at most about
  // `stages - stage` micro-batches (times the chunks) are in flight.
  const int64_t total = micro * virtualStages;
  const int64_t round = stages * virtualStages;
  auto step = [&](char pass, int64_t id) {
    int64_t chunk = (id % round) / stages;
    if (pass == 'B')
      chunk = virtualStages - 1 - chunk;
    return PassStep{pass, chunk, id / round * stages + id % stages};
  };
  int64_t warmup =
      virtualStages == 1
          ? std::min(stages - stage - 1, micro)
          : std::min((stages - stage - 1) * 2 + (virtualStages - 1) * stages,
                     total);
  for (int64_t id = 0; id < warmup; ++id)
    order.push_back(step('F', id));
  for (int64_t id = 0; id + warmup < total; ++id) {
    order.push_back(step('F', id + warmup));
    order.push_back(step('B', id));
  }
  for (int64_t id = total - warmup; id < total; ++id)
    order.push_back(step('B', id));
  return order;
}

/// A message between stages: the activation into model chunk `chunk`
/// ('A') or the gradient of its output ('G'), of micro-batch `micro`.
struct Message {
  char kind;
  int64_t chunk, micro;
  auto key() const { return std::make_tuple(kind, chunk, micro); }
  bool operator<(const Message &o) const { return key() < o.key(); }
  bool operator==(const Message &o) const { return key() == o.key(); }
};

/// Who talks to whom in the pipeline, and in which order: model chunk c
/// runs on stage c % stages.
struct Traffic {
  int64_t stages, chunks;
  /// Messages from stage `from` to stage `to`, in the order `from` sends
  /// them. MPI (like NCCL) matches a pair's messages in posting order, so
  /// a receiver posts its receives in this order, ahead of use if needed.
  std::map<std::pair<int64_t, int64_t>, std::vector<Message>> channels;

  int64_t ownerOf(int64_t chunk) const { return chunk % stages; }
  /// The stage that sends `m`: the previous chunk's for an activation, the
  /// next chunk's for a gradient.
  int64_t senderOf(const Message &m) const {
    return ownerOf(m.kind == 'A' ? m.chunk - 1 : m.chunk + 1);
  }
  /// What a pass needs from other stages and what it sends to them.
  void exchanges(int64_t stage, PassStep p, llvm::SmallVectorImpl<Message> &in,
                 llvm::SmallVectorImpl<std::pair<Message, int64_t>> &out) {
    int64_t c = p.chunk * stages + stage;
    bool first = c == 0, last = c == chunks - 1;
    if (p.pass == 'F') {
      if (last)
        return; // the last chunk's backward runs its forward
      if (!first)
        in.push_back({'A', c, p.micro});
      out.push_back({{'A', c + 1, p.micro}, ownerOf(c + 1)});
      return;
    }
    if (last && !first)
      in.push_back({'A', c, p.micro});
    if (!last)
      in.push_back({'G', c, p.micro});
    if (!first)
      out.push_back({{'G', c - 1, p.micro}, ownerOf(c - 1)});
  }
};

/// Runs every stage's schedule against the others (sends never block,
/// a pass waits for the messages it reads) and records each channel's
/// order; fails if some stage would wait forever.
llvm::Expected<Traffic>
simulate(const std::vector<llvm::SmallVector<PassStep>> &schedules,
         int64_t chunks) {
  Traffic traffic{static_cast<int64_t>(schedules.size()), chunks, {}};
  std::set<Message> sent;
  std::vector<size_t> next(schedules.size(), 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int64_t s = 0; s < traffic.stages; ++s) {
      while (next[s] < schedules[s].size()) {
        llvm::SmallVector<Message> in;
        llvm::SmallVector<std::pair<Message, int64_t>> out;
        traffic.exchanges(s, schedules[s][next[s]], in, out);
        if (!llvm::all_of(in, [&](const Message &m) { return sent.count(m); }))
          break;
        for (auto &[m, to] : out) {
          sent.insert(m);
          traffic.channels[{s, to}].push_back(m);
        }
        ++next[s];
        progress = true;
      }
    }
  }
  for (int64_t s = 0; s < traffic.stages; ++s)
    if (next[s] < schedules[s].size())
      return failure("pipeline: the schedule deadlocks at stage {0}, pass "
                     "{1} of {2}",
                     s, next[s], schedules[s].size());
  return traffic;
}

/// One model chunk's forward and backward functions, sharded and
/// partitioned over the data/tensor-parallel mesh, in their own module.
struct Chunk {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  bool first = false, last = false;
  /// The gradient of the chunk's objective; its last argument is d output
  /// (not on the last chunk, whose backward pass runs all of it).
  mlir::func::FuncOp backward;
  /// Before the last chunk, `backward`'s ops split by pass: the forward
  /// pass runs `forwardOps` (the chunk forward and the layout change of
  /// its output, result `outputIndex`), the backward pass the rest, reading
  /// the forward values it needs (the stash) from the micro-batch's
  /// forward pass.
  llvm::SmallVector<mlir::Operation *> forwardOps, backwardOps;
  unsigned outputIndex = 0;
  /// The forward function's arguments the chunk reads (data), in order.
  llvm::SmallVector<unsigned> usedArgs;
  llvm::SmallVector<GradientResult> params;
  /// `backward`'s result index of each of `params`' gradients, and of the
  /// gradient of its input activation (-1 on the first chunk).
  llvm::SmallVector<unsigned> gradIndex;
  int dInputIndex = -1;
  mlir::Type inputType, outputType;
};

/// Splits a non-last chunk's partitioned `backward` into its two passes
/// (1F1B keeps each micro-batch's forward values alive until its backward
/// pass, as Megatron-LM does; `--recompute` decides which). The backward
/// pass runs what reads d output (the objective) and everything after the
/// forward end, except the ops that put the output in its boundary layout.
llvm::Error splitPasses(Chunk &chunk) {
  mlir::Block &body = chunk.backward.getBody().front();
  mlir::Value dOutput = body.getArguments().back();
  llvm::DenseSet<mlir::Operation *> backwardPass;
  bool afterEnd = false;
  for (mlir::Operation &op : body.without_terminator()) {
    bool readsBackward = llvm::any_of(op.getOperands(), [&](mlir::Value v) {
      return v == dOutput || backwardPass.contains(v.getDefiningOp());
    });
    if (afterEnd || readsBackward)
      backwardPass.insert(&op);
    if (op.hasAttr(kForwardEndAttr)) {
      afterEnd = true;
      op.removeAttr(kForwardEndAttr);
    }
  }
  if (!afterEnd)
    return failure("pipeline: a chunk's backward function lost the end of "
                   "its forward part");
  // The output's producers (the layout change the partitioner put before
  // the return) run in the forward pass; they cannot read d output.
  llvm::SmallVector<mlir::Value> worklist{
      body.getTerminator()->getOperand(chunk.outputIndex)};
  while (!worklist.empty()) {
    mlir::Operation *op = worklist.pop_back_val().getDefiningOp();
    if (!op || !backwardPass.erase(op))
      continue;
    if (llvm::is_contained(op->getOperands(), dOutput))
      return failure("pipeline: a chunk's output depends on the gradient of "
                     "its output");
    llvm::append_range(worklist, op->getOperands());
  }
  for (mlir::Operation &op : body.without_terminator())
    (backwardPass.contains(&op) ? chunk.backwardOps : chunk.forwardOps)
        .push_back(&op);
  return llvm::Error::success();
}

/// Clones a chunk's backward-pass ops; `map` holds what its forward pass
/// computed (the stash) and d output. Parameters and constants are cloned
/// again rather than kept from the forward pass, so that ZeRO-3 gathers a
/// parameter for each pass instead of holding it whole in between.
/// Returns the function's results.
llvm::SmallVector<mlir::Value> inlineBackwardPass(mlir::OpBuilder &b,
                                                  const Chunk &chunk,
                                                  mlir::IRMapping &map) {
  for (mlir::Operation *op : chunk.forwardOps)
    if (isFree(op))
      for (mlir::Value result : op->getResults())
        map.erase(result);
  for (mlir::Operation *op : chunk.backwardOps) {
    for (mlir::Value operand : op->getOperands())
      if (!map.contains(operand))
        if (mlir::Operation *def = operand.getDefiningOp(); def && isFree(def))
          b.clone(*def, map);
    b.clone(*op, map);
  }
  llvm::SmallVector<mlir::Value> results;
  mlir::func::FuncOp backward = chunk.backward;
  for (mlir::Value v :
       backward.getBody().front().getTerminator()->getOperands())
    results.push_back(map.lookup(v));
  return results;
}

/// Builds model chunk `c` of `cuts`: ops [cuts.begin[c], cuts.begin[c+1])
/// of `forward`.
llvm::Expected<Chunk> buildChunk(mlir::ModuleOp module,
                                 mlir::func::FuncOp forward,
                                 const StageCuts &cuts, int64_t c,
                                 const TrainingStepOptions &stageOptions) {
  const int64_t chunks = cuts.begin.size();
  Chunk chunk;
  chunk.first = c == 0;
  chunk.last = c == chunks - 1;
  mlir::OpBuilder b(module.getContext());
  chunk.module = mlir::ModuleOp::create(forward.getLoc());
  mlir::ModuleOp chunkModule = *chunk.module;
  chunkModule->setAttrs(module->getAttrs());
  unsigned begin = cuts.begin[c];
  unsigned end = chunk.last
                     ? static_cast<unsigned>(
                           forward.getBody().front().getOperations().size() - 1)
                     : cuts.begin[c + 1];
  mlir::Value input = chunk.first ? nullptr : cuts.input[c];
  mlir::Value output = chunk.last ? nullptr : cuts.input[c + 1];
  mlir::func::FuncOp objective = buildStage(
      chunkModule, forward, begin, end, input, output, "stage", chunk.usedArgs);
  // The objective of a chunk before the last: sum(output * d output),
  // whose gradient is the chunk's vector-Jacobian product.
  if (!chunk.last) {
    mlir::Block &body = objective.getBody().front();
    auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());
    mlir::Value chunkOutput = ret.getOperand(0);
    auto type = tensorType(chunkOutput);
    (void)objective.insertArgument(objective.getNumArguments(), type, {},
                                   objective.getLoc());
    mlir::Value dOutput = body.getArgument(objective.getNumArguments() - 1);
    b.setInsertionPoint(ret);
    llvm::SmallVector<int64_t> all;
    for (int64_t dim = 0; dim < type.getRank(); ++dim)
      all.push_back(dim);
    mlir::Value product =
        b.create<d::MulOp>(objective.getLoc(), chunkOutput, dOutput);
    mlir::Value sum = b.create<d::ReduceSumOp>(objective.getLoc(), product,
                                               b.getDenseI64ArrayAttr(all));
    ret->setOperands(sum);
    objective.setFunctionType(b.getFunctionType(
        body.getArgumentTypes(), mlir::TypeRange{sum.getType()}));
  }
  // Shard the objective (parameters keep these layouts in both passes).
  if (!stageOptions.mesh.empty())
    if (llvm::Error e = shardFunctions(chunkModule, stageOptions,
                                       /*partition=*/false, false))
      return std::move(e);
  GradientOptions gradOptions;
  gradOptions.wrtArguments = !chunk.first;
  auto backward = buildGradientFunction(objective, 0, "backward", gradOptions);
  if (mlir::failed(backward))
    return failure("pipeline chunk {0}: it cannot be differentiated (see the "
                   "error above)",
                   c);
  chunk.backward = *backward;
  objective.erase();
  auto unit = b.getUnitAttr();
  mlir::Operation *objectiveOp = chunk.backward.getBody()
                                     .front()
                                     .getTerminator()
                                     ->getOperand(0)
                                     .getDefiningOp();
  if (!chunk.last)
    objectiveOp->setAttr(kForwardEndAttr, unit);
  // Recompute hook (docs/recompute.md), as in `micro_step`: what the
  // backward pass keeps of the forward pass.
  if (mlir::failed(applyRecompute(chunk.backward, 0, stageOptions.recompute)))
    return failure("pipeline chunk {0}: {1} recompute failed (see the error "
                   "above)",
                   c, recomputeModeName(stageOptions.recompute));
  for (unsigned i = 0; i < chunk.backward.getNumResults(); ++i)
    if (auto arg = chunk.backward.getResultAttrOfType<mlir::IntegerAttr>(
            i, kGradOfArgAttrName);
        arg && arg.getInt() == 0 && !chunk.first) {
      chunk.dInputIndex = static_cast<int>(i);
      chunk.backward.setResultAttr(
          i, "dtc.sharding",
          activationLayout(b, chunk.backward.getResultTypes()[i],
                           stageOptions.mesh));
    }
  // The chunk's output (the activation the objective multiplies by d
  // output) becomes a result too, in the boundary layout the next chunk
  // reads: the forward pass sends it.
  if (!chunk.last) {
    auto ret = llvm::cast<mlir::func::ReturnOp>(
        chunk.backward.getBody().front().getTerminator());
    mlir::Value chunkOutput =
        objectiveOp->getOperand(0).getDefiningOp()->getOperand(0);
    chunk.outputIndex = ret.getNumOperands();
    ret->insertOperands(chunk.outputIndex, chunkOutput);
    (void)chunk.backward.insertResult(
        chunk.outputIndex, chunkOutput.getType(),
        b.getDictionaryAttr(b.getNamedAttr(
            "dtc.sharding",
            activationLayout(b, chunkOutput.getType(), stageOptions.mesh))));
  }
  if (!stageOptions.mesh.empty())
    if (llvm::Error e = shardFunctions(chunkModule, stageOptions,
                                       /*partition=*/true,
                                       /*deferGradientSync=*/true))
      return std::move(e);
  if (stageOptions.overlap) {
    chunkTensorParallelCollectives(chunk.backward, stageOptions.tpCommChunks);
    scheduleCollectives(chunk.backward);
  }
  if (!chunk.last)
    if (llvm::Error e = splitPasses(chunk))
      return std::move(e);

  // The gradients this chunk produces, as in `micro_step`.
  for (unsigned i = 1; i < chunk.backward.getNumResults(); ++i)
    if (chunk.backward.getResultAttr(i, kGradOfAttrName)) {
      chunk.params.push_back(describeGradient(chunk.backward, i));
      chunk.gradIndex.push_back(i);
    }
  if (chunk.params.empty())
    return badInput("pipeline chunk {0} has no trainable parameters; use "
                    "fewer stages or virtual stages",
                    c);
  if (!chunk.first)
    chunk.inputType = chunk.backward.getFunctionType().getInput(0);
  if (!chunk.last)
    chunk.outputType =
        chunk.backward.getFunctionType().getResult(chunk.outputIndex);
  return chunk;
}

} // namespace
} // namespace training

using namespace training;

/// A parameter several stages read: the input and output embeddings of a
/// model that ties them.
struct SharedParameter {
  std::string name;
  mlir::RankedTensorType type; ///< whole
  llvm::SmallVector<int64_t> stages;
  llvm::SmallVector<mlir::Attribute> shards; ///< per holder: its dtc.shard
};

/// The parameters more than one stage reads, in name order (the order all
/// stages sum their gradients in), with how each stage splits its copy.
llvm::Expected<std::vector<SharedParameter>>
sharedAcrossStages(llvm::ArrayRef<llvm::SmallVector<GradientResult>> paramsOf) {
  std::map<std::string, std::vector<std::pair<int64_t, const GradientResult *>>>
      holders;
  for (auto [s, params] : llvm::enumerate(paramsOf))
    for (const GradientResult &p : params)
      holders[p.parameter].push_back({s, &p});
  std::vector<SharedParameter> shared;
  for (auto &[name, copies] : holders) {
    if (copies.size() < 2)
      continue;
    // The whole type; each stage's copy is gathered to it for the sum.
    const GradientResult &first = *copies.front().second;
    mlir::RankedTensorType whole = first.type;
    if (auto global = llvm::dyn_cast_or_null<mlir::TypeAttr>(
            first.shardAttrs.get("dtc.global_type")))
      whole = llvm::cast<mlir::RankedTensorType>(global.getValue());
    SharedParameter p{name, whole, {}, {}};
    for (auto [s, copy] : copies) {
      p.stages.push_back(s);
      p.shards.push_back(copy->shardAttrs.get("dtc.shard"));
    }
    shared.push_back(std::move(p));
  }
  return shared;
}

llvm::Expected<TrainingStepInfo> buildPipelineStep(
    mlir::ModuleOp module, const TrainingStepOptions &options,
    llvm::SmallVectorImpl<mlir::OwningOpRef<mlir::ModuleOp>> &stageModules) {
  const int64_t stages = options.pipelineStages;
  const int64_t virtualStages = std::max<int64_t>(1, options.virtualStages);
  const int64_t chunks = stages * virtualStages;
  const int64_t micro = options.gradAccum;
  if (options.schedule != "1f1b" && options.schedule != "gpipe")
    return badInput("pipeline: schedule '{0}' is not lowered (1f1b, its "
                    "interleaved form with virtual stages, and gpipe are)",
                    options.schedule);
  if (virtualStages > 1 && options.schedule != "1f1b")
    return badInput("pipeline: virtual stages (vpp={0}) need the 1f1b "
                    "schedule",
                    virtualStages);
  if (virtualStages > 1 && micro % stages != 0)
    return badInput("pipeline: the interleaved schedule runs micro-batches "
                    "in groups of pp={0}, but there are {1}; pick a global "
                    "batch giving a multiple of {0} micro-batches",
                    stages, micro);
  auto funcs = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
  if (funcs.size() != 1)
    return failure("training step: expected one forward function, found {0}",
                   funcs.size());
  mlir::func::FuncOp forward = funcs.front();
  auto info = bindLoss(forward);
  if (!info)
    return info.takeError();
  auto cuts = chooseCuts(forward, chunks);
  if (!cuts)
    return cuts.takeError();

  std::vector<llvm::SmallVector<PassStep>> schedules;
  for (int64_t s = 0; s < stages; ++s)
    schedules.push_back(
        scheduleOf(options.schedule, s, stages, virtualStages, micro));
  auto traffic = simulate(schedules, chunks);
  if (!traffic)
    return traffic.takeError();

  // The data/tensor-parallel part of the mesh: what each chunk is sharded
  // and partitioned over.
  TrainingStepOptions stageOptions = options;
  std::string meshError;
  std::optional<d::DeviceMesh> whole =
      d::DeviceMesh::parse(options.mesh, meshError);
  if (!whole)
    return badInput("pipeline: {0}", meshError);
  d::DeviceMesh inner;
  for (const d::DeviceMesh::Axis &axis : whole->axes)
    if (axis.name != "pp")
      inner.axes.push_back(axis);
  stageOptions.mesh = inner.str();
  mlir::MLIRContext *ctx = module.getContext();
  // The rows each rank feeds of every data argument (tokens and labels, or
  // a classifier's inputs and labels): the batch cut over the data axes (dp
  // and the ep inside it); the columns of tokens and labels: the sequence
  // cut over cp (zigzag chunks, which the stages' partitioned functions
  // expect).
  int64_t dataParts = 1, contextParts = 1;
  for (const d::DeviceMesh::Axis &axis : inner.axes) {
    if (axis.name == "dp" || axis.name == "ep")
      dataParts *= axis.size;
    if (axis.name == "cp")
      contextParts *= axis.size;
  }
  const unsigned numData = forward.getNumArguments();
  llvm::SmallVector<mlir::RankedTensorType> dataTypes; // one micro-batch's
  for (mlir::Type type : forward.getArgumentTypes()) {
    auto whole = llvm::cast<mlir::RankedTensorType>(type);
    llvm::SmallVector<int64_t> shape(whole.getShape());
    shape[0] /= dataParts;
    if (contextParts > 1) {
      if (!isTokenTensor(whole))
        return badInput("pipeline: context parallelism splits the sequence "
                        "of token inputs; this model's input is {0} (use "
                        "--cp 1)",
                        describeType(whole));
      shape[1] /= contextParts;
    }
    dataTypes.push_back(whole.clone(shape));
  }

  // Every stage's model chunks (s, s + stages, ...) and parameters, each
  // parameter once per stage.
  std::vector<std::vector<Chunk>> chunksOf(stages);
  std::vector<llvm::SmallVector<GradientResult>> paramsOf(stages);
  for (int64_t s = 0; s < stages; ++s)
    for (int64_t k = 0; k < virtualStages; ++k) {
      auto chunk =
          buildChunk(module, forward, *cuts, k * stages + s, stageOptions);
      if (!chunk)
        return chunk.takeError();
      for (const GradientResult &p : chunk->params)
        if (llvm::none_of(paramsOf[s], [&](const GradientResult &q) {
              return q.parameter == p.parameter;
            }))
          paramsOf[s].push_back(p);
      chunksOf[s].push_back(std::move(*chunk));
    }
  auto shared = sharedAcrossStages(paramsOf);
  if (!shared)
    return shared.takeError();

  for (int64_t s = 0; s < stages; ++s) {
    std::vector<Chunk> &mine = chunksOf[s];
    const llvm::SmallVector<GradientResult> &params = paramsOf[s];
    llvm::StringMap<size_t> accumulatorOf;
    for (auto [i, p] : llvm::enumerate(params))
      accumulatorOf[p.parameter] = i;
    mlir::OpBuilder b(ctx);
    mlir::OwningOpRef<mlir::ModuleOp> stageModule =
        mlir::ModuleOp::create(forward.getLoc());
    (*stageModule)->setAttrs(module->getAttrs());

    // pipeline_step: the schedule, inlined. Its data arguments stack the
    // step's micro-batches: [micro, rows, ...].
    llvm::SmallVector<mlir::Type> argTypes;
    for (mlir::RankedTensorType type : dataTypes) {
      llvm::SmallVector<int64_t> shape{micro};
      llvm::append_range(shape, type.getShape());
      argTypes.push_back(type.clone(shape));
    }
    for (const GradientResult &p : params)
      argTypes.push_back(p.type);
    b.setInsertionPointToEnd(stageModule->getBody());
    mlir::Location loc = forward.getLoc();
    auto step = b.create<mlir::func::FuncOp>(loc, "pipeline_step",
                                             b.getFunctionType(argTypes, {}));
    mlir::Block *body = step.addEntryBlock();
    for (unsigned i = 0; i < numData; ++i) {
      for (llvm::StringRef name : {"dtc.feed", "dtc.name"})
        if (mlir::Attribute attr = forward.getArgAttr(i, name))
          step.setArgAttr(i, name, attr);
      if (contextParts > 1)
        step.setArgAttr(i, "dtc.zigzag", b.getUnitAttr());
    }
    for (auto [i, p] : llvm::enumerate(params)) {
      std::string state = "grad:" + p.parameter;
      step.setArgAttr(numData + i, "dtc.state", b.getStringAttr(state));
      step.setArgAttr(numData + i, "dtc.state_role", b.getStringAttr("grad"));
      step.setArgAttr(numData + i, "dtc.state_of",
                      b.getStringAttr(p.parameter));
    }
    step->setAttr("dtc.mesh", b.getStringAttr(options.mesh));
    // The schedule, for readers of program.mlir: "F3.1" is the forward of
    // micro-batch 1 through model chunk 3 (the last chunk's forward runs
    // inside its backward).
    llvm::SmallVector<std::string> passes;
    for (const PassStep &p : schedules[s])
      passes.push_back(
          llvm::formatv("{0}{1}.{2}", p.pass, p.chunk * stages + s, p.micro));
    step->setAttr("dtc.schedule",
                  b.getStrArrayAttr(llvm::SmallVector<llvm::StringRef>(
                      passes.begin(), passes.end())));
    b.setInsertionPointToStart(body);
    Collectives comm(b, loc);
    auto pp = b.getStrArrayAttr({kPipelineAxis});
    auto handle = [&](mlir::Type t) { return d::AsyncType::get(ctx, t); };

    // Micro-batch i of data argument `arg`.
    std::map<std::pair<unsigned, int64_t>, mlir::Value> slices;
    auto dataSlice = [&](unsigned arg, int64_t i) {
      mlir::Value &v = slices[{arg, i}];
      if (!v) {
        mlir::RankedTensorType type = dataTypes[arg];
        llvm::SmallVector<int64_t> begin{i}, end{i + 1}, shape{1};
        begin.append(type.getRank(), 0);
        llvm::append_range(end, type.getShape());
        llvm::append_range(shape, type.getShape());
        llvm::SmallVector<int64_t> strides(shape.size(), 1);
        mlir::Value part = b.create<d::SliceOp>(
            loc, type.clone(shape), body->getArgument(arg),
            b.getDenseI64ArrayAttr(begin), b.getDenseI64ArrayAttr(end),
            b.getDenseI64ArrayAttr(strides));
        v = b.create<d::ReshapeOp>(loc, type, part);
      }
      return v;
    };
    auto chunkArgs = [&](const Chunk &chunk, int64_t i) {
      llvm::SmallVector<mlir::Value> args;
      for (unsigned a : chunk.usedArgs)
        args.push_back(dataSlice(a, i));
      return args;
    };

    // Receives are posted in each channel's send order and waited where
    // used; sends are waited at the end of the step.
    std::map<Message, mlir::Value> posted; // message -> its recv_start
    std::map<int64_t, size_t> postedUpTo;  // channel from stage -> count
    auto messageType = [&](const Message &m) {
      const Chunk &into = mine[m.chunk / stages];
      return m.kind == 'A' ? into.inputType : into.outputType;
    };
    auto post = [&](const Message &m) {
      int64_t from = traffic->senderOf(m);
      const std::vector<Message> &channel = traffic->channels[{from, s}];
      size_t &n = postedUpTo[from];
      while (!posted.count(m)) {
        const Message &next = channel[n++];
        posted[next] = b.create<d::RecvStartOp>(loc, handle(messageType(next)),
                                                pp, from - s);
        tagMicroBatch(posted[next].getDefiningOp(), next.micro);
      }
      return posted[m].getDefiningOp();
    };
    auto receive = [&](const Message &m) { return comm.wait(post(m)); };
    // With overlap, the receives of the next pass are posted before this
    // pass computes, so its input arrives meanwhile.
    auto postNext = [&](size_t next) {
      if (!options.overlap || next >= schedules[s].size())
        return;
      llvm::SmallVector<Message> in;
      llvm::SmallVector<std::pair<Message, int64_t>> out;
      traffic->exchanges(s, schedules[s][next], in, out);
      for (const Message &m : in)
        post(m);
    };
    auto send = [&](mlir::Value v, int64_t to) {
      return b.create<d::SendStartOp>(loc, handle(b.getNoneType()), v, pp,
                                      to - s);
    };

    llvm::SmallVector<mlir::Value> accumulators(
        body->getArguments().begin() + numData, body->getArguments().end());
    // What each micro-batch's forward pass through a chunk computed, for
    // its backward pass: (chunk, micro-batch) -> the forward values.
    std::map<std::pair<int64_t, int64_t>, mlir::IRMapping> forwardValues;
    llvm::SmallVector<mlir::Value> sends;
    mlir::Value lossSum;
    for (auto [index, p] : llvm::enumerate(schedules[s])) {
      const Chunk &chunk = mine[p.chunk];
      const int64_t c = p.chunk * stages + s, i = p.micro;
      // What this pass adds to the body belongs to micro-batch i (receives
      // posted ahead for later passes are tagged with their own).
      mlir::Operation *before = body->empty() ? nullptr : &body->back();
      auto tagPass = llvm::make_scope_exit([&, i = i] {
        auto it = before ? std::next(before->getIterator()) : body->begin();
        for (mlir::Operation &op : llvm::make_range(it, body->end()))
          if (!op.hasAttr(d::kMicroBatchAttrName))
            tagMicroBatch(&op, i);
      });
      mlir::func::FuncOp backward = chunk.backward;
      mlir::Block &callee = backward.getBody().front();
      if (p.pass == 'F') {
        if (chunk.last)
          continue; // the last chunk's backward runs its forward
        mlir::IRMapping &map = forwardValues[{c, i}];
        llvm::SmallVector<mlir::Value> args;
        if (!chunk.first)
          args.push_back(receive({'A', c, i}));
        llvm::append_range(args, chunkArgs(chunk, i));
        for (auto [arg, value] : llvm::zip(callee.getArguments(), args))
          map.map(arg, value);
        postNext(index + 1);
        for (mlir::Operation *op : chunk.forwardOps)
          b.clone(*op, map);
        mlir::Value y =
            map.lookup(callee.getTerminator()->getOperand(chunk.outputIndex));
        sends.push_back(send(y, traffic->ownerOf(c + 1)));
        continue;
      }
      llvm::SmallVector<mlir::Value> results;
      if (chunk.last) {
        llvm::SmallVector<mlir::Value> args;
        if (!chunk.first)
          args.push_back(receive({'A', c, i}));
        llvm::append_range(args, chunkArgs(chunk, i));
        postNext(index + 1);
        results = inlineCall(b, chunk.backward, args);
      } else {
        auto node = forwardValues.extract({c, i});
        mlir::IRMapping &map = node.mapped();
        map.map(callee.getArguments().back(), receive({'G', c, i}));
        postNext(index + 1);
        results = inlineBackwardPass(b, chunk, map);
      }
      if (chunk.last)
        lossSum =
            lossSum ? b.create<d::AddOp>(loc, lossSum, results[0]) : results[0];
      for (auto [j, index] : llvm::enumerate(chunk.gradIndex)) {
        mlir::Value &acc =
            accumulators[accumulatorOf.lookup(chunk.params[j].parameter)];
        acc = b.create<d::AddOp>(loc, acc, results[index]);
      }
      if (chunk.dInputIndex >= 0)
        sends.push_back(
            send(results[chunk.dInputIndex], traffic->ownerOf(c - 1)));
    }
    // Sends complete before the step ends (their buffers stay reserved
    // until then), so no rank blocks on a send while its peer blocks too.
    for (mlir::Value sent : sends)
      b.create<d::WaitOp>(loc, sent)->setAttr(
          d::kMicroBatchAttrName,
          sent.getDefiningOp()->getAttr(d::kMicroBatchAttrName));
    // The mean loss over the micro-batches, from the last stage to all.
    mlir::Value loss =
        lossSum ? b.create<d::MulOp>(
                       loc, lossSum,
                       scalar(b, loc, 1.0f / static_cast<float>(micro)))
                      .getResult()
                : scalar(b, loc, 0.0f);
    loss = comm.allReduce(loss, {kPipelineAxis.str()});
    llvm::SmallVector<mlir::Value> results{loss};
    llvm::append_range(results, accumulators);
    b.create<mlir::func::ReturnOp>(loc, results);
    step.setFunctionType(b.getFunctionType(
        body->getArgumentTypes(), mlir::ValueRange(results).getTypes()));
    step.setResultAttr(0, "dtc.name", b.getStringAttr("loss"));
    for (auto [i, p] : llvm::enumerate(params))
      step.setResultAttr(1 + i, "dtc.state",
                         b.getStringAttr("grad:" + p.parameter));
    eraseUnusedResults(step);

    TrainingStepOptions applyOptions = options;
    ZeroLayout zero = zeroLayoutOf(applyOptions, params);
    // ZeRO-3: every pass inlined its own copy of the chunk's parameters,
    // so each copy is gathered once, before the pass that reads it.
    if (options.zeroStage >= 3)
      gatherParametersForUse(step, zero, options.overlap,
                             options.zeroPrefetchElements);
    std::vector<StageSharedGradient> sharedHere;
    for (const SharedParameter &p : *shared) {
      const auto *held = llvm::find(p.stages, s);
      mlir::Attribute shard =
          held == p.stages.end() ? nullptr : p.shards[held - p.stages.begin()];
      sharedHere.push_back({p.name, p.type, shard, kPipelineAxis.str(),
                            held != p.stages.end(), p.stages.front() == s});
    }
    buildApply(*stageModule, params, applyOptions, zero, {kPipelineAxis.str()},
               /*syncedInStep=*/{}, /*scatteredInStep=*/false, sharedHere);
    if (mlir::failed(mlir::verify(*stageModule)))
      return failure("pipeline stage {0}: the built functions do not verify "
                     "(see the error above)",
                     s);
    stageModules.push_back(std::move(stageModule));
  }
  info->microBatchesPerCall = micro;
  info->stackedMicroBatches = true;
  return info;
}

} // namespace dtc
