//===- DtcOps.cpp - dtc shape, sharding and gradient rules ---------------===//
//
// Each op's shape rule (inferReturnTypes, which also verifies operands), its
// loop structure (iterator types + indexing maps) and its gradient rule
// (buildGradient, DtcGradient.h) live here, next to each other, so that they
// cannot drift apart.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"

#include "dialects/dtc/DtcGradient.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/TypeUtilities.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"

#include <cmath>
#include <numeric>

using namespace mlir;
using namespace mlir::dtc;
using utils::IteratorType;

static RankedTensorType asTensor(Type type) {
  return cast<RankedTensorType>(type);
}

static SmallVector<AffineExpr> loopDims(MLIRContext *ctx, int64_t first,
                                        int64_t count) {
  SmallVector<AffineExpr> exprs;
  for (int64_t i = 0; i < count; ++i)
    exprs.push_back(getAffineDimExpr(first + i, ctx));
  return exprs;
}

/// Dimensions of `shape` read by loops `[0, resultShape.size())` under numpy
/// broadcasting: trailing dims align, size-1 dims against a larger loop read
/// index 0.
static SmallVector<AffineExpr> broadcastExprs(MLIRContext *ctx,
                                              ArrayRef<int64_t> shape,
                                              ArrayRef<int64_t> resultShape) {
  SmallVector<AffineExpr> exprs;
  int64_t offset = resultShape.size() - shape.size();
  for (auto [i, size] : llvm::enumerate(shape)) {
    if (size == 1 && resultShape[offset + i] != 1)
      exprs.push_back(getAffineConstantExpr(0, ctx));
    else
      exprs.push_back(getAffineDimExpr(offset + i, ctx));
  }
  return exprs;
}

/// Numpy broadcast of two shapes, or failure.
static FailureOr<SmallVector<int64_t>> broadcastShapes(ArrayRef<int64_t> a,
                                                       ArrayRef<int64_t> b) {
  size_t rank = std::max(a.size(), b.size());
  SmallVector<int64_t> result(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x != y && x != 1 && y != 1)
      return failure();
    result[i] = x == 1 ? y : x;
  }
  return result;
}

static LogicalResult verifyGradType(std::optional<Location> loc, Type grad,
                                    Type expected, StringRef what);

static std::string shapeString(ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleave(shape, os, "x");
  return s + "]";
}

//===----------------------------------------------------------------------===//
// Shared rules (declared in DtcOps.h)
//===----------------------------------------------------------------------===//

LogicalResult mlir::dtc::detail::verifyShardingRule(Operation *op) {
  // The rule is computed from the operand and result shapes, so check them
  // first rather than rely on the order in which the region verifiers of
  // InferTypeOpInterface and this interface run: a rule may not index by a
  // bad shape.
  if (isa<InferTypeOpInterface>(op) &&
      failed(mlir::detail::verifyInferredResultTypes(op)))
    return failure();
  auto rule = cast<ShardingRuleOpInterface>(op);
  size_t numLoops = rule.getLoopIteratorTypes().size();
  SmallVector<AffineMap> maps = rule.getIndexingMaps();
  size_t numValues = op->getNumOperands() + op->getNumResults();
  if (maps.size() != numValues)
    return op->emitOpError("sharding rule has ")
           << maps.size() << " indexing maps for " << numValues << " values";
  SmallVector<Value> values(op->getOperands());
  llvm::append_range(values, op->getResults());
  for (auto [value, map] : llvm::zip(values, maps)) {
    int64_t rank = cast<ShapedType>(value.getType()).getRank();
    if (map.getNumDims() != numLoops || map.getNumResults() != rank)
      return op->emitOpError("sharding rule map ")
             << AffineMapAttr::get(map) << " does not fit a rank-" << rank
             << " value over " << numLoops << " loops";
  }
  return success();
}

SmallVector<IteratorType>
mlir::dtc::detail::elementwiseIteratorTypes(Operation *op) {
  int64_t rank = asTensor(op->getResult(0).getType()).getRank();
  return SmallVector<IteratorType>(rank, IteratorType::parallel);
}

SmallVector<AffineMap>
mlir::dtc::detail::elementwiseIndexingMaps(Operation *op) {
  MLIRContext *ctx = op->getContext();
  ArrayRef<int64_t> resultShape =
      asTensor(op->getResult(0).getType()).getShape();
  int64_t numLoops = resultShape.size();
  SmallVector<AffineMap> maps;
  for (Value operand : op->getOperands())
    maps.push_back(AffineMap::get(
        numLoops, 0,
        broadcastExprs(ctx, asTensor(operand.getType()).getShape(),
                       resultShape),
        ctx));
  maps.push_back(AffineMap::getMultiDimIdentityMap(numLoops, ctx));
  return maps;
}

LogicalResult
mlir::dtc::detail::inferBroadcastType(std::optional<Location> loc, Type lhs,
                                      Type rhs, SmallVectorImpl<Type> &types) {
  auto lhsType = asTensor(lhs), rhsType = asTensor(rhs);
  if (lhsType.getElementType() != rhsType.getElementType())
    return emitOptionalError(
        loc, "operand element types differ: ", lhsType.getElementType(), " vs ",
        rhsType.getElementType());
  auto shape = broadcastShapes(lhsType.getShape(), rhsType.getShape());
  if (failed(shape))
    return emitOptionalError(loc, "shapes ", shapeString(lhsType.getShape()),
                             " and ", shapeString(rhsType.getShape()),
                             " do not broadcast");
  types.push_back(RankedTensorType::get(*shape, lhsType.getElementType()));
  return success();
}

/// Checks that `dims` are sorted, unique and within `[0, rank)`.
static LogicalResult verifyDimList(std::optional<Location> loc,
                                   ArrayRef<int64_t> dims, int64_t rank,
                                   StringRef what) {
  for (auto [i, dim] : llvm::enumerate(dims)) {
    if (dim < 0 || dim >= rank)
      return emitOptionalError(loc, what, " ", dim,
                               " is out of range for rank ", rank);
    if (i > 0 && dims[i - 1] >= dim)
      return emitOptionalError(loc, what, "s must be sorted and unique, got ",
                               dim, " after ", dims[i - 1]);
  }
  return success();
}

LogicalResult mlir::dtc::detail::inferReduceType(std::optional<Location> loc,
                                                 Type input,
                                                 ArrayRef<int64_t> dims,
                                                 bool keepDims,
                                                 SmallVectorImpl<Type> &types) {
  auto inputType = asTensor(input);
  if (failed(verifyDimList(loc, dims, inputType.getRank(), "reduction dim")))
    return failure();
  SmallVector<int64_t> shape;
  for (auto [i, size] : llvm::enumerate(inputType.getShape())) {
    if (!llvm::is_contained(dims, static_cast<int64_t>(i)))
      shape.push_back(size);
    else if (keepDims)
      shape.push_back(1);
  }
  types.push_back(RankedTensorType::get(shape, inputType.getElementType()));
  return success();
}

SmallVector<IteratorType>
mlir::dtc::detail::reduceIteratorTypes(int64_t rank, ArrayRef<int64_t> dims) {
  SmallVector<IteratorType> types(rank, IteratorType::parallel);
  for (int64_t dim : dims)
    types[dim] = IteratorType::reduction;
  return types;
}

SmallVector<AffineMap>
mlir::dtc::detail::reduceIndexingMaps(MLIRContext *ctx, int64_t rank,
                                      ArrayRef<int64_t> dims, bool keepDims) {
  SmallVector<AffineExpr> outputExprs;
  for (int64_t i = 0; i < rank; ++i) {
    if (!llvm::is_contained(dims, i))
      outputExprs.push_back(getAffineDimExpr(i, ctx));
    else if (keepDims)
      outputExprs.push_back(getAffineConstantExpr(0, ctx));
  }
  return {AffineMap::getMultiDimIdentityMap(rank, ctx),
          AffineMap::get(rank, 0, outputExprs, ctx)};
}

/// Loops: every dim; dims from `axis` on are reductions (normalizations).
static SmallVector<IteratorType> normalizedIteratorTypes(int64_t rank,
                                                         int64_t axis) {
  SmallVector<IteratorType> types(rank, IteratorType::parallel);
  for (int64_t i = axis; i < rank; ++i)
    types[i] = IteratorType::reduction;
  return types;
}

//===----------------------------------------------------------------------===//
// Elementwise ops (Dtc_UnaryOp, Dtc_BinaryOp): gradients. Unary: dx = g *
// f'(x), f' in terms of x or y = f(x). Binary: each operand's cotangent is
// computed in the result's shape, then summed over the broadcast dims.
//===----------------------------------------------------------------------===//

LogicalResult NegOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, gb.neg(gb.grad()));
  return success();
}

// g * sign(x): 0 at x = 0, as PyTorch.
LogicalResult AbsOp::buildGradient(GradientBuilder &gb) {
  Value x = getInput(), g = gb.grad();
  Value zero = gb.scalar(x, 0);
  Value isPositive = gb.compare(x, zero, "gt");
  Value positive = gb.select(isPositive, g, gb.scalar(g, 0));
  Value isNegative = gb.compare(x, zero, "lt");
  Value negated = gb.neg(g);
  gb.setGrad(0, gb.select(isNegative, negated, positive));
  return success();
}

LogicalResult ExpOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, gb.mul(gb.grad(), getOutput()));
  return success();
}

LogicalResult LogOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, gb.div(gb.grad(), getInput()));
  return success();
}

// d sqrt(x) = 1 / (2 sqrt(x))
LogicalResult SqrtOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, gb.div(gb.mulScalar(gb.grad(), 0.5), getOutput()));
  return success();
}

// d x^(-1/2) = -1/2 x^(-3/2) = -1/2 y^3
LogicalResult RsqrtOp::buildGradient(GradientBuilder &gb) {
  Value y = getOutput();
  Value cube = gb.mul(gb.mul(y, y), y);
  gb.setGrad(0, gb.mul(gb.mulScalar(gb.grad(), -0.5), cube));
  return success();
}

// d (1/x) = -1/x^2 = -y^2
LogicalResult ReciprocalOp::buildGradient(GradientBuilder &gb) {
  Value y = getOutput();
  gb.setGrad(0, gb.neg(gb.mul(gb.grad(), gb.mul(y, y))));
  return success();
}

// d tanh = 1 - y^2
LogicalResult TanhOp::buildGradient(GradientBuilder &gb) {
  Value y = getOutput();
  Value one = gb.scalar(y, 1);
  Value slope = gb.sub(one, gb.mul(y, y));
  gb.setGrad(0, gb.mul(gb.grad(), slope));
  return success();
}

// d erf = 2/sqrt(pi) e^(-x^2)
LogicalResult ErfOp::buildGradient(GradientBuilder &gb) {
  Value x = getInput();
  Value gauss = ExpOp::create(gb.b, gb.loc, gb.neg(gb.mul(x, x)));
  gb.setGrad(0, gb.mul(gb.mulScalar(gb.grad(), 2.0 / std::sqrt(M_PI)), gauss));
  return success();
}

// d sigmoid = y (1 - y)
LogicalResult SigmoidOp::buildGradient(GradientBuilder &gb) {
  Value y = getOutput();
  Value slope = gb.mul(y, gb.sub(gb.scalar(y, 1), y));
  gb.setGrad(0, gb.mul(gb.grad(), slope));
  return success();
}

// d softplus = sigmoid(x)
LogicalResult SoftplusOp::buildGradient(GradientBuilder &gb) {
  Value slope = SigmoidOp::create(gb.b, gb.loc, getInput());
  gb.setGrad(0, gb.mul(gb.grad(), slope));
  return success();
}

