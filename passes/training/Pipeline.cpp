//===- Pipeline.cpp - The pipeline-parallel training step -----------------===//
//
// Splits the loss-bound forward function into pipeline stages and builds,
// per stage, one module that a group of ranks runs (docs/partition.md,
// "Pipeline stages"):
//
//   @chunk<c>_forward(activation in?, data...) -> (output, kept...)
//   @chunk<c>_backward(kept..., d output) -> (d activation in?)
//   @chunk<c>_step(activation in?, data...) -> (loss, d activation in?)
//                                 (the last model chunk: forward and backward)
//   @pipeline_loss(mean loss) -> loss            (summed over the stages)
//   @pipeline_step(tokens[m], labels[m] (or a classifier's inputs[m],
//                  labels[m]))            (no code: the schedule as data)
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
// backward pass (the rest), which reads the forward values the forward
// pass keeps, as Megatron-LM's 1F1B does; both add parameter gradients to
// the "grad:" accumulators. Each pass exists once, whatever the number of
// micro-batches: `pipeline_step` carries the schedule (GPipe, 1F1B or
// interleaved 1F1B) as its `dtc.pipeline` attribute, which the executor
// interprets (runtime/core/PipelineSchedule.h, ExecutorPipeline.cpp) with
// send/recv over the "pp" mesh axis. The schedule is simulated here, by the
// code the executor runs it with, to prove it cannot deadlock.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcAttrs.h"
#include "dialects/dtc/DtcCollectiveOps.h"
#include "passes/OpCost.h"
#include "passes/TransformerBlocks.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/training/StepParts.h"
#include "runtime/core/PipelineSchedule.h"
#include "runtime/support/Error.h"

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
/// The pipeline step's schedule, for program lowering (Function.pipeline).
constexpr llvm::StringLiteral kPipelineAttr = "dtc.pipeline";

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
  // Every stage trains something (a stage without a trainable parameter
  // has no gradient to reduce or apply, and the pipeline pass refuses it):
  // ops reading a trainable parameter before each index.
  llvm::SmallVector<unsigned> trainableBefore(n + 1, 0);
  for (unsigned k = 0; k < n; ++k) {
    bool trains = !isFree(ops[k]) &&
                  llvm::any_of(ops[k]->getOperands(), [](mlir::Value v) {
                    auto param = v.getDefiningOp<mlir::dtc::ParameterOp>();
                    return param && !param.getFrozen() &&
                           llvm::isa<mlir::FloatType>(
                               mlir::getElementTypeOrSelf(v.getType()));
                  });
    trainableBefore[k + 1] = trainableBefore[k] + (trains ? 1 : 0);
  }
  auto trainsIn = [&](unsigned begin, unsigned end) {
    return trainableBefore[end] - trainableBefore[begin];
  };
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
    bool anyPoint = false;
    for (const auto &c : candidates) {
      if (c.first <= cuts.begin.back())
        continue;
      anyPoint = true;
      // This stage, and each one after it, keeps a trainable parameter.
      if (!trainsIn(cuts.begin.back(), c.first) ||
          trainsIn(c.first, n) < static_cast<unsigned>(stages - s))
        continue;
      if (!best || std::abs(workBefore[c.first] - target) <
                       std::abs(workBefore[best->first] - target))
        best = &c;
    }
    if (!best && anyPoint)
      return badInput("pipeline: cannot cut the model into {0} stages that "
                      "each train a parameter (a stage without one has "
                      "nothing to update); use fewer stages or virtual "
                      "stages",
                      stages);
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
  auto func = mlir::func::FuncOp::create(
      b, forward.getLoc(), name,
      b.getFunctionType(argTypes, {result.getType()}));
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
  mlir::func::ReturnOp::create(b, forward.getLoc(), map.lookup(result));
  return func;
}

