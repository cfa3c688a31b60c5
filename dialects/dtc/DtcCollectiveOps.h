//===- DtcCollectiveOps.h - async handle type and device meshes -*- C++ -*-===//
//
// The `!dtc.async<T>` handle of the collective ops (DtcCollectiveOps.td) and
// the device mesh their groups are named in.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_DIALECTS_DTC_DTCCOLLECTIVEOPS_H
#define DTC_DIALECTS_DTC_DTCCOLLECTIVEOPS_H

#include "dialects/dtc/DtcAttrs.h"
#include "dialects/dtc/DtcDialect.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/LogicalResult.h"

#include <optional>
#include <string>

#define GET_TYPEDEF_CLASSES
#include "dialects/dtc/DtcCollectiveTypes.h.inc"

namespace mlir::dtc {

/// Named axes of a device grid, outermost first: #dtc.mesh<[dp = 2, tp = 4]>
/// is 8 ranks, rank = dp * 4 + tp. A copy of a MeshAttr's axes that code
/// indexing axes in loops reads without going through the context.
struct DeviceMesh {
  using Axis = MeshAttr::Axis;
  llvm::SmallVector<Axis, 4> axes;

  static DeviceMesh get(MeshAttr mesh);
  /// The mesh of the nearest op enclosing (or being) `op` that has a
  /// `dtc.mesh` attribute; none when there is none.
  static std::optional<DeviceMesh> lookup(Operation *op);

  std::optional<size_t> find(llvm::StringRef name) const;
  int64_t numRanks() const;
  /// "dp:2,tp:4".
  std::string str() const;
};

/// The number of ranks in the group named by `axes` (a collective's or a
/// ring step's), from the mesh of the enclosing function or module; failure,
/// after an error at `op`, when there is no such mesh or an axis is not in it.
FailureOr<int64_t> groupSize(Operation *op, ArrayAttr axes);

/// Name of the #dtc.mesh attribute on a function or module.
inline constexpr llvm::StringLiteral kMeshAttrName = "dtc.mesh";

} // namespace mlir::dtc

#endif // DTC_DIALECTS_DTC_DTCCOLLECTIVEOPS_H
