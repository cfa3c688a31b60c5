//===- TrainingStepTest.cpp - Data binding of the training step -----------===//
//
// buildTrainingStep binds the training data and the objective
// (docs/training.md, "Objectives"): read off the graph (token models,
// encoders, encoder-decoders, classifiers, models with their own loss) or
// asked for (LossRequest: --loss, --feed). A graph or request that does not
// fit is refused with one line naming what to pass and what the graph has.
//
//===----------------------------------------------------------------------===//

#include "passes/training/TrainingStep.h"
#include "dialects/dtc/DtcDialect.h"
#include "dialects/dtc/DtcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

namespace {

struct Parsed {
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

std::unique_ptr<Parsed> parse(llvm::StringRef source) {
  auto parsed = std::make_unique<Parsed>();
  parsed->context.loadDialect<mlir::func::FuncDialect, mlir::dtc::DtcDialect>();
  parsed->module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &parsed->context);
  return parsed;
}

mlir::func::FuncOp function(mlir::ModuleOp module, llvm::StringRef name) {
  return module.lookupSymbol<mlir::func::FuncOp>(name);
}

std::string feedOf(mlir::func::FuncOp f, unsigned arg) {
  auto feed = f.getArgAttrOfType<mlir::StringAttr>(arg, "dtc.feed");
  return feed ? feed.getValue().str() : "";
}

std::string typeOf(mlir::func::FuncOp f, unsigned arg) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << f.getArgumentTypes()[arg];
  return text;
}