// g where x > 0 (0 at x = 0, as PyTorch).
LogicalResult ReluOp::buildGradient(GradientBuilder &gb) {
  Value x = getInput();
  Value positive = gb.compare(x, gb.scalar(x, 0), "gt");
  gb.setGrad(0, gb.select(positive, gb.grad(), gb.scalar(gb.grad(), 0)));
  return success();
}

LogicalResult SiluOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, SiluGradOp::create(gb.b, gb.loc, getInput(), gb.grad()));
  return success();
}

LogicalResult GeluOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, GeluGradOp::create(gb.b, gb.loc, getInput(), gb.grad(),
                                   getApproximateTanh()));
  return success();
}

LogicalResult AddOp::buildGradient(GradientBuilder &gb) {
  gb.setBroadcastGrads(gb.grad(), gb.grad());
  return success();
}

LogicalResult SubOp::buildGradient(GradientBuilder &gb) {
  gb.setBroadcastGrads(gb.grad(), gb.wants(1) ? gb.neg(gb.grad()) : Value());
  return success();
}

LogicalResult MulOp::buildGradient(GradientBuilder &gb) {
  Value g = gb.grad();
  Value lhsGrad = gb.wants(0) ? gb.mul(g, getRhs()) : Value();
  Value rhsGrad = gb.wants(1) ? gb.mul(g, getLhs()) : Value();
  gb.setBroadcastGrads(lhsGrad, rhsGrad);
  return success();
}

// d(l/r) = g/r, -g l/r^2 = -(g y)/r
LogicalResult DivOp::buildGradient(GradientBuilder &gb) {
  Value r = getRhs(), g = gb.grad();
  Value lhsGrad = gb.wants(0) ? gb.div(g, r) : Value();
  Value rhsGrad =
      gb.wants(1) ? gb.neg(gb.div(gb.mul(g, getOutput()), r)) : Value();
  gb.setBroadcastGrads(lhsGrad, rhsGrad);
  return success();
}

/// Max and min: the cotangent goes to the chosen operand, lhs on ties.
static void chosenOperandGrads(GradientBuilder &gb, Value lhs, Value rhs,
                               StringRef lhsWins, StringRef rhsWins) {
  Value g = gb.grad();
  Value zero = gb.scalar(g, 0);
  Value lhsGrad, rhsGrad;
  if (gb.wants(0))
    lhsGrad = gb.select(gb.compare(lhs, rhs, lhsWins), g, zero);
  if (gb.wants(1))
    rhsGrad = gb.select(gb.compare(lhs, rhs, rhsWins), g, zero);
  gb.setBroadcastGrads(lhsGrad, rhsGrad);
}

LogicalResult MaxOp::buildGradient(GradientBuilder &gb) {
  chosenOperandGrads(gb, getLhs(), getRhs(), "ge", "lt");
  return success();
}

LogicalResult MinOp::buildGradient(GradientBuilder &gb) {
  chosenOperandGrads(gb, getLhs(), getRhs(), "le", "gt");
  return success();
}

// d l^r = g r l^(r-1) and g y log(l)
LogicalResult PowOp::buildGradient(GradientBuilder &gb) {
  Value l = getLhs(), r = getRhs(), g = gb.grad();
  Value lhsGrad, rhsGrad;
  if (gb.wants(0)) {
    Value power = PowOp::create(gb.b, gb.loc, l, gb.sub(r, gb.scalar(r, 1)));
    lhsGrad = gb.mul(gb.mul(g, power), r);
  }
  if (gb.wants(1)) {
    // Created first so that the IR does not depend on the compiler's
    // argument evaluation order.
    Value log = LogOp::create(gb.b, gb.loc, l);
    rhsGrad = gb.mul(gb.mul(g, getOutput()), log);
  }
  gb.setBroadcastGrads(lhsGrad, rhsGrad);
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions (Dtc_ReduceOp): gradients. The cotangent is broadcast back
// over the reduced dims.
//===----------------------------------------------------------------------===//

/// The reduction's result shape with the reduced dims kept as 1s.
static SmallVector<int64_t> keptShape(RankedTensorType input,
                                      ArrayRef<int64_t> dims) {
  SmallVector<int64_t> shape(input.getShape());
  for (int64_t dim : dims)
    shape[dim] = 1;
  return shape;
}

/// Sum and mean: every reduced element receives the cotangent (divided by
/// the group's size for the mean).
static void spreadOverReducedDims(GradientBuilder &gb,
                                  RankedTensorType inputType,
                                  ArrayRef<int64_t> dims, bool mean) {
  Value g = gb.reshape(gb.grad(), keptShape(inputType, dims));
  if (mean) {
    int64_t count = 1;
    for (int64_t dim : dims)
      count *= inputType.getDimSize(dim);
    g = gb.mulScalar(g, 1.0 / static_cast<double>(count));
  }
  gb.setGrad(0, gb.broadcastTo(g, inputType));
}

LogicalResult ReduceSumOp::buildGradient(GradientBuilder &gb) {
  spreadOverReducedDims(gb, getInput().getType(), getDims(), /*mean=*/false);
  return success();
}

LogicalResult ReduceMeanOp::buildGradient(GradientBuilder &gb) {
  spreadOverReducedDims(gb, getInput().getType(), getDims(), /*mean=*/true);
  return success();
}

// The cotangent is shared evenly by the maxima of each reduced group (as
// PyTorch's amax), so ties do not multiply it.
LogicalResult ReduceMaxOp::buildGradient(GradientBuilder &gb) {
  RankedTensorType inputType = getInput().getType();
  SmallVector<int64_t> kept = keptShape(inputType, getDims());
  Value x = getInput();
  Value isMax = gb.compare(x, gb.reshape(getOutput(), kept), "eq");
  Value g = gb.reshape(gb.grad(), kept);
  Value one = gb.scalar(g, 1), zero = gb.scalar(g, 0);
  Value ones = gb.select(isMax, one, zero);
  Value count = gb.reduceSum(ones, getDims(), /*keepDims=*/true);
  Value share = gb.div(g, count);
  gb.setGrad(0, gb.select(isMax, share, zero));
  return success();
}

//===----------------------------------------------------------------------===//
// ParameterOp
//===----------------------------------------------------------------------===//

LogicalResult ParameterOp::verify() {
  if (getName().empty())
    return emitOpError("needs a non-empty name");
  if (std::optional<ArrayAttr> stack = getStack()) {
    // Partitioned parameters hold a shard; their global type is elsewhere.
    auto type = dyn_cast<RankedTensorType>(getOutput().getType());
    bool whole = !(*this)->hasAttr("dtc.global_type") &&
                 !(*this)->hasAttr("dtc.flat_shard");
    if (stack->empty() ||
        (whole && type && type.getRank() > 0 &&
         type.getDimSize(0) != static_cast<int64_t>(stack->size())))
      return emitOpError("stacks ")
             << stack->size() << " initializers into " << getOutput().getType();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// CastOp
//===----------------------------------------------------------------------===//

LogicalResult CastOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  types.push_back(
      asTensor(adaptor.getInput().getType()).clone(adaptor.getTo()));
  return success();
}

SmallVector<IteratorType> CastOp::getLoopIteratorTypes() {
  return detail::elementwiseIteratorTypes(getOperation());
}

SmallVector<AffineMap> CastOp::getIndexingMaps() {
  return detail::elementwiseIndexingMaps(getOperation());
}

// The cotangent converts back to the input's element type.
LogicalResult CastOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, gb.cast(gb.grad(), getElementTypeOrSelf(getInput().getType())));
  return success();
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  auto lhs = asTensor(adaptor.getLhs().getType());
  auto rhs = asTensor(adaptor.getRhs().getType());
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return emitOptionalError(loc, "operands must have rank >= 2, got ",
                             lhs.getRank(), " and ", rhs.getRank());
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(
        loc, "operand element types differ: ", lhs.getElementType(), " vs ",
        rhs.getElementType());
  ArrayRef<int64_t> a = lhs.getShape(), b = rhs.getShape();
  int64_t m = a[a.size() - 2], k = a.back();
  if (adaptor.getTransposeLhs())
    std::swap(m, k);
  int64_t k2 = b[b.size() - 2], n = b.back();
  if (adaptor.getTransposeRhs())
    std::swap(k2, n);
  if (k != k2)
    return emitOptionalError(loc, "contraction sizes differ: lhs ",
                             shapeString(a), " gives k=", k, ", rhs ",
                             shapeString(b), " gives k=", k2);
  auto batch = broadcastShapes(a.drop_back(2), b.drop_back(2));
  if (failed(batch))
    return emitOptionalError(loc, "batch dimensions of ", shapeString(a),
                             " and ", shapeString(b), " do not broadcast");
  SmallVector<int64_t> shape = *batch;
  shape.append({m, n});
  types.push_back(RankedTensorType::get(shape, lhs.getElementType()));
  return success();
}

SmallVector<IteratorType> MatmulOp::getLoopIteratorTypes() {
  int64_t rank = getOutput().getType().getRank();
  SmallVector<IteratorType> types(rank, IteratorType::parallel);
  types.push_back(IteratorType::reduction);
  return types;
}

// Loops: result batch dims, then m, n, k.
SmallVector<AffineMap> MatmulOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  ArrayRef<int64_t> result = getOutput().getType().getShape();
  int64_t numBatch = result.size() - 2, numLoops = result.size() + 1;
  AffineExpr m = getAffineDimExpr(numBatch, ctx);
  AffineExpr n = getAffineDimExpr(numBatch + 1, ctx);
  AffineExpr k = getAffineDimExpr(numBatch + 2, ctx);
  auto operandMap = [&](RankedTensorType type, AffineExpr row, AffineExpr col,
                        bool transposed) {
    SmallVector<AffineExpr> exprs =
        broadcastExprs(ctx, type.getShape().drop_back(2), result.drop_back(2));
    if (transposed)
      std::swap(row, col);
    exprs.append({row, col});
    return AffineMap::get(numLoops, 0, exprs, ctx);
  };
  SmallVector<AffineExpr> outputExprs = loopDims(ctx, 0, result.size());
  return {operandMap(getLhs().getType(), m, k, getTransposeLhs()),
          operandMap(getRhs().getType(), k, n, getTransposeRhs()),
          AffineMap::get(numLoops, 0, outputExprs, ctx)};
}

/// Folds the batch dims of a rank > 2 tensor into its rows: [..., m, k] ->
/// [prod(...) * m, k].
static Value foldBatchIntoRows(GradientBuilder &gb, Value value) {
  ArrayRef<int64_t> shape = asTensor(value.getType()).getShape();
  int64_t rows = std::accumulate(shape.begin(), shape.end() - 1, int64_t{1},
                                 std::multiplies<int64_t>());
  return gb.reshape(value, {rows, shape.back()});
}

// With A = op(lhs), B = op(rhs) (op: the transpose flags), dA = G B^T and
// dB = A^T G, expressed through the flags so no transpose is materialized;
// broadcast batch dims are summed.
LogicalResult MatmulOp::buildGradient(GradientBuilder &gb) {
  Value lhs = getLhs(), rhs = getRhs(), g = gb.grad();
  bool ta = getTransposeLhs(), tb = getTransposeRhs();
  int64_t lhsRank = getLhs().getType().getRank();
  int64_t rhsRank = getRhs().getType().getRank();
  auto matmul = [&](Value a, Value b, bool transposeA, bool transposeB) {
    return MatmulOp::create(gb.b, gb.loc, a, b, transposeA, transposeB);
  };

  if (gb.wants(0)) {
    if (rhsRank == 2 && lhsRank > 2 && !ta) {
      // A Linear layer: the batch dims are rows of the one GEMM.
      Value flat = matmul(foldBatchIntoRows(gb, g), rhs, false, !tb);
      gb.setGrad(0, gb.reshape(flat, getLhs().getType().getShape()));
    } else if (!ta) {
      gb.setGrad(0, gb.sumToType(matmul(g, rhs, false, !tb), lhs.getType()));
    } else {
      gb.setGrad(0, gb.sumToType(matmul(rhs, g, tb, true), lhs.getType()));
    }
  }
  if (gb.wants(1)) {
    if (rhsRank == 2 && lhsRank > 2 && !ta) {
      // The weight gradient of a Linear layer: one GEMM over all rows
      // instead of a per-batch product summed afterwards.
      Value flatLhs = foldBatchIntoRows(gb, lhs);
      Value flatGrad = foldBatchIntoRows(gb, g);
      gb.setGrad(1, tb ? matmul(flatGrad, flatLhs, true, false)
                       : matmul(flatLhs, flatGrad, true, false));
    } else if (!tb) {
      gb.setGrad(1, gb.sumToType(matmul(lhs, g, !ta, false), rhs.getType()));
    } else {
      gb.setGrad(1, gb.sumToType(matmul(g, lhs, true, ta), rhs.getType()));
    }
  }
  return success();
}

