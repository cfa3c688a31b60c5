//===- DtcMoeOps.cpp - shape, sharding and gradient rules of the MoE ops -===//
//
// The mixture-of-experts ops (DtcOps.td, docs/moe.md) share one loop nest,
// (b, s, e, c, h): batch, token positions, experts, capacity slots, hidden.
// Slots address positions globally, so the position loop never splits;
// everything else follows from which values index which loops.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"

#include "dialects/dtc/DtcGradient.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::dtc;
using mlir::utils::IteratorType;

namespace {

RankedTensorType tensorOf(Type type) { return cast<RankedTensorType>(type); }

std::string shapeText(ArrayRef<int64_t> shape) {
  std::string s = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? ", " : "") + std::to_string(d);
  return s + "]";
}

/// Checks `slots [b, E, C]` against a batch and expert count.
LogicalResult verifySlots(std::optional<Location> loc, Type slotsType,
                          int64_t batch, int64_t experts) {
  auto slots = tensorOf(slotsType);
  if (slots.getRank() != 3 || slots.getDimSize(0) != batch ||
      slots.getDimSize(1) != experts)
    return emitOptionalError(loc, "slots ", shapeText(slots.getShape()),
                             " must be [batch ", batch, ", experts ", experts,
                             ", capacity]");
  return success();
}

/// The loop nest (b, s, e, c, h) with the given maps.
SmallVector<AffineMap> moeMaps(MLIRContext *ctx,
                               ArrayRef<SmallVector<AffineExpr>> values) {
  SmallVector<AffineMap> maps;
  for (const auto &exprs : values)
    maps.push_back(AffineMap::get(5, 0, exprs, ctx));
  return maps;
}

struct MoeLoops {
  AffineExpr b, s, e, c, h;
  explicit MoeLoops(MLIRContext *ctx) { bindDims(ctx, b, s, e, c, h); }
};

// Positions are a reduction that never splits (slots address them
// globally); e and c are sum reductions where no result indexes them.
SmallVector<IteratorType> moeIterators(bool expertsReduce) {
  IteratorType ec =
      expertsReduce ? IteratorType::reduction : IteratorType::parallel;
  return {IteratorType::parallel, IteratorType::reduction, ec, ec,
          IteratorType::parallel};
}

LogicalResult verifyRouteAttrs(std::optional<Location> loc, int64_t topK,
                               int64_t capacity, StringRef score,
                               int64_t experts, int64_t positions) {
  if (topK < 1 || topK > experts)
    return emitOptionalError(loc, "top_k ", topK, " must be in [1, ", experts,
                             "]");
  if (capacity < 1 || capacity > positions)
    return emitOptionalError(loc, "capacity ", capacity, " must be in [1, ",
                             positions, "] (one slot per position at most)");
  if (score != "softmax" && score != "sigmoid")
    return emitOptionalError(loc,
                             "score must be \"softmax\" or \"sigmoid\", "
                             "got \"",
                             score, "\"");
  return success();
}

} // namespace

//===----------------------------------------------------------------------===//
// MoeRouteOp
//===----------------------------------------------------------------------===//

LogicalResult MoeRouteOp::inferReturnTypes(MLIRContext *ctx,
                                           std::optional<Location> loc,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  auto logits = tensorOf(adaptor.getLogits().getType());
  if (logits.getRank() != 3)
    return emitOptionalError(loc,
                             "router logits must be [batch, seq, "
                             "experts], got ",
                             shapeText(logits.getShape()));
  int64_t b = logits.getDimSize(0), e = logits.getDimSize(2);
  if (failed(verifyRouteAttrs(loc, adaptor.getTopK(), adaptor.getCapacity(),
                              adaptor.getScore(), e, logits.getDimSize(1))))
    return failure();
  types.push_back(logits);
  int64_t capacity = adaptor.getCapacity();
  types.push_back(
      RankedTensorType::get({b, e, capacity}, IntegerType::get(ctx, 64)));
  types.push_back(RankedTensorType::get({b}, logits.getElementType()));
  return success();
}

// Only the batch splits: the choice reads every expert's score, and the
// slots and the auxiliary loss read every position. (h is unused.)
static SmallVector<IteratorType> routeIterators() {
  return {IteratorType::parallel, IteratorType::reduction,
          IteratorType::reduction, IteratorType::reduction,
          IteratorType::parallel};
}

SmallVector<IteratorType> MoeRouteOp::getLoopIteratorTypes() {
  return routeIterators();
}

SmallVector<AffineMap> MoeRouteOp::getIndexingMaps() {
  MoeLoops l(getContext());
  return moeMaps(getContext(),
                 {{l.b, l.s, l.e}, {l.b, l.s, l.e}, {l.b, l.e, l.c}, {l.b}});
}

