//===- TrainingStep.cpp - The training step as dtc functions --------------===//

#include "passes/training/TrainingStep.h"

#include "compiler/support/Error.h"
#include "dialects/dtc/DtcOps.h"
#include "passes/autodiff/Autodiff.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

namespace d = mlir::dtc;

namespace dtc {
namespace {

mlir::RankedTensorType tensorType(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType());
}

bool isTokenTensor(mlir::Type type) {
  auto t = llvm::dyn_cast<mlir::RankedTensorType>(type);
  return t && t.getRank() == 2 &&
         llvm::isa<mlir::IntegerType>(t.getElementType()) &&
         !t.getElementType().isInteger(1);
}

/// A 0-d f32 constant.
mlir::Value scalar(mlir::OpBuilder &b, mlir::Location loc, float value) {
  auto type = mlir::RankedTensorType::get({}, b.getF32Type());
  return b.create<d::ConstantOp>(loc,
                                 mlir::DenseElementsAttr::get(type, value));
}

/// The rows of the embedding table that `tokens` index, or 0.
int64_t vocabOfTokens(mlir::Value tokens) {
  for (mlir::Operation *user : tokens.getUsers())
    if (auto embedding = llvm::dyn_cast<d::EmbeddingOp>(user))
      return tensorType(embedding.getTable()).getDimSize(0);
  return 0;
}

/// Makes `forward` return only its training loss, binding the data
/// arguments (`dtc.feed`); appends next-token cross-entropy to logits.
llvm::Expected<TrainingStepInfo> bindLoss(mlir::func::FuncOp forward) {
  mlir::Block &body = forward.getBody().front();
  auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());
  mlir::OpBuilder b(ret);
  mlir::Location loc = forward.getLoc();
  TrainingStepInfo info;
  auto args = body.getArguments();
  auto feed = [&](unsigned i, llvm::StringRef what) {
    forward.setArgAttr(i, "dtc.feed", b.getStringAttr(what));
  };

  int lossIndex = -1;
  for (auto [i, v] : llvm::enumerate(ret.getOperands()))
    if (tensorType(v).getRank() == 0 &&
        llvm::isa<mlir::FloatType>(tensorType(v).getElementType()))
      lossIndex = lossIndex < 0 ? static_cast<int>(i) : lossIndex;

  mlir::Value loss;
  if (lossIndex >= 0 && args.size() == 2 && isTokenTensor(args[0].getType()) &&
      args[0].getType() == args[1].getType()) {
    feed(0, "tokens");
    feed(1, "labels");
    loss = ret.getOperand(lossIndex);
    info.vocab = vocabOfTokens(args[0]);
  } else if (args.size() == 1 && isTokenTensor(args[0].getType()) &&
             ret.getNumOperands() >= 1 &&
             tensorType(ret.getOperand(0)).getRank() == 3) {
    mlir::Value logits = ret.getOperand(0);
    auto tokensType = tensorType(args[0]);
    auto logitsType = tensorType(logits);
    if (logitsType.getDimSize(0) != tokensType.getDimSize(0) ||
        logitsType.getDimSize(1) != tokensType.getDimSize(1))
      return badInput("the model's output [{0}, {1}, {2}] is not logits over "
                      "its token input [{3}, {4}]; bind the data with "
                      "--bind NAME=tokens|labels (not supported yet)",
                      logitsType.getDimSize(0), logitsType.getDimSize(1),
                      logitsType.getDimSize(2), tokensType.getDimSize(0),
                      tokensType.getDimSize(1));
    feed(0, "tokens");
    auto labelsType =
        mlir::RankedTensorType::get(tokensType.getShape(), b.getI64Type());
    if (mlir::failed(forward.insertArgument(1, labelsType, {}, loc)))
      return failure("cannot add the labels argument");
    feed(1, "labels");
    forward.setArgAttr(1, "dtc.name", b.getStringAttr("labels"));
    loss = b.create<d::CrossEntropyOp>(loc, logits, body.getArgument(1),
                                       static_cast<uint64_t>(-100));
    info.vocab = logitsType.getDimSize(2);
  } else {
    return badInput("cannot bind training data: the graph must output a "
                    "scalar loss from two integer [batch, seq] inputs "
                    "(tokens, labels) or logits [batch, seq, vocab] from one "
                    "integer input; --bind NAME=tokens|labels is not "
                    "supported yet");
  }
  auto tokensType = tensorType(body.getArgument(0));
  info.microBatch = tokensType.getDimSize(0);
  info.seqLen = tokensType.getDimSize(1);