//===----------------------------------------------------------------------===//
// ConvOp
//===----------------------------------------------------------------------===//

/// The shape of conv's result for an input and weight shape: every shape
/// rule of dtc.conv but element types and bias (shared with the gradients).
static FailureOr<SmallVector<int64_t>>
convResultShape(std::optional<Location> loc, ArrayRef<int64_t> input,
                ArrayRef<int64_t> weight, ArrayRef<int64_t> strides,
                ArrayRef<int64_t> dilations, ArrayRef<int64_t> pads,
                int64_t groups) {
  int64_t rank = input.size();
  if (rank < 3)
    return emitOptionalError(loc, "input must be [n, c, spatial...], got rank ",
                             rank);
  if (static_cast<int64_t>(weight.size()) != rank)
    return emitOptionalError(loc, "weight rank ", weight.size(),
                             " differs from the input rank ", rank);
  int64_t k = rank - 2;
  if (static_cast<int64_t>(strides.size()) != k ||
      static_cast<int64_t>(dilations.size()) != k ||
      static_cast<int64_t>(pads.size()) != 2 * k)
    return emitOptionalError(loc, "strides and dilations need ", k,
                             " entries and pads ", 2 * k, " for ", k,
                             " spatial dims");
  int64_t channels = input[1], filters = weight[0];
  if (groups < 1 || channels % groups || filters % groups)
    return emitOptionalError(
        loc, "groups ", groups,
        " must be positive and divide the input channels (", channels,
        ") and output channels (", filters, ")");
  if (weight[1] * groups != channels)
    return emitOptionalError(loc, "weight ", shapeString(weight),
                             " must have input channels / groups = ",
                             channels / groups, " in dim 1");
  SmallVector<int64_t> shape = {input[0], filters};
  for (int64_t i = 0; i < k; ++i) {
    if (strides[i] < 1 || dilations[i] < 1 || pads[i] < 0 || pads[k + i] < 0)
      return emitOptionalError(loc, "spatial dim ", i,
                               ": strides and dilations must be positive and "
                               "pads non-negative");
    int64_t padded = input[2 + i] + pads[i] + pads[k + i];
    int64_t window = dilations[i] * (weight[2 + i] - 1) + 1;
    if (window > padded)
      return emitOptionalError(loc, "spatial dim ", i, ": kernel window ",
                               window, " exceeds the padded input ", padded);
    shape.push_back((padded - window) / strides[i] + 1);
  }
  return shape;
}

LogicalResult ConvOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  auto input = asTensor(adaptor.getInput().getType());
  auto weight = asTensor(adaptor.getWeight().getType());
  if (input.getElementType() != weight.getElementType())
    return emitOptionalError(
        loc, "operand element types differ: ", input.getElementType(), " vs ",
        weight.getElementType());
  auto shape = convResultShape(loc, input.getShape(), weight.getShape(),
                               adaptor.getStrides(), adaptor.getDilations(),
                               adaptor.getPads(), adaptor.getGroups());
  if (failed(shape))
    return failure();
  if (Value bias = adaptor.getBias()) {
    int64_t filters = weight.getDimSize(0);
    auto biasType = asTensor(bias.getType());
    if (biasType.getShape() != ArrayRef<int64_t>{filters} ||
        biasType.getElementType() != input.getElementType())
      return emitOptionalError(loc, "bias must be a ", filters, "-element ",
                               input.getElementType(), " vector, got ",
                               biasType);
  }
  types.push_back(input.clone(*shape));
  return success();
}

/// Iterator types of conv's loops `(n, f, o1..ok, c', k1..kk)`.
static SmallVector<IteratorType> convIteratorTypes(int64_t k) {
  SmallVector<IteratorType> types(2 + k, IteratorType::parallel);
  types.append(1 + k, IteratorType::reduction);
  return types;
}

/// Indexing maps of conv's loops `(n, f, o1..ok, c', k1..kk)` for the
/// (padded) input, the weight and the result.
namespace {
struct ConvMaps {
  AffineMap input, weight, output;
};
} // namespace
static ConvMaps convIndexingMaps(MLIRContext *ctx, ArrayRef<int64_t> weight,
                                 ArrayRef<int64_t> strides,
                                 ArrayRef<int64_t> dilations, int64_t groups) {
  int64_t k = weight.size() - 2, numLoops = 2 * k + 3;
  AffineExpr n = getAffineDimExpr(0, ctx), f = getAffineDimExpr(1, ctx);
  AffineExpr c = getAffineDimExpr(2 + k, ctx);
  AffineExpr channel = c;
  if (groups > 1) {
    int64_t perGroupIn = weight[1];
    int64_t perGroupOut = weight[0] / groups;
    channel = f.floorDiv(perGroupOut) * perGroupIn + c;
  }
  SmallVector<AffineExpr> inputExprs = {n, channel}, weightExprs = {f, c},
                          outputExprs = {n, f};
  for (int64_t i = 0; i < k; ++i) {
    AffineExpr o = getAffineDimExpr(2 + i, ctx);
    AffineExpr w = getAffineDimExpr(3 + k + i, ctx);
    inputExprs.push_back(o * strides[i] + w * dilations[i]);
    weightExprs.push_back(w);
    outputExprs.push_back(o);
  }
  return {AffineMap::get(numLoops, 0, inputExprs, ctx),
          AffineMap::get(numLoops, 0, weightExprs, ctx),
          AffineMap::get(numLoops, 0, outputExprs, ctx)};
}

// Loops (n, f, o1..ok, c', k1..kk): see the op description.
SmallVector<IteratorType> ConvOp::getLoopIteratorTypes() {
  return convIteratorTypes(getInput().getType().getRank() - 2);
}

SmallVector<AffineMap> ConvOp::getIndexingMaps() {
  ConvMaps maps =
      convIndexingMaps(getContext(), getWeight().getType().getShape(),
                       getStrides(), getDilations(), getGroups());
  SmallVector<AffineMap> result = {maps.input, maps.weight};
  if (getBias())
    result.push_back(AffineMap::get(maps.output.getNumDims(), 0,
                                    {getAffineDimExpr(1, getContext())},
                                    getContext()));
  result.push_back(maps.output);
  return result;
}

LogicalResult ConvOp::buildGradient(GradientBuilder &gb) {
  Value g = gb.grad();
  RankedTensorType inputType = getInput().getType();
  RankedTensorType weightType = getWeight().getType();
  if (gb.wants(0))
    gb.setGrad(0, ConvGradInputOp::create(
                      gb.b, gb.loc, g, getWeight(), inputType.getShape(),
                      getStrides(), getDilations(), getPads(), getGroups()));
  if (gb.wants(1))
    gb.setGrad(1, ConvGradWeightOp::create(
                      gb.b, gb.loc, getInput(), g, weightType.getShape(),
                      getStrides(), getDilations(), getPads(), getGroups()));
  if (getBias() && gb.wants(2)) {
    // The bias is added at every batch element and output position.
    SmallVector<int64_t> dims = {0};
    for (int64_t i = 2; i < inputType.getRank(); ++i)
      dims.push_back(i);
    gb.setGrad(2, gb.reduceSum(g, dims, /*keepDims=*/false));
  }
  return success();
}

//===----------------------------------------------------------------------===//
// MaxPoolOp, AvgPoolOp
//===----------------------------------------------------------------------===//

LogicalResult mlir::dtc::detail::inferPoolType(
    std::optional<Location> loc, Type input, ArrayRef<int64_t> kernel,
    ArrayRef<int64_t> strides, ArrayRef<int64_t> dilations,
    ArrayRef<int64_t> pads, SmallVectorImpl<Type> &types) {
  auto inputType = asTensor(input);
  if (inputType.getRank() < 3)
    return emitOptionalError(loc, "input must be [n, c, spatial...], got rank ",
                             inputType.getRank());
  int64_t k = inputType.getRank() - 2;
  if (static_cast<int64_t>(kernel.size()) != k ||
      static_cast<int64_t>(strides.size()) != k ||
      static_cast<int64_t>(dilations.size()) != k ||
      static_cast<int64_t>(pads.size()) != 2 * k)
    return emitOptionalError(loc, "kernel_shape, strides and dilations need ",
                             k, " entries and pads ", 2 * k, " for ", k,
                             " spatial dims");
  SmallVector<int64_t> shape(inputType.getShape().take_front(2));
  for (int64_t i = 0; i < k; ++i) {
    if (kernel[i] < 1 || strides[i] < 1 || dilations[i] < 1 || pads[i] < 0 ||
        pads[k + i] < 0)
      return emitOptionalError(loc, "spatial dim ", i,
                               ": kernel, strides and dilations must be "
                               "positive and pads non-negative");
    int64_t padded = inputType.getDimSize(2 + i) + pads[i] + pads[k + i];
    int64_t window = dilations[i] * (kernel[i] - 1) + 1;
    if (window > padded)
      return emitOptionalError(loc, "spatial dim ", i, ": kernel window ",
                               window, " exceeds the padded input ", padded);
    shape.push_back((padded - window) / strides[i] + 1);
  }
  types.push_back(inputType.clone(shape));
  return success();
}

// Loops (n, c, o1..ok, k1..kk).
SmallVector<IteratorType>
mlir::dtc::detail::poolIteratorTypes(int64_t numSpatial) {
  SmallVector<IteratorType> types(2 + numSpatial, IteratorType::parallel);
  types.append(numSpatial, IteratorType::reduction);
  return types;
}

SmallVector<AffineMap>
mlir::dtc::detail::poolIndexingMaps(MLIRContext *ctx, ArrayRef<int64_t> strides,
                                    ArrayRef<int64_t> dilations) {
  int64_t k = strides.size(), numLoops = 2 + 2 * k;
  SmallVector<AffineExpr> inputExprs = loopDims(ctx, 0, 2);
  SmallVector<AffineExpr> outputExprs = loopDims(ctx, 0, 2 + k);
  for (int64_t i = 0; i < k; ++i)
    inputExprs.push_back(getAffineDimExpr(2 + i, ctx) * strides[i] +
                         getAffineDimExpr(2 + k + i, ctx) * dilations[i]);
  return {AffineMap::get(numLoops, 0, inputExprs, ctx),
          AffineMap::get(numLoops, 0, outputExprs, ctx)};
}

LogicalResult MaxPoolOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, MaxPoolGradOp::create(gb.b, gb.loc, getInput(), gb.grad(),
                                      getKernelShape(), getStrides(),
                                      getDilations(), getPads()));
  return success();
}

LogicalResult AvgPoolOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, AvgPoolGradOp::create(
                    gb.b, gb.loc, gb.grad(), getInput().getType().getShape(),
                    getKernelShape(), getStrides(), getDilations(), getPads(),
                    getCountIncludePad()));
  return success();
}

