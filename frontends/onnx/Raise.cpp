//===- Raise.cpp - Raising exported idioms to dtc ops ---------------------===//

#include "frontends/onnx/Raise.h"

#include "dialects/dtc/DtcOps.h"

#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

using namespace mlir;
namespace d = mlir::dtc;

namespace dtc::onnx {

std::optional<double> getSplatFloat(Value value) {
  auto constant = value.getDefiningOp<mlir::dtc::ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || !isa<FloatType>(dense.getElementType()) || !dense.isSplat())
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

bool isClose(double a, double b, double relTol) {
  return std::fabs(a - b) <= relTol * std::max(std::fabs(a), std::fabs(b));
}

namespace {

/// matmul(x, transpose(W)) with the transpose swapping the last two dims ->
/// matmul(x, W) {transpose_rhs} (likewise for the lhs): a PyTorch Linear
/// exported without constant folding (`x @ W^T`). The weight's gradient then
/// reaches the parameter directly, where the training step sums it once per
/// step instead of after every micro-batch.
struct FoldTransposeIntoMatmul : OpRewritePattern<d::MatmulOp> {
  using OpRewritePattern::OpRewritePattern;

  static bool swapsLastTwo(d::TransposeOp t) {
    llvm::ArrayRef<int64_t> perm = t.getPermutation();
    int64_t rank = static_cast<int64_t>(perm.size());
    if (rank < 2)
      return false;
    for (int64_t i = 0; i < rank - 2; ++i)
      if (perm[i] != i)
        return false;
    return perm[rank - 2] == rank - 1 && perm[rank - 1] == rank - 2;
  }

  LogicalResult matchAndRewrite(d::MatmulOp op,
                                PatternRewriter &rewriter) const override {
    auto lhs = op.getLhs().getDefiningOp<d::TransposeOp>();
    auto rhs = op.getRhs().getDefiningOp<d::TransposeOp>();
    bool foldLhs = lhs && swapsLastTwo(lhs);
    bool foldRhs = rhs && swapsLastTwo(rhs);
    if (!foldLhs && !foldRhs)
      return failure();
    rewriter.modifyOpInPlace(op, [&] {
      if (foldLhs) {
        op.getLhsMutable().assign(lhs.getInput());
        op.setTransposeLhs(!op.getTransposeLhs());
      }
      if (foldRhs) {
        op.getRhsMutable().assign(rhs.getInput());
        op.setTransposeRhs(!op.getTransposeRhs());
      }
    });
    return success();
  }
};

} // namespace

LogicalResult raiseIdioms(Operation *op) {
  RewritePatternSet patterns(op->getContext());
  patterns.add<FoldTransposeIntoMatmul>(op->getContext());
  populateRaiseGeluPatterns(patterns);
  populateRaiseAttentionPatterns(patterns);
  populateRaiseNormPatterns(patterns);
  populateRaiseScanPatterns(patterns);
  if (failed(applyPatternsGreedily(op, std::move(patterns))))
    return failure();
  SmallVector<Location> unraised = findUnraisedAttention(op);
  if (!unraised.empty())
    op->setAttr("dtc.unraised_attention",
                ArrayAttr::get(
                    op->getContext(),
                    SmallVector<Attribute>(unraised.begin(), unraised.end())));
  return success();
}

} // namespace dtc::onnx
