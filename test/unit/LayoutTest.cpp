//===- LayoutTest.cpp - The layout rules both sharding passes share -------===//
//
// reshapeLayouts (which splits survive a reshape) and layoutForLoops (the
// layout a sharding rule's map gives a value under a loop split), with the
// expected layouts worked out by hand in the comments.
//
//===----------------------------------------------------------------------===//

#include "passes/Layout.h"
#include "passes/LoopLayout.h"

#include "mlir/IR/AffineExpr.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mlir;
using namespace mlir::dtc;

namespace {

Layout splitOn(size_t numAxes, size_t axis, int64_t dim, int64_t block = 0) {
  Layout l = Layout::replicated(numAxes);
  l.split(axis, dim, block);
  return l;
}

TEST(ReshapeLayouts, SplitOuterDimStaysOuter) {
  // [8, 12] split on dim 0 over 2 -> [8, 3, 4]: dim 0 is untouched.
  Layout in = splitOn(1, 0, 0);
  ReshapeLayouts r = reshapeLayouts({8, 12}, {8, 3, 4}, in, {2});
  EXPECT_EQ(r.operand, in);
  EXPECT_EQ(r.result, splitOn(1, 0, 0));
  EXPECT_EQ(r.splitAxes, 1u);
}

TEST(ReshapeLayouts, InnerSplitBecomesInterleavedWhenFlattened) {
  // [4, 6] split on dim 1 over 2: each rank holds columns [0, 3) or [3, 6)
  // of every row, that is runs of 3 in each block of 6 of the flat [24].
  ReshapeLayouts r = reshapeLayouts({4, 6}, {24}, splitOn(1, 0, 1), {2});
  EXPECT_EQ(r.result, splitOn(1, 0, 0, /*block=*/6));
  EXPECT_EQ(r.operand, splitOn(1, 0, 1));
}

TEST(ReshapeLayouts, SplitThatNoResultDimHoldsIsGatheredFirst) {
  // [2, 6] split on dim 0 over 2 (rows of 6) -> [3, 4]: a half is 6 flat
  // elements, 1.5 rows of 4, so no result dim holds the split.
  ReshapeLayouts r = reshapeLayouts({2, 6}, {3, 4}, splitOn(1, 0, 0), {2});
  EXPECT_EQ(r.operand, Layout::replicated(1));
  EXPECT_EQ(r.result, Layout::replicated(1));
  EXPECT_EQ(r.splitAxes, 0u);
}

TEST(ReshapeLayouts, PartialSumsPassThrough) {
  // Axis 1 is a partial sum, axis 0 splits dim 0 of [4, 4] -> [16]: dim 0's
  // halves are the flat halves.
  Layout in = splitOn(2, 0, 0);
  in.setPartial(1);
  ReshapeLayouts r = reshapeLayouts({4, 4}, {16}, in, {2, 2});
  Layout expected = splitOn(2, 0, 0);
  expected.setPartial(1);
  EXPECT_EQ(r.result, expected);
  EXPECT_EQ(r.splitAxes, 1u);
}

class LoopLayoutTest : public ::testing::Test {
protected:
  AffineExpr d(unsigned i) { return getAffineDimExpr(i, &context); }
  AffineMap map(unsigned loops, ArrayRef<AffineExpr> results) {
    return AffineMap::get(loops, 0, results, &context);
  }
  MLIRContext context;
};

TEST_F(LoopLayoutTest, PlainLoopSplitsTheDimItIndexes) {
  // Matmul's rhs (d0, d1, d2) -> (d2, d1) with the contraction d2 over 4.
  Layout l;
  EXPECT_FALSE(layoutForLoops(map(3, {d(2), d(1)}), {64, 32}, {{2, 0, 4}},
                              {16, 32, 64}, false, l));
  EXPECT_EQ(l, splitOn(1, 0, 0));
  // A loop the map does not index leaves the value whole.
  EXPECT_FALSE(layoutForLoops(map(3, {d(0), d(1)}), {16, 32}, {{2, 0, 4}},
                              {16, 32, 64}, false, l));
  EXPECT_EQ(l, Layout::replicated(1));
}

TEST_F(LoopLayoutTest, SliceOfTheMiddleThirdIsAnInterleavedSplit) {
  // A slice reading [8, 16) of 24: the loop (extent 8) split in 2 splits
  // the input in runs of 8, interleaved (8 != 24).
  Layout l;
  EXPECT_FALSE(
      layoutForLoops(map(1, {d(0) + 8}), {24}, {{0, 0, 2}}, {8}, false, l));
  EXPECT_EQ(l, splitOn(1, 0, 0, /*block=*/8));
  std::optional<LoopLayoutError> error =
      layoutForLoops(map(1, {d(0) + 4}), {24}, {{0, 0, 2}}, {8}, false, l);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->kind, LoopLayoutError::Misaligned);
  EXPECT_EQ(error->dim, 0);
}

TEST_F(LoopLayoutTest, GroupedHeadsSplitWholeOnlyWhereAllowed) {
  // Key/value heads h floordiv 2 of 8 query heads: 4 kv heads over 2.
  AffineMap kv = map(1, {d(0).floorDiv(2)});
  Layout l;
  EXPECT_FALSE(layoutForLoops(kv, {4}, {{0, 0, 2}}, {8}, true, l));
  EXPECT_EQ(l, splitOn(1, 0, 0));
  std::optional<LoopLayoutError> error =
      layoutForLoops(kv, {4}, {{0, 0, 2}}, {8}, false, l);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->kind, LoopLayoutError::NotPlainLoop);
  // 3 kv heads do not split over 2.
  error = layoutForLoops(kv, {3}, {{0, 0, 2}}, {6}, true, l);
  ASSERT_TRUE(error);
  EXPECT_EQ(error->kind, LoopLayoutError::UnevenGroups);
}

} // namespace