//===----------------------------------------------------------------------===//
// SoftmaxOp, LayerNormOp, RmsNormOp
//===----------------------------------------------------------------------===//

static LogicalResult verifyAxis(std::optional<Location> loc, int64_t axis,
                                int64_t rank) {
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, "axis ", axis, " is out of range for rank ",
                             rank);
  return success();
}

LogicalResult SoftmaxOp::verify() {
  return verifyAxis(getLoc(), getAxis(), getInput().getType().getRank());
}

/// The loops of an op along one axis of its input (softmax, a running sum):
/// that axis is a reduction the output also indexes, every other parallel.
/// verify() reports a bad axis; no out-of-bounds index if this is asked
/// before (or without) verification.
static SmallVector<IteratorType> axisReductionLoops(int64_t rank,
                                                    int64_t axis) {
  SmallVector<IteratorType> types(rank, IteratorType::parallel);
  if (axis >= 0 && axis < rank)
    types[axis] = IteratorType::reduction;
  return types;
}

/// Input and output both indexed by every loop.
static SmallVector<AffineMap> identityInputOutput(RankedTensorType input) {
  auto map =
      AffineMap::getMultiDimIdentityMap(input.getRank(), input.getContext());
  return {map, map};
}

// The normalized dimension is a reduction loop that the output also indexes:
// splitting it needs the op's own cross-shard statistics.
SmallVector<IteratorType> SoftmaxOp::getLoopIteratorTypes() {
  return axisReductionLoops(getInput().getType().getRank(), getAxis());
}

SmallVector<AffineMap> SoftmaxOp::getIndexingMaps() {
  return identityInputOutput(getInput().getType());
}

LogicalResult CumSumOp::verify() {
  return verifyAxis(getLoc(), getAxis(), getInput().getType().getRank());
}

// The scanned dimension is a reduction loop that the output also indexes,
// as softmax's: a split of it would need the sums of the parts before.
SmallVector<IteratorType> CumSumOp::getLoopIteratorTypes() {
  return axisReductionLoops(getInput().getType().getRank(), getAxis());
}

SmallVector<AffineMap> CumSumOp::getIndexingMaps() {
  return identityInputOutput(getInput().getType());
}

// d/dx_j of sum_{j <= i} x_j is 1 for every i >= j: the gradient's running
// sum the other way, exclusive as the forward is.
LogicalResult CumSumOp::buildGradient(GradientBuilder &gb) {
  if (!gb.wants(0))
    return success();
  Value grad = gb.grad();
  gb.setGrad(0,
             CumSumOp::create(gb.b, gb.loc, grad.getType(), grad, getAxisAttr(),
                              getExclusiveAttr(),
                              getReverse() ? UnitAttr() : gb.b.getUnitAttr()));
  return success();
}

/// Shared shape rule of layer_norm and rms_norm: the scale (and bias) cover
/// the normalized trailing dims.
static LogicalResult inferNormType(std::optional<Location> loc, Type input,
                                   int64_t axis, TypeRange affineOperands,
                                   SmallVectorImpl<Type> &types) {
  auto inputType = asTensor(input);
  if (failed(verifyAxis(loc, axis, inputType.getRank())))
    return failure();
  ArrayRef<int64_t> normalized = inputType.getShape().drop_front(axis);
  for (Type type : affineOperands) {
    auto tensor = asTensor(type);
    if (tensor.getShape() != normalized)
      return emitOptionalError(
          loc, "scale/bias shape ", shapeString(tensor.getShape()),
          " must equal the normalized shape ", shapeString(normalized));
    if (tensor.getElementType() != inputType.getElementType())
      return emitOptionalError(
          loc, "scale/bias element type ", tensor.getElementType(),
          " differs from the input's ", inputType.getElementType());
  }
  types.push_back(inputType);
  return success();
}

static SmallVector<AffineMap> normIndexingMaps(MLIRContext *ctx, int64_t rank,
                                               int64_t axis,
                                               unsigned numAffineOperands) {
  auto identity = AffineMap::getMultiDimIdentityMap(rank, ctx);
  auto trailing =
      AffineMap::get(rank, 0, loopDims(ctx, axis, rank - axis), ctx);
  SmallVector<AffineMap> maps = {identity};
  maps.append(numAffineOperands, trailing);
  maps.push_back(identity);
  return maps;
}

//===----------------------------------------------------------------------===//
// SelectiveScanOp
//===----------------------------------------------------------------------===//

/// The result type of selective_scan(a, x, c): a [b, d, t, n], x of a's
/// type, c [b, t, n] of a's element type -> [b, d, t].
static FailureOr<RankedTensorType>
selectiveScanResultType(std::optional<Location> loc, Type aType, Type xType,
                        Type cType) {
  auto a = asTensor(aType), c = asTensor(cType);
  if (a.getRank() != 4)
    return emitOptionalError(loc, "a must be [b, d, t, n], got ",
                             shapeString(a.getShape()));
  if (xType != aType)
    return emitOptionalError(loc, "x type ", xType, " differs from a's ",
                             aType);
  ArrayRef<int64_t> s = a.getShape();
  if (c.getElementType() != a.getElementType() ||
      c.getShape() != ArrayRef<int64_t>{s[0], s[2], s[3]})
    return emitOptionalError(loc, "c must be ", shapeString({s[0], s[2], s[3]}),
                             " of ", a.getElementType(), ", got ", cType);
  return RankedTensorType::get({s[0], s[1], s[2]}, a.getElementType());
}

LogicalResult SelectiveScanOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  auto type = selectiveScanResultType(loc, adaptor.getA().getType(),
                                      adaptor.getX().getType(),
                                      adaptor.getC().getType());
  if (failed(type))
    return failure();
  types.push_back(*type);
  return success();
}

/// Loops (b, d, t, n) of the scan: batch and channels parallel, the
/// positions a scan (a reduction the result indexes, never split), the
/// state `stateLoop` (a sum in the forward op, parallel in its gradient).
static SmallVector<IteratorType> selectiveScanLoops(IteratorType stateLoop) {
  return {IteratorType::parallel, IteratorType::parallel,
          IteratorType::reduction, stateLoop};
}

/// a and x (b, d, t, n), c (b, t, n); then each of `results` maps.
static SmallVector<AffineMap> selectiveScanMaps(MLIRContext *ctx,
                                                ArrayRef<StringRef> results,
                                                unsigned numOperands = 3) {
  AffineExpr b, d, t, n;
  bindDims(ctx, b, d, t, n);
  auto full = AffineMap::get(4, 0, {b, d, t, n}, ctx);
  auto perPosition = AffineMap::get(4, 0, {b, t, n}, ctx);
  auto perChannel = AffineMap::get(4, 0, {b, d, t}, ctx);
  SmallVector<AffineMap> maps = {full, full, perPosition};
  if (numOperands == 4)
    maps.push_back(perChannel);
  for (StringRef r : results)
    maps.push_back(r == "full" ? full : r == "c" ? perPosition : perChannel);
  return maps;
}

SmallVector<IteratorType> SelectiveScanOp::getLoopIteratorTypes() {
  return selectiveScanLoops(IteratorType::reduction);
}

SmallVector<AffineMap> SelectiveScanOp::getIndexingMaps() {
  return selectiveScanMaps(getContext(), {"y"});
}

LogicalResult SelectiveScanOp::buildGradient(GradientBuilder &gb) {
  auto grad = SelectiveScanGradOp::create(gb.b, gb.loc, getA(), getX(), getC(),
                                          gb.grad());
  gb.setGrads(grad, {0, 1, 2});
  return success();
}

LogicalResult SelectiveScanGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  Type a = adaptor.getA().getType(), c = adaptor.getC().getType();
  auto y = selectiveScanResultType(loc, a, adaptor.getX().getType(), c);
  if (failed(y) ||
      failed(verifyGradType(loc, adaptor.getGrad().getType(), *y, "result")))
    return failure();
  types.append({a, a, c});
  return success();
}

SmallVector<IteratorType> SelectiveScanGradOp::getLoopIteratorTypes() {
  return selectiveScanLoops(IteratorType::parallel);
}

// Operands (a, x, c, grad), results (a_grad, x_grad, c_grad): c_grad does
// not index the channels it sums over.
SmallVector<AffineMap> SelectiveScanGradOp::getIndexingMaps() {
  return selectiveScanMaps(getContext(), {"full", "full", "c"}, 4);
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  SmallVector<Type> affine = {adaptor.getWeight().getType()};
  if (adaptor.getBias())
    affine.push_back(adaptor.getBias().getType());
  return inferNormType(loc, adaptor.getInput().getType(), adaptor.getAxis(),
                       affine, types);
}

SmallVector<IteratorType> LayerNormOp::getLoopIteratorTypes() {
  return normalizedIteratorTypes(getInput().getType().getRank(), getAxis());
}

SmallVector<AffineMap> LayerNormOp::getIndexingMaps() {
  return normIndexingMaps(getContext(), getInput().getType().getRank(),
                          getAxis(), getBias() ? 2 : 1);
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  return inferNormType(loc, adaptor.getInput().getType(), adaptor.getAxis(),
                       {adaptor.getWeight().getType()}, types);
}

SmallVector<IteratorType> RmsNormOp::getLoopIteratorTypes() {
  return normalizedIteratorTypes(getInput().getType().getRank(), getAxis());
}

SmallVector<AffineMap> RmsNormOp::getIndexingMaps() {
  return normIndexingMaps(getContext(), getInput().getType().getRank(),
                          getAxis(), 1);
}

LogicalResult SoftmaxOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, SoftmaxGradOp::create(gb.b, gb.loc, getOutput(), gb.grad(),
                                      getAxisAttr()));
  return success();
}

LogicalResult LayerNormOp::buildGradient(GradientBuilder &gb) {
  auto grad =
      LayerNormGradOp::create(gb.b, gb.loc, getInput(), getWeight(), gb.grad(),
                              getAxisAttr(), getEpsilonAttr());
  for (unsigned i = 0; i < getNumOperands(); ++i)
    if (gb.wants(i))
      gb.setGrad(i, grad->getResult(i));
  return success();
}

LogicalResult RmsNormOp::buildGradient(GradientBuilder &gb) {
  auto grad = RmsNormGradOp::create(gb.b, gb.loc, getInput(), getWeight(),
                                    gb.grad(), getAxisAttr(), getEpsilonAttr());
  gb.setGrads(grad, {0, 1});
  return success();
}

//===----------------------------------------------------------------------===//
// ReshapeOp
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto input = getInput().getType(), output = getOutput().getType();
  if (input.getElementType() != output.getElementType())
    return emitOpError("changes the element type from ")
           << input.getElementType() << " to " << output.getElementType();
  if (input.getNumElements() != output.getNumElements())
    return emitOpError("cannot reshape ")
           << shapeString(input.getShape()) << " (" << input.getNumElements()
           << " elements) to " << shapeString(output.getShape()) << " ("
           << output.getNumElements() << " elements)";
  return success();
}

LogicalResult ReshapeOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, gb.reshape(gb.grad(), getInput().getType().getShape()));
  return success();
}

//===----------------------------------------------------------------------===//
// TransposeOp
//===----------------------------------------------------------------------===//

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto input = asTensor(adaptor.getInput().getType());
  ArrayRef<int64_t> perm = adaptor.getPermutation();
  if (static_cast<int64_t>(perm.size()) != input.getRank())
    return emitOptionalError(loc, "permutation has ", perm.size(),
                             " entries for a rank-", input.getRank(), " input");
  llvm::SmallSet<int64_t, 8> seen;
  SmallVector<int64_t> shape;
  for (int64_t dim : perm) {
    if (dim < 0 || dim >= input.getRank() || !seen.insert(dim).second)
      return emitOptionalError(
          loc, "permutation [", llvm::make_range(perm.begin(), perm.end()),
          "] is not a permutation of 0..", input.getRank() - 1);
    shape.push_back(input.getDimSize(dim));
  }
  types.push_back(input.clone(shape));
  return success();
}