LogicalResult MoeRouteGradOp::inferReturnTypes(MLIRContext *,
                                               std::optional<Location> loc,
                                               Adaptor adaptor,
                                               SmallVectorImpl<Type> &types) {
  auto logits = tensorOf(adaptor.getLogits().getType());
  if (logits.getRank() != 3)
    return emitOptionalError(loc, "router logits must be [batch, seq, "
                                  "experts]");
  if (failed(verifyRouteAttrs(loc, adaptor.getTopK(), adaptor.getCapacity(),
                              adaptor.getScore(), logits.getDimSize(2),
                              logits.getDimSize(1))))
    return failure();
  if (adaptor.getGatesGrad().getType() != logits)
    return emitOptionalError(loc,
                             "gates gradient type differs from the "
                             "logits type ",
                             logits);
  auto aux = tensorOf(adaptor.getAuxGrad().getType());
  if (aux.getRank() != 1 || aux.getDimSize(0) != logits.getDimSize(0))
    return emitOptionalError(loc, "aux gradient must be [batch]");
  types.push_back(logits);
  return success();
}

SmallVector<IteratorType> MoeRouteGradOp::getLoopIteratorTypes() {
  return routeIterators();
}

SmallVector<AffineMap> MoeRouteGradOp::getIndexingMaps() {
  MoeLoops l(getContext());
  return moeMaps(getContext(),
                 {{l.b, l.s, l.e}, {l.b, l.s, l.e}, {l.b}, {l.b, l.s, l.e}});
}

// Gates and aux loss -> logits. A result nothing reads back from the loss
// has a zero cotangent; slots are integers (no cotangent).
LogicalResult MoeRouteOp::buildGradient(GradientBuilder &gb) {
  Value gates = gb.grad(0) ? gb.grad(0) : gb.splat(getGates().getType(), 0);
  Value aux = gb.grad(2) ? gb.grad(2) : gb.splat(getAux().getType(), 0);
  gb.setGrad(0, MoeRouteGradOp::create(gb.b, gb.loc, getLogits(), gates, aux,
                                       getTopK(), getCapacity(), getScore(),
                                       getNormalize()));
  return success();
}

//===----------------------------------------------------------------------===//
// MoeDispatchOp, MoeDispatchGradOp
//===----------------------------------------------------------------------===//

LogicalResult MoeDispatchOp::inferReturnTypes(MLIRContext *,
                                              std::optional<Location> loc,
                                              Adaptor adaptor,
                                              SmallVectorImpl<Type> &types) {
  auto input = tensorOf(adaptor.getInput().getType());
  auto slots = tensorOf(adaptor.getSlots().getType());
  if (input.getRank() != 3)
    return emitOptionalError(loc, "input must be [batch, seq, hidden]");
  if (slots.getRank() != 3 ||
      failed(verifySlots(loc, slots, input.getDimSize(0), slots.getDimSize(1))))
    return failure();
  types.push_back(input.clone({input.getDimSize(0), slots.getDimSize(1),
                               slots.getDimSize(2), input.getDimSize(2)}));
  return success();
}

SmallVector<IteratorType> MoeDispatchOp::getLoopIteratorTypes() {
  return moeIterators(/*expertsReduce=*/false);
}

SmallVector<AffineMap> MoeDispatchOp::getIndexingMaps() {
  MoeLoops l(getContext());
  return moeMaps(getContext(),
                 {{l.b, l.s, l.h}, {l.b, l.e, l.c}, {l.b, l.e, l.c, l.h}});
}

LogicalResult
MoeDispatchGradOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                    Adaptor adaptor,
                                    SmallVectorImpl<Type> &types) {
  auto grad = tensorOf(adaptor.getGrad().getType());
  if (grad.getRank() != 4)
    return emitOptionalError(loc, "gradient must be [batch, experts, "
                                  "capacity, hidden]");
  if (failed(verifySlots(loc, adaptor.getSlots().getType(), grad.getDimSize(0),
                         grad.getDimSize(1))))
    return failure();
  int64_t seqLen = adaptor.getSeqLen();
  if (seqLen < 1)
    return emitOptionalError(loc, "seq_len must be positive");
  types.push_back(grad.clone({grad.getDimSize(0), seqLen, grad.getDimSize(3)}));
  return success();
}

SmallVector<IteratorType> MoeDispatchGradOp::getLoopIteratorTypes() {
  return moeIterators(/*expertsReduce=*/true);
}

