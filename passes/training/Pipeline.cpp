//===- Pipeline.cpp - The pipeline-parallel training step -----------------===//
//
// Splits the loss-bound forward function into pipeline stages and builds,
// per stage, one module that a group of ranks runs (docs/pipeline.md):
//
//   @pipeline_step(tokens[m], labels[m], grad accumulators...)
//       -> (loss, accumulators + this stage's gradients over m micro-batches)
//   @apply(lr, step, grad accumulators...)  (as without pipelining)
//
// A stage is a run of ops between two cut points where exactly one
// activation (the residual stream) crosses; cuts balance the stages'
// estimated work. Each stage has a forward function (input -> output
// activation) and a backward function: the gradient of
// sum(output * d output) (or of the loss on the last stage), which
// recomputes the stage's forward from its stashed input, so only stage
// inputs stay alive between a micro-batch's forward and backward. Both are
// sharded and partitioned over the data/tensor-parallel mesh, then inlined
// into `pipeline_step` in the order of the schedule (GPipe or 1F1B), joined
// by send/recv over the "pp" mesh axis.
//
//===----------------------------------------------------------------------===//

#include "compiler/support/Error.h"
#include "dialects/dtc/DtcAttrs.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/training/StepParts.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"

#include <map>

namespace dtc {
namespace training {
namespace {

constexpr llvm::StringLiteral kPipelineAxis = "pp";

bool isFree(mlir::Operation *op) {
  return llvm::isa<d::ParameterOp, d::ConstantOp>(op);
}

/// An op's share of the work, for balancing stages: multiply-adds of
/// contractions, elements written otherwise.
double workOf(mlir::Operation *op) {
  double elements = 0;
  for (mlir::Value r : op->getResults())
    if (auto t = llvm::dyn_cast<mlir::RankedTensorType>(r.getType()))
      elements += static_cast<double>(t.getNumElements());
  if (llvm::isa<d::MatmulOp>(op)) {
    auto a = tensorType(op->getOperand(0));
    return elements * static_cast<double>(a.getDimSize(a.getRank() - 1));
  }
  if (llvm::isa<d::AttentionOp>(op)) {
    auto q = tensorType(op->getOperand(0));
    return 2 * elements * static_cast<double>(q.getDimSize(q.getRank() - 2));
  }
  return elements;
}

/// Where each stage after the first starts (an op index of the forward
/// body) and the activation that crosses into it.
struct StageCuts {
  llvm::SmallVector<unsigned> begin;    // begin[0] == 0
  llvm::SmallVector<mlir::Value> input; // input[0] is null
};

llvm::Expected<StageCuts> chooseCuts(mlir::func::FuncOp forward,
                                     int64_t stages) {
  mlir::Block &body = forward.getBody().front();
  llvm::SmallVector<mlir::Operation *> ops;
  for (mlir::Operation &op : body.without_terminator())
    ops.push_back(&op);
  const unsigned n = ops.size();
  llvm::DenseMap<mlir::Operation *, unsigned> index;
  for (auto [i, op] : llvm::enumerate(ops))
    index[op] = i;
  auto lastUse = [&](mlir::Value v) {
    unsigned last = 0;
    for (mlir::Operation *user : v.getUsers())
      last =
          std::max(last, user == body.getTerminator() ? n : index.lookup(user));
    return last;
  };
  // Sweep the cut points: the activations (results of ops that are not
  // parameters or constants) defined before a cut and read after it.
  llvm::SmallVector<double> workBefore(n + 1, 0);
  llvm::SetVector<mlir::Value> live;
  llvm::SmallVector<std::pair<unsigned, mlir::Value>> candidates;
  for (unsigned k = 0; k < n; ++k) {
    workBefore[k + 1] = workBefore[k] + (isFree(ops[k]) ? 0 : workOf(ops[k]));
    if (!isFree(ops[k]))
      for (mlir::Value r : ops[k]->getResults())
        if (lastUse(r) > k)
          live.insert(r);
    live.remove_if([&](mlir::Value v) { return lastUse(v) <= k; });
    if (live.size() == 1 && k + 1 < n) {
      auto t = llvm::dyn_cast<mlir::RankedTensorType>(live[0].getType());
      if (t && llvm::isa<mlir::FloatType>(t.getElementType()) &&
          t.getRank() >= 2)
        candidates.push_back({k + 1, live[0]});
    }
  }
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

/// The layout of a stage boundary activation: rows split over "dp" when
/// the mesh has it, everything else whole.
mlir::Attribute activationLayout(mlir::Builder &b, mlir::Type type,
                                 llvm::StringRef mesh) {
  bool dp = llvm::any_of(llvm::split(mesh, ','), [](llvm::StringRef item) {
    return item.trim().starts_with("dp:");
  });
  auto rank = llvm::cast<mlir::RankedTensorType>(type).getRank();
  llvm::SmallVector<mlir::Attribute> dims;
  for (int64_t d = 0; d < rank; ++d)
    dims.push_back(d == 0 && dp ? b.getStrArrayAttr({"dp"})
                                : b.getArrayAttr({}));
  llvm::SmallVector<int64_t> blocks(rank, 0);
  return d::ShardingAttr::get(b.getContext(), b.getArrayAttr(dims), blocks,
                              b.getArrayAttr({}));
}

/// Clones `callee`'s body at the builder with `args`; returns its results.
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

/// The order a stage runs its micro-batches' forward ('F') and backward
/// ('B') passes in.
llvm::SmallVector<std::pair<char, int64_t>> scheduleOf(llvm::StringRef schedule,
                                                       int64_t stage,
                                                       int64_t stages,
                                                       int64_t micro) {
  llvm::SmallVector<std::pair<char, int64_t>> order;
  if (schedule == "gpipe") {
    for (int64_t i = 0; i < micro; ++i)
      order.push_back({'F', i});
    for (int64_t i = 0; i < micro; ++i)
      order.push_back({'B', i});
    return order;
  }
  // 1F1B: the warmup fills the pipeline, then one forward and one backward
  // alternate, so at most `stages - stage` micro-batches are in flight.
  int64_t warmup = std::min(stages - stage - 1, micro);
  for (int64_t i = 0; i < warmup; ++i)
    order.push_back({'F', i});
  for (int64_t i = 0; i + warmup < micro; ++i) {
    order.push_back({'F', i + warmup});
    order.push_back({'B', i});
  }
  for (int64_t i = micro - warmup; i < micro; ++i)
    order.push_back({'B', i});
  return order;
}

} // namespace
} // namespace training

using namespace training;

llvm::Expected<TrainingStepInfo> buildPipelineStep(
    mlir::ModuleOp module, const TrainingStepOptions &options,
    llvm::SmallVectorImpl<mlir::OwningOpRef<mlir::ModuleOp>> &stageModules) {
  const int64_t stages = options.pipelineStages;
  const int64_t micro = options.gradAccum;
  if (options.zeroStage >= 3)
    return badInput("pipeline: ZeRO stage 3 with pipeline stages is not "
                    "lowered yet; pin --zero 2 or lower");
  if (options.schedule != "1f1b" && options.schedule != "gpipe")
    return badInput("pipeline: schedule '{0}' is not lowered yet (1f1b and "
                    "gpipe are)",
                    options.schedule);
  auto funcs = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
  if (funcs.size() != 1)
    return failure("training step: expected one forward function, found {0}",
                   funcs.size());
  mlir::func::FuncOp forward = funcs.front();
  auto info = bindLoss(forward);
  if (!info)
    return info.takeError();
  auto cuts = chooseCuts(forward, stages);
  if (!cuts)
    return cuts.takeError();

  // The data/tensor-parallel part of the mesh: what each stage is sharded
  // and partitioned over.
  TrainingStepOptions stageOptions = options;
  llvm::SmallVector<std::string> inner;
  for (llvm::StringRef item : llvm::split(options.mesh, ','))
    if (!item.trim().empty() && !item.trim().starts_with("pp:"))
      inner.push_back(item.trim().str());
  stageOptions.mesh = llvm::join(inner, ",");
  mlir::MLIRContext *ctx = module.getContext();
  auto tokensType = tensorType(forward.getArgument(0));
  int64_t dp = 1;
  for (llvm::StringRef item : inner)
    if (item.starts_with("dp:"))
      (void)item.drop_front(3).getAsInteger(10, dp);
  const int64_t rows = tokensType.getDimSize(0) / dp;
  const int64_t seq = tokensType.getDimSize(1);

  for (int64_t s = 0; s < stages; ++s) {
    bool first = s == 0, last = s == stages - 1;
    mlir::OpBuilder b(ctx);
    mlir::OwningOpRef<mlir::ModuleOp> stageModule =
        mlir::ModuleOp::create(forward.getLoc());
    (*stageModule)->setAttrs(module->getAttrs());
    unsigned begin = cuts->begin[s];
    unsigned end =
        last ? static_cast<unsigned>(
                   forward.getBody().front().getOperations().size() - 1)
             : cuts->begin[s + 1];
    mlir::Value input = first ? nullptr : cuts->input[s];
    mlir::Value output = last ? nullptr : cuts->input[s + 1];
    llvm::SmallVector<unsigned> usedArgs;
    mlir::func::FuncOp objective = buildStage(*stageModule, forward, begin, end,
                                              input, output, "stage", usedArgs);
    // The objective of a stage before the last: sum(output * d output),
    // whose gradient is the stage's vector-Jacobian product.
    mlir::Value stageOutput;
    if (!last) {
      mlir::Block &body = objective.getBody().front();
      auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());
      stageOutput = ret.getOperand(0);
      auto type = tensorType(stageOutput);
      (void)objective.insertArgument(objective.getNumArguments(), type, {},
                                     objective.getLoc());
      mlir::Value dOutput = body.getArgument(objective.getNumArguments() - 1);
      b.setInsertionPoint(ret);
      llvm::SmallVector<int64_t> all;
      for (int64_t dim = 0; dim < type.getRank(); ++dim)
        all.push_back(dim);
      mlir::Value product =
          b.create<d::MulOp>(objective.getLoc(), stageOutput, dOutput);
      mlir::Value sum = b.create<d::ReduceSumOp>(objective.getLoc(), product,
                                                 b.getDenseI64ArrayAttr(all));
      ret->setOperands(sum);
      objective.setFunctionType(b.getFunctionType(
          body.getArgumentTypes(), mlir::TypeRange{sum.getType()}));
    }
    // Shard the objective (parameters keep these layouts in both passes).
    if (!stageOptions.mesh.empty())
      if (llvm::Error e = shardFunctions(*stageModule, stageOptions,
                                         /*partition=*/false, false))
        return std::move(e);
    // The forward pass: the objective without its last two ops.
    mlir::func::FuncOp forwardPass;
    if (!last) {
      forwardPass = objective.clone();
      forwardPass.setSymName("forward");
      stageModule->push_back(forwardPass);
      mlir::Block &body = forwardPass.getBody().front();
      auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());
      mlir::Operation *sum = ret.getOperand(0).getDefiningOp();
      mlir::Operation *product = sum->getOperand(0).getDefiningOp();
      ret->setOperands(product->getOperand(0));
      sum->erase();
      product->erase();
      forwardPass.eraseArgument(forwardPass.getNumArguments() - 1);
      forwardPass.setFunctionType(
          b.getFunctionType(body.getArgumentTypes(),
                            mlir::TypeRange{ret.getOperand(0).getType()}));
      forwardPass.setResultAttr(
          0, "dtc.sharding",
          activationLayout(b, ret.getOperand(0).getType(), stageOptions.mesh));
    }
    GradientOptions gradOptions;
    gradOptions.wrtArguments = !first;
    auto backward =
        buildGradientFunction(objective, 0, "backward", gradOptions);
    if (mlir::failed(backward))
      return failure("pipeline stage {0}: the stage cannot be differentiated "
                     "(see the error above)",
                     s);
    objective.erase();
    int dInputIndex = -1;
    for (unsigned i = 0; i < backward->getNumResults(); ++i)
      if (auto arg = backward->getResultAttrOfType<mlir::IntegerAttr>(
              i, kGradOfArgAttrName);
          arg && arg.getInt() == 0 && !first) {
        dInputIndex = static_cast<int>(i);
        backward->setResultAttr(i, "dtc.sharding",
                                activationLayout(b,
                                                 backward->getResultTypes()[i],
                                                 stageOptions.mesh));
      }
    if (!stageOptions.mesh.empty())
      if (llvm::Error e = shardFunctions(*stageModule, stageOptions,
                                         /*partition=*/true,
                                         /*deferGradientSync=*/true))
        return std::move(e);