SmallVector<IteratorType> TransposeOp::getLoopIteratorTypes() {
  return detail::elementwiseIteratorTypes(getOperation());
}

// Loops follow the output; input dim perm[i] is read by loop i.
SmallVector<AffineMap> TransposeOp::getIndexingMaps() {
  ArrayRef<int64_t> perm = getPermutation();
  SmallVector<AffineExpr> inputExprs(perm.size());
  for (auto [loop, dim] : llvm::enumerate(perm))
    inputExprs[dim] = getAffineDimExpr(loop, getContext());
  return {AffineMap::get(perm.size(), 0, inputExprs, getContext()),
          AffineMap::getMultiDimIdentityMap(perm.size(), getContext())};
}

LogicalResult TransposeOp::buildGradient(GradientBuilder &gb) {
  ArrayRef<int64_t> permutation = getPermutation();
  SmallVector<int64_t> inverse(permutation.size());
  for (auto [i, p] : llvm::enumerate(permutation))
    inverse[p] = static_cast<int64_t>(i);
  gb.setGrad(0, TransposeOp::create(gb.b, gb.loc, gb.grad(), inverse));
  return success();
}

//===----------------------------------------------------------------------===//
// ConcatOp
//===----------------------------------------------------------------------===//

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(loc, "needs at least one input");
  auto first = asTensor(inputs.front().getType());
  int64_t axis = adaptor.getAxis();
  if (failed(verifyAxis(loc, axis, first.getRank())))
    return failure();
  SmallVector<int64_t> shape(first.getShape());
  for (Value input : inputs.drop_front()) {
    auto type = asTensor(input.getType());
    if (type.getRank() != first.getRank())
      return emitOptionalError(loc, "inputs have different ranks");
    for (int64_t i = 0; i < type.getRank(); ++i) {
      if (i != axis && type.getDimSize(i) != shape[i])
        return emitOptionalError(
            loc, "input shapes ", shapeString(first.getShape()), " and ",
            shapeString(type.getShape()), " differ outside axis ", axis);
    }
    shape[axis] += type.getDimSize(axis);
  }
  types.push_back(first.clone(shape));
  return success();
}

// Each input's cotangent is its slice of the result's.
LogicalResult ConcatOp::buildGradient(GradientBuilder &gb) {
  int64_t axis = getAxis(), offset = 0;
  ArrayRef<int64_t> shape = getOutput().getType().getShape();
  for (auto [i, operand] : llvm::enumerate(getInputs())) {
    int64_t size = asTensor(operand.getType()).getDimSize(axis);
    if (gb.wants(i)) {
      SmallVector<int64_t> starts(shape.size(), 0), limits(shape);
      SmallVector<int64_t> strides(shape.size(), 1);
      starts[axis] = offset;
      limits[axis] = offset + size;
      gb.setGrad(
          i, SliceOp::create(gb.b, gb.loc, gb.grad(), starts, limits, strides));
    }
    offset += size;
  }
  return success();
}

//===----------------------------------------------------------------------===//
// SliceOp
//===----------------------------------------------------------------------===//

LogicalResult SliceOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto input = asTensor(adaptor.getInput().getType());
  ArrayRef<int64_t> starts = adaptor.getStarts(), limits = adaptor.getLimits(),
                    strides = adaptor.getStrides();
  int64_t rank = input.getRank();
  if (static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(limits.size()) != rank ||
      static_cast<int64_t>(strides.size()) != rank)
    return emitOptionalError(loc, "starts, limits and strides need ", rank,
                             " entries each");
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i) {
    if (strides[i] < 1)
      return emitOptionalError(loc, "stride ", strides[i], " of dim ", i,
                               " must be positive");
    if (starts[i] < 0 || starts[i] > limits[i] ||
        limits[i] > input.getDimSize(i))
      return emitOptionalError(loc, "range [", starts[i], ", ", limits[i],
                               ") of dim ", i, " is not within [0, ",
                               input.getDimSize(i), "]");
    shape.push_back(llvm::divideCeil(limits[i] - starts[i], strides[i]));
  }
  types.push_back(input.clone(shape));
  return success();
}

SmallVector<IteratorType> SliceOp::getLoopIteratorTypes() {
  return detail::elementwiseIteratorTypes(getOperation());
}

SmallVector<AffineMap> SliceOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  int64_t rank = getStarts().size();
  SmallVector<AffineExpr> inputExprs;
  for (int64_t i = 0; i < rank; ++i)
    inputExprs.push_back(getAffineDimExpr(i, ctx) * getStrides()[i] +
                         getStarts()[i]);
  return {AffineMap::get(rank, 0, inputExprs, ctx),
          AffineMap::getMultiDimIdentityMap(rank, ctx)};
}

LogicalResult SliceOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, SliceGradOp::create(gb.b, gb.loc, gb.grad(),
                                    getInput().getType().getShape(),
                                    getStarts(), getStrides()));
  return success();
}

// The bounds are global positions: a split dimension's become the local
// part's, which the partitioner only allows for whole-part slices.
LogicalResult SliceOp::localize(const LocalForm &form) {
  SmallVector<int64_t> starts(getStarts()), limits(getLimits());
  for (const LocalForm::Split &split : form.resultSplits) {
    int64_t d = split.dim;
    if (getStrides()[d] != 1)
      return form.global->emitOpError(
          "a strided slice of a split dimension is not supported");
    if (split.zigzag &&
        limits[d] - starts[d] != form.operandTypes[0].getDimSize(d))
      return form.global->emitOpError("a slice of the sequence split over \"")
             << split.axis << "\" (zigzag chunks) is not supported yet";
    int64_t length = (limits[d] - starts[d]) / split.parts;
    starts[d] /= split.parts;
    limits[d] = starts[d] + length;
  }
  setStarts(starts);
  setLimits(limits);
  return success();
}

//===----------------------------------------------------------------------===//
// EmbeddingOp
//===----------------------------------------------------------------------===//

LogicalResult EmbeddingOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto table = asTensor(adaptor.getTable().getType());
  auto ids = asTensor(adaptor.getIds().getType());
  if (table.getRank() != 2)
    return emitOptionalError(loc, "table must be [rows, dim], got rank ",
                             table.getRank());
  SmallVector<int64_t> shape(ids.getShape());
  shape.push_back(table.getDimSize(1));
  types.push_back(table.clone(shape));
  return success();
}

// Loops: the ids dims and the embedding dim (parallel), the table rows
// (reduction: the lookup is a one-hot contraction).
SmallVector<IteratorType> EmbeddingOp::getLoopIteratorTypes() {
  SmallVector<IteratorType> types(getIds().getType().getRank() + 1,
                                  IteratorType::parallel);
  types.push_back(IteratorType::reduction);
  return types;
}

SmallVector<AffineMap> EmbeddingOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  int64_t idsRank = getIds().getType().getRank(), numLoops = idsRank + 2;
  AffineExpr d = getAffineDimExpr(idsRank, ctx);
  AffineExpr row = getAffineDimExpr(idsRank + 1, ctx);
  SmallVector<AffineExpr> outputExprs = loopDims(ctx, 0, idsRank + 1);
  return {AffineMap::get(numLoops, 0, {row, d}, ctx),
          AffineMap::get(numLoops, 0, loopDims(ctx, 0, idsRank), ctx),
          AffineMap::get(numLoops, 0, outputExprs, ctx)};
}

LogicalResult EmbeddingOp::buildGradient(GradientBuilder &gb) {
  Value grad = gb.grad();
  if (std::optional<int64_t> padding = getPaddingIdx()) {
    // The padding row's lookups pass no gradient: their rows of the
    // cotangent are zeroed before the scatter-add.
    Value ids = getIds();
    SmallVector<int64_t> rowShape(getIds().getType().getShape());
    rowShape.push_back(1);
    Value isPadding = gb.reshape(
        gb.compare(ids, gb.scalar(ids, static_cast<double>(*padding)), "eq"),
        rowShape);
    grad = gb.select(isPadding, gb.scalar(grad, 0), grad);
  }
  gb.setGrad(0, EmbeddingGradOp::create(gb.b, gb.loc, grad, getIds(),
                                        getTable().getType().getDimSize(0)));
  return success();
}

//===----------------------------------------------------------------------===//
// GatherElementsOp
//===----------------------------------------------------------------------===//

/// Checks the shared shape rule of gather_elements and its gradient: `data`
/// (the forward's data shape) and `indices` agree off `axis`.
static LogicalResult verifyGatherElements(std::optional<Location> loc,
                                          ArrayRef<int64_t> data,
                                          ArrayRef<int64_t> indices,
                                          int64_t axis) {
  int64_t rank = indices.size();
  if (static_cast<int64_t>(data.size()) != rank)
    return emitOptionalError(loc, "data ", shapeString(data), " and indices ",
                             shapeString(indices), " differ in rank");
  if (failed(verifyAxis(loc, axis, rank)))
    return failure();
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis && data[d] != indices[d])
      return emitOptionalError(loc, "data ", shapeString(data), " and indices ",
                               shapeString(indices), " differ in dim ", d,
                               " (only the axis ", axis, " may differ)");
  return success();
}

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  auto data = asTensor(adaptor.getData().getType());
  auto indices = asTensor(adaptor.getIndices().getType());
  if (failed(verifyGatherElements(loc, data.getShape(), indices.getShape(),
                                  adaptor.getAxis())))
    return failure();
  types.push_back(data.clone(indices.getShape()));
  return success();
}

/// Loops of gather_elements and its gradient: the indices dims, then the
/// data's `axis` (a lookup reads the whole axis). Maps: the indices dims for
/// the indices-shaped values, the axis swapped for the last loop for the
/// data-shaped one.
static SmallVector<IteratorType> gatherElementsLoops(int64_t rank) {
  SmallVector<IteratorType> types(rank, IteratorType::parallel);
  types.push_back(IteratorType::reduction);
  return types;
}

static AffineMap gatherElementsDataMap(MLIRContext *ctx, int64_t rank,
                                       int64_t axis) {
  SmallVector<AffineExpr> exprs = loopDims(ctx, 0, rank);
  if (axis >= 0 && axis < rank)
    exprs[axis] = getAffineDimExpr(rank, ctx);
  return AffineMap::get(rank + 1, 0, exprs, ctx);
}

SmallVector<IteratorType> GatherElementsOp::getLoopIteratorTypes() {
  return gatherElementsLoops(getIndices().getType().getRank());
}

SmallVector<AffineMap> GatherElementsOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  int64_t rank = getIndices().getType().getRank();
  auto indices = AffineMap::get(rank + 1, 0, loopDims(ctx, 0, rank), ctx);
  return {gatherElementsDataMap(ctx, rank, getAxis()), indices, indices};
}