TEST(TrainingStep, ClassifierGetsLabelsAndCrossEntropy) {
  auto p = parse(R"(
    func.func @main(%x: tensor<4x8xf32> {dtc.name = "features"}) -> tensor<4x3xf32> {
      %w = dtc.parameter "fc.weight" : tensor<8x3xf32>
      %y = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
      return %y : tensor<4x3xf32>
    })");
  ASSERT_TRUE(p->module);
  auto info = dtc::buildTrainingStep(*p->module, {});
  ASSERT_TRUE(static_cast<bool>(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->microBatch, 4);
  EXPECT_EQ(info->vocab, 3); // the labels' range: the classes
  EXPECT_EQ(info->seqLen, 1);
  mlir::func::FuncOp step = function(*p->module, "micro_step");
  ASSERT_TRUE(step);
  EXPECT_EQ(feedOf(step, 0), "input");
  EXPECT_EQ(feedOf(step, 1), "labels");
  EXPECT_EQ(typeOf(step, 1), "tensor<4xi64>");
  auto name = step.getArgAttrOfType<mlir::StringAttr>(1, "dtc.name");
  ASSERT_TRUE(name);
  EXPECT_EQ(name.getValue(), "labels");
  int crossEntropy = 0;
  step.walk([&](mlir::dtc::CrossEntropyOp) { ++crossEntropy; });
  EXPECT_EQ(crossEntropy, 1);
}

// Logits [batch, positions, classes]: one label per position.
TEST(TrainingStep, ClassifierOfPositionsGetsALabelPerPosition) {
  auto p = parse(R"(
    func.func @main(%x: tensor<2x5x8xf32>) -> tensor<2x5x3xf32> {
      %w = dtc.parameter "w" : tensor<8x3xf32>
      %y = dtc.matmul %x, %w : (tensor<2x5x8xf32>, tensor<8x3xf32>) -> tensor<2x5x3xf32>
      return %y : tensor<2x5x3xf32>
    })");
  ASSERT_TRUE(p->module);
  auto info = dtc::buildTrainingStep(*p->module, {});
  ASSERT_TRUE(static_cast<bool>(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->vocab, 3);
  mlir::func::FuncOp step = function(*p->module, "micro_step");
  ASSERT_TRUE(step);
  EXPECT_EQ(feedOf(step, 0), "input");
  EXPECT_EQ(typeOf(step, 1), "tensor<2x5xi64>");
}

// A regressor (one value per sample) is neither a token model nor a
// classifier: refused in one line naming its inputs and outputs.
TEST(TrainingStep, NeitherTokensNorLogitsIsRefusedInOneLine) {
  auto p = parse(R"(
    func.func @main(%x: tensor<4x8xf32>) -> tensor<4xf32> {
      %w = dtc.parameter "w" : tensor<8x1xf32>
      %y = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x1xf32>) -> tensor<4x1xf32>
      %s = dtc.reduce_sum %y {dims = array<i64: 1>} : (tensor<4x1xf32>) -> tensor<4xf32>
      return %s : tensor<4xf32>
    })");
  ASSERT_TRUE(p->module);
  auto info = dtc::buildTrainingStep(*p->module, {});
  ASSERT_FALSE(static_cast<bool>(info));
  EXPECT_EQ(llvm::toString(info.takeError()),
            "objective classify (read off the graph; --loss picks another): "
            "no output is logits over classes ([4, ..., classes]); the "
            "graph's inputs are #0 [4, 8] f32 and its outputs #0 [4] f32");
}

// The forward function of a tiny token model: ids -> embedding ->
// attention (causal or not) -> logits over the ids; `extra` adds inputs.
std::string tokenModel(bool causal, llvm::StringRef extraArgs = "") {
  return (llvm::Twine(R"(
    func.func @main(%ids: tensor<2x4xi64> {dtc.name = "input_ids"})") +
          extraArgs + R"() -> tensor<2x4x8xf32> {
      %t = dtc.parameter "t" : tensor<8x8xf32>
      %x = dtc.embedding %t, %ids : (tensor<8x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
      %q = dtc.reshape %x : (tensor<2x4x8xf32>) -> tensor<2x1x4x8xf32>
      %a = dtc.attention %q, %q, %q )" +
          (causal ? "{causal} " : "") +
          R"(: (tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32>
      %y = dtc.reshape %a : (tensor<2x1x4x8xf32>) -> tensor<2x4x8xf32>
      return %y : tensor<2x4x8xf32>
    })")
      .str();
}

dtc::TrainingStepOptions requesting(llvm::StringRef objective,
                                    llvm::ArrayRef<std::string> feeds = {}) {
  dtc::TrainingStepOptions options;
  options.loss.objective = objective.str();
  options.loss.feeds.assign(feeds.begin(), feeds.end());
  return options;
}

// Causal attention everywhere: next-token; some bidirectional attention
// (an encoder): masked-lm. Both append labels shaped as the tokens.
TEST(TrainingStep, CausalityChoosesTheLanguageModelingObjective) {
  for (bool causal : {true, false}) {
    auto p = parse(tokenModel(causal));
    ASSERT_TRUE(p->module);
    auto info = dtc::buildTrainingStep(*p->module, {});
    ASSERT_TRUE(static_cast<bool>(info)) << llvm::toString(info.takeError());
    EXPECT_EQ(info->objective, causal ? "next-token" : "masked-lm");
    mlir::func::FuncOp step = function(*p->module, "micro_step");
    ASSERT_TRUE(step);
    EXPECT_EQ(feedOf(step, 0), "tokens");
    EXPECT_EQ(feedOf(step, 1), "labels");
    EXPECT_EQ(typeOf(step, 1), "tensor<2x4xi64>");
  }
}

// The decoder's input by its Hugging Face name makes a seq2seq model: the
// labels are shaped as the decoder's tokens, and a mask is fed as one.
TEST(TrainingStep, DecoderInputMakesSeq2Seq) {
  auto p = parse(tokenModel(
      true, R"(, %mask: tensor<2x4xi64> {dtc.name = "attention_mask"},
              %dec: tensor<2x4xi64> {dtc.name = "decoder_input_ids"})"));
  ASSERT_TRUE(p->module);
  auto info = dtc::buildTrainingStep(*p->module, {});
  ASSERT_TRUE(static_cast<bool>(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->objective, "seq2seq");
  mlir::func::FuncOp step = function(*p->module, "micro_step");
  ASSERT_TRUE(step);
  EXPECT_EQ(feedOf(step, 0), "tokens");
  EXPECT_EQ(feedOf(step, 1), "attention_mask");
  EXPECT_EQ(feedOf(step, 2), "decoder_tokens");
  EXPECT_EQ(feedOf(step, 3), "labels");
}

// --loss and --feed override what the graph says; a request the graph
// cannot meet is refused naming what to pass.
TEST(TrainingStep, RequestsAreHonouredOrRefusedInOneLine) {
  {
    auto p = parse(tokenModel(true));
    auto info = dtc::buildTrainingStep(*p->module, requesting("masked-lm"));
    ASSERT_TRUE(static_cast<bool>(info)) << llvm::toString(info.takeError());
    EXPECT_EQ(info->objective, "masked-lm");
  }
  auto refusal = [](dtc::TrainingStepOptions options) {
    auto p = parse(tokenModel(true));
    auto info = dtc::buildTrainingStep(*p->module, options);
    return info ? std::string("accepted") : llvm::toString(info.takeError());
  };
  EXPECT_EQ(refusal(requesting("seq2seq")),
            "--loss seq2seq: no input is fed decoder_tokens (the graph's "
            "inputs are input_ids [2, 4] i64); name it with --feed "
            "NAME=decoder_tokens");
  EXPECT_EQ(refusal(requesting("model")),
            "--loss model: the graph has no scalar float output (its outputs "
            "are #0 [2, 4, 8] f32); pass --loss next-token, masked-lm, "
            "seq2seq or classify");
  EXPECT_EQ(refusal(requesting("", {"ids=tokens"})),
            "--feed ids=tokens: the graph has no input 'ids'; its inputs are "
            "input_ids [2, 4] i64");
  EXPECT_EQ(refusal(requesting("", {"input_ids=pixels"})),
            "--feed input_ids=pixels: expected NAME=ROLE with ROLE one of "
            "tokens, labels, decoder_tokens, attention_mask, input");
  // A seq2seq request with the decoder's input named by --feed.
  {
    auto p = parse(tokenModel(
        true, R"(, %d: tensor<2x4xi64> {dtc.name = "target_prefix"})"));
    auto info = dtc::buildTrainingStep(
        *p->module, requesting("seq2seq", {"target_prefix=decoder_tokens"}));
    ASSERT_TRUE(static_cast<bool>(info)) << llvm::toString(info.takeError());
    EXPECT_EQ(info->objective, "seq2seq");
  }
}

// Float data cannot be fed as ids.
TEST(TrainingStep, FloatInputsAreNotIds) {
  auto p = parse(R"(
    func.func @main(%x: tensor<4x8xf32> {dtc.name = "x"}) -> tensor<4x3xf32> {
      %w = dtc.parameter "w" : tensor<8x3xf32>
      %y = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
      return %y : tensor<4x3xf32>
    })");
  ASSERT_TRUE(p->module);
  auto info = dtc::buildTrainingStep(*p->module, requesting("", {"x=tokens"}));
  ASSERT_FALSE(static_cast<bool>(info));
  EXPECT_EQ(llvm::toString(info.takeError()),
            "input 'x' ([4, 8] f32) is fed tokens, which are integer ids; "
            "bind it with --feed x=input");
}

// A model computing its own loss from float data and integer labels (HF's
// forward(pixel_values, labels).loss): every input is fed by its role.
TEST(TrainingStep, ModelLossFromAnyInputs) {
  auto p = parse(R"(
    func.func @main(%x: tensor<4x8xf32> {dtc.name = "pixel_values"},
                    %y: tensor<4xi64> {dtc.name = "labels"})
        -> (tensor<f32> {dtc.name = "loss"}, tensor<4x3xf32> {dtc.name = "logits"}) {
      %w = dtc.parameter "w" : tensor<8x3xf32>
      %l = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
      %c = dtc.cross_entropy %l, %y : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>
      return %c, %l : tensor<f32>, tensor<4x3xf32>
    })");
  ASSERT_TRUE(p->module);
  auto info = dtc::buildTrainingStep(*p->module, {});
  ASSERT_TRUE(static_cast<bool>(info)) << llvm::toString(info.takeError());
  EXPECT_EQ(info->objective, "model-loss");
  mlir::func::FuncOp step = function(*p->module, "micro_step");
  ASSERT_TRUE(step);
  EXPECT_EQ(feedOf(step, 0), "input");
  EXPECT_EQ(feedOf(step, 1), "labels");
}

} // namespace
