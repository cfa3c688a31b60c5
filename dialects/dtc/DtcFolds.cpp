//===- DtcFolds.cpp - dtc folders and canonicalization patterns -----------===//
//
// Local simplifications the canonicalizer (and the dtc-simplify pass) apply:
// identities (x + 0, x * 1, identity transposes/reshapes/slices), constant
// folding of elementwise ops on constants, and merging of chained
// transposes and reshapes, which the ONNX importer produces in bulk.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"

#include "mlir/Dialect/CommonFolders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/TypeUtilities.h"

using namespace mlir;
using namespace mlir::dtc;

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// Binary elementwise ops
//===----------------------------------------------------------------------===//

/// True if `attr` is a splat whose every element equals `value`.
static bool isSplatOf(Attribute attr, double value) {
  auto splat = dyn_cast_if_present<SplatElementsAttr>(attr);
  if (!splat)
    return false;
  Type elementType = splat.getElementType();
  if (isa<FloatType>(elementType))
    return splat.getSplatValue<APFloat>().convertToDouble() == value;
  if (isa<IntegerType>(elementType))
    return splat.getSplatValue<APInt>().getSExtValue() ==
           static_cast<int64_t>(value);
  return false;
}

/// Folds `op` when both operands are constants of the result's type, using
/// `floatFn` / `intFn` per element; either may return std::nullopt to leave
/// the op unfolded.
template <typename FloatFn, typename IntFn>
static OpFoldResult foldConstants(Operation *op, ArrayRef<Attribute> operands,
                                  FloatFn floatFn, IntFn intFn) {
  Type type = op->getResult(0).getType();
  if (op->getOperand(0).getType() != type ||
      op->getOperand(1).getType() != type)
    return {};
  if (isa<FloatType>(getElementTypeOrSelf(type)))
    return constFoldBinaryOpConditional<FloatAttr, APFloat, void>(
        operands,
        [&](const APFloat &a, const APFloat &b) -> std::optional<APFloat> {
          return floatFn(a, b);
        });
  return constFoldBinaryOpConditional<IntegerAttr, APInt, void>(
      operands, [&](const APInt &a, const APInt &b) -> std::optional<APInt> {
        return intFn(a, b);
      });
}

/// `x op identity` -> x, when that does not change the result's type.
static OpFoldResult foldRightIdentity(Operation *op, Attribute rhs,
                                      double identity) {
  Value lhs = op->getOperand(0);
  if (lhs.getType() == op->getResult(0).getType() && isSplatOf(rhs, identity))
    return lhs;
  return {};
}

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult identity = foldRightIdentity(*this, adaptor.getRhs(), 0))
    return identity;
  return foldConstants(
      *this, adaptor.getOperands(),
      [](const APFloat &a, const APFloat &b) { return a + b; },
      [](const APInt &a, const APInt &b) { return a + b; });
}

OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult identity = foldRightIdentity(*this, adaptor.getRhs(), 0))
    return identity;
  return foldConstants(
      *this, adaptor.getOperands(),
      [](const APFloat &a, const APFloat &b) { return a - b; },
      [](const APInt &a, const APInt &b) { return a - b; });
}

OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult identity = foldRightIdentity(*this, adaptor.getRhs(), 1))
    return identity;
  return foldConstants(
      *this, adaptor.getOperands(),
      [](const APFloat &a, const APFloat &b) { return a * b; },
      [](const APInt &a, const APInt &b) { return a * b; });
}

OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult identity = foldRightIdentity(*this, adaptor.getRhs(), 1))
    return identity;
  // Integer division by zero is left for the runtime to report.
  if (isSplatOf(adaptor.getRhs(), 0))
    return {};
  return foldConstants(
      *this, adaptor.getOperands(),
      [](const APFloat &a, const APFloat &b) { return a / b; },
      [](const APInt &a, const APInt &b) -> std::optional<APInt> {
        // Not just a splat zero: any zero element of a divisor.
        if (b.isZero())
          return std::nullopt;
        return a.sdiv(b);
      });
}

OpFoldResult MaxOp::fold(FoldAdaptor adaptor) {
  return foldConstants(
      *this, adaptor.getOperands(),
      [](const APFloat &a, const APFloat &b) { return llvm::maximum(a, b); },
      [](const APInt &a, const APInt &b) { return a.sge(b) ? a : b; });
}

OpFoldResult MinOp::fold(FoldAdaptor adaptor) {
  return foldConstants(
      *this, adaptor.getOperands(),
      [](const APFloat &a, const APFloat &b) { return llvm::minimum(a, b); },
      [](const APInt &a, const APInt &b) { return a.sle(b) ? a : b; });
}

OpFoldResult PowOp::fold(FoldAdaptor adaptor) {
  return foldRightIdentity(*this, adaptor.getRhs(), 1);
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

OpFoldResult ReshapeOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  if (auto dense = dyn_cast_if_present<DenseElementsAttr>(adaptor.getInput()))
    return dense.reshape(getType());
  return {};
}

namespace {
/// reshape(reshape(x)) -> reshape(x): only the final shape matters.
struct MergeReshapes : OpRewritePattern<ReshapeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(ReshapeOp op,
                                PatternRewriter &rewriter) const override {
    auto producer = op.getInput().getDefiningOp<ReshapeOp>();
    if (!producer)
      return failure();
    rewriter.replaceOpWithNewOp<ReshapeOp>(op, op.getType(),
                                           producer.getInput());
    return success();
  }
};

/// transpose(transpose(x, p1), p2) -> transpose(x, p1 . p2).
struct MergeTransposes : OpRewritePattern<TransposeOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(TransposeOp op,
                                PatternRewriter &rewriter) const override {
    auto producer = op.getInput().getDefiningOp<TransposeOp>();
    if (!producer)
      return failure();
    ArrayRef<int64_t> inner = producer.getPermutation();
    SmallVector<int64_t> composed;
    for (int64_t dim : op.getPermutation())
      composed.push_back(inner[dim]);
    rewriter.replaceOpWithNewOp<TransposeOp>(op, producer.getInput(), composed);
    return success();
  }
};
} // namespace

void ReshapeOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                            MLIRContext *ctx) {
  patterns.add<MergeReshapes>(ctx);
}

OpFoldResult TransposeOp::fold(FoldAdaptor adaptor) {
  if (llvm::equal(getPermutation(),
                  llvm::seq<int64_t>(0, getPermutation().size())))
    return getInput();
  return {};
}

void TransposeOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                              MLIRContext *ctx) {
  patterns.add<MergeTransposes>(ctx);
}

OpFoldResult ConcatOp::fold(FoldAdaptor) {
  if (getInputs().size() == 1)
    return getInputs().front();
  return {};
}

OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (getInput().getType() == getType() &&
      llvm::all_of(getStarts(), [](int64_t s) { return s == 0; }) &&
      llvm::all_of(getStrides(), [](int64_t s) { return s == 1; }))
    return getInput();
  return {};
}