LogicalResult GatherElementsOp::buildGradient(GradientBuilder &gb) {
  if (!gb.wants(0))
    return success();
  int64_t axis = getAxis();
  gb.setGrad(0, GatherElementsGradOp::create(
                    gb.b, gb.loc, gb.grad(), getIndices(), axis,
                    getData().getType().getDimSize(axis)));
  return success();
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

/// The result type of attention over `q`, `k`, `v`, or failure.
static FailureOr<RankedTensorType>
attentionResultType(std::optional<Location> loc, Type query, Type key,
                    Type value) {
  auto q = asTensor(query), k = asTensor(key), v = asTensor(value);
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return emitOptionalError(
        loc, "query, key and value must be [batch, heads, seq, head_dim]");
  if (q.getElementType() != k.getElementType() ||
      q.getElementType() != v.getElementType())
    return emitOptionalError(loc, "query, key and value element types differ");
  int64_t heads = q.getDimSize(1), kvHeads = k.getDimSize(1);
  if (k.getDimSize(0) != q.getDimSize(0) || v.getDimSize(0) != q.getDimSize(0))
    return emitOptionalError(loc, "batch sizes differ");
  if (v.getDimSize(1) != kvHeads || v.getDimSize(2) != k.getDimSize(2))
    return emitOptionalError(loc, "key ", shapeString(k.getShape()),
                             " and value ", shapeString(v.getShape()),
                             " disagree on heads or sequence length");
  if (heads == 0 || kvHeads == 0 || heads % kvHeads != 0)
    return emitOptionalError(
        loc, "query heads (", heads,
        ") must be a positive multiple of key/value heads (", kvHeads, ")");
  if (k.getDimSize(3) != q.getDimSize(3))
    return emitOptionalError(loc, "query head dim ", q.getDimSize(3),
                             " differs from key head dim ", k.getDimSize(3));
  return q.clone({q.getDimSize(0), heads, q.getDimSize(2), v.getDimSize(3)});
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto type = attentionResultType(loc, adaptor.getQuery().getType(),
                                  adaptor.getKey().getType(),
                                  adaptor.getValue().getType());
  if (failed(type))
    return failure();
  types.push_back(*type);
  return success();
}

/// The scale attention and its gradient use: the attribute, else 1 /
/// sqrt(head dim) of the query.
static double attentionScale(std::optional<APFloat> scale,
                             RankedTensorType query) {
  if (scale)
    return scale->convertToDouble();
  return 1.0 / std::sqrt(static_cast<double>(query.getDimSize(3)));
}

/// Loops (b, h, s, e, t, d): batch, query heads, query positions and value
/// dims are parallel; key positions and the q.k dim are reductions.
static SmallVector<IteratorType> attentionLoops() {
  return {IteratorType::parallel,  IteratorType::parallel,
          IteratorType::parallel,  IteratorType::parallel,
          IteratorType::reduction, IteratorType::reduction};
}

/// The query (s) and key (t) positions among attentionLoops().
static constexpr int64_t kQueryPositionLoop = 2, kKeyPositionLoop = 4;

/// The maps of query, key, value and output over attentionLoops(); key and
/// value index the kv head h floordiv (query heads / kv heads).
static SmallVector<AffineMap, 4> attentionMaps(RankedTensorType query,
                                               RankedTensorType key) {
  MLIRContext *ctx = query.getContext();
  AffineExpr b, h, s, e, t, d;
  bindDims(ctx, b, h, s, e, t, d);
  AffineExpr kvHead = h.floorDiv(query.getDimSize(1) / key.getDimSize(1));
  return {AffineMap::get(6, 0, {b, h, s, d}, ctx),
          AffineMap::get(6, 0, {b, kvHead, t, d}, ctx),
          AffineMap::get(6, 0, {b, kvHead, t, e}, ctx),
          AffineMap::get(6, 0, {b, h, s, e}, ctx)};
}

double AttentionOp::getEffectiveScale() {
  return attentionScale(getScale(), getQuery().getType());
}

void AttentionOp::addComputedDefaults(NamedAttrList &attributes) {
  attributes.set(getScaleAttrName(),
                 Builder(getContext()).getF64FloatAttr(getEffectiveScale()));
}

SmallVector<IteratorType> AttentionOp::getLoopIteratorTypes() {
  return attentionLoops();
}

SmallVector<AffineMap> AttentionOp::getIndexingMaps() {
  return llvm::to_vector(
      attentionMaps(getQuery().getType(), getKey().getType()));
}

// dtc.attention_grad recomputes the probabilities inside its kernel.
LogicalResult AttentionOp::buildGradient(GradientBuilder &gb) {
  auto grad =
      AttentionGradOp::create(gb.b, gb.loc, getQuery(), getKey(), getValue(),
                              gb.grad(), getCausalAttr(), getScaleAttr());
  gb.setGrads(grad, {0, 1, 2});
  return success();
}

// The default scale reads the global head dim: written out before the
// local copy could read a split one.
LogicalResult AttentionOp::localize(const LocalForm &form) {
  if (!getScale())
    setScaleAttr(
        Builder(getContext())
            .getF64FloatAttr(
                llvm::cast<AttentionOp>(form.global).getEffectiveScale()));
  return success();
}

bool AttentionOp::isCausal() { return getCausal(); }
int64_t AttentionOp::getQueryPositionLoop() { return kQueryPositionLoop; }
int64_t AttentionOp::getKeyPositionLoop() { return kKeyPositionLoop; }

// The keys and values travel around the context ring.
SmallVector<unsigned> AttentionOp::getRingOperands() { return {1, 2}; }
SmallVector<unsigned> AttentionOp::getRingResults() { return {}; }

//===----------------------------------------------------------------------===//
// AttentionBlockOp, AttentionMergeOp, AttentionBlockGradOp: ring attention
//===----------------------------------------------------------------------===//

/// Shapes of one ring step: query [b, h, s, d], key [b, g, t, d], value
/// [b, g, t, e] with g dividing h; the output [b, h, s, e] and lse [b, h, s]
/// f32 when given (a block's results, or a gradient's operands).
static LogicalResult verifyRingStep(Operation *op, ArrayAttr axes,
                                    int64_t kvShift, bool zigzag, Type query,
                                    Type key, Type value, Type output,
                                    Type lse) {
  FailureOr<int64_t> n = groupSize(op, axes);
  if (failed(n))
    return failure();
  if (kvShift < 0 || kvShift >= *n)
    return op->emitOpError("kv_shift must be in [0, ")
           << *n << "), the group size, got " << kvShift;
  auto q = cast<RankedTensorType>(query), k = cast<RankedTensorType>(key),
       v = cast<RankedTensorType>(value);
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return op->emitOpError("query, key and value must have rank 4");
  int64_t b = q.getDimSize(0), h = q.getDimSize(1), s = q.getDimSize(2);
  if (k.getDimSize(0) != b || v.getDimSize(0) != b ||
      k.getDimSize(1) != v.getDimSize(1) || h % k.getDimSize(1) != 0 ||
      k.getDimSize(3) != q.getDimSize(3) || v.getDimSize(2) != k.getDimSize(2))
    return op->emitOpError("query ")
           << q << ", key " << k << " and value " << v << " are inconsistent";
  if (zigzag && (s % 2 || k.getDimSize(2) % 2))
    return op->emitOpError("zigzag chunks are two halves: the query and key "
                           "positions must be even, got ")
           << s << " and " << k.getDimSize(2);
  auto expectedOutput =
      RankedTensorType::get({b, h, s, v.getDimSize(3)}, q.getElementType());
  if (output != expectedOutput)
    return op->emitOpError("output must be ")
           << expectedOutput << ", got " << output;
  auto expectedLse =
      RankedTensorType::get({b, h, s}, Float32Type::get(op->getContext()));
  if (lse != expectedLse)
    return op->emitOpError("lse must be ") << expectedLse << ", got " << lse;
  return success();
}

LogicalResult AttentionBlockOp::verify() {
  return verifyRingStep(*this, getMeshAxes(), getKvShift(), getZigzag(),
                        getQuery().getType(), getKey().getType(),
                        getValue().getType(), getOutput().getType(),
                        getLse().getType());
}

LogicalResult AttentionBlockGradOp::verify() {
  if (failed(verifyRingStep(*this, getMeshAxes(), getKvShift(), getZigzag(),
                            getQuery().getType(), getKey().getType(),
                            getValue().getType(), getOutput().getType(),
                            getLse().getType())))
    return failure();
  if (getGrad().getType() != getOutput().getType())
    return emitOpError("grad must have the output's type ")
           << getOutput().getType();
  if (getQueryGrad().getType() != getQuery().getType() ||
      getKeyGrad().getType() != getKey().getType() ||
      getValueGrad().getType() != getValue().getType())
    return emitOpError("results must have the types of query, key and value");
  return success();
}

LogicalResult AttentionMergeOp::verify() {
  auto output = getOutputA().getType(), lse = getLseA().getType();
  if (getOutputB().getType() != output || getOutput().getType() != output ||
      getLseB().getType() != lse || getLse().getType() != lse)
    return emitOpError("both blocks and the result must have one output "
                       "type and one lse type");
  auto o = cast<RankedTensorType>(output);
  auto expectedLse = RankedTensorType::get(o.getShape().drop_back(),
                                           Float32Type::get(getContext()));
  if (o.getRank() < 1 || lse != expectedLse)
    return emitOpError("lse must be ") << expectedLse << ", got " << lse;
  return success();
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *ctx,
                                               std::optional<Location> loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  auto logits = asTensor(adaptor.getLogits().getType());
  auto labels = asTensor(adaptor.getLabels().getType());
  if (logits.getRank() < 1 ||
      labels.getShape() != logits.getShape().drop_back())
    return emitOptionalError(loc, "labels ", shapeString(labels.getShape()),
                             " must have the shape of logits ",
                             shapeString(logits.getShape()),
                             " without its last (vocabulary) dim");
  types.push_back(RankedTensorType::get({}, Float32Type::get(ctx)));
  return success();
}

// The loss is a mean over every position and a log-sum-exp over the
// vocabulary: every loop reduces into the scalar.
SmallVector<IteratorType> CrossEntropyOp::getLoopIteratorTypes() {
  return SmallVector<IteratorType>(getLogits().getType().getRank(),
                                   IteratorType::reduction);
}

SmallVector<AffineMap> CrossEntropyOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  int64_t rank = getLogits().getType().getRank();
  return {AffineMap::getMultiDimIdentityMap(rank, ctx),
          AffineMap::get(rank, 0, loopDims(ctx, 0, rank - 1), ctx),
          AffineMap::get(rank, 0, {}, ctx)};
}

// The loss is f32; the logits' cotangent has the logits' type.
LogicalResult CrossEntropyOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0,
             CrossEntropyGradOp::create(gb.b, gb.loc, getLogits(), getLabels(),
                                        gb.grad(), getIgnoreIndex()));
  return success();
}

//===----------------------------------------------------------------------===//
// CompareOp, SelectOp
//===----------------------------------------------------------------------===//

LogicalResult CompareOp::inferReturnTypes(MLIRContext *ctx,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  StringRef predicate = adaptor.getPredicate();
  if (!llvm::is_contained({"eq", "ne", "lt", "le", "gt", "ge"}, predicate))
    return emitOptionalError(loc, "predicate '", predicate,
                             "' is not one of eq, ne, lt, le, gt, ge");
  SmallVector<Type, 1> broadcast;
  if (failed(detail::inferBroadcastType(loc, adaptor.getLhs().getType(),
                                        adaptor.getRhs().getType(), broadcast)))
    return failure();
  types.push_back(asTensor(broadcast[0]).clone(IntegerType::get(ctx, 1)));
  return success();
}

SmallVector<IteratorType> CompareOp::getLoopIteratorTypes() {
  return detail::elementwiseIteratorTypes(getOperation());
}

SmallVector<AffineMap> CompareOp::getIndexingMaps() {
  return detail::elementwiseIndexingMaps(getOperation());
}

LogicalResult SelectOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  SmallVector<Type, 1> values;
  if (failed(detail::inferBroadcastType(loc, adaptor.getOnTrue().getType(),
                                        adaptor.getOnFalse().getType(),
                                        values)))
    return failure();
  auto valueType = asTensor(values[0]);
  ArrayRef<int64_t> cond = asTensor(adaptor.getCond().getType()).getShape();
  auto shape = broadcastShapes(cond, valueType.getShape());
  if (failed(shape))
    return emitOptionalError(loc, "condition shape ", shapeString(cond),
                             " does not broadcast with ",
                             shapeString(valueType.getShape()));
  types.push_back(valueType.clone(*shape));
  return success();
}

