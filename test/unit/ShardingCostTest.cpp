//===- ShardingCostTest.cpp - what propagation prices an op's compute at --===//
//
// The compute sharding propagation trades against communication is each
// op's own price: checked here against the textbook counts (a GEMM's 2mnk,
// attention's QK^T and PV, 2bhst(d + dv)), written out by hand.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "passes/ShardingRules.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"

#include <gtest/gtest.h>

using namespace mlir;

namespace {
class ShardingCostTest : public ::testing::Test {
protected:
  ShardingCostTest() : builder(&context) {
    context.loadDialect<mlir::dtc::DtcDialect, func::FuncDialect>();
    module = ModuleOp::create(builder.getUnknownLoc());
    builder.setInsertionPointToEnd(module->getBody());
  }

  Value param(ArrayRef<int64_t> shape) {
    auto tensor = RankedTensorType::get(shape, builder.getF32Type());
    return mlir::dtc::ParameterOp::create(builder, builder.getUnknownLoc(),
                                          tensor,
                                          "p" + std::to_string(counter++));
  }

  double flops(Operation *op) {
    return mlir::dtc::shardingComputeFlops(
        cast<mlir::dtc::ShardingRuleOpInterface>(op));
  }

  MLIRContext context;
  OpBuilder builder;
  OwningOpRef<ModuleOp> module;
  int counter = 0;
};
} // namespace

TEST_F(ShardingCostTest, AttentionAtItsFlopsNotItsLoopProduct) {
  // b 2, h 8 query heads over g 2 kv heads, s = t = 64, d = dv = 128.
  const double b = 2, h = 8, s = 64, t = 64, d = 128, dv = 128;
  auto attention = mlir::dtc::AttentionOp::create(
      builder, builder.getUnknownLoc(), param({2, 8, 64, 128}),
      param({2, 2, 64, 128}), param({2, 2, 64, 128}), /*causal=*/true,
      /*scale=*/nullptr);
  // QK^T: 2bhst d; PV: 2bhst dv (causal counted in full, Megatron's rule).
  EXPECT_DOUBLE_EQ(flops(attention), 2 * b * h * s * t * (d + dv));
  // The loop product (b h s t d dv, times 2) is d dv / (d + dv) = 64x more.
  EXPECT_LT(flops(attention) * 60, 2 * b * h * s * t * d * dv);
}

TEST_F(ShardingCostTest, MatmulIsTwoMnk) {
  // x [4, 8, 16] @ W^T with W [32, 16]: m = 32 rows, n = 32, k = 16.
  auto mm = mlir::dtc::MatmulOp::create(builder, builder.getUnknownLoc(),
                                        param({4, 8, 16}), param({32, 16}),
                                        /*transpose_lhs=*/false,
                                        /*transpose_rhs=*/true);
  EXPECT_DOUBLE_EQ(flops(mm), 2.0 * 32 * 32 * 16);
}

TEST_F(ShardingCostTest, ElementwiseOnePerElement) {
  Value x = param({4, 8, 16});
  auto add = mlir::dtc::AddOp::create(builder, builder.getUnknownLoc(), x, x);
  EXPECT_DOUBLE_EQ(flops(add), 4.0 * 8 * 16);
}