  b.create<mlir::func::ReturnOp>(loc, loss);
  ret.erase();
  forward.setFunctionType(b.getFunctionType(body.getArgumentTypes(),
                                            mlir::TypeRange{loss.getType()}));
  forward.setAllResultAttrs(
      llvm::ArrayRef<mlir::DictionaryAttr>{b.getDictionaryAttr(
          b.getNamedAttr("dtc.name", b.getStringAttr("loss")))});
  return info;
}

struct GradientResult {
  std::string parameter;
  mlir::RankedTensorType type;
};

/// Turns the gradient function into `micro_step`: every gradient is added
/// to its accumulator (a `dtc.state` argument updated in place).
void accumulateGradients(mlir::func::FuncOp grad,
                         llvm::SmallVectorImpl<GradientResult> &params) {
  mlir::Block &body = grad.getBody().front();
  auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());
  mlir::OpBuilder b(ret);
  mlir::Location loc = grad.getLoc();
  unsigned numArgs = grad.getNumArguments();
  llvm::SmallVector<mlir::Value> results{ret.getOperand(0)};
  llvm::SmallVector<mlir::DictionaryAttr> resultAttrs{
      grad.getResultAttrDict(0)};
  for (unsigned i = 1; i < ret.getNumOperands(); ++i) {
    auto of = grad.getResultAttrOfType<mlir::StringAttr>(i, kGradOfAttrName);
    mlir::Value g = ret.getOperand(i);
    params.push_back({of.getValue().str(), tensorType(g)});
    std::string state = "grad:" + of.getValue().str();
    (void)grad.insertArgument(numArgs + i - 1, g.getType(), {}, loc);
    mlir::Value acc = body.getArgument(numArgs + i - 1);
    grad.setArgAttr(numArgs + i - 1, "dtc.state", b.getStringAttr(state));
    grad.setArgAttr(numArgs + i - 1, "dtc.state_role", b.getStringAttr("grad"));
    grad.setArgAttr(numArgs + i - 1, "dtc.state_of", of);
    // Accumulate as soon as the gradient exists, so it dies there instead
    // of every gradient staying alive until the end of the backward pass.
    mlir::OpBuilder::InsertionGuard guard(b);
    if (mlir::Operation *def = g.getDefiningOp())
      b.setInsertionPointAfter(def);
    results.push_back(b.create<d::AddOp>(loc, acc, g));
    resultAttrs.push_back(b.getDictionaryAttr(
        b.getNamedAttr("dtc.state", b.getStringAttr(state))));
  }
  b.create<mlir::func::ReturnOp>(loc, results);
  ret.erase();
  grad.setFunctionType(b.getFunctionType(body.getArgumentTypes(),
                                         mlir::ValueRange(results).getTypes()));
  grad.setAllResultAttrs(resultAttrs);
}

