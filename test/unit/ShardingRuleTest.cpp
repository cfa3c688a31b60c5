//===- ShardingRuleTest.cpp - every op's sharding rule is well formed -----===//
//
// Builds each op with the C++ builders (shape inference included) and checks
// that its rule verifies and that its maps agree with the ranks, the property
// propagation relies on. The rules themselves are checked case by case in
// test/passes/dtc-test-sharding-rules.mlir.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {
class ShardingRuleTest : public ::testing::Test {
protected:
  ShardingRuleTest() : builder(&context) {
    context.loadDialect<mlir::dtc::DtcDialect, func::FuncDialect>();
    module = ModuleOp::create(builder.getUnknownLoc());
    builder.setInsertionPointToEnd(module->getBody());
  }

  Value param(ArrayRef<int64_t> shape, Type type = {}) {
    auto tensor =
        RankedTensorType::get(shape, type ? type : builder.getF32Type());
    return mlir::dtc::ParameterOp::create(builder, builder.getUnknownLoc(),
                                          tensor,
                                          "p" + std::to_string(counter++));
  }

  MLIRContext context;
  OpBuilder builder;
  OwningOpRef<ModuleOp> module;
  int counter = 0;
};
} // namespace

TEST_F(ShardingRuleTest, MatmulInfersTypeAndContractsK) {
  Value x = param({4, 8, 16});
  Value w = param({32, 16}); // [out, in], as x @ W^T
  auto mm = mlir::dtc::MatmulOp::create(builder, builder.getUnknownLoc(), x, w,
                                        /*transpose_lhs=*/false,
                                        /*transpose_rhs=*/true);
  EXPECT_EQ(mm.getType(),
            RankedTensorType::get({4, 8, 32}, builder.getF32Type()));
  ASSERT_TRUE(succeeded(verify(mm)));
  auto iterators = mm.getLoopIteratorTypes();
  ASSERT_EQ(iterators.size(), 4u);
  EXPECT_EQ(iterators.back(), utils::IteratorType::reduction);
  // The rhs is read as (n, k): loops (b, m, n, k) -> (d2, d3).
  auto maps = mm.getIndexingMaps();
  AffineExpr d2 = builder.getAffineDimExpr(2), d3 = builder.getAffineDimExpr(3);
  EXPECT_EQ(maps[1], AffineMap::get(4, 0, {d2, d3}, &context));
}

TEST_F(ShardingRuleTest, EveryRuleMatchesOperandRanks) {
  Value x = param({2, 8, 4, 16});
  Value ids = param({2, 8}, builder.getI64Type());
  Location loc = builder.getUnknownLoc();
  SmallVector<Operation *> ops = {
      mlir::dtc::AddOp::create(builder, loc, x, param({16})),
      mlir::dtc::SoftmaxOp::create(builder, loc, x, 3),
      mlir::dtc::ReduceMeanOp::create(builder, loc, x, ArrayRef<int64_t>{1, 3},
                                      /*keep_dims=*/true),
      mlir::dtc::TransposeOp::create(builder, loc, x,
                                     ArrayRef<int64_t>{0, 2, 1, 3}),
      mlir::dtc::AttentionOp::create(builder, loc, x, param({2, 2, 8, 16}),
                                     param({2, 2, 8, 16}), /*causal=*/true,
                                     /*scale=*/nullptr),
      mlir::dtc::EmbeddingOp::create(builder, loc, param({100, 16}), ids,
                                     mlir::IntegerAttr()),
      mlir::dtc::LayerNormOp::create(builder, loc, x, param({16}), param({16}),
                                     builder.getI64IntegerAttr(3),
                                     builder.getF64FloatAttr(1e-5)),
  };
  for (Operation *op : ops) {
    ASSERT_TRUE(succeeded(verify(op))) << op->getName().getStringRef().str();
    auto rule = cast<mlir::dtc::ShardingRuleOpInterface>(op);
    size_t loops = rule.getLoopIteratorTypes().size();
    auto maps = rule.getIndexingMaps();
    ASSERT_EQ(maps.size(), op->getNumOperands() + op->getNumResults());
    for (auto [value, map] : llvm::zip(
             llvm::concat<Value>(op->getOperands(), op->getResults()), maps)) {
      EXPECT_EQ(map.getNumDims(), loops) << op->getName().getStringRef().str();
      EXPECT_EQ(map.getNumResults(),
                cast<ShapedType>(value.getType()).getRank())
          << op->getName().getStringRef().str();
    }
  }
}