/// The layout of a stage boundary activation: rows split over the data
/// axes the mesh has ("dp", then the "ep" inside it), the sequence over
/// "cp" (as propagation splits a stage's inputs), everything else whole.
mlir::Attribute activationLayout(mlir::Builder &b, mlir::Type type,
                                 const runtime::Mesh &mesh) {
  llvm::SmallVector<llvm::StringRef> dataAxes, contextAxes;
  for (const runtime::Mesh::Axis &axis : mesh.axes()) {
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

/// One model chunk as dtc-pipeline-assemble reads it back from its module
/// (`dtc.chunk` and the partitioned `@backward`).
struct Chunk {
  int64_t index = 0;
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
  llvm::SmallVector<int64_t> usedArgs;
  llvm::SmallVector<GradientResult> params;
  /// `backward`'s result index of each of `params`' gradients, and of the
  /// gradient of its input activation (-1 on the first chunk).
  llvm::SmallVector<unsigned> gradIndex;
  int dInputIndex = -1;
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

/// A gradient a pass function adds to its parameter's accumulator: the
/// chunk backward function's result `index`.
struct GradientSum {
  unsigned index;
  std::string parameter;
  mlir::RankedTensorType type;
};

/// Creates function `name` at the builder from `ops` of a chunk's backward
/// function: arguments `inputs` (its block arguments or values computed
/// outside `ops`), results `outputs` and, per gradient of `grads`, an
/// accumulator argument (the "grad:<parameter>" variable) returned plus
/// the gradient. Parameters and constants are cloned where used, so that
/// every pass reads (and ZeRO-3 gathers) its own copy.
mlir::func::FuncOp buildPassFunction(mlir::OpBuilder &b, const Chunk &chunk,
                                     llvm::StringRef name,
                                     llvm::ArrayRef<mlir::Value> inputs,
                                     llvm::ArrayRef<mlir::Operation *> ops,
                                     llvm::ArrayRef<mlir::Value> outputs,
                                     llvm::ArrayRef<GradientSum> grads) {
  mlir::func::FuncOp source = chunk.backward;
  mlir::Block &sourceBody = source.getBody().front();
  mlir::Location loc = source.getLoc();
  llvm::SmallVector<mlir::Type> argTypes, resultTypes;
  for (mlir::Value v : inputs)
    argTypes.push_back(v.getType());
  for (const GradientSum &g : grads)
    argTypes.push_back(g.type);
  for (mlir::Value v : outputs)
    resultTypes.push_back(v.getType());
  for (const GradientSum &g : grads)
    resultTypes.push_back(g.type);
  auto fn = mlir::func::FuncOp::create(
      b, loc, name, b.getFunctionType(argTypes, resultTypes));
  if (mlir::Attribute mesh = source->getAttr(d::kMeshAttrName))
    fn->setAttr(d::kMeshAttrName, mesh);
  mlir::Block *entry = fn.addEntryBlock();
  mlir::IRMapping map;
  for (auto [i, v] : llvm::enumerate(inputs)) {
    map.map(v, entry->getArgument(i));
    if (auto arg = llvm::dyn_cast<mlir::BlockArgument>(v);
        arg && arg.getOwner() == &sourceBody)
      if (mlir::DictionaryAttr attrs =
              source.getArgAttrDict(arg.getArgNumber()))
        fn.setArgAttrs(i, attrs);
  }
  mlir::OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(entry);
  for (mlir::Operation *op : ops) {
    if (isFree(op))
      continue;
    for (mlir::Value operand : op->getOperands())
      if (!map.contains(operand))
        if (mlir::Operation *def = operand.getDefiningOp(); def && isFree(def))
          b.clone(*def, map);
    b.clone(*op, map);
  }
  llvm::SmallVector<mlir::Value> results;
  for (mlir::Value v : outputs) {
    if (!map.contains(v))
      if (mlir::Operation *def = v.getDefiningOp(); def && isFree(def))
        b.clone(*def, map);
    results.push_back(map.lookup(v));
  }
  mlir::Operation *sourceReturn = sourceBody.getTerminator();
  for (auto [j, g] : llvm::enumerate(grads)) {
    unsigned argIndex = inputs.size() + j;
    std::string state = "grad:" + g.parameter;
    fn.setArgAttr(argIndex, "dtc.state", b.getStringAttr(state));
    fn.setArgAttr(argIndex, "dtc.state_role", b.getStringAttr("grad"));
    fn.setArgAttr(argIndex, "dtc.state_of", b.getStringAttr(g.parameter));
    mlir::Value source = sourceReturn->getOperand(g.index);
    if (!map.contains(source))
      if (mlir::Operation *def = source.getDefiningOp(); def && isFree(def))
        b.clone(*def, map);
    mlir::Value grad = map.lookup(source);
    results.push_back(
        d::AddOp::create(b, loc, entry->getArgument(argIndex), grad));
    fn.setResultAttr(outputs.size() + j, "dtc.state", b.getStringAttr(state));
  }
  mlir::func::ReturnOp::create(b, loc, results);
  return fn;
}

/// A pass function and, when the schedule splits the backward, its
/// weight-gradient part.
struct BackwardPasses {
  mlir::func::FuncOp backward, weight;
};

/// Builds a backward pass over `ops` of `chunk.backward` (reading `inputs`,
/// returning `outputs`): whole, or (`split`) as its input-gradient part B,
/// the ops `outputs` depend on (the backward slice of the gradient sent
/// upstream, and of the loss on the last chunk), and its weight-gradient
/// part W, the rest (the parameter gradients into the accumulators). B
/// returns after `outputs` every value W reads that W does not compute
/// (what B computed and the inputs W reads, as the forward pass keeps what
/// the backward pass reads); W takes exactly those. Collectives stay with
/// their waits (a start is in B only if its wait is), point-to-point
/// transfers inside the backward all go to B, and each part keeps the
/// original order, the same on every rank.
BackwardPasses buildBackwardPasses(mlir::OpBuilder &b, const Chunk &chunk,
                                   llvm::StringRef name,
                                   llvm::ArrayRef<mlir::Value> inputs,
                                   llvm::ArrayRef<mlir::Operation *> ops,
                                   llvm::ArrayRef<mlir::Value> outputs,
                                   llvm::ArrayRef<GradientSum> grads,
                                   bool split) {
  if (!split)
    return {buildPassFunction(b, chunk, name, inputs, ops, outputs, grads), {}};
  llvm::DenseSet<mlir::Operation *> candidates(ops.begin(), ops.end());
  llvm::DenseSet<mlir::Operation *> inputPart;
  llvm::SmallVector<mlir::Operation *> worklist;
  for (mlir::Value v : outputs)
    worklist.push_back(v.getDefiningOp());
  // Point-to-point transfers (context parallelism's ring) pair with the
  // same transfer on a peer, whose input gradient may read what this rank
  // sends: a send has no result for the slice to reach, so every transfer
  // and its wait join B (all ranks then run them in the same order).
  for (mlir::Operation *op : ops)
    if (llvm::isa<d::SendStartOp, d::RecvStartOp>(op)) {
      worklist.push_back(op);
      llvm::append_range(worklist, op->getUsers());
    }
  while (!worklist.empty()) {
    mlir::Operation *op = worklist.pop_back_val();
    if (!op || !candidates.contains(op) || !inputPart.insert(op).second)
      continue;
    for (mlir::Value operand : op->getOperands())
      worklist.push_back(operand.getDefiningOp());
  }
  llvm::SmallVector<mlir::Operation *> inputOps, weightOps;
  for (mlir::Operation *op : ops)
    (inputPart.contains(op) ? inputOps : weightOps).push_back(op);
  // What W reads from outside itself, in the order it first reads it.
  llvm::DenseSet<mlir::Operation *> inWeight(weightOps.begin(),
                                             weightOps.end());
  llvm::SetVector<mlir::Value> handed;
  auto read = [&](mlir::Value v) {
    mlir::Operation *def = v.getDefiningOp();
    if (!def || (!inWeight.contains(def) && !isFree(def)))
      handed.insert(v);
  };
  for (mlir::Operation *op : weightOps)
    for (mlir::Value operand : op->getOperands())
      read(operand);
  mlir::func::FuncOp source = chunk.backward;
  mlir::Operation *terminator = source.getBody().front().getTerminator();
  for (const GradientSum &g : grads)
    read(terminator->getOperand(g.index));
  llvm::SmallVector<mlir::Value> inputOutputs(outputs.begin(), outputs.end());
  llvm::append_range(inputOutputs, handed);
  BackwardPasses passes;
  passes.backward =
      buildPassFunction(b, chunk, name, inputs, inputOps, inputOutputs, {});
  passes.weight = buildPassFunction(b, chunk, (name + "_weight").str(),
                                    handed.getArrayRef(), weightOps, {}, grads);
  return passes;
}

/// The last model chunk's one function: forward, loss and backward of a
/// micro-batch, (activation in?, data...) -> (loss, d activation in?).
BackwardPasses buildLastChunkStep(mlir::OpBuilder &b, const Chunk &chunk,
                                  llvm::StringRef name,
                                  llvm::ArrayRef<GradientSum> grads,
                                  bool split) {
  mlir::func::FuncOp backward = chunk.backward;
  mlir::Block &body = backward.getBody().front();
  llvm::SmallVector<mlir::Value> inputs(body.getArguments());
  llvm::SmallVector<mlir::Operation *> ops;
  for (mlir::Operation &op : body.without_terminator())
    ops.push_back(&op);
  llvm::SmallVector<mlir::Value> outputs{body.getTerminator()->getOperand(0)};
  if (chunk.dInputIndex >= 0)
    outputs.push_back(body.getTerminator()->getOperand(chunk.dInputIndex));
  return buildBackwardPasses(b, chunk, name, inputs, ops, outputs, grads,
                             split);
}

/// A model chunk's forward pass, (activation in?, data...) -> (output,
/// kept...), and backward pass, (kept..., d output) -> (d activation in?):
/// what the backward pass reads of the forward pass is kept between them
/// (1F1B keeps each micro-batch's forward values alive until its backward
/// pass, as Megatron-LM does; `--recompute` decides which).
std::pair<mlir::func::FuncOp, BackwardPasses>
buildChunkPasses(mlir::OpBuilder &b, const Chunk &chunk,
                 llvm::StringRef forwardName, llvm::StringRef backwardName,
                 llvm::ArrayRef<GradientSum> grads, bool split) {
  mlir::func::FuncOp backward = chunk.backward;
  mlir::Block &body = backward.getBody().front();
  mlir::Operation *terminator = body.getTerminator();
  mlir::Value dOutput = body.getArguments().back();
  llvm::SmallVector<mlir::Value> backwardOutputs;
  if (chunk.dInputIndex >= 0)
    backwardOutputs.push_back(terminator->getOperand(chunk.dInputIndex));
  // What the backward pass reads that it does not compute: the kept
  // values, in the order it first reads them (parameters and constants it
  // clones itself; d output arrives from the next stage).
  llvm::DenseSet<mlir::Operation *> inBackward(chunk.backwardOps.begin(),
                                               chunk.backwardOps.end());
  llvm::SetVector<mlir::Value> kept;
  auto keep = [&](mlir::Value v) {
    if (v == dOutput)
      return;
    mlir::Operation *def = v.getDefiningOp();
    if (def && (inBackward.contains(def) || isFree(def)))
      return;
    kept.insert(v);
  };
  for (mlir::Operation *op : chunk.backwardOps)
    for (mlir::Value operand : op->getOperands())
      keep(operand);
  for (mlir::Value v : backwardOutputs)
    keep(v);
  for (const GradientSum &g : grads)
    keep(terminator->getOperand(g.index));

  llvm::SmallVector<mlir::Value> forwardInputs(body.getArguments().drop_back());
  llvm::SmallVector<mlir::Value> forwardOutputs{
      terminator->getOperand(chunk.outputIndex)};
  llvm::append_range(forwardOutputs, kept);
  mlir::func::FuncOp forwardFn =
      buildPassFunction(b, chunk, forwardName, forwardInputs, chunk.forwardOps,
                        forwardOutputs, {});
  llvm::SmallVector<mlir::Value> backwardInputs(kept.begin(), kept.end());
  backwardInputs.push_back(dOutput);
  BackwardPasses backwardFns =
      buildBackwardPasses(b, chunk, backwardName, backwardInputs,
                          chunk.backwardOps, backwardOutputs, grads, split);
  return {forwardFn, backwardFns};
}

/// A chunk module's `dtc.chunk`: its index, whether it is the first or the
/// last chunk, and the forward function's arguments it reads (`data`).
constexpr llvm::StringLiteral kChunkAttr = "dtc.chunk";
/// The pipeline's shape, from dtc-pipeline-split to dtc-pipeline-assemble.
constexpr llvm::StringLiteral kPipelineShapeAttr = "dtc.pipeline_shape";
/// Marks the chunk's output among `@backward`'s results.
constexpr llvm::StringLiteral kChunkOutputAttr = "dtc.chunk_output";

/// What a chunk or stage module inherits of the pipeline module's
/// attributes: all but those describing the whole step.
void inheritAttributes(mlir::ModuleOp into, mlir::ModuleOp from) {
  for (mlir::NamedAttribute attr : from->getAttrs())
    if (attr.getName() != kStepInfoAttr && attr.getName() != kPipelineShapeAttr)
      into->setAttr(attr.getName(), attr.getValue());
}

runtime::PipelineShape pipelineShapeOf(const TrainingStepOptions &options) {
  runtime::PipelineShape shape;
  shape.schedule = scheduleName(options.schedule).str();
  shape.stages = options.pipelineStages;
  shape.virtualStages = std::max<int64_t>(1, options.virtualStages);
  shape.microBatches = options.gradAccum;
  return shape;
}

void recordPipelineShape(mlir::ModuleOp module, const TrainingStepOptions &o) {
  mlir::Builder b(module.getContext());
  module->setAttr(
      kPipelineShapeAttr,
      b.getDictionaryAttr({
          b.getNamedAttr("mesh", d::MeshAttr::get(b.getContext(), o.mesh)),
          b.getNamedAttr("stages", b.getI64IntegerAttr(o.pipelineStages)),
          b.getNamedAttr("virtual_stages",
                         b.getI64IntegerAttr(o.virtualStages)),
          b.getNamedAttr("schedule", b.getStringAttr(scheduleName(o.schedule))),
          b.getNamedAttr("micro_batches", b.getI64IntegerAttr(o.gradAccum)),
          b.getNamedAttr("overlap", b.getBoolAttr(o.overlap)),
      }));
}

/// Reads what recordPipelineShape wrote into `o`.
llvm::Error readPipelineShape(mlir::ModuleOp module, TrainingStepOptions &o) {
  auto shape = module->getAttrOfType<mlir::DictionaryAttr>(kPipelineShapeAttr);
  auto mesh = shape ? shape.getAs<d::MeshAttr>("mesh") : nullptr;
  auto stages = shape ? shape.getAs<mlir::IntegerAttr>("stages") : nullptr;
  auto virtualStages =
      shape ? shape.getAs<mlir::IntegerAttr>("virtual_stages") : nullptr;
  auto schedule = shape ? shape.getAs<mlir::StringAttr>("schedule") : nullptr;
  auto micro =
      shape ? shape.getAs<mlir::IntegerAttr>("micro_batches") : nullptr;
  auto overlap = shape ? shape.getAs<mlir::BoolAttr>("overlap") : nullptr;
  if (!mesh || !stages || !virtualStages || !schedule || !micro || !overlap)
    return failure("dtc-pipeline-assemble: the module holds no pipeline "
                   "chunks (run dtc-pipeline-split first)");
  o.mesh = mesh.getMesh();
  o.pipelineStages = stages.getInt();
  o.virtualStages = virtualStages.getInt();
  o.schedule = parseSchedule(schedule).value_or(Schedule::OneFOneB);
  o.gradAccum = micro.getInt();
  o.overlap = overlap.getValue();
  return llvm::Error::success();
}

/// The chunk module's `dtc.chunk` as a Chunk (no functions yet).
llvm::Expected<Chunk> chunkOf(mlir::ModuleOp chunkModule) {
  auto attr = chunkModule->getAttrOfType<mlir::DictionaryAttr>(kChunkAttr);
  auto index = attr ? attr.getAs<mlir::IntegerAttr>("index") : nullptr;
  auto first = attr ? attr.getAs<mlir::BoolAttr>("first") : nullptr;
  auto last = attr ? attr.getAs<mlir::BoolAttr>("last") : nullptr;
  auto data = attr ? attr.getAs<mlir::DenseI64ArrayAttr>("data") : nullptr;
  if (!index || !first || !last || !data)
    return failure("not a pipeline chunk module (dtc-pipeline-split makes "
                   "them)");
  Chunk chunk;
  chunk.index = index.getInt();
  chunk.first = first.getValue();
  chunk.last = last.getValue();
  chunk.usedArgs.assign(data.asArrayRef().begin(), data.asArrayRef().end());
  return chunk;
}

/// The forward function of a pipeline module: its one function.
llvm::Expected<mlir::func::FuncOp> forwardOf(mlir::ModuleOp module) {
  auto funcs = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
  if (funcs.size() != 1)
    return failure("training step: expected one forward function, found {0}",
                   funcs.size());
  return funcs.front();
}

/// Makes a chunk's objective before the last chunk: sum(output * d
/// output), whose gradient is the chunk's vector-Jacobian product; d output
/// becomes the objective's last argument.
void objectiveOfOutput(mlir::func::FuncOp objective) {
  mlir::OpBuilder b(objective.getContext());
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
      d::MulOp::create(b, objective.getLoc(), chunkOutput, dOutput);
  mlir::Value sum = d::ReduceSumOp::create(b, objective.getLoc(), product,
                                           b.getDenseI64ArrayAttr(all));
  ret->setOperands(sum);
  objective.setFunctionType(b.getFunctionType(body.getArgumentTypes(),
                                              mlir::TypeRange{sum.getType()}));
}

/// Reads chunk `chunk`'s partitioned `@backward` in `chunkModule`: the
/// result indices of the input's gradient, the output and the parameter
/// gradients, and (before the last chunk) its ops split into passes.
llvm::Error readChunkFunctions(mlir::ModuleOp chunkModule, Chunk &chunk) {
  chunk.backward = chunkModule.lookupSymbol<mlir::func::FuncOp>("backward");
  if (!chunk.backward)
    return failure("pipeline chunk {0} has no @backward (run "
                   "dtc-chunk-gradient first)",
                   chunk.index);
  for (unsigned i = 0; i < chunk.backward.getNumResults(); ++i) {
    if (auto arg = chunk.backward.getResultAttrOfType<mlir::IntegerAttr>(
            i, kGradOfArgAttrName);
        arg && arg.getInt() == 0 && !chunk.first)
      chunk.dInputIndex = static_cast<int>(i);
    if (chunk.backward.getResultAttr(i, kChunkOutputAttr))
      chunk.outputIndex = i;
  }
  if (!chunk.last)
    if (llvm::Error e = splitPasses(chunk))
      return e;
  // The gradients this chunk produces, as in `micro_step`.
  for (unsigned i = 1; i < chunk.backward.getNumResults(); ++i)
    if (chunk.backward.getResultAttr(i, kGradOfAttrName)) {
      chunk.params.push_back(describeGradient(chunk.backward, i));
      chunk.gradIndex.push_back(i);
    }
  if (chunk.params.empty())
    return badInput("pipeline chunk {0} has no trainable parameters; use "
                    "fewer stages or virtual stages",
                    chunk.index);
  return llvm::Error::success();
}

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

} // namespace

runtime::Mesh stageMesh(const runtime::Mesh &mesh) {
  std::vector<runtime::Mesh::Axis> inner;
  for (const runtime::Mesh::Axis &axis : mesh.axes())
    if (axis.name != kPipelineAxis)
      inner.push_back(axis);
  return runtime::Mesh(std::move(inner));
}

llvm::Error splitIntoChunks(mlir::ModuleOp module,
                            const TrainingStepOptions &options) {
  runtime::PipelineShape shape = pipelineShapeOf(options);
  if (llvm::Error e = runtime::checkPipelineShape(shape))
    return badInput("{0}", llvm::toString(std::move(e)));
  auto forward = forwardOf(module);
  if (!forward)
    return forward.takeError();
  // dtc-bind-loss's; dtc-pipeline-assemble completes it.
  if (auto info = readStepInfo(module); !info)
    return info.takeError();
  const int64_t chunks = shape.stages * shape.virtualStages;
  auto cuts = chooseCuts(*forward, chunks);
  if (!cuts)
    return cuts.takeError();
  // The schedule is proved deadlock-free here, for the compiled
  // micro-batches, by the code the executor runs it with.
  if (auto actions = runtime::pipelineActions(shape, options.overlap); !actions)
    return failure("{0}", llvm::toString(actions.takeError()));

  // Chunk c: ops [cuts.begin[c], cuts.begin[c+1]) of the forward function.
  mlir::Builder b(module.getContext());
  const unsigned numOps = forward->getBody().front().getOperations().size() - 1;
  for (int64_t c = 0; c < chunks; ++c) {
    bool first = c == 0, last = c == chunks - 1;
    auto chunkModule = mlir::ModuleOp::create(
        forward->getLoc(), llvm::formatv("chunk{0}", c).str());
    inheritAttributes(chunkModule, module);
    unsigned begin = cuts->begin[c];
    unsigned end = last ? numOps : cuts->begin[c + 1];
    mlir::Value input = first ? nullptr : cuts->input[c];
    mlir::Value output = last ? nullptr : cuts->input[c + 1];
    llvm::SmallVector<unsigned> usedArgs;
    mlir::func::FuncOp objective = buildStage(chunkModule, *forward, begin, end,
                                              input, output, "stage", usedArgs);
    if (!last)
      objectiveOfOutput(objective);
    chunkModule->setAttr(
        kChunkAttr,
        b.getDictionaryAttr({
            b.getNamedAttr("index", b.getI64IntegerAttr(c)),
            b.getNamedAttr("first", b.getBoolAttr(first)),
            b.getNamedAttr("last", b.getBoolAttr(last)),
            b.getNamedAttr("data", b.getDenseI64ArrayAttr(
                                       llvm::to_vector_of<int64_t>(usedArgs))),
        }));
    module.getBody()->push_back(chunkModule);
  }
  recordPipelineShape(module, options);
  return llvm::Error::success();
}

llvm::Error differentiateChunk(mlir::ModuleOp chunkModule) {
  auto chunk = chunkOf(chunkModule);
  if (!chunk)
    return chunk.takeError();
  auto objective = chunkModule.lookupSymbol<mlir::func::FuncOp>("stage");
  if (!objective)
    return failure("pipeline chunk {0} has no @stage objective", chunk->index);
  GradientOptions gradOptions;
  gradOptions.wrtArguments = !chunk->first;
  auto backward = buildGradientFunction(objective, 0, "backward", gradOptions);
  if (mlir::failed(backward))
    return failure("pipeline chunk {0}: it cannot be differentiated (see the "
                   "error above)",
                   chunk->index);
  objective.erase();
  // The objective ends the forward pass of a chunk before the last.
  if (!chunk->last)
    backward->getBody()
        .front()
        .getTerminator()
        ->getOperand(0)
        .getDefiningOp()
        ->setAttr(kForwardEndAttr,
                  mlir::UnitAttr::get(chunkModule.getContext()));
  return llvm::Error::success();
}

llvm::Error setChunkBoundaries(mlir::ModuleOp chunkModule,
                               const runtime::Mesh &mesh) {
  auto chunk = chunkOf(chunkModule);
  if (!chunk)
    return chunk.takeError();
  auto backward = chunkModule.lookupSymbol<mlir::func::FuncOp>("backward");
  if (!backward)
    return failure("pipeline chunk {0} has no @backward (run "
                   "dtc-chunk-gradient first)",
                   chunk->index);
  mlir::OpBuilder b(chunkModule.getContext());
  for (unsigned i = 0; i < backward.getNumResults(); ++i)
    if (auto arg = backward.getResultAttrOfType<mlir::IntegerAttr>(
            i, kGradOfArgAttrName);
        arg && arg.getInt() == 0 && !chunk->first)
      backward.setResultAttr(
          i, "dtc.sharding",
          activationLayout(b, backward.getResultTypes()[i], mesh));
  if (chunk->last)
    return llvm::Error::success();
  // The chunk's output (the activation the objective multiplies by d
  // output) becomes a result too, in the boundary layout the next chunk
  // reads: the forward pass sends it.
  auto ret = llvm::cast<mlir::func::ReturnOp>(
      backward.getBody().front().getTerminator());
  mlir::Operation *objectiveOp = ret.getOperand(0).getDefiningOp();
  mlir::Value chunkOutput =
      objectiveOp->getOperand(0).getDefiningOp()->getOperand(0);
  unsigned outputIndex = ret.getNumOperands();
  ret->insertOperands(outputIndex, chunkOutput);
  (void)backward.insertResult(
      outputIndex, chunkOutput.getType(),
      b.getDictionaryAttr(
          {b.getNamedAttr("dtc.sharding",
                          activationLayout(b, chunkOutput.getType(), mesh)),
           b.getNamedAttr(kChunkOutputAttr, b.getUnitAttr())}));
  return llvm::Error::success();
}

namespace {

/// The data arguments of one micro-batch on a rank: the forward function's,
/// their rows cut over the data axes (dp and the ep inside it) and, with
/// cp, the sequence of tokens and labels (zigzag chunks, which the stages'
/// partitioned functions expect).
struct RankData {
  llvm::SmallVector<mlir::RankedTensorType> types;
  bool zigzag = false; ///< The sequence is cut over cp.
};
llvm::Expected<RankData> rankDataTypes(mlir::func::FuncOp forward,
                                       const runtime::Mesh &stage) {
  int64_t dataParts = 1, contextParts = 1;
  for (const runtime::Mesh::Axis &axis : stage.axes()) {
    if (axis.name == "dp" || axis.name == "ep")
      dataParts *= axis.size;
    if (axis.name == "cp")
      contextParts *= axis.size;
  }
  RankData data;
  data.zigzag = contextParts > 1;
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
    data.types.push_back(whole.clone(shape));
  }
  return data;
}

/// `pipeline_loss(mean loss) -> loss`: the last stage's loss, summed over
/// the pipeline axis so that every stage has it.
void buildPipelineLoss(mlir::OpBuilder &b, mlir::Location loc,
                       const runtime::Mesh &mesh) {
  auto scalarType = mlir::RankedTensorType::get({}, b.getF32Type());
  auto lossFn = mlir::func::FuncOp::create(
      b, loc, "pipeline_loss", b.getFunctionType({scalarType}, {scalarType}));
  lossFn->setAttr(d::kMeshAttrName, d::MeshAttr::get(b.getContext(), mesh));
  {
    mlir::OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(lossFn.addEntryBlock());
    Collectives comm(b, loc);
    mlir::Value loss =
        comm.allReduce(lossFn.getArgument(0), {kPipelineAxis.str()});
    mlir::func::ReturnOp::create(b, loc, loss);
  }
  lossFn.setResultAttr(0, "dtc.name", b.getStringAttr("loss"));
}

/// `pipeline_step`: no code, stage `s`'s schedule as data. Its data
/// arguments stack the step's micro-batches: [micro, rows, ...].
void buildPipelineStepFunction(mlir::OpBuilder &b, mlir::func::FuncOp forward,
                               llvm::ArrayRef<mlir::RankedTensorType> dataTypes,
                               const TrainingStepOptions &options, int64_t s,
                               llvm::ArrayRef<mlir::Attribute> chunkAttrs,
                               bool zigzag) {
  runtime::PipelineShape shape = pipelineShapeOf(options);
  mlir::Location loc = forward.getLoc();
  llvm::SmallVector<mlir::Type> argTypes;
  for (mlir::RankedTensorType type : dataTypes) {
    llvm::SmallVector<int64_t> stacked{shape.microBatches};
    llvm::append_range(stacked, type.getShape());
    argTypes.push_back(type.clone(stacked));
  }
  auto step = mlir::func::FuncOp::create(b, loc, "pipeline_step",
                                         b.getFunctionType(argTypes, {}));
  mlir::Block *body = step.addEntryBlock();
  for (unsigned i = 0; i < dataTypes.size(); ++i) {
    for (llvm::StringRef name : {"dtc.feed", "dtc.name"})
      if (mlir::Attribute attr = forward.getArgAttr(i, name))
        step.setArgAttr(i, name, attr);
    if (zigzag)
      step.setArgAttr(i, "dtc.zigzag", b.getUnitAttr());
  }
  step->setAttr(d::kMeshAttrName,
                d::MeshAttr::get(b.getContext(), options.mesh));
  step->setAttr(kPipelineAttr,
                b.getDictionaryAttr({
                    b.getNamedAttr("schedule", b.getStringAttr(scheduleName(
                                                   options.schedule))),
                    b.getNamedAttr("stages", b.getI64IntegerAttr(shape.stages)),
                    b.getNamedAttr("stage", b.getI64IntegerAttr(s)),
                    b.getNamedAttr("virtual_stages",
                                   b.getI64IntegerAttr(shape.virtualStages)),
                    b.getNamedAttr("micro_batches",
                                   b.getI64IntegerAttr(shape.microBatches)),
                    b.getNamedAttr("overlap", b.getBoolAttr(options.overlap)),
                    b.getNamedAttr("axis", b.getStringAttr(kPipelineAxis)),
                    b.getNamedAttr("chunks", b.getArrayAttr(chunkAttrs)),
                    b.getNamedAttr("loss", b.getStringAttr("pipeline_loss")),
                }));
  // The stage's passes for the compiled micro-batches, for readers of the
  // IR ("F2.1": docs/runtime.md); the executor derives its own.
  std::vector<std::string> names;
  for (const runtime::PipelinePass &pass : runtime::pipelinePasses(shape, s))
    names.push_back(runtime::passName(shape, s, pass));
  step->setAttr("dtc.schedule",
                b.getStrArrayAttr(llvm::to_vector_of<llvm::StringRef>(names)));
  mlir::OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(body);
  mlir::func::ReturnOp::create(b, loc);
}

/// Stage `s`'s chunks' pass functions, once each: forward and backward, or
/// the last chunk's whole step (the executor runs them in the schedule's
/// order). Returns each chunk's entry of `dtc.pipeline`'s `chunks`.
llvm::SmallVector<mlir::Attribute>
buildStagePasses(mlir::OpBuilder &b, llvm::ArrayRef<Chunk> chunks,
                 const ZeroLayout &zero, const TrainingStepOptions &options) {
  llvm::SmallVector<mlir::Attribute> chunkAttrs;
  llvm::SmallVector<mlir::func::FuncOp> passFunctions;
  for (const Chunk &chunk : chunks) {
    llvm::SmallVector<GradientSum> grads;
    for (auto [j, index] : llvm::enumerate(chunk.gradIndex))
      grads.push_back({index, chunk.params[j].parameter, chunk.params[j].type});
    std::string prefix = llvm::formatv("chunk{0}_", chunk.index).str();
    llvm::SmallVector<mlir::NamedAttribute> entry{
        b.getNamedAttr("data", b.getDenseI64ArrayAttr(chunk.usedArgs))};
    // Zero-bubble schedules run the weight gradients apart, every chunk's
    // (the last one's too: its input gradient is what the pipeline waits
    // for, its weight gradient can fill a bubble like any other).
    const bool split = splitsBackward(options.schedule);
    BackwardPasses backward;
    if (chunk.last) {
      backward = buildLastChunkStep(b, chunk, prefix + "step", grads, split);
    } else {
      auto passes = buildChunkPasses(b, chunk, prefix + "forward",
                                     prefix + "backward", grads, split);
      passFunctions.push_back(passes.first);
      entry.push_back(b.getNamedAttr(
          "forward", b.getStringAttr(passes.first.getSymName())));
      backward = passes.second;
    }
    passFunctions.push_back(backward.backward);
    entry.push_back(b.getNamedAttr(
        "backward", b.getStringAttr(backward.backward.getSymName())));
    if (backward.weight) {
      passFunctions.push_back(backward.weight);
      entry.push_back(b.getNamedAttr(
          "weight", b.getStringAttr(backward.weight.getSymName())));
    }
    chunkAttrs.push_back(b.getDictionaryAttr(entry));
  }
  for (mlir::func::FuncOp fn : passFunctions) {
    // What a pass computes for nothing (a chunk's objective value,
    // all-reduced but never read) goes.
    eraseUnusedResults(fn);
    // ZeRO-3: each pass gathers the parameters it reads, so none is held
    // whole between passes.
    if (options.zeroStage >= 3)
      gatherParametersForUse(fn, zero, options.overlap,
                             options.zeroPrefetchElements);
  }
  return chunkAttrs;
}

} // namespace

llvm::Expected<TrainingStepInfo> assemblePipeline(mlir::ModuleOp module,
                                                  TrainingStepOptions options) {
  if (llvm::Error e = readPipelineShape(module, options))
    return std::move(e);
  runtime::PipelineShape shape = pipelineShapeOf(options);
  auto info = readStepInfo(module);
  if (!info)
    return info.takeError();
  module->removeAttr(kStepInfoAttr);
  module->removeAttr(kPipelineShapeAttr);
  auto forward = forwardOf(module);
  if (!forward)
    return forward.takeError();
  auto data = rankDataTypes(*forward, stageMesh(options.mesh));
  if (!data)
    return data.takeError();

  // Every stage's model chunks (s, s + stages, ...) and parameters, each
  // parameter once per stage.
  llvm::SmallVector<mlir::ModuleOp> chunkModules(
      module.getOps<mlir::ModuleOp>());
  const int64_t stages = shape.stages;
  if (static_cast<int64_t>(chunkModules.size()) != stages * shape.virtualStages)
    return failure("dtc-pipeline-assemble: {0} chunk modules for {1} x {2} "
                   "chunks",
                   chunkModules.size(), stages, shape.virtualStages);
  std::vector<std::vector<Chunk>> chunksOf(stages);
  std::vector<llvm::SmallVector<GradientResult>> paramsOf(stages);
  for (int64_t s = 0; s < stages; ++s)
    for (int64_t k = 0; k < shape.virtualStages; ++k) {
      mlir::ModuleOp chunkModule = chunkModules[k * stages + s];
      auto chunk = chunkOf(chunkModule);
      if (!chunk)
        return chunk.takeError();
      if (llvm::Error e = readChunkFunctions(chunkModule, *chunk))
        return std::move(e);
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

  llvm::SmallVector<mlir::OwningOpRef<mlir::ModuleOp>> stageModules;
  for (int64_t s = 0; s < stages; ++s) {
    const llvm::SmallVector<GradientResult> &params = paramsOf[s];
    mlir::OpBuilder b(module.getContext());
    mlir::OwningOpRef<mlir::ModuleOp> stageModule =
        mlir::ModuleOp::create(forward->getLoc());
    inheritAttributes(*stageModule, module);
    b.setInsertionPointToEnd(stageModule->getBody());
    ZeroLayout zero = zeroLayoutOf(options, params);
    llvm::SmallVector<mlir::Attribute> chunkAttrs =
        buildStagePasses(b, chunksOf[s], zero, options);
    buildPipelineLoss(b, forward->getLoc(), options.mesh);
    buildPipelineStepFunction(b, *forward, data->types, options, s, chunkAttrs,
                              data->zigzag);
    std::vector<StageSharedGradient> sharedHere;
    for (const SharedParameter &p : *shared) {
      const auto *held = llvm::find(p.stages, s);
      mlir::Attribute shard =
          held == p.stages.end() ? nullptr : p.shards[held - p.stages.begin()];
      sharedHere.push_back({p.name, p.type, shard, kPipelineAxis.str(),
                            held != p.stages.end(), p.stages.front() == s});
    }
    buildApply(*stageModule, params, options, zero, {kPipelineAxis.str()},
               /*syncedInStep=*/{}, /*scatteredInStep=*/false, sharedHere);
    if (mlir::failed(mlir::verify(*stageModule)))
      return failure("pipeline stage {0}: the built functions do not verify "
                     "(see the error above)",
                     s);
    stageModules.push_back(std::move(stageModule));
  }

  // The stages replace the forward function and the chunks, each in its
  // own module (its own symbol table: every stage has an @apply).
  for (mlir::Operation &op :
       llvm::make_early_inc_range(module.getBody()->getOperations()))
    op.erase();
  for (auto [s, stage] : llvm::enumerate(stageModules)) {
    stage->setSymName(llvm::formatv("stage{0}", s).str());
    module.getBody()->push_back(stage.release());
  }
  info->microBatchesPerCall = shape.microBatches;
  info->stackedMicroBatches = true;
  writeStepInfo(module, *info);
  return info;
}

} // namespace training
} // namespace dtc
