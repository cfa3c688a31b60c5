//===- DtcAttrs.td - dtc dialect attributes ----------------*- tablegen -*-===//
//
// The device mesh, and the sharding of a value over it as sharding
// propagation writes it and partitioning reads it. See docs/sharding.md.
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

def Dtc_MeshAttr : AttrDef<Dtc_Dialect, "Mesh"> {
  let mnemonic = "mesh";
  let summary = "The device mesh: named axes and their sizes, outermost first";
  let description = [{
    The ranks of a program laid out as a grid: rank r sits at the row-major
    coordinates of r (the last axis varies fastest). The empty mesh is one
    rank.

    ```
    #dtc.mesh<[pp = 2, dp = 4, tp = 2]>
    #dtc.mesh<[]>
    ```

    Its text form on command lines and in program.pb ("pp:2,dp:4,tp:2") is
    runtime/support/Mesh.h's, which also computes the ranks of every group:
    `getMesh()` and `get(context, mesh)` convert, `parseText` reads the
    text. Axis names are non-empty and distinct; sizes are at least 1.
  }];
  let parameters = (ins
    "::mlir::ArrayAttr":$names,
    ArrayRefParameter<"int64_t", "size of each axis">:$sizes
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let builders = [
    AttrBuilder<(ins "const ::dtc::runtime::Mesh &":$mesh)>
  ];
  let extraClassDeclaration = [{
    using Axis = ::dtc::runtime::Mesh::Axis;

    /// Reads the mesh text ("dp:2,tp:4"; "" is one rank): the one place
    /// text becomes a mesh inside the compiler, so every bad mesh gets the
    /// same error.
    static ::llvm::Expected<MeshAttr> parseText(::mlir::MLIRContext *context,
                                                ::llvm::StringRef text);
    /// The runtime's mesh, which computes rank groups and the text form.
    ::dtc::runtime::Mesh getMesh() const;
    /// "dp:2,tp:4", as program.pb and the command line spell it.
    std::string str() const;

    unsigned getNumAxes() const { return getSizes().size(); }
    bool empty() const { return getNumAxes() == 0; }
    ::llvm::StringRef getAxisName(unsigned axis) const;
    int64_t getAxisSize(unsigned axis) const { return getSizes()[axis]; }
    /// The (name, size) pairs, outermost first.
    ::llvm::SmallVector<Axis> getAxes() const;
    /// The index of `name` among the axes, if it is one.
    std::optional<unsigned> getAxisIndex(::llvm::StringRef name) const;
    /// The number of ranks: the product of the sizes.
    int64_t getWorldSize() const;
  }];
}

#endif // DTC_ATTRS_TD
