//===- TrainingStepTest.cpp - Data binding of the training step -----------===//
//
// buildTrainingStep binds the training data by the forward function's
// signature (docs/training.md): token models as before, and classifiers
// (float inputs, logits [batch, ..., classes]) get a labels argument and
// cross-entropy. A graph that is neither is refused with one line naming
// what was expected and what the graph has.
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
// classifier.
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
            "cannot bind training data: the graph must output a scalar loss "
            "from two integer [batch, seq] inputs (tokens, labels), logits "
            "[batch, seq, vocab] from one integer input, or logits [batch, "
            "classes] from float [batch, ...] inputs (a classifier); it has "
            "inputs ([4, 8] f32) and first output [4] f32; --bind "
            "NAME=tokens|labels is not supported yet");
}

// Float and integer inputs together: refused, naming both.
TEST(TrainingStep, MixedInputsAreRefused) {
  auto p = parse(R"(
    func.func @main(%x: tensor<4x8xf32>, %m: tensor<4x8xi64>) -> tensor<4x3xf32> {
      %w = dtc.parameter "w" : tensor<8x3xf32>
      %y = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
      return %y : tensor<4x3xf32>
    })");
  ASSERT_TRUE(p->module);
  auto info = dtc::buildTrainingStep(*p->module, {});
  ASSERT_FALSE(static_cast<bool>(info));
  std::string error = llvm::toString(info.takeError());
  EXPECT_NE(error.find("it has inputs ([4, 8] f32, [4, 8] i64) and first "
                       "output [4, 3] f32"),
            std::string::npos)
      << error;
}

} // namespace