SmallVector<AffineMap> MoeDispatchGradOp::getIndexingMaps() {
  MoeLoops l(getContext());
  return moeMaps(getContext(),
                 {{l.b, l.e, l.c, l.h}, {l.b, l.e, l.c}, {l.b, l.s, l.h}});
}

LogicalResult MoeDispatchOp::buildGradient(GradientBuilder &gb) {
  gb.setGrad(0, MoeDispatchGradOp::create(gb.b, gb.loc, gb.grad(), getSlots(),
                                          getInput().getType().getDimSize(1)));
  return success();
}

//===----------------------------------------------------------------------===//
// MoeCombineOp, MoeCombineGradOp
//===----------------------------------------------------------------------===//

static LogicalResult verifyCombineOperands(std::optional<Location> loc,
                                           Type expertsType, Type slotsType,
                                           Type gatesType) {
  auto experts = tensorOf(expertsType);
  auto gates = tensorOf(gatesType);
  if (experts.getRank() != 4)
    return emitOptionalError(loc, "experts must be [batch, experts, capacity, "
                                  "hidden]");
  int64_t b = experts.getDimSize(0), e = experts.getDimSize(1);
  if (failed(verifySlots(loc, slotsType, b, e)))
    return failure();
  if (tensorOf(slotsType).getDimSize(2) != experts.getDimSize(2))
    return emitOptionalError(loc, "slots and experts disagree on capacity");
  if (gates.getRank() != 3 || gates.getDimSize(0) != b ||
      gates.getDimSize(2) != e)
    return emitOptionalError(loc, "gates ", shapeText(gates.getShape()),
                             " must be [batch ", b, ", seq, experts ", e, "]");
  if (gates.getElementType() != experts.getElementType())
    return emitOptionalError(loc, "gates and experts element types differ");
  return success();
}

LogicalResult MoeCombineOp::inferReturnTypes(MLIRContext *,
                                             std::optional<Location> loc,
                                             Adaptor adaptor,
                                             SmallVectorImpl<Type> &types) {
  if (failed(verifyCombineOperands(loc, adaptor.getExperts().getType(),
                                   adaptor.getSlots().getType(),
                                   adaptor.getGates().getType())))
    return failure();
  auto experts = tensorOf(adaptor.getExperts().getType());
  auto gates = tensorOf(adaptor.getGates().getType());
  types.push_back(experts.clone(
      {experts.getDimSize(0), gates.getDimSize(1), experts.getDimSize(3)}));
  return success();
}

SmallVector<IteratorType> MoeCombineOp::getLoopIteratorTypes() {
  return moeIterators(/*expertsReduce=*/true);
}

SmallVector<AffineMap> MoeCombineOp::getIndexingMaps() {
  MoeLoops l(getContext());
  return moeMaps(getContext(), {{l.b, l.e, l.c, l.h},
                                {l.b, l.e, l.c},
                                {l.b, l.s, l.e},
                                {l.b, l.s, l.h}});
}

LogicalResult MoeCombineGradOp::inferReturnTypes(MLIRContext *,
                                                 std::optional<Location> loc,
                                                 Adaptor adaptor,
                                                 SmallVectorImpl<Type> &types) {
  Type experts = adaptor.getExperts().getType();
  Type gates = adaptor.getGates().getType();
  if (failed(verifyCombineOperands(loc, experts, adaptor.getSlots().getType(),
                                   gates)))
    return failure();
  auto e = tensorOf(experts);
  auto expected = e.clone(
      {e.getDimSize(0), tensorOf(gates).getDimSize(1), e.getDimSize(3)});
  if (adaptor.getGrad().getType() != expected)
    return emitOptionalError(loc, "gradient type ", adaptor.getGrad().getType(),
                             " differs from the combined output type ",
                             expected);
  types.append({experts, gates});
  return success();
}

SmallVector<IteratorType> MoeCombineGradOp::getLoopIteratorTypes() {
  return moeIterators(/*expertsReduce=*/false);
}

SmallVector<AffineMap> MoeCombineGradOp::getIndexingMaps() {
  MoeLoops l(getContext());
  return moeMaps(getContext(), {{l.b, l.e, l.c, l.h},
                                {l.b, l.e, l.c},
                                {l.b, l.s, l.e},
                                {l.b, l.s, l.h},
                                {l.b, l.e, l.c, l.h},
                                {l.b, l.s, l.e}});
}

// -> experts and gates (operands 0 and 2).
LogicalResult MoeCombineOp::buildGradient(GradientBuilder &gb) {
  auto grad = MoeCombineGradOp::create(gb.b, gb.loc, getExperts(), getSlots(),
                                       getGates(), gb.grad());
  gb.setGrads(grad, {0, 2});
  return success();
}
