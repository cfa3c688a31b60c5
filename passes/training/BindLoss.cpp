//===- BindLoss.cpp - The training objective of the forward function -----===//
//
// dtc-bind-loss's work (docs/training.md, "Objectives"): every argument of
// the imported forward function gets a data role (what `dtc run` feeds it),
// and the function returns one scalar to minimize: the model's own loss, or
// cross-entropy appended to its logits. What is asked (`dtc compile --loss`,
// `--feed`) is checked against the graph; what is not asked is read off it:
//
//   a scalar float output                  -> model-loss
//   a decoder_tokens input, logits over it -> seq2seq
//   token input, logits [b, t, v] over it  -> next-token when every
//                                             attention is causal, else
//                                             masked-lm
//   float inputs, logits [b, ..., classes] -> classify
//
//===----------------------------------------------------------------------===//

#include "passes/training/StepParts.h"
#include "passes/training/TrainingStep.h"

#include "dialects/dtc/DtcOps.h"
#include "runtime/support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/StringSwitch.h"

namespace dtc {
namespace training {

std::string describeType(mlir::Type type) {
  auto t = llvm::dyn_cast<mlir::RankedTensorType>(type);
  if (!t)
    return "?";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << "[";
  llvm::interleaveComma(t.getShape(), os);
  os << "] " << t.getElementType();
  return text;
}

namespace {

bool isIntegerTensor(mlir::Type type) {
  auto t = llvm::dyn_cast<mlir::RankedTensorType>(type);
  return t && llvm::isa<mlir::IntegerType>(t.getElementType()) &&
         !t.getElementType().isInteger(1);
}

bool isFloatTensor(mlir::Type type) {
  auto t = llvm::dyn_cast<mlir::RankedTensorType>(type);
  return t && llvm::isa<mlir::FloatType>(t.getElementType());
}

/// The rows of the embedding table that `tokens` index, or 0.
int64_t vocabOfTokens(mlir::Value tokens) {
  for (mlir::Operation *user : tokens.getUsers())
    if (auto embedding = llvm::dyn_cast<d::EmbeddingOp>(user))
      return tensorType(embedding.getTable()).getDimSize(0);
  return 0;
}

/// The loss plus each MoE layer's load-balancing loss (its mean over the
/// sequences) times the layer's `dtc.aux_loss_coeff`, summed over layers as
/// Megatron-Core does.
mlir::Value addAuxiliaryLosses(mlir::OpBuilder &b, mlir::Location loc,
                               mlir::Block &body, mlir::Value loss) {
  for (auto route : body.getOps<d::MoeRouteOp>()) {
    auto coeff = route->getAttrOfType<mlir::FloatAttr>("dtc.aux_loss_coeff");
    if (!coeff || coeff.getValueAsDouble() == 0)
      continue;
    mlir::Value mean = d::ReduceMeanOp::create(
        b, loc, route.getAux(), llvm::ArrayRef<int64_t>{0}, false);
    if (tensorType(mean).getElementType() != tensorType(loss).getElementType())
      mean = d::CastOp::create(
          b, loc, mean, mlir::TypeAttr::get(tensorType(loss).getElementType()));
    auto weight =
        mlir::RankedTensorType::get({}, tensorType(loss).getElementType());
    mlir::Value scale = d::ConstantOp::create(
        b, loc,
        mlir::DenseElementsAttr::get(
            weight,
            b.getFloatAttr(weight.getElementType(), coeff.getValueAsDouble())
                .getValue()));
    loss =
        d::AddOp::create(b, loc, loss, d::MulOp::create(b, loc, mean, scale));
  }
  return loss;
}

bool isDataRole(llvm::StringRef role) {
  return llvm::is_contained(kDataRoles, role);
}

/// The forward function's arguments and outputs by their ONNX names.
struct Signature {
  mutable mlir::func::FuncOp forward; // read through const accessors
  llvm::SmallVector<std::string> inputNames, outputNames;