TEST_F(ShardingRuleTest, ShapeRuleRejectsMismatchedContraction) {
  // The builder's inference reports through the diagnostic engine; a
  // mismatched k must not produce an op.
  Value x = param({4, 16});
  Value w = param({8, 32});
  SmallVector<Type> types;
  std::string message;
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    message = diag.str();
    return success();
  });
  EXPECT_TRUE(failed(mlir::dtc::MatmulOp::inferReturnTypes(
      &context, builder.getUnknownLoc(), ValueRange{x, w},
      builder.getDictionaryAttr({}), nullptr, {}, types)));
  EXPECT_NE(message.find("contraction sizes differ"), std::string::npos);
}

// Propagation finds the positions and the ring's values of attention
// through SequenceMixingOpInterface: its loops must be the ones the
// indexing maps put on the query and key positions.
TEST_F(ShardingRuleTest, SequenceMixingNamesThePositionLoopsOfTheMaps) {
  Location loc = builder.getUnknownLoc();
  Value q = param({2, 4, 8, 16}), k = param({2, 2, 6, 16}),
        v = param({2, 2, 6, 12});
  auto attention =
      mlir::dtc::AttentionOp::create(builder, loc, q, k, v,
                                     /*causal=*/true, /*scale=*/nullptr);
  auto grad = mlir::dtc::AttentionGradOp::create(
      builder, loc, q, k, v, param({2, 4, 8, 12}),
      /*causal=*/false, /*scale=*/nullptr);
  for (Operation *op : {attention.getOperation(), grad.getOperation()}) {
    ASSERT_TRUE(succeeded(verify(op))) << op->getName().getStringRef().str();
    auto mixing = cast<mlir::dtc::SequenceMixingOpInterface>(op);
    auto rule = cast<mlir::dtc::ShardingRuleOpInterface>(op);
    auto iterators = rule.getLoopIteratorTypes();
    auto maps = rule.getIndexingMaps();
    int64_t queries = mixing.getQueryPositionLoop(),
            keys = mixing.getKeyPositionLoop();
    EXPECT_EQ(iterators[queries], utils::IteratorType::parallel);
    EXPECT_EQ(iterators[keys], utils::IteratorType::reduction);
    // Positions are dim 2 of query, key and value [b, heads, positions, d]
    // and of the results (output, or the gradients of query, key, value).
    AffineExpr s = builder.getAffineDimExpr(queries),
               t = builder.getAffineDimExpr(keys);
    size_t numOperands = op->getNumOperands();
    EXPECT_EQ(maps[0].getResultPosition(s), 2u);
    EXPECT_EQ(maps[numOperands].getResultPosition(s), 2u);
    for (unsigned i : mixing.getRingOperands())
      EXPECT_EQ(maps[i].getResultPosition(t), 2u) << "operand " << i;
    for (unsigned i : mixing.getRingResults())
      EXPECT_EQ(maps[numOperands + i].getResultPosition(t), 2u)
          << "result " << i;
  }
  auto forward =
      cast<mlir::dtc::SequenceMixingOpInterface>(attention.getOperation());
  auto backward =
      cast<mlir::dtc::SequenceMixingOpInterface>(grad.getOperation());
  EXPECT_TRUE(forward.isCausal());
  EXPECT_FALSE(backward.isCausal());
  EXPECT_EQ(forward.getRingOperands(), (SmallVector<unsigned>{1, 2}));
  EXPECT_TRUE(forward.getRingResults().empty());
  EXPECT_EQ(backward.getRingOperands(), (SmallVector<unsigned>{1, 2}));
  EXPECT_EQ(backward.getRingResults(), (SmallVector<unsigned>{1, 2}));
}