/// Builds `apply`: global-norm clipping of the averaged gradient, AdamW on
/// every parameter, gradients zeroed for the next step.
void buildApply(mlir::ModuleOp module, llvm::ArrayRef<GradientResult> params,
                const TrainingStepOptions &options) {
  mlir::OpBuilder b(module.getBodyRegion());
  b.setInsertionPointToEnd(module.getBody());
  mlir::Location loc = module.getLoc();
  auto f32Scalar = mlir::RankedTensorType::get({}, b.getF32Type());

  llvm::SmallVector<mlir::Type> argTypes{f32Scalar, f32Scalar};
  llvm::SmallVector<mlir::DictionaryAttr> argAttrs{
      b.getDictionaryAttr(b.getNamedAttr("dtc.feed", b.getStringAttr("lr"))),
      b.getDictionaryAttr(b.getNamedAttr("dtc.feed", b.getStringAttr("step")))};
  auto stateArg = [&](mlir::Type type, const std::string &role,
                      const std::string &param) {
    argTypes.push_back(type);
    std::string name = role == "grad" ? "grad:" + param : role + ":" + param;
    argAttrs.push_back(b.getDictionaryAttr(
        {b.getNamedAttr("dtc.state", b.getStringAttr(name)),
         b.getNamedAttr("dtc.state_role", b.getStringAttr(role)),
         b.getNamedAttr("dtc.state_of", b.getStringAttr(param))}));
  };
  for (const GradientResult &p : params) {
    stateArg(p.type, "grad", p.parameter);
    stateArg(p.type, "exp_avg", p.parameter);
    stateArg(p.type, "exp_avg_sq", p.parameter);
  }
  auto apply = b.create<mlir::func::FuncOp>(loc, "apply",
                                            b.getFunctionType(argTypes, {}));
  mlir::Block *body = apply.addEntryBlock();
  b.setInsertionPointToStart(body);
  mlir::Value lr = body->getArgument(0), step = body->getArgument(1);

  // ||g / A|| over all parameters, and the factor AdamW applies to g.
  double inverseAccum = 1.0 / static_cast<double>(options.gradAccum);
  mlir::Value sumSquares;
  for (auto [i, p] : llvm::enumerate(params)) {
    mlir::Value g = body->getArgument(2 + 3 * i);
    llvm::SmallVector<int64_t> all;
    for (int64_t dim = 0; dim < p.type.getRank(); ++dim)
      all.push_back(dim);
    mlir::Value squares = b.create<d::MulOp>(loc, g, g);
    mlir::Value s =
        b.create<d::ReduceSumOp>(loc, squares, b.getDenseI64ArrayAttr(all));
    if (!p.type.getElementType().isF32())
      s = b.create<d::CastOp>(loc, s, mlir::TypeAttr::get(b.getF32Type()));
    sumSquares = sumSquares ? b.create<d::AddOp>(loc, sumSquares, s) : s;
  }
  mlir::Value norm =
      b.create<d::MulOp>(loc, b.create<d::SqrtOp>(loc, sumSquares),
                         scalar(b, loc, static_cast<float>(inverseAccum)));
  mlir::Value gradScale = scalar(b, loc, static_cast<float>(inverseAccum));
  if (options.optimizer.gradClip > 0) {
    mlir::Value clip = b.create<d::MinOp>(
        loc, scalar(b, loc, 1.0f),
        b.create<d::DivOp>(
            loc, scalar(b, loc, static_cast<float>(options.optimizer.gradClip)),
            b.create<d::AddOp>(loc, norm, scalar(b, loc, 1e-6f))));
    gradScale = b.create<d::MulOp>(loc, clip, gradScale);
  }

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
    mlir::Value g = body->getArgument(2 + 3 * i);
    mlir::Value m = body->getArgument(3 + 3 * i);
    mlir::Value v = body->getArgument(4 + 3 * i);
    mlir::Value param =
        b.create<d::ParameterOp>(loc, p.type, b.getStringAttr(p.parameter));
    // Megatron and nanoGPT decay matrices only, not biases and norm scales.
    double decay = p.type.getRank() >= 2 ? opt.weightDecay : 0.0;
    mlir::OperationState state(loc, "dtc.adamw");
    state.addOperands({param, g, m, v, lr, step, gradScale});
    state.addTypes({p.type, p.type, p.type});
    state.addAttribute("beta1", b.getF64FloatAttr(opt.beta1));
    state.addAttribute("beta2", b.getF64FloatAttr(opt.beta2));
    state.addAttribute("epsilon", b.getF64FloatAttr(opt.epsilon));
    state.addAttribute("weight_decay", b.getF64FloatAttr(decay));
    mlir::Operation *adamw = b.create(state);
    writes(adamw->getResult(0), p.parameter);
    writes(adamw->getResult(1), "exp_avg:" + p.parameter);
    writes(adamw->getResult(2), "exp_avg_sq:" + p.parameter);
    auto zero = mlir::DenseElementsAttr::get(
        p.type, b.getZeroAttr(p.type.getElementType()));
    writes(b.create<d::ConstantOp>(loc, zero), "grad:" + p.parameter);
  }
  b.create<mlir::func::ReturnOp>(loc, results);
  apply.setFunctionType(
      b.getFunctionType(argTypes, mlir::ValueRange(results).getTypes()));
  apply.setAllArgAttrs(argAttrs);
  apply.setAllResultAttrs(resultAttrs);
}

} // namespace

llvm::Expected<TrainingStepInfo>
buildTrainingStep(mlir::ModuleOp module, const TrainingStepOptions &options) {
  auto funcs = llvm::to_vector(module.getOps<mlir::func::FuncOp>());
  if (funcs.size() != 1)
    return failure("training step: expected one forward function, found {0}",
                   funcs.size());
  mlir::func::FuncOp forward = funcs.front();
  auto info = bindLoss(forward);
  if (!info)
    return info.takeError();
  auto grad = buildGradientFunction(forward, 0, "micro_step");
  if (mlir::failed(grad))
    return failure("training step: the model cannot be differentiated (see "
                   "the error above)");
  forward.erase();
  // Recompute hook (docs/recompute.md): the loss (result 0) ends the
  // forward part of the gradient function.
  if (mlir::failed(applyRecompute(*grad, 0, options.recompute)))
    return failure("training step: {0} recompute failed (see the error "
                   "above)",
                   recomputeModeName(options.recompute));
  llvm::SmallVector<GradientResult> params;
  accumulateGradients(*grad, params);
  if (params.empty())
    return badInput("the model has no trainable parameters (no float "
                    "initializer reaches the loss)");
  buildApply(module, params, options);
  if (mlir::failed(mlir::verify(module)))
    return failure("training step: the built functions do not verify (see "
                   "the error above)");
  return info;
}

} // namespace dtc