  explicit Signature(mlir::func::FuncOp f) : forward(f) {
    for (unsigned i = 0; i < f.getNumArguments(); ++i) {
      auto name = f.getArgAttrOfType<mlir::StringAttr>(i, "dtc.name");
      inputNames.push_back(name ? name.getValue().str()
                                : llvm::formatv("#{0}", i).str());
    }
    for (unsigned i = 0; i < f.getNumResults(); ++i) {
      auto name = f.getResultAttrOfType<mlir::StringAttr>(i, "dtc.name");
      outputNames.push_back(name ? name.getValue().str()
                                 : llvm::formatv("#{0}", i).str());
    }
  }
  std::string describeInputs() const {
    std::string text;
    for (auto [name, type] : llvm::zip(inputNames, forward.getArgumentTypes()))
      text += (text.empty() ? "" : ", ") + name + " " + describeType(type);
    return text;
  }
  std::string describeOutputs() const {
    std::string text;
    for (auto [name, type] : llvm::zip(outputNames, forward.getResultTypes()))
      text += (text.empty() ? "" : ", ") + name + " " + describeType(type);
    return text.empty() ? "none" : text;
  }
};

/// The role a Hugging Face-style input name states, or "".
llvm::StringRef roleOfName(llvm::StringRef name) {
  return llvm::StringSwitch<llvm::StringRef>(name)
      .Cases("input_ids", "idx", "tokens", "tokens")
      .Cases("labels", "targets", "label", "labels")
      .Case("decoder_input_ids", "decoder_tokens")
      .Cases("attention_mask", "decoder_attention_mask", "attention_mask")
      .Default("");
}

/// Each argument's data role: --feed first, then the input's name, then
/// its type (the first integer input is the tokens, a second one of the
/// same type the labels when the graph computes its own loss; float data
/// is "input").
llvm::Expected<llvm::SmallVector<std::string>>
assignRoles(const Signature &sig, const LossRequest &request,
            bool graphHasLoss) {
  llvm::SmallVector<std::string> roles(sig.inputNames.size());
  for (const std::string &feed : request.feeds) {
    auto [name, role] = llvm::StringRef(feed).split('=');
    if (role.empty() || !isDataRole(role))
      return badInput("--feed {0}: expected NAME=ROLE with ROLE one of {1}",
                      feed, llvm::join(llvm::ArrayRef(kDataRoles), ", "));
    auto *it = llvm::find(sig.inputNames, name);
    if (it == sig.inputNames.end())
      return badInput("--feed {0}: the graph has no input '{1}'; its inputs "
                      "are {2}",
                      feed, name, sig.describeInputs());
    roles[it - sig.inputNames.begin()] = role.str();
  }
  auto taken = [&](llvm::StringRef role) {
    return llvm::is_contained(roles, role);
  };
  for (auto [i, name] : llvm::enumerate(sig.inputNames))
    if (roles[i].empty()) {
      llvm::StringRef role = roleOfName(name);
      if (!role.empty() && (role == "attention_mask" || !taken(role)))
        roles[i] = role.str();
    }
  mlir::TypeRange types = sig.forward.getArgumentTypes();
  for (unsigned i = 0; i < roles.size(); ++i) {
    if (!roles[i].empty())
      continue;
    if (isIntegerTensor(types[i]) && !taken("tokens"))
      roles[i] = "tokens";
    else if (graphHasLoss && isIntegerTensor(types[i]) && !taken("labels"))
      roles[i] = "labels";
    else
      roles[i] = "input";
  }
  // Ids must be integers; a mask may be either.
  for (unsigned i = 0; i < roles.size(); ++i)
    if ((roles[i] == "tokens" || roles[i] == "labels" ||
         roles[i] == "decoder_tokens") &&
        !isIntegerTensor(types[i]))
      return badInput("input '{0}' ({1}) is fed {2}, which are integer ids; "
                      "bind it with --feed {0}=input",
                      sig.inputNames[i], describeType(types[i]), roles[i]);
  return roles;
}

/// `mean` (cross-entropy over `labels`) times the labels it counts (not
/// -100): the loss summed over them.
mlir::Value sumOverCountedLabels(mlir::OpBuilder &b, mlir::Location loc,
                                 mlir::Value mean, mlir::Value labels) {
  auto labelsType = tensorType(labels);
  auto ignoreType =
      mlir::RankedTensorType::get({}, labelsType.getElementType());
  mlir::Value ignore = d::ConstantOp::create(
      b, loc,
      mlir::DenseElementsAttr::get(
          ignoreType, b.getIntegerAttr(labelsType.getElementType(), -100)));
  mlir::Value counted =
      d::CompareOp::create(b, loc, labelsType.clone(b.getI1Type()), labels,
                           ignore, b.getStringAttr("ne"));
  mlir::Value ones =
      d::CastOp::create(b, loc, counted, mlir::TypeAttr::get(b.getF32Type()));
  auto all = llvm::to_vector(llvm::seq<int64_t>(0, labelsType.getRank()));
  mlir::Value count = d::ReduceSumOp::create(b, loc, ones, all, false);
  return d::MulOp::create(b, loc, mean, count);
}

/// Whether the logits at a position can see later tokens: some op that
/// mixes positions (attention) is not causal. A graph without one is taken
/// as causal (a recurrent or state-space model; pass --loss masked-lm
/// otherwise).
bool attendsBothWays(mlir::func::FuncOp forward) {
  bool bidirectional = false;
  forward.walk([&](d::SequenceMixingOpInterface op) {
    if (!op.isCausal())
      bidirectional = true;
  });
  return bidirectional;
}

/// The first output shaped as logits over `ids` ([b, t, v] for ids [b, t];
/// [b, classes] or [b, ..., classes] when `ids` is null and the rows are
/// `batch`), or -1.
int findLogits(mlir::func::FuncOp forward, mlir::RankedTensorType ids,
               int64_t batch) {
  for (auto [i, type] : llvm::enumerate(forward.getResultTypes())) {
    auto t = llvm::dyn_cast<mlir::RankedTensorType>(type);
    if (!t || !isFloatTensor(t) || t.getRank() < 2 || t.getDimSize(0) != batch)
      continue;
    if (!ids)
      return static_cast<int>(i);
    if (t.getRank() == ids.getRank() + 1 &&
        t.getShape().drop_back() == ids.getShape())
      return static_cast<int>(i);
  }
  return -1;
}

int findScalarLoss(const Signature &sig, llvm::StringRef name) {
  for (auto [i, type] : llvm::enumerate(sig.forward.getResultTypes())) {
    auto t = llvm::dyn_cast<mlir::RankedTensorType>(type);
    bool scalar = t && t.getRank() == 0 && isFloatTensor(t);
    if (name.empty() ? scalar : sig.outputNames[i] == name)
      return scalar ? static_cast<int>(i) : -2;
  }
  return -1;
}

int indexOf(llvm::ArrayRef<std::string> roles, llvm::StringRef role) {
  const auto *it = llvm::find(roles, role);
  return it == roles.end() ? -1 : static_cast<int>(it - roles.begin());
}

/// The objective read off the graph when none was asked for.
std::string chooseObjective(const Signature &sig,
                            llvm::ArrayRef<std::string> roles,
                            const LossRequest &request) {
  if (findScalarLoss(sig, "") >= 0)
    return "model";
  if (llvm::is_contained(roles, "decoder_tokens"))
    return "seq2seq";
  // Token input: language modeling when some output is logits over the
  // tokens, else a sequence classifier.
  if (int at = indexOf(roles, "tokens");
      at >= 0 &&
      findLogits(sig.forward, tensorType(sig.forward.getArgument(at)),
                 tensorType(sig.forward.getArgument(0)).getDimSize(0)) >= 0)
    // A [MASK] id given asks for masked-lm even where the attention was
    // not raised, so its direction cannot be read (DeBERTa, MPNet).
    return attendsBothWays(sig.forward) || request.maskTokenId >= 0
               ? "masked-lm"
               : "next-token";
  return "classify";
}

} // namespace

/// Freezes the float parameters `loss` does not depend on (a head the
/// objective leaves out): PyTorch gives them no gradient, so AdamW neither
/// moves nor decays them; trained, they would decay. A name tied across
/// several ops stays trained if any of them is reached.
void freezeUnreachedParameters(mlir::Block &body, mlir::Value loss) {
  llvm::DenseSet<mlir::Value> reached{loss};
  llvm::StringSet<> reachedNames;
  for (mlir::Operation &op : llvm::reverse(body.without_terminator())) {
    if (llvm::none_of(op.getResults(),
                      [&](mlir::Value v) { return reached.contains(v); }))
      continue;
    reached.insert(op.operand_begin(), op.operand_end());
    if (auto parameter = llvm::dyn_cast<d::ParameterOp>(op))
      reachedNames.insert(parameter.getName());
  }
  for (auto parameter : body.getOps<d::ParameterOp>())
    if (isFloatTensor(parameter.getType()) && !parameter.getFrozen() &&
        !reachedNames.contains(parameter.getName()))
      parameter.setFrozen(true);
}

llvm::Expected<TrainingStepInfo> bindLoss(mlir::func::FuncOp forward,
                                          const LossRequest &request) {
  mlir::Block &body = forward.getBody().front();
  auto ret = llvm::cast<mlir::func::ReturnOp>(body.getTerminator());
  mlir::OpBuilder b(ret);
  mlir::Location loc = forward.getLoc();
  const Signature sig(forward);
  if (forward.getNumArguments() == 0)
    return badInput("cannot train a graph without inputs: there is no data "
                    "to feed");
  auto firstInput =
      llvm::dyn_cast<mlir::RankedTensorType>(forward.getArgumentTypes()[0]);
  if (!firstInput || firstInput.getRank() == 0)
    return badInput("input '{0}' ({1}) has no batch dim; the first input's "
                    "dim 0 is the batch",
                    sig.inputNames[0], describeType(firstInput));
  const int64_t batch = firstInput.getDimSize(0);

  std::string objective = request.objective;
  if (objective.empty() && !request.lossOutput.empty())
    objective = "model";
  const bool graphHasLoss = objective == "model" ||
                            (objective.empty() && findScalarLoss(sig, "") >= 0);
  auto roles = assignRoles(sig, request, graphHasLoss);
  if (!roles)
    return roles.takeError();
  if (objective.empty())
    objective = chooseObjective(sig, *roles, request);

  // How errors name the objective: as asked, or as read off the graph.
  const std::string asked =
      request.objective.empty()
          ? "objective " + objective +
                " (read off the graph; --loss picks another)"
          : "--loss " + objective;
  TrainingStepInfo info;
  info.objective = objective == "model" ? "model-loss" : objective;
  info.maskTokenId = request.maskTokenId;
  info.maskProbability = request.maskProbability;
  info.decoderStartTokenId = request.decoderStartTokenId;
  info.microBatch = batch;
  info.seqLen = 1; // a sample counts as one token unless it has tokens
  const int tokensAt = indexOf(*roles, "tokens");
  if (tokensAt >= 0 && tensorType(body.getArgument(tokensAt)).getRank() >= 2)
    info.seqLen = tensorType(body.getArgument(tokensAt)).getDimSize(1);
  if (tokensAt >= 0)
    info.vocab = vocabOfTokens(body.getArgument(tokensAt));

  mlir::Value loss;
  if (objective == "model") {
    int at = findScalarLoss(sig, request.lossOutput);
    if (at < 0)
      return badInput(
          at == -2 ? "--loss model:{0}: that output is not a scalar float; "
                     "the graph's outputs are {1}"
          : request.lossOutput.empty()
              ? "--loss model: the graph has no scalar float output (its "
                "outputs are {1}); pass --loss next-token, masked-lm, "
                "seq2seq or classify"
              : "--loss model:{0}: the graph has no output '{0}'; its "
                "outputs are {1}",
          request.lossOutput, sig.describeOutputs());
    loss = ret.getOperand(at);
  } else {
    // Cross-entropy of logits against labels, the labels argument the
    // graph's own or appended.
    mlir::RankedTensorType over; // the ids the logits are over
    llvm::StringRef wanted;
    if (objective == "next-token" || objective == "masked-lm") {
      wanted = "tokens";
    } else if (objective == "seq2seq") {
      wanted = "decoder_tokens";
    } else if (objective != "classify") {
      return badInput("--loss {0}: expected next-token, masked-lm, seq2seq, "
                      "classify or model[:OUTPUT]",
                      objective);
    }
    if (!wanted.empty()) {
      int at = indexOf(*roles, wanted);
      if (at < 0)
        return badInput("{0}: no input is fed {1} (the graph's inputs are "
                        "{2}); name it with --feed NAME={1}",
                        asked, wanted, sig.describeInputs());
      over = tensorType(body.getArgument(at));
    }
    int logitsAt = findLogits(forward, over, batch);
    if (logitsAt < 0)
      return badInput(
          "{0}: no output is logits over {1} ({2}); the graph's inputs are "
          "{4} and its outputs {3}",
          asked, over ? "the " + wanted.str() : std::string("classes"),
          over ? "[" +
                     llvm::join(llvm::map_range(over.getShape(),
                                                [](int64_t d) {
                                                  return std::to_string(d);
                                                }),
                                ", ") +
                     ", vocab]"
               : llvm::formatv("[{0}, ..., classes]", batch).str(),
          sig.describeOutputs(), sig.describeInputs());
    mlir::Value logits = ret.getOperand(logitsAt);
    auto logitsType = tensorType(logits);
    auto labelsType = mlir::RankedTensorType::get(
        logitsType.getShape().drop_back(), b.getI64Type());
    mlir::Value labels;
    if (int at = indexOf(*roles, "labels"); at >= 0) {
      labels = body.getArgument(at);
      if (tensorType(labels).getShape() != labelsType.getShape())
        return badInput("input '{0}' ({1}) is fed labels, but the logits {2} "
                        "need labels {3}",
                        sig.inputNames[at], describeType(labels.getType()),
                        describeType(logitsType), describeType(labelsType));
    } else {
      unsigned appended = forward.getNumArguments();
      if (mlir::failed(forward.insertArgument(appended, labelsType, {}, loc)))
        return failure("cannot add the labels argument");
      forward.setArgAttr(appended, "dtc.name", b.getStringAttr("labels"));
      roles->push_back("labels");
      labels = body.getArgument(appended);
    }
    loss = d::CrossEntropyOp::create(b, loc, logits, labels,
                                     static_cast<uint64_t>(-100));
    info.vocab = logitsType.getShape().back();
    // Masked tokens and padded targets: micro-batches count different
    // numbers of labels, so the step sums the loss over them and the
    // runtime divides by the step's count (PyTorch's mean over one batch).
    if (objective == "masked-lm" || objective == "seq2seq") {
      loss = sumOverCountedLabels(b, loc, loss, labels);
      info.lossSumsCountedLabels = true;
    }
  }
  for (auto [i, role] : llvm::enumerate(*roles))
    forward.setArgAttr(i, "dtc.feed", b.getStringAttr(role));

  loss = addAuxiliaryLosses(b, loc, body, loss);
  for (auto route : body.getOps<d::MoeRouteOp>()) {
    info.moeLayers =
        std::max<int64_t>(info.moeLayers, route.getLayer().value_or(0) + 1);
    info.moeExperts = tensorType(route.getLogits()).getDimSize(2);
  }

  mlir::func::ReturnOp::create(b, loc, loss);
  ret.erase();
  freezeUnreachedParameters(body, loss);
  forward.setFunctionType(b.getFunctionType(body.getArgumentTypes(),
                                            mlir::TypeRange{loss.getType()}));
  forward.setAllResultAttrs(
      llvm::ArrayRef<mlir::DictionaryAttr>{b.getDictionaryAttr(
          b.getNamedAttr("dtc.name", b.getStringAttr("loss")))});
  return info;
}

} // namespace training
} // namespace dtc