SmallVector<IteratorType> SelectOp::getLoopIteratorTypes() {
  return detail::elementwiseIteratorTypes(getOperation());
}

SmallVector<AffineMap> SelectOp::getIndexingMaps() {
  return detail::elementwiseIndexingMaps(getOperation());
}

// select(c, t, f): the cotangent goes to the chosen side.
LogicalResult SelectOp::buildGradient(GradientBuilder &gb) {
  Value c = getCond(), g = gb.grad();
  Value zero = gb.scalar(g, 0);
  if (gb.wants(1))
    gb.setGrad(1, gb.sumToType(gb.select(c, g, zero), getOnTrue().getType()));
  if (gb.wants(2))
    gb.setGrad(2, gb.sumToType(gb.select(c, zero, g), getOnFalse().getType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

/// Checks that a gradient operand has the type of the value it is the
/// gradient of.
static LogicalResult verifyGradType(std::optional<Location> loc, Type grad,
                                    Type expected, StringRef what) {
  if (grad != expected)
    return emitOptionalError(loc, "gradient type ", grad, " differs from the ",
                             what, " type ", expected);
  return success();
}

LogicalResult
mlir::dtc::detail::inferSameTypeGrad(std::optional<Location> loc, Type input,
                                     Type grad, SmallVectorImpl<Type> &types) {
  if (failed(verifyGradType(loc, grad, input, "input")))
    return failure();
  types.push_back(input);
  return success();
}

LogicalResult SoftmaxGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  Type output = adaptor.getOutput().getType();
  if (failed(verifyAxis(loc, adaptor.getAxis(), asTensor(output).getRank())) ||
      failed(verifyGradType(loc, adaptor.getGrad().getType(), output,
                            "softmax output")))
    return failure();
  types.push_back(output);
  return success();
}

SmallVector<IteratorType> SoftmaxGradOp::getLoopIteratorTypes() {
  int64_t rank = getOutput().getType().getRank(), axis = getAxis();
  SmallVector<IteratorType> types(rank, IteratorType::parallel);
  if (axis >= 0 && axis < rank)
    types[axis] = IteratorType::reduction;
  return types;
}

SmallVector<AffineMap> SoftmaxGradOp::getIndexingMaps() {
  auto map = AffineMap::getMultiDimIdentityMap(getOutput().getType().getRank(),
                                               getContext());
  return {map, map, map};
}

/// Loops of the norm gradients, as the forward norms; `weightValues` are
/// the positions (operands, then results) of the weight-shaped values.
static SmallVector<AffineMap> normGradIndexingMaps(Operation *op, int64_t axis,
                                                   ArrayRef<int> weightValues) {
  MLIRContext *ctx = op->getContext();
  int64_t rank = asTensor(op->getOperand(0).getType()).getRank();
  auto identity = AffineMap::getMultiDimIdentityMap(rank, ctx);
  auto trailing =
      AffineMap::get(rank, 0, loopDims(ctx, axis, rank - axis), ctx);
  SmallVector<AffineMap> maps(op->getNumOperands() + op->getNumResults(),
                              identity);
  for (int i : weightValues)
    maps[i] = trailing;
  return maps;
}

LogicalResult LayerNormGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  Type input = adaptor.getInput().getType(),
       weight = adaptor.getWeight().getType();
  if (failed(inferNormType(loc, input, adaptor.getAxis(), {weight}, types)) ||
      failed(verifyGradType(loc, adaptor.getGrad().getType(), input, "input")))
    return failure();
  types.append({weight, weight});
  return success();
}

SmallVector<IteratorType> LayerNormGradOp::getLoopIteratorTypes() {
  return normalizedIteratorTypes(getInput().getType().getRank(), getAxis());
}

// Operands (input, weight, grad), results (dx, dweight, dbias).
SmallVector<AffineMap> LayerNormGradOp::getIndexingMaps() {
  return normGradIndexingMaps(getOperation(), getAxis(), {1, 4, 5});
}

LogicalResult RmsNormGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  Type input = adaptor.getInput().getType(),
       weight = adaptor.getWeight().getType();
  if (failed(inferNormType(loc, input, adaptor.getAxis(), {weight}, types)) ||
      failed(verifyGradType(loc, adaptor.getGrad().getType(), input, "input")))
    return failure();
  types.push_back(weight);
  return success();
}

SmallVector<IteratorType> RmsNormGradOp::getLoopIteratorTypes() {
  return normalizedIteratorTypes(getInput().getType().getRank(), getAxis());
}

// Operands (input, weight, grad), results (dx, dweight).
SmallVector<AffineMap> RmsNormGradOp::getIndexingMaps() {
  return normGradIndexingMaps(getOperation(), getAxis(), {1, 4});
}

LogicalResult AttentionGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  Type q = adaptor.getQuery().getType(), k = adaptor.getKey().getType(),
       v = adaptor.getValue().getType();
  auto output = attentionResultType(loc, q, k, v);
  if (failed(output) || failed(verifyGradType(loc, adaptor.getGrad().getType(),
                                              *output, "attention output")))
    return failure();
  types.append({q, k, v});
  return success();
}

double AttentionGradOp::getEffectiveScale() {
  return attentionScale(getScale(), getQuery().getType());
}

void AttentionGradOp::addComputedDefaults(NamedAttrList &attributes) {
  attributes.set(getScaleAttrName(),
                 Builder(getContext()).getF64FloatAttr(getEffectiveScale()));
}

// Loops (b, h, s, e, t, d) as dtc.attention; the key and value gradients
// index the kv head like the key and value.
SmallVector<IteratorType> AttentionGradOp::getLoopIteratorTypes() {
  return attentionLoops();
}

// Operands query, key, value, d output; results d query, d key, d value.
SmallVector<AffineMap> AttentionGradOp::getIndexingMaps() {
  SmallVector<AffineMap, 4> maps =
      attentionMaps(getQuery().getType(), getKey().getType());
  return {maps[0], maps[1], maps[2], maps[3], maps[0], maps[1], maps[2]};
}

bool AttentionGradOp::isCausal() { return getCausal(); }
int64_t AttentionGradOp::getQueryPositionLoop() { return kQueryPositionLoop; }
int64_t AttentionGradOp::getKeyPositionLoop() { return kKeyPositionLoop; }

// The keys and values travel around the context ring, and their gradients
// come back to the ranks that hold them.
SmallVector<unsigned> AttentionGradOp::getRingOperands() { return {1, 2}; }
SmallVector<unsigned> AttentionGradOp::getRingResults() { return {1, 2}; }

LogicalResult EmbeddingGradOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  auto grad = asTensor(adaptor.getGrad().getType());
  auto ids = asTensor(adaptor.getIds().getType());
  if (grad.getRank() != ids.getRank() + 1 ||
      grad.getShape().drop_back() != ids.getShape())
    return emitOptionalError(loc, "gradient ", shapeString(grad.getShape()),
                             " must be the ids' shape ",
                             shapeString(ids.getShape()),
                             " plus the embedding dim");
  int64_t rows = adaptor.getNumRows();
  if (rows < 1)
    return emitOptionalError(loc, "num_rows must be positive, got ", rows);
  types.push_back(grad.clone({rows, grad.getShape().back()}));
  return success();
}

// Loops (ids dims..., d, row): the lookup's one-hot contraction transposed;
// the ids dims are summed into each row.
SmallVector<IteratorType> EmbeddingGradOp::getLoopIteratorTypes() {
  SmallVector<IteratorType> types(getIds().getType().getRank(),
                                  IteratorType::reduction);
  types.append(2, IteratorType::parallel);
  return types;
}

SmallVector<AffineMap> EmbeddingGradOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  int64_t idsRank = getIds().getType().getRank(), numLoops = idsRank + 2;
  AffineExpr d = getAffineDimExpr(idsRank, ctx);
  AffineExpr row = getAffineDimExpr(idsRank + 1, ctx);
  return {AffineMap::get(numLoops, 0, loopDims(ctx, 0, idsRank + 1), ctx),
          AffineMap::get(numLoops, 0, loopDims(ctx, 0, idsRank), ctx),
          AffineMap::get(numLoops, 0, {row, d}, ctx)};
}

LogicalResult GatherElementsGradOp::inferReturnTypes(
    MLIRContext *, std::optional<Location> loc, Adaptor adaptor,
    SmallVectorImpl<Type> &types) {
  auto grad = asTensor(adaptor.getGrad().getType());
  auto indices = asTensor(adaptor.getIndices().getType());
  if (grad.getShape() != indices.getShape())
    return emitOptionalError(loc, "gradient ", shapeString(grad.getShape()),
                             " must have the indices' shape ",
                             shapeString(indices.getShape()));
  int64_t axis = adaptor.getAxis(), size = adaptor.getDimSize();
  if (failed(verifyAxis(loc, axis, indices.getRank())))
    return failure();
  if (size < 1)
    return emitOptionalError(loc, "dim_size must be positive, got ", size);
  SmallVector<int64_t> shape(indices.getShape());
  shape[axis] = size;
  types.push_back(grad.clone(shape));
  return success();
}

SmallVector<IteratorType> GatherElementsGradOp::getLoopIteratorTypes() {
  SmallVector<IteratorType> types =
      gatherElementsLoops(getIndices().getType().getRank());
  int64_t axis = getAxis();
  if (axis >= 0 && axis < static_cast<int64_t>(types.size()) - 1)
    types[axis] = IteratorType::reduction;
  return types;
}

SmallVector<AffineMap> GatherElementsGradOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  int64_t rank = getIndices().getType().getRank();
  auto indices = AffineMap::get(rank + 1, 0, loopDims(ctx, 0, rank), ctx);
  return {indices, indices, gatherElementsDataMap(ctx, rank, getAxis())};
}

// Elements of a split of the indices' axis land anywhere along the result's
// axis: each part scatters into zeros, so the parts sum.
bool GatherElementsGradOp::isSumReductionLoop(int64_t loop) {
  return loop == static_cast<int64_t>(getAxis());
}

LogicalResult
CrossEntropyGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                     Adaptor adaptor,
                                     SmallVectorImpl<Type> &types) {
  auto logits = asTensor(adaptor.getLogits().getType());
  auto labels = asTensor(adaptor.getLabels().getType());
  if (logits.getRank() < 1 ||
      labels.getShape() != logits.getShape().drop_back())
    return emitOptionalError(loc, "labels ", shapeString(labels.getShape()),
                             " must have the shape of logits ",
                             shapeString(logits.getShape()),
                             " without its last (vocabulary) dim");
  types.push_back(logits);
  return success();
}

// Positions are parallel; the vocabulary is a softmax's reduction.
SmallVector<IteratorType> CrossEntropyGradOp::getLoopIteratorTypes() {
  int64_t rank = getLogits().getType().getRank();
  SmallVector<IteratorType> types(rank - 1, IteratorType::parallel);
  types.push_back(IteratorType::reduction);
  return types;
}

SmallVector<AffineMap> CrossEntropyGradOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  int64_t rank = getLogits().getType().getRank();
  auto identity = AffineMap::getMultiDimIdentityMap(rank, ctx);
  return {identity, AffineMap::get(rank, 0, loopDims(ctx, 0, rank - 1), ctx),
          AffineMap::get(rank, 0, {}, ctx), identity};
}

