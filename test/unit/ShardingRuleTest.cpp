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
    context.loadDialect<dtc::DtcDialect, func::FuncDialect>();
    module = ModuleOp::create(builder.getUnknownLoc());
    builder.setInsertionPointToEnd(module->getBody());
  }

  Value param(ArrayRef<int64_t> shape, Type type = {}) {
    auto tensor =
        RankedTensorType::get(shape, type ? type : builder.getF32Type());
    return dtc::ParameterOp::create(builder, builder.getUnknownLoc(), tensor,
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
  auto mm = dtc::MatmulOp::create(builder, builder.getUnknownLoc(), x, w,
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
      dtc::AddOp::create(builder, loc, x, param({16})),
      dtc::SoftmaxOp::create(builder, loc, x, 3),
      dtc::ReduceMeanOp::create(builder, loc, x, ArrayRef<int64_t>{1, 3},
                                /*keep_dims=*/true),
      dtc::TransposeOp::create(builder, loc, x, ArrayRef<int64_t>{0, 2, 1, 3}),
      dtc::AttentionOp::create(builder, loc, x, param({2, 2, 8, 16}),
                               param({2, 2, 8, 16}), /*causal=*/true,
                               /*scale=*/nullptr),
      dtc::EmbeddingOp::create(builder, loc, param({100, 16}), ids),
      dtc::LayerNormOp::create(builder, loc, x, param({16}), param({16}),
                               builder.getI64IntegerAttr(3),
                               builder.getF64FloatAttr(1e-5)),
  };
  for (Operation *op : ops) {
    ASSERT_TRUE(succeeded(verify(op))) << op->getName().getStringRef().str();
    auto rule = cast<dtc::ShardingRuleOpInterface>(op);
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
  EXPECT_TRUE(failed(dtc::MatmulOp::inferReturnTypes(
      &context, builder.getUnknownLoc(), ValueRange{x, w},
      builder.getDictionaryAttr({}), nullptr, {}, types)));
  EXPECT_NE(message.find("contraction sizes differ"), std::string::npos);
}
