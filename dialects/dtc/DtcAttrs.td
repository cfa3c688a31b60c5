//===- DtcAttrs.td - dtc dialect attributes ----------------*- tablegen -*-===//
//
// The sharding of a value over a device mesh, as sharding propagation writes
// it and partitioning reads it. See docs/sharding.md.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_ATTRS_TD
#define DTC_ATTRS_TD

include "dialects/dtc/DtcBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def Dtc_ShardingAttr : AttrDef<Dtc_Dialect, "Sharding"> {
  let mnemonic = "sharding";
  let summary = "How a tensor is laid out over the axes of a device mesh";
  let description = [{
    One entry per tensor dimension: the mesh axes that dimension is split
    over, outermost first (`[]`: not split). An entry may end in `:B`, an
    interleaved split: the dimension is read as `[size / B, B]` and only the
    inner `B` is split, so every run of `B` elements is spread over the axes
    (a fused QKV projection whose `3 x 64` columns are split per head group
    is `["tp"]:64`). `partial` lists the axes over which the value is a
    partial sum: the full value is the sum of the per-device values.

    ```
    #dtc.sharding<[["dp"], [], ["tp"]]>
    #dtc.sharding<[[], ["tp"]:64]>
    #dtc.sharding<[[], []], partial = ["tp"]>
    ```

    The attribute checks itself (no axis used twice, blocks positive); that
    the axes exist in the mesh and divide the dimensions is checked by
    `dtc-propagate-sharding`, which knows the mesh and the shapes.
  }];
  let parameters = (ins
    "::mlir::ArrayAttr":$dims,
    ArrayRefParameter<"int64_t", "interleave block per dim, 0: whole dim">:$blocks,
    "::mlir::ArrayAttr":$partial
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Mesh axes dimension `dim` is split over, outermost first.
    ::llvm::SmallVector<::llvm::StringRef> getDimAxes(unsigned dim) const;
    /// Axes the value is a partial sum over.
    ::llvm::SmallVector<::llvm::StringRef> getPartialAxes() const;
    /// True when no dim is split and the value is not partial.
    bool isReplicated() const;
  }];
}

#endif // DTC_ATTRS_TD