    // The gradients this stage produces, as in `micro_step`.
    llvm::SmallVector<GradientResult> params;
    llvm::SmallVector<unsigned> gradIndex;
    for (unsigned i = 1; i < backward->getNumResults(); ++i)
      if (backward->getResultAttr(i, kGradOfAttrName)) {
        params.push_back(describeGradient(*backward, i));
        gradIndex.push_back(i);
      }
    if (params.empty())
      return badInput("pipeline stage {0} has no trainable parameters; use "
                      "fewer stages",
                      s);

    // pipeline_step: the schedule, inlined.
    auto dataType = mlir::RankedTensorType::get({micro, rows, seq},
                                                tokensType.getElementType());
    llvm::SmallVector<mlir::Type> argTypes{dataType, dataType};
    for (const GradientResult &p : params)
      argTypes.push_back(p.type);
    b.setInsertionPointToEnd(stageModule->getBody());
    mlir::Location loc = forward.getLoc();
    auto step = b.create<mlir::func::FuncOp>(loc, "pipeline_step",
                                             b.getFunctionType(argTypes, {}));
    mlir::Block *body = step.addEntryBlock();
    step.setArgAttr(0, "dtc.feed", b.getStringAttr("tokens"));
    step.setArgAttr(1, "dtc.feed", b.getStringAttr("labels"));
    for (auto [i, p] : llvm::enumerate(params)) {
      std::string state = "grad:" + p.parameter;
      step.setArgAttr(2 + i, "dtc.state", b.getStringAttr(state));
      step.setArgAttr(2 + i, "dtc.state_role", b.getStringAttr("grad"));
      step.setArgAttr(2 + i, "dtc.state_of", b.getStringAttr(p.parameter));
    }
    step->setAttr("dtc.mesh", b.getStringAttr(options.mesh));
    b.setInsertionPointToStart(body);
    Collectives comm(b, loc);
    auto pp = b.getStrArrayAttr({kPipelineAxis});
    auto handle = [&](mlir::Type t) { return d::AsyncType::get(ctx, t); };

