//===- DtcOps.h - dtc dialect operations ------------------------*- C++ -*-===//

#ifndef DTC_DIALECTS_DTC_DTCOPS_H
#define DTC_DIALECTS_DTC_DTCOPS_H

#include "dialects/dtc/DtcCollectiveOps.h"
#include "dialects/dtc/DtcDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/Dialect/Utils/StructuredOpsUtils.h"
#include "mlir/IR/AffineMap.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace mlir::dtc::detail {
/// Checks that an op's sharding rule is well formed: one map per operand and
/// result, each over all loops, with as many results as the value's rank.
LogicalResult verifyShardingRule(Operation *op);

/// Elementwise ops: one parallel loop per result dim; operands broadcast.
SmallVector<utils::IteratorType> elementwiseIteratorTypes(Operation *op);
SmallVector<AffineMap> elementwiseIndexingMaps(Operation *op);

/// Numpy broadcasting of two shapes; the element type is the lhs's.
LogicalResult inferBroadcastType(std::optional<Location> loc, Type lhs,
                                 Type rhs, SmallVectorImpl<Type> &types);

/// Gradient ops whose result has the type of their input and whose
/// gradient operand must have that type too.
LogicalResult inferSameTypeGrad(std::optional<Location> loc, Type input,
                                Type grad, SmallVectorImpl<Type> &types);

/// Reductions over `dims` of a rank-`rank` input.
LogicalResult inferReduceType(std::optional<Location> loc, Type input,
                              ArrayRef<int64_t> dims, bool keepDims,
                              SmallVectorImpl<Type> &types);
SmallVector<utils::IteratorType> reduceIteratorTypes(int64_t rank,
                                                     ArrayRef<int64_t> dims);
SmallVector<AffineMap> reduceIndexingMaps(MLIRContext *ctx, int64_t rank,
                                          ArrayRef<int64_t> dims,
                                          bool keepDims);

/// Window pooling over the spatial dims of an `[n, c, spatial...]` input.
LogicalResult inferPoolType(std::optional<Location> loc, Type input,
                            ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
                            ArrayRef<int64_t> dilations, ArrayRef<int64_t> pads,
                            SmallVectorImpl<Type> &types);
SmallVector<utils::IteratorType> poolIteratorTypes(int64_t numSpatial);
SmallVector<AffineMap> poolIndexingMaps(MLIRContext *ctx,
                                        ArrayRef<int64_t> strides,
                                        ArrayRef<int64_t> dilations);
} // namespace mlir::dtc::detail

namespace mlir::dtc::traits {
/// Every reduction loop of the op is a sum (DtcInterfaces.td).
template <typename ConcreteType>
class SumReductions
    : public ::mlir::OpTrait::TraitBase<ConcreteType, SumReductions> {};
/// A result sums over a parallel loop it does not index (DtcInterfaces.td).
template <typename ConcreteType>
class SumsOverParallelLoops
    : public ::mlir::OpTrait::TraitBase<ConcreteType, SumsOverParallelLoops> {};
/// Every reduction loop divides by its extent (DtcInterfaces.td).
template <typename ConcreteType>
class MeanReductions
    : public ::mlir::OpTrait::TraitBase<ConcreteType, MeanReductions> {};
/// Two FLOPs per loop iteration; a lookup over its last loop
/// (DtcInterfaces.td).
template <typename ConcreteType>
class MultiplyAdd
    : public ::mlir::OpTrait::TraitBase<ConcreteType, MultiplyAdd> {};
template <typename ConcreteType>
class RowLookup : public ::mlir::OpTrait::TraitBase<ConcreteType, RowLookup> {};
/// Selective recompute may run the op again (DtcInterfaces.td).
template <typename ConcreteType>
class Recomputable
    : public ::mlir::OpTrait::TraitBase<ConcreteType, Recomputable> {};
} // namespace mlir::dtc::traits

namespace mlir::dtc {
class GradientBuilder; // DtcGradient.h: what gradient rules build with.

/// What LocalFormOpInterface::localize knows of a partitioned op.
struct LocalForm {
  /// A mesh axis that splits a dimension of the op's first result.
  struct Split {
    StringRef axis;
    int64_t dim;
    int64_t parts;
    /// The dimension holds zigzag chunks (halves k and 2n - 1 - k of 2n,
    /// docs/partition.md) rather than one contiguous part.
    bool zigzag;
  };
  /// The op before partitioning: its attributes are the global ones.
  Operation *global;
  /// Global types of its operands.
  ArrayRef<RankedTensorType> operandTypes;
  SmallVector<Split> resultSplits;
};
} // namespace mlir::dtc

#include "dialects/dtc/DtcInterfaces.h.inc"

#define GET_OP_CLASSES
#include "dialects/dtc/DtcOps.h.inc"

#endif // DTC_DIALECTS_DTC_DTCOPS_H
