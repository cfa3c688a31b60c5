//===- DtcBase.td - dtc dialect definition -----------------*- tablegen -*-===//
//
// The `dtc` dialect: the high-level tensor ops of transformer training graphs,
// each carrying the loop structure (iterator types + indexing maps) that
// sharding propagation, partitioning and the cost model read.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_BASE_TD
#define DTC_BASE_TD

include "mlir/IR/OpBase.td"

def Dtc_Dialect : Dialect {
  let name = "dtc";
  let cppNamespace = "::mlir::dtc";
  let summary = "Tensor ops of transformer training graphs, with sharding rules";
  let description = [{
    Values are builtin ranked tensors with static shapes: the frontend binds
    every dynamic dimension before anything else runs. Element types are
    f32, bf16, f16, f64 for data and i64, i32, i8, i1 for indices and masks.
    Model weights enter through `dtc.parameter`, identified by the model's own
    initializer name, so checkpoints and layouts can refer to them.
  }];
  let hasConstantMaterializer = 1;
  let useDefaultAttributePrinterParser = 1;
  let useDefaultTypePrinterParser = 1;
  let extraClassDeclaration = [{
    /// Registers the attributes of DtcAttrs.td (defined in DtcAttrs.cpp).
    void registerAttributes();
    /// Registers the types of DtcCollectiveOps.td (DtcCollectiveOps.cpp).
    void registerTypes();
  }];
}

def Dtc_FloatType : AnyTypeOf<[F32, BF16, F16, F64]>;
def Dtc_IntType : AnyTypeOf<[I64, I32, I8, I1]>;
def Dtc_ElementType : AnyTypeOf<[Dtc_FloatType, Dtc_IntType]>;

def Dtc_Tensor : StaticShapeTensorOf<[Dtc_ElementType]>;
def Dtc_FloatTensor : StaticShapeTensorOf<[Dtc_FloatType]>;
def Dtc_IndexTensor : StaticShapeTensorOf<[I64, I32]>;

#endif // DTC_BASE_TD
