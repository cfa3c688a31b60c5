//===- RecomputeTest.cpp - Activation recompute on the tiny GPT -----------===//
//
// The recompute transform (passes/recompute) must not change what the
// gradient function computes: the clones run the same kernels on the same
// inputs, and the backward ops and their order of additions are untouched,
// so the gradients with full and selective recompute are compared with the
// ones without recompute bit for bit. The memory it saves is read off the
// lowered micro_step's arena (the bytes the runtime allocates for its
// temporaries).
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "dialects/dtc/DtcDialect.h"
#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/OnnxImporter.h"
#include "passes/autodiff/Autodiff.h"
#include "passes/lowering/ProgramLowering.h"
#include "passes/recompute/Recompute.h"
#include "passes/training/TrainingStep.h"

#include "onnx/onnx_pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <random>

namespace d = mlir::dtc;
namespace rt = ::dtc::runtime;
using ::dtc::Recompute;

namespace {

const std::string kTinyGpt =
    std::string(DTC_TEST_MODELS_DIR) + "/tiny-gpt.onnx";
constexpr int64_t kVocab = 256;

std::unique_ptr<mlir::MLIRContext> makeContext() {
  auto ctx = std::make_unique<mlir::MLIRContext>();
  ctx->loadDialect<d::DtcDialect, mlir::func::FuncDialect>();
  return ctx;
}

/// The tiny GPT with its decomposed idioms raised (fused dtc.attention,
/// dtc.gelu) or not (scores, softmax, erf GELU as separate ops).
mlir::OwningOpRef<mlir::ModuleOp> importTinyGpt(mlir::MLIRContext &ctx,
                                                int64_t batch, int64_t seq,
                                                bool raiseIdioms) {
  ::dtc::onnx::ImportOptions options;
  options.batch = batch;
  options.seqLen = seq;
  options.raiseIdioms = raiseIdioms;
  auto imported = ::dtc::onnx::importOnnxFile(kTinyGpt, options, ctx);
  if (!imported) {
    ADD_FAILURE() << llvm::toString(imported.takeError());
    return nullptr;
  }
  return std::move(*imported);
}

/// Appends the cross-entropy of the logits against constant `labels`
/// (the model's loss) and builds @main_grad, rewritten for `mode`.
mlir::FailureOr<::dtc::RecomputeStats>
buildGradient(mlir::ModuleOp module, llvm::ArrayRef<int64_t> labels,
              Recompute mode) {
  auto main = module.lookupSymbol<mlir::func::FuncOp>("main");
  auto ret =
      mlir::cast<mlir::func::ReturnOp>(main.getBody().front().getTerminator());
  mlir::OpBuilder b(ret);
  auto logitsType =
      mlir::cast<mlir::RankedTensorType>(ret.getOperand(0).getType());
  auto labelType = mlir::RankedTensorType::get(
      {logitsType.getDimSize(0), logitsType.getDimSize(1)}, b.getI64Type());
  mlir::Value labelValues = d::ConstantOp::create(
      b, ret.getLoc(),
      mlir::cast<mlir::ElementsAttr>(
          mlir::DenseElementsAttr::get(labelType, labels)));
  mlir::Value loss = d::CrossEntropyOp::create(b, ret.getLoc(),
                                               ret.getOperand(0), labelValues);
  mlir::func::ReturnOp::create(b, ret.getLoc(), loss);
  ret.erase();
  main.setFunctionType(mlir::FunctionType::get(
      module.getContext(), main.getArgumentTypes(), {loss.getType()}));
  main.setAllResultAttrs(llvm::ArrayRef<mlir::DictionaryAttr>{});
  auto grad = ::dtc::buildGradientFunction(main, 0, "main_grad");
  if (mlir::failed(grad))
    return mlir::failure();
  auto stats = ::dtc::applyRecompute(*grad, 0, mode);
  if (mlir::failed(stats) || mlir::failed(mlir::verify(module)))
    return mlir::failure();
  return stats;
}

/// The model's initializers by name: the parameter values.
std::map<std::string, rt::Tensor> tinyGptParameters() {
  std::map<std::string, rt::Tensor> params;
  ::onnx::ModelProto model;
  std::ifstream in(kTinyGpt, std::ios::binary);
  EXPECT_TRUE(model.ParseFromIstream(&in));
  for (const auto &init : model.graph().initializer()) {
    std::string error;
    auto tensor = ::dtc::onnx::decodeTensor(init, "", error);
    EXPECT_TRUE(tensor.has_value()) << error;
    if (!tensor || !tensor->isFloat())
      continue;
    std::vector<float> values(tensor->floats.begin(), tensor->floats.end());
    params[init.name()] = ::dtc::test::makeF32(tensor->shape, values);
  }
  return params;
}

int countOps(mlir::ModuleOp module, llvm::StringRef func,
             llvm::StringRef opName, bool recomputedOnly = false) {
  int n = 0;
  module.lookupSymbol<mlir::func::FuncOp>(func).walk([&](mlir::Operation *op) {
    if (op->getName().getStringRef() == opName &&
        (!recomputedOnly || op->hasAttr(::dtc::kRecomputedAttrName)))
      ++n;
  });
  return n;
}

/// Runs @main_grad of the tiny GPT (batch 4, sequence 32) for `mode` and
/// checks every result against the run without recompute, bit for bit.
void checkBitIdenticalGradients(bool raiseIdioms) {
  constexpr int64_t kBatch = 4, kSeq = 32;
  std::mt19937 rng(11);
  std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
  std::vector<int64_t> labels(kBatch * kSeq), ids(kBatch * kSeq);
  for (auto &l : labels)
    l = token(rng);
  for (auto &i : ids)
    i = token(rng);
  rt::Tensor idTensor(rt::DType::I64, {kBatch, kSeq});
  std::copy(ids.begin(), ids.end(), idTensor.as<int64_t>());
  auto params = tinyGptParameters();

  std::vector<rt::Tensor> reference;
  for (Recompute mode :
       {Recompute::None, Recompute::Selective, Recompute::Full}) {
    std::string name = ::dtc::recomputeName(mode).str();
    auto ctx = makeContext();
    auto module = importTinyGpt(*ctx, kBatch, kSeq, raiseIdioms);
    ASSERT_TRUE(module);
    auto stats = buildGradient(*module, labels, mode);
    ASSERT_TRUE(succeeded(stats)) << name;
    std::cout << "[ recompute ] tiny-gpt "
              << (raiseIdioms ? "fused" : "unfused") << " " << name << ": "
              << stats->savedValues << " values saved (" << stats->savedBytes
              << " bytes), " << stats->recomputedValues << " recomputed ("
              << stats->recomputedBytes << " bytes), " << stats->clonedOps
              << " ops cloned\n";
    if (mode == Recompute::None) {
      EXPECT_EQ(stats->recomputedValues, 0);
      EXPECT_EQ(stats->clonedOps, 0);
    } else {
      EXPECT_GT(stats->recomputedValues, 0) << name;
      EXPECT_GT(stats->clonedOps, 0) << name;
    }
    if (mode == Recompute::Full) {
      // The checkpoints: the inputs of the 5 layer norms (2 per block and
      // the final one), [4, 32, 64] f32 each, and the logits the loss reads
      // at the boundary, [4, 32, 256]; everything else the backward reads
      // is recomputed.
      EXPECT_EQ(stats->savedValues, 6);
      EXPECT_EQ(stats->savedBytes,
                5 * kBatch * kSeq * 64 * 4 + kBatch * kSeq * kVocab * 4);
      // Each block's attention runs again in the backward.
      if (raiseIdioms) {
        EXPECT_EQ(countOps(*module, "main_grad", "dtc.attention", true), 2);
      }
    }
    if (mode == Recompute::Selective && raiseIdioms) {
      // Fused attention keeps nothing of size s^2; the only cheap values
      // with saved inputs are the two GELU outputs (from the GELU inputs,
      // which gelu_grad reads anyway): [4, 32, 256] f32 each.
      EXPECT_EQ(stats->recomputedValues, 2);
      EXPECT_EQ(stats->recomputedBytes, 2 * kBatch * kSeq * 256 * 4);
      EXPECT_EQ(countOps(*module, "main_grad", "dtc.gelu", true), 2);
      EXPECT_EQ(countOps(*module, "main_grad", "dtc.matmul", true), 0);
    }
    if (mode == Recompute::Selective && !raiseIdioms) {
      // Unfused attention: each block's scores (Q K^T) and softmax are
      // recomputed from the saved Q and K; no weight GEMM is.
      EXPECT_EQ(countOps(*module, "main_grad", "dtc.softmax", true), 2);
      EXPECT_EQ(countOps(*module, "main_grad", "dtc.matmul", true), 2);
      EXPECT_EQ(countOps(*module, "main_grad", "dtc.layer_norm", true), 0);
    }

    auto results =
        ::dtc::test::runOnCpu(*module, "main_grad", {idTensor}, params);
    ASSERT_TRUE(static_cast<bool>(results))
        << name << ": " << llvm::toString(results.takeError());
    // 1 loss + 29 parameter gradients.
    ASSERT_EQ(results->size(), 30u);
    if (mode == Recompute::None) {
      reference = std::move(*results);
      continue;
    }
    for (size_t i = 0; i < reference.size(); ++i) {
      ASSERT_EQ((*results)[i].bytes(), reference[i].bytes());
      EXPECT_EQ(std::memcmp((*results)[i].data(), reference[i].data(),
                            reference[i].bytes()),
                0)
          << name << ": result " << i << " differs from no recompute";
    }
  }
}

TEST(Recompute, TinyGptGradientsBitIdentical) {
  checkBitIdenticalGradients(/*raiseIdioms=*/true);
}

TEST(Recompute, UnfusedTinyGptGradientsBitIdentical) {
  checkBitIdenticalGradients(/*raiseIdioms=*/false);
}

/// The micro_step's arena bytes of the tiny GPT's training step.
int64_t microStepArena(Recompute mode, int64_t batch, int64_t seq,
                       bool raiseIdioms) {
  auto ctx = makeContext();
  auto module = importTinyGpt(*ctx, batch, seq, raiseIdioms);
  if (!module)
    return -1;
  ::dtc::TrainingStepOptions options;
  options.recompute = mode;
  auto info = ::dtc::buildTrainingStep(*module, options);
  if (!info) {
    ADD_FAILURE() << llvm::toString(info.takeError());
    return -1;
  }
  auto rank = ::dtc::lowerToRankProgram(*module);
  if (!rank) {
    ADD_FAILURE() << llvm::toString(rank.takeError());
    return -1;
  }
  for (const auto &f : rank->functions())
    if (f.name() == "micro_step") {
      std::cout << "[ recompute ] tiny-gpt "
                << (raiseIdioms ? "fused" : "unfused") << " batch " << batch
                << " seq " << seq << " " << ::dtc::recomputeName(mode).str()
                << ": micro_step arena " << f.arena_bytes()
                << " bytes (live peak " << f.live_bytes_peak() << ")\n";
      return f.arena_bytes();
    }
  ADD_FAILURE() << "no micro_step";
  return -1;
}

// At micro-batch 16, sequence 32 the activations outweigh the parameter
// gradients (135k floats) that every variant holds at the end of the
// backward. Measured: 5505088 bytes without recompute, 4849664 selective,
// 2753088 full (2.0x).
TEST(Recompute, TinyGptMicroStepArenaDrops) {
  int64_t none = microStepArena(Recompute::None, 16, 32, true);
  int64_t selective = microStepArena(Recompute::Selective, 16, 32, true);
  int64_t full = microStepArena(Recompute::Full, 16, 32, true);
  ASSERT_GT(none, 0);
  EXPECT_LT(selective, none);
  EXPECT_LE(full * 18, none * 10) << "full recompute saves less than 1.8x";
  std::cout << "[ recompute ] arena none / full: "
            << static_cast<double>(none) / full << "\n";
}

// Unfused attention keeps [batch, heads, seq, seq] probabilities per block;
// selective recompute drops them.
TEST(Recompute, UnfusedTinyGptMicroStepArenaDrops) {
  int64_t none = microStepArena(Recompute::None, 16, 32, false);
  int64_t selective = microStepArena(Recompute::Selective, 16, 32, false);
  int64_t full = microStepArena(Recompute::Full, 16, 32, false);
  ASSERT_GT(none, 0);
  EXPECT_LT(selective, none);
  EXPECT_LT(full, selective);
}

} // namespace