    // Micro-batch i of the tokens (0) or labels (1) argument.
    std::map<std::pair<unsigned, int64_t>, mlir::Value> slices;
    auto dataSlice = [&](unsigned arg, int64_t i) {
      mlir::Value &v = slices[{arg, i}];
      if (!v) {
        auto sliced = mlir::RankedTensorType::get({1, rows, seq},
                                                  tokensType.getElementType());
        mlir::Value part =
            b.create<d::SliceOp>(loc, sliced, body->getArgument(arg),
                                 b.getDenseI64ArrayAttr({i, 0, 0}),
                                 b.getDenseI64ArrayAttr({i + 1, rows, seq}),
                                 b.getDenseI64ArrayAttr({1, 1, 1}));
        v = b.create<d::ReshapeOp>(
            loc,
            mlir::RankedTensorType::get({rows, seq},
                                        tokensType.getElementType()),
            part);
      }
      return v;
    };
    auto stageArgs = [&](int64_t i) {
      llvm::SmallVector<mlir::Value> args;
      for (unsigned a : usedArgs)
        args.push_back(dataSlice(a, i));
      return args;
    };
    mlir::Type inputType =
        first ? mlir::Type() : backward->getFunctionType().getInput(0);
    mlir::Type outputType =
        last ? mlir::Type() : forwardPass.getFunctionType().getResult(0);