LogicalResult SliceGradOp::inferReturnTypes(MLIRContext *,
                                            std::optional<Location> loc,
                                            Adaptor adaptor,
                                            SmallVectorImpl<Type> &types) {
  auto grad = asTensor(adaptor.getGrad().getType());
  ArrayRef<int64_t> inputShape = adaptor.getInputShape(),
                    starts = adaptor.getStarts(),
                    strides = adaptor.getStrides();
  int64_t rank = grad.getRank();
  if (static_cast<int64_t>(inputShape.size()) != rank ||
      static_cast<int64_t>(starts.size()) != rank ||
      static_cast<int64_t>(strides.size()) != rank)
    return emitOptionalError(loc, "input_shape, starts and strides need ", rank,
                             " entries each");
  for (int64_t i = 0; i < rank; ++i) {
    if (strides[i] < 1)
      return emitOptionalError(loc, "stride ", strides[i], " of dim ", i,
                               " must be positive");
    int64_t extent = grad.getDimSize(i);
    int64_t last = extent ? starts[i] + (extent - 1) * strides[i] : starts[i];
    if (inputShape[i] < 0 || starts[i] < 0 ||
        (extent ? last >= inputShape[i] : starts[i] > inputShape[i]))
      return emitOptionalError(loc, "dim ", i, ": ", extent, " elements from ",
                               starts[i], " by ", strides[i], " do not fit in ",
                               inputShape[i]);
  }
  types.push_back(grad.clone(inputShape));
  return success();
}

SmallVector<IteratorType> SliceGradOp::getLoopIteratorTypes() {
  return SmallVector<IteratorType>(getGrad().getType().getRank(),
                                   IteratorType::parallel);
}

// Loops over the slice, as dtc.slice; the result is the slice's input.
SmallVector<AffineMap> SliceGradOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  int64_t rank = getStarts().size();
  SmallVector<AffineExpr> inputExprs;
  for (int64_t i = 0; i < rank; ++i)
    inputExprs.push_back(getAffineDimExpr(i, ctx) * getStrides()[i] +
                         getStarts()[i]);
  return {AffineMap::getMultiDimIdentityMap(rank, ctx),
          AffineMap::get(rank, 0, inputExprs, ctx)};
}

/// Checks that `grad` has the type of conv's result for `input` and
/// `weight` shapes.
static LogicalResult
verifyConvGrad(std::optional<Location> loc, RankedTensorType grad,
               ArrayRef<int64_t> input, ArrayRef<int64_t> weight,
               ArrayRef<int64_t> strides, ArrayRef<int64_t> dilations,
               ArrayRef<int64_t> pads, int64_t groups) {
  if (llvm::any_of(input, [](int64_t d) { return d < 0; }) ||
      llvm::any_of(weight, [](int64_t d) { return d < 0; }))
    return emitOptionalError(loc, "shapes must be non-negative");
  auto shape =
      convResultShape(loc, input, weight, strides, dilations, pads, groups);
  if (failed(shape))
    return failure();
  if (grad.getShape() != ArrayRef<int64_t>(*shape))
    return emitOptionalError(loc, "gradient ", shapeString(grad.getShape()),
                             " differs from the conv result ",
                             shapeString(*shape));
  return success();
}

LogicalResult ConvGradInputOp::inferReturnTypes(MLIRContext *,
                                                std::optional<Location> loc,
                                                Adaptor adaptor,
                                                SmallVectorImpl<Type> &types) {
  auto grad = asTensor(adaptor.getGrad().getType());
  auto weight = asTensor(adaptor.getWeight().getType());
  if (grad.getElementType() != weight.getElementType())
    return emitOptionalError(
        loc, "operand element types differ: ", grad.getElementType(), " vs ",
        weight.getElementType());
  if (failed(verifyConvGrad(loc, grad, adaptor.getInputShape(),
                            weight.getShape(), adaptor.getStrides(),
                            adaptor.getDilations(), adaptor.getPads(),
                            adaptor.getGroups())))
    return failure();
  types.push_back(grad.clone(adaptor.getInputShape()));
  return success();
}

// Loops (n, f, o1..ok, c', k1..kk) as dtc.conv: the output channels and the
// kernel window sum into each input position.
SmallVector<IteratorType> ConvGradInputOp::getLoopIteratorTypes() {
  int64_t k = getGrad().getType().getRank() - 2;
  SmallVector<IteratorType> types = convIteratorTypes(k);
  types[1] = IteratorType::reduction;
  types[2 + k] = IteratorType::parallel;
  return types;
}

SmallVector<AffineMap> ConvGradInputOp::getIndexingMaps() {
  ConvMaps maps =
      convIndexingMaps(getContext(), getWeight().getType().getShape(),
                       getStrides(), getDilations(), getGroups());
  return {maps.output, maps.weight, maps.input};
}

LogicalResult ConvGradWeightOp::inferReturnTypes(MLIRContext *,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  auto input = asTensor(adaptor.getInput().getType());
  auto grad = asTensor(adaptor.getGrad().getType());
  if (grad.getElementType() != input.getElementType())
    return emitOptionalError(
        loc, "operand element types differ: ", input.getElementType(), " vs ",
        grad.getElementType());
  if (failed(verifyConvGrad(loc, grad, input.getShape(),
                            adaptor.getWeightShape(), adaptor.getStrides(),
                            adaptor.getDilations(), adaptor.getPads(),
                            adaptor.getGroups())))
    return failure();
  types.push_back(grad.clone(adaptor.getWeightShape()));
  return success();
}

// Loops (n, f, o1..ok, c', k1..kk) as dtc.conv: batch and output positions
// sum into each weight element.
SmallVector<IteratorType> ConvGradWeightOp::getLoopIteratorTypes() {
  int64_t k = getGrad().getType().getRank() - 2;
  SmallVector<IteratorType> types(2 * k + 3, IteratorType::parallel);
  types[0] = IteratorType::reduction;
  for (int64_t i = 0; i < k; ++i)
    types[2 + i] = IteratorType::reduction;
  return types;
}

SmallVector<AffineMap> ConvGradWeightOp::getIndexingMaps() {
  ConvMaps maps = convIndexingMaps(getContext(), getWeightShape(), getStrides(),
                                   getDilations(), getGroups());
  return {maps.input, maps.output, maps.weight};
}

LogicalResult MaxPoolGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  Type input = adaptor.getInput().getType();
  SmallVector<Type, 1> pooled;
  if (failed(detail::inferPoolType(loc, input, adaptor.getKernelShape(),
                                   adaptor.getStrides(), adaptor.getDilations(),
                                   adaptor.getPads(), pooled)) ||
      failed(verifyGradType(loc, adaptor.getGrad().getType(), pooled[0],
                            "pooled result")))
    return failure();
  types.push_back(input);
  return success();
}

SmallVector<IteratorType> MaxPoolGradOp::getLoopIteratorTypes() {
  return detail::poolIteratorTypes(getKernelShape().size());
}

// Operands (input, grad), result dx indexed like the input.
SmallVector<AffineMap> MaxPoolGradOp::getIndexingMaps() {
  SmallVector<AffineMap> maps =
      detail::poolIndexingMaps(getContext(), getStrides(), getDilations());
  return {maps[0], maps[1], maps[0]};
}

LogicalResult AvgPoolGradOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  auto grad = asTensor(adaptor.getGrad().getType());
  ArrayRef<int64_t> inputShape = adaptor.getInputShape();
  if (llvm::any_of(inputShape, [](int64_t d) { return d < 0; }))
    return emitOptionalError(loc, "input_shape ", shapeString(inputShape),
                             " must be non-negative");
  auto input = grad.clone(inputShape);
  SmallVector<Type, 1> pooled;
  if (failed(detail::inferPoolType(loc, input, adaptor.getKernelShape(),
                                   adaptor.getStrides(), adaptor.getDilations(),
                                   adaptor.getPads(), pooled)) ||
      failed(verifyGradType(loc, grad, pooled[0], "pooled result")))
    return failure();
  types.push_back(input);
  return success();
}

SmallVector<IteratorType> AvgPoolGradOp::getLoopIteratorTypes() {
  return detail::poolIteratorTypes(getKernelShape().size());
}

// Operand grad, result dx indexed like the input.
SmallVector<AffineMap> AvgPoolGradOp::getIndexingMaps() {
  SmallVector<AffineMap> maps =
      detail::poolIndexingMaps(getContext(), getStrides(), getDilations());
  return {maps[1], maps[0]};
}

//===----------------------------------------------------------------------===//
// Gradient ops' local forms: the shape attributes describe the result
//===----------------------------------------------------------------------===//

static ArrayRef<int64_t> resultShape(Operation *op) {
  return asTensor(op->getResult(0).getType()).getShape();
}

LogicalResult SliceGradOp::localize(const LocalForm &form) {
  SmallVector<int64_t> starts(getStarts());
  for (const LocalForm::Split &split : form.resultSplits) {
    if (getStrides()[split.dim] != 1)
      return form.global->emitOpError(
          "a strided slice of a split dimension is not supported");
    starts[split.dim] /= split.parts;
  }
  setStarts(starts);
  setInputShape(resultShape(*this));
  return success();
}

LogicalResult ConvGradInputOp::localize(const LocalForm &) {
  setInputShape(resultShape(*this));
  return success();
}

LogicalResult ConvGradWeightOp::localize(const LocalForm &) {
  setWeightShape(resultShape(*this));
  return success();
}

LogicalResult AvgPoolGradOp::localize(const LocalForm &) {
  setInputShape(resultShape(*this));
  return success();
}

//===----------------------------------------------------------------------===//
// AdamWOp
//===----------------------------------------------------------------------===//

LogicalResult AdamWOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto param = asTensor(adaptor.getParam().getType());
  for (Value value :
       {adaptor.getGrad(), adaptor.getExpAvg(), adaptor.getExpAvgSq()}) {
    auto type = asTensor(value.getType());
    if (type.getShape() != param.getShape())
      return emitOptionalError(loc,
                               "gradient and moments must have the "
                               "parameter's shape ",
                               shapeString(param.getShape()), ", got ",
                               shapeString(type.getShape()));
  }
  types.append(
      {param, adaptor.getExpAvg().getType(), adaptor.getExpAvgSq().getType()});
  return success();
}

SmallVector<IteratorType> AdamWOp::getLoopIteratorTypes() {
  return SmallVector<IteratorType>(getParam().getType().getRank(),
                                   IteratorType::parallel);
}

// Parameter, gradient and moments follow the loops; the scalars are
// read by every loop.
SmallVector<AffineMap> AdamWOp::getIndexingMaps() {
  MLIRContext *ctx = getContext();
  int64_t rank = getParam().getType().getRank();
  auto identity = AffineMap::getMultiDimIdentityMap(rank, ctx);
  auto scalar = AffineMap::get(rank, 0, {}, ctx);
  return {identity, identity, identity, identity, scalar,
          scalar,   scalar,   identity, identity, identity};
}

// The new parameter and moments over the old ones (param, exp_avg,
// exp_avg_sq): the kernel reads each element's state before writing it.
SmallVector<std::pair<unsigned, unsigned>> AdamWOp::getInPlaceOperands() {
  return {{0, 0}, {1, 2}, {2, 3}};
}

#include "dialects/dtc/DtcInterfaces.cpp.inc"

#define GET_OP_CLASSES
#include "dialects/dtc/DtcOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Which loop splits leave partial sums (ShardingRuleOpInterface)
//===----------------------------------------------------------------------===//

bool CrossEntropyOp::isSumReductionLoop(int64_t loop) {
  return !isVocabParallelLoop(loop);
}

bool CrossEntropyOp::isVocabParallelLoop(int64_t loop) {
  return loop == static_cast<int64_t>(getLoopIteratorTypes().size()) - 1;
}

bool CrossEntropyGradOp::isVocabParallelLoop(int64_t loop) {
  return loop == static_cast<int64_t>(getLoopIteratorTypes().size()) - 1;
}

bool CrossEntropyOp::isMeanLoop(int64_t loop) {
  return !isVocabParallelLoop(loop);
}

bool CrossEntropyGradOp::isMeanLoop(int64_t loop) {
  return !isVocabParallelLoop(loop);
}