    llvm::SmallVector<mlir::Value> accumulators(
        body->getArguments().begin() + 2, body->getArguments().end());
    llvm::DenseMap<int64_t, mlir::Value> stash; // micro-batch -> input
    llvm::SmallVector<mlir::Value> sends;
    mlir::Value lossSum;
    auto receive = [&](mlir::Type type, int64_t offset) {
      auto start = b.create<d::RecvStartOp>(loc, handle(type), pp, offset);
      return comm.wait(start);
    };
    for (auto [pass, i] : scheduleOf(options.schedule, s, stages, micro)) {
      if (pass == 'F') {
        if (last)
          continue; // the last stage's backward runs its forward
        llvm::SmallVector<mlir::Value> args;
        if (!first)
          args.push_back(stash[i] = receive(inputType, -1));
        llvm::append_range(args, stageArgs(i));
        mlir::Value y = inlineCall(b, forwardPass, args)[0];
        sends.push_back(
            b.create<d::SendStartOp>(loc, handle(b.getNoneType()), y, pp, 1));
        continue;
      }
      llvm::SmallVector<mlir::Value> args;
      if (!first)
        args.push_back(last ? (stash[i] = receive(inputType, -1)) : stash[i]);
      llvm::append_range(args, stageArgs(i));
      if (!last)
        args.push_back(receive(outputType, 1));
      llvm::SmallVector<mlir::Value> results = inlineCall(b, *backward, args);
      if (last)
        lossSum =
            lossSum ? b.create<d::AddOp>(loc, lossSum, results[0]) : results[0];
      for (auto [j, index] : llvm::enumerate(gradIndex))
        accumulators[j] =
            b.create<d::AddOp>(loc, accumulators[j], results[index]);
      if (dInputIndex >= 0)
        sends.push_back(b.create<d::SendStartOp>(loc, handle(b.getNoneType()),
                                                 results[dInputIndex], pp, -1));
    }
    // Sends complete before the step ends (their buffers stay reserved
    // until then), so no rank blocks on a send while its peer blocks too.
    for (mlir::Value send : sends)
      b.create<d::WaitOp>(loc, send);
    // The mean loss over the micro-batches, from the last stage to all.
    mlir::Value loss =
        last ? b.create<d::MulOp>(
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
    backward->erase();
    if (forwardPass)
      forwardPass.erase();
    eraseUnusedResults(step);

    TrainingStepOptions applyOptions = options;
    ZeroLayout zero = zeroLayoutOf(applyOptions, params);
    buildApply(*stageModule, params, applyOptions, zero, {kPipelineAxis.str()});
    if (mlir::failed(mlir::verify(*stageModule)))
      return failure("pipeline stage {0}: the built functions do not verify "
                     "(see the error above)",
                     s);
    stageModules.push_back(std::move(stageModule));
  }
  info->microBatchesPerCall = micro;
  return info;
}

} // namespace dtc
