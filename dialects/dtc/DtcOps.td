//===- DtcOps.td - dtc dialect operations ------------------*- tablegen -*-===//
//
// Every op infers its result type (the inference is the shape verifier: one
// source of truth for shape rules) and states its sharding rule through
// ShardingRuleOpInterface. Adding an op: one record here, its shape rule and
// loop structure in DtcOps.cpp, its reference kernel in the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_OPS_TD
#define DTC_OPS_TD

include "dialects/dtc/DtcBase.td"
include "dialects/dtc/DtcAttrs.td"
include "dialects/dtc/DtcInterfaces.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Dtc_Op<string mnemonic, list<Trait> traits = []>
    : Op<Dtc_Dialect, mnemonic, traits>;

// A side-effect-free op with a sharding rule.
class Dtc_ShardableOp<string mnemonic, list<Trait> traits = []>
    : Dtc_Op<mnemonic, !listconcat(traits, [Pure,
        DeclareOpInterfaceMethods<Dtc_ShardingRuleOpInterface>])>;

// ... whose result type follows from a shape rule (inferReturnTypes).
class Dtc_ShapedOp<string mnemonic, list<Trait> traits = []>
    : Dtc_ShardableOp<mnemonic, !listconcat(traits, [InferTypeOpAdaptor])>;

// An op with a gradient rule (buildGradient, next to its shape rule).
defvar Dtc_Differentiable =
    DeclareOpInterfaceMethods<Dtc_DifferentiableOpInterface>;
// An op whose partitioned copy rewrites attributes (localize).
defvar Dtc_LocalForm = DeclareOpInterfaceMethods<Dtc_LocalFormOpInterface>;
// An op with a default computed from its operand types (addComputedDefaults).
defvar Dtc_ComputedDefaults =
    DeclareOpInterfaceMethods<Dtc_ComputedDefaultsOpInterface>;
// An op that mixes positions along a sequence (causal mask, context ring).
defvar Dtc_SequenceMixing =
    DeclareOpInterfaceMethods<Dtc_SequenceMixingOpInterface>;

//===----------------------------------------------------------------------===//
// Leaves: constants and parameters
//===----------------------------------------------------------------------===//

def Dtc_ConstantOp : Dtc_Op<"constant", [ConstantLike, Pure,
    AllTypesMatch<["value", "output"]>]> {
  let summary = "A tensor constant";
  let description = [{
    ```mlir
    %0 = dtc.constant dense<1.0> : tensor<4xf32>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat = "$value attr-dict";
  let hasFolder = 1;
}

def Dtc_ParameterOp : Dtc_Op<"parameter", [Pure]> {
  let summary = "A model weight or buffer, named by the model's initializer";
  let description = [{
    The value of the named tensor at the current step. Values live outside
    the IR (in the model file or a checkpoint); the name is the key that
    checkpoints, layouts and `dtc ckpt consolidate` use.

    ```mlir
    %w = dtc.parameter "transformer.h.0.attn.c_attn.weight" : tensor<64x192xf32>
    %f = dtc.parameter "rotary_emb.inv_freq" {frozen} : tensor<16xf32>
    ```

    `frozen`: the tensor is read from the model (and saved with the
    checkpoints) but never trained: no gradient, no optimizer state. A
    PyTorch buffer, or a weight `--frozen` names.
    `stack`: the weight is the model's initializers of these names stacked
    along a new leading dim (the experts of an MoE layer exported one
    Linear per expert); `stack_transposed`: each is stored transposed.
  }];
  let arguments = (ins StrAttr:$name, OptionalAttr<StrArrayAttr>:$stack,
                       UnitAttr:$stack_transposed, UnitAttr:$frozen);
  let results = (outs Dtc_Tensor:$output);
  let builders = [
    OpBuilder<(ins "Type":$type, "StringRef":$name), [{
      build($_builder, $_state, type, $_builder.getStringAttr(name),
            ArrayAttr(), UnitAttr(), UnitAttr());
    }]>];
  let assemblyFormat = "$name attr-dict `:` type($output)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

// The sharding rule of every elementwise op is the identity on the result's
// loops with numpy broadcasting for operands (DtcOps.cpp).
class Dtc_UnaryOp<string mnemonic, string desc, Type type = Dtc_FloatTensor,
                  list<Trait> traits = []>
    : Dtc_ShardableOp<mnemonic, !listconcat(traits, [SameOperandsAndResultType,
        Dtc_Differentiable, Dtc_Recomputable, Dtc_InPlaceOpInterface])> {
  let summary = "Elementwise " # desc;
  let arguments = (ins type:$input);
  let results = (outs type:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let extraClassDefinition = [{
    ::llvm::SmallVector<::mlir::utils::IteratorType>
    $cppClass::getLoopIteratorTypes() {
      return detail::elementwiseIteratorTypes(getOperation());
    }
    ::llvm::SmallVector<::mlir::AffineMap> $cppClass::getIndexingMaps() {
      return detail::elementwiseIndexingMaps(getOperation());
    }
  }];
}

def Dtc_NegOp : Dtc_UnaryOp<"neg", "negation">;
def Dtc_AbsOp : Dtc_UnaryOp<"abs", "absolute value">;
def Dtc_ExpOp : Dtc_UnaryOp<"exp", "exponential">;
def Dtc_LogOp : Dtc_UnaryOp<"log", "natural logarithm">;
def Dtc_SqrtOp : Dtc_UnaryOp<"sqrt", "square root">;
def Dtc_RsqrtOp : Dtc_UnaryOp<"rsqrt", "reciprocal square root">;
def Dtc_ReciprocalOp : Dtc_UnaryOp<"reciprocal", "reciprocal">;
def Dtc_TanhOp : Dtc_UnaryOp<"tanh", "hyperbolic tangent">;
def Dtc_ErfOp : Dtc_UnaryOp<"erf", "error function">;
def Dtc_SigmoidOp : Dtc_UnaryOp<"sigmoid", "logistic sigmoid">;
def Dtc_SoftplusOp : Dtc_UnaryOp<"softplus", "log(1 + exp(x))">;
def Dtc_ReluOp : Dtc_UnaryOp<"relu", "max(x, 0)">;
def Dtc_SiluOp : Dtc_UnaryOp<"silu", "x * sigmoid(x) (swish)">;
def Dtc_GeluOp : Dtc_UnaryOp<"gelu", "Gaussian error linear unit"> {
  let description = [{
    `x * Phi(x)`; with `approximate_tanh` the tanh approximation
    `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))` of GPT-2 and PyTorch's
    `approximate="tanh"`.
  }];
  let arguments = (ins Dtc_FloatTensor:$input, UnitAttr:$approximate_tanh);
}

def Dtc_CastOp : Dtc_ShapedOp<"cast", [SameOperandsAndResultShape,
                                       Dtc_Differentiable, Dtc_Recomputable]> {
  let summary = "Elementwise conversion of the element type";
  let arguments = (ins Dtc_Tensor:$input, TypeAttr:$to);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input) `to` $to";
  let hasFolder = 1;
}

class Dtc_BinaryOp<string mnemonic, string desc, list<Trait> traits = []>
    : Dtc_ShapedOp<mnemonic, !listconcat(traits, [Dtc_Differentiable,
                                                  Dtc_Recomputable])> {
  let summary = "Elementwise " # desc # " with numpy broadcasting";
  let arguments = (ins Dtc_Tensor:$lhs, Dtc_Tensor:$rhs);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return detail::inferBroadcastType(loc, adaptor.getLhs().getType(),
                                        adaptor.getRhs().getType(), types);
    }
    ::llvm::SmallVector<::mlir::utils::IteratorType>
    $cppClass::getLoopIteratorTypes() {
      return detail::elementwiseIteratorTypes(getOperation());
    }
    ::llvm::SmallVector<::mlir::AffineMap> $cppClass::getIndexingMaps() {
      return detail::elementwiseIndexingMaps(getOperation());
    }
  }];
  let hasFolder = 1;
}

def Dtc_AddOp : Dtc_BinaryOp<"add", "addition",
                             [Commutative, Dtc_InPlaceOpInterface]>;
def Dtc_SubOp : Dtc_BinaryOp<"sub", "subtraction", [Dtc_InPlaceOpInterface]>;
def Dtc_MulOp : Dtc_BinaryOp<"mul", "multiplication",
                             [Commutative, Dtc_InPlaceOpInterface]>;
def Dtc_DivOp : Dtc_BinaryOp<"div", "division", [Dtc_InPlaceOpInterface]>;
def Dtc_MaxOp : Dtc_BinaryOp<"max", "maximum", [Commutative]>;
def Dtc_MinOp : Dtc_BinaryOp<"min", "minimum", [Commutative]>;
def Dtc_PowOp : Dtc_BinaryOp<"pow", "power">;

//===----------------------------------------------------------------------===//
// Contractions and reductions
//===----------------------------------------------------------------------===//

def Dtc_MatmulOp
    : Dtc_ShapedOp<"matmul", [Dtc_SumReductions, Dtc_MultiplyAdd,
                              Dtc_Differentiable]> {
  let summary = "Batched matrix product with numpy batch broadcasting";
  let description = [{
    `lhs[..., m, k] x rhs[..., k, n] -> [..., m, n]`; `transpose_lhs` and
    `transpose_rhs` read the last two dimensions of that operand swapped, so
    `x @ W^T` (a PyTorch Linear) needs no separate transpose. Leading batch
    dimensions broadcast like numpy's matmul. Loops: the result's batch
    dimensions, m, n (parallel) and k (reduction).
  }];
  let arguments = (ins Dtc_FloatTensor:$lhs, Dtc_FloatTensor:$rhs,
                   UnitAttr:$transpose_lhs, UnitAttr:$transpose_rhs);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Dtc_ConvOp
    : Dtc_ShapedOp<"conv", [Dtc_SumReductions, Dtc_MultiplyAdd,
                            Dtc_Differentiable]> {
  let summary = "N-d grouped convolution, channels first (ONNX Conv)";
  let description = [{
    `input [n, c, x1..xk]`, `weight [f, c/groups, k1..kk]`, optional
    `bias [f]` -> `[n, f, o1..ok]` with
    `oi = (xi + pad_begin_i + pad_end_i - dilation_i * (ki - 1) - 1)
    floordiv stride_i + 1`. `pads` holds the k begin pads then the k end
    pads (ONNX order); padding reads zeros. Both `c` and `f` must be
    multiples of `groups`; output channel `f` reads input channels
    `[g * c/groups, (g + 1) * c/groups)` with `g = f floordiv (f/groups)`.

    Loops: `(n, f, o1..ok, c', k1..kk)`: batch, output channels and output
    positions are parallel, the per-group input channel `c'` and the kernel
    window are reductions. The input map describes the padded input:
    `x_i = o_i * stride_i + k_i * dilation_i` (pads shift it by a constant
    that only halos care about). A loop in a sum with another loop (output
    positions, kernel window) needs a halo exchange to split, which
    propagation does not offer; with `groups > 1` the input channel is
    `g * (c/groups) + c'`, so propagation splits neither `f` nor `c'` there.
  }];
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_FloatTensor:$weight,
                   Optional<Dtc_FloatTensor>:$bias,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                   DenseI64ArrayAttr:$pads,
                   DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

class Dtc_PoolOp<string mnemonic, string desc>
    : Dtc_ShapedOp<mnemonic, [Dtc_Differentiable]> {
  let summary = "N-d " # desc # " pooling over windows, channels first";
  let description = [{
    `input [n, c, x1..xk]` -> `[n, c, o1..ok]` with
    `oi = (xi + pad_begin_i + pad_end_i - dilation_i * (kernel_i - 1) - 1)
    floordiv stride_i + 1`; `pads` holds the k begin pads then the k end pads.
    Padded positions are not part of any window (max ignores them; average
    divides by the positions inside the input unless `count_include_pad`).
    Loops `(n, c, o1..ok, k1..kk)`, the window taps are reductions; the input
    map `o_i * stride_i + k_i * dilation_i` is over the padded input, as for
    `dtc.conv`: propagation splits batch and channels only.
  }];
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return detail::inferPoolType(loc, adaptor.getInput().getType(),
                                   adaptor.getKernelShape(),
                                   adaptor.getStrides(),
                                   adaptor.getDilations(), adaptor.getPads(),
                                   types);
    }
    ::llvm::SmallVector<::mlir::utils::IteratorType>
    $cppClass::getLoopIteratorTypes() {
      return detail::poolIteratorTypes(getKernelShape().size());
    }
    ::llvm::SmallVector<::mlir::AffineMap> $cppClass::getIndexingMaps() {
      return detail::poolIndexingMaps(getContext(), getStrides(),
                                      getDilations());
    }
  }];
}

def Dtc_MaxPoolOp : Dtc_PoolOp<"max_pool", "max"> {
  let arguments = (ins Dtc_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                   DenseI64ArrayAttr:$pads);
}

def Dtc_AvgPoolOp : Dtc_PoolOp<"avg_pool", "average"> {
  let arguments = (ins Dtc_FloatTensor:$input,
                   DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                   DenseI64ArrayAttr:$pads, UnitAttr:$count_include_pad);
}

class Dtc_ReduceOp<string mnemonic, string desc, list<Trait> traits = []>
    : Dtc_ShapedOp<mnemonic, !listconcat(traits, [Dtc_Differentiable,
                                                  Dtc_Recomputable])> {
  let summary = "Reduce by " # desc # " over `dims`";
  let arguments = (ins Dtc_Tensor:$input, DenseI64ArrayAttr:$dims,
                   UnitAttr:$keep_dims);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return detail::inferReduceType(loc, adaptor.getInput().getType(),
                                     adaptor.getDims(),
                                     adaptor.getKeepDims(), types);
    }
    ::llvm::SmallVector<::mlir::utils::IteratorType>
    $cppClass::getLoopIteratorTypes() {
      return detail::reduceIteratorTypes(getInput().getType().getRank(),
                                         getDims());
    }
    ::llvm::SmallVector<::mlir::AffineMap> $cppClass::getIndexingMaps() {
      return detail::reduceIndexingMaps(getContext(),
                                        getInput().getType().getRank(),
                                        getDims(), getKeepDims());
    }
  }];
}

def Dtc_ReduceSumOp : Dtc_ReduceOp<"reduce_sum", "sum", [Dtc_SumReductions]>;
def Dtc_ReduceMeanOp : Dtc_ReduceOp<"reduce_mean", "mean",
                                    [Dtc_SumReductions, Dtc_MeanReductions]>;
def Dtc_ReduceMaxOp : Dtc_ReduceOp<"reduce_max", "maximum">;

//===----------------------------------------------------------------------===//
// Normalizations and activations over a dimension
//===----------------------------------------------------------------------===//

def Dtc_SoftmaxOp : Dtc_ShardableOp<"softmax", [SameOperandsAndResultType,
                                                Dtc_Differentiable,
                                                Dtc_Recomputable]> {
  let summary = "Softmax over one dimension";
  let arguments = (ins Dtc_FloatTensor:$input, I64Attr:$axis);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Dtc_CumSumOp : Dtc_ShardableOp<"cumsum", [SameOperandsAndResultType,
                                              Dtc_Differentiable]> {
  let summary = "Running sum along one dimension (ONNX CumSum)";
  let description = [{
    `output[..., i, ...]` is the sum of `input[..., j, ...]` over `j <= i`
    (`j < i` with `exclusive`; `j >= i`, `j > i` with `reverse`), in the
    input's element type. The scanned dimension is a reduction loop the
    output also indexes (as softmax's), so it is never split. Its gradient
    is the running sum of the gradient the other way.

    ```mlir
    %pos = dtc.cumsum %mask {axis = 1 : i64} : tensor<4x8xi64>
    ```
  }];
  let arguments = (ins Dtc_Tensor:$input, I64Attr:$axis,
                   UnitAttr:$exclusive, UnitAttr:$reverse);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Dtc_SelectiveScanOp
    : Dtc_ShapedOp<"selective_scan", [Dtc_MultiplyAdd, Dtc_Differentiable]> {
  let summary = "Linear recurrence over positions read out by a projection "
                "(Mamba's selective scan)";
  let description = [{
    `a [b, d, t, n]`, `x [b, d, t, n]`, `c [b, t, n]` -> `y [b, d, t]`: per
    batch row and channel `d`, a state `h [n]` that starts at zero and runs
    over the positions `t` in order,

      h_t = a_t * h_{t-1} + x_t,    y_t = sum_n h_t[n] * c_t[n]

    (Mamba's selective scan with the discretized `a = exp(delta * A)` and
    `x = delta * B * u` given; Mamba2's scalar decay per head is `a`
    broadcast over its channels). Loops `(b, d, t, n)`: the batch and the
    channels are parallel, so tensor parallelism splits the channels with no
    communication; the positions are a reduction the result also indexes (a
    scan, as `dtc.cumsum`'s), never split; the state is a sum reduction (a
    split of it leaves partial sums of `y`). The gradient is
    `dtc.selective_scan_grad`, the same recurrence backwards in time.

    ```mlir
    %y = dtc.selective_scan %a, %x, %c
        : (tensor<2x16x8x4xf32>, tensor<2x16x8x4xf32>, tensor<2x8x4xf32>)
        -> tensor<2x16x8xf32>
    ```
  }];
  let arguments = (ins Dtc_FloatTensor:$a, Dtc_FloatTensor:$x,
                   Dtc_FloatTensor:$c);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat = [{
    $a `,` $x `,` $c attr-dict `:` functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Only the state loop sums; the positions are a scan.
    bool isSumReductionLoop(int64_t loop) { return loop == 3; }
  }];
}

def Dtc_LayerNormOp : Dtc_ShapedOp<"layer_norm", [Dtc_Differentiable]> {
  let summary = "Layer normalization over the trailing dims from `axis`";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * weight + bias`, statistics over
    dimensions `[axis, rank)`; `weight` and the optional `bias` have the shape
    of those dimensions.
  }];
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_FloatTensor:$weight,
                   Optional<Dtc_FloatTensor>:$bias, I64Attr:$axis,
                   F64Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:`
    functional-type(operands, results)
  }];
}

def Dtc_RmsNormOp : Dtc_ShapedOp<"rms_norm", [Dtc_Differentiable]> {
  let summary = "RMS normalization over the trailing dims from `axis`";
  let description = [{
    `x / sqrt(mean(x^2) + epsilon) * weight`, statistics over dimensions
    `[axis, rank)` (LLaMA's RMSNorm).
  }];
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_FloatTensor:$weight,
                   I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat =
      "$input `,` $weight attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

def Dtc_ReshapeOp
    : Dtc_Op<"reshape", [Pure, Dtc_Differentiable, Dtc_Recomputable]> {
  let summary = "Reinterpret the shape; element count is preserved";
  let description = [{
    Row-major reshape between static shapes. It has no affine sharding rule:
    propagation splits it into groups of dimensions whose products match.
  }];
  let arguments = (ins Dtc_Tensor:$input);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasVerifier = 1;
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

def Dtc_TransposeOp
    : Dtc_ShapedOp<"transpose", [Dtc_Differentiable, Dtc_Recomputable]> {
  let summary = "Permute dimensions: output dim i is input dim permutation[i]";
  let arguments = (ins Dtc_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
  let hasCanonicalizer = 1;
}

// Concatenation has no affine sharding rule along `axis`; propagation treats
// that dimension as replicated and every other one as parallel.
def Dtc_ConcatOp : Dtc_Op<"concat", [Pure, InferTypeOpAdaptor,
                                     SameOperandsElementType,
                                     Dtc_Differentiable, Dtc_Recomputable]> {
  let summary = "Concatenate along `axis`";
  let arguments = (ins Variadic<Dtc_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat = "$inputs attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Dtc_SliceOp
    : Dtc_ShapedOp<"slice", [Dtc_Differentiable, Dtc_Recomputable,
                             Dtc_LocalForm]> {
  let summary = "Strided slice: [starts, limits) with strides, every dim";
  let arguments = (ins Dtc_Tensor:$input, DenseI64ArrayAttr:$starts,
                   DenseI64ArrayAttr:$limits, DenseI64ArrayAttr:$strides);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat = "$input attr-dict `:` functional-type(operands, results)";
  let hasFolder = 1;
}

def Dtc_EmbeddingOp
    : Dtc_ShapedOp<"embedding", [Dtc_SumReductions, Dtc_RowLookup,
                                 Dtc_Differentiable]> {
  let summary = "Row lookup: output[..., d] = table[ids[...], d]";
  let description = [{
    Its sharding rule treats the lookup as a one-hot contraction over the
    vocabulary loop, so splitting the table by rows (Megatron's
    vocab-parallel embedding) is a split reduction like any other.
    `padding_idx` (PyTorch's nn.Embedding(padding_idx=p)): lookups of row p
    pass no gradient to the table.
  }];
  let arguments = (ins Dtc_FloatTensor:$table, Dtc_IndexTensor:$ids,
                       OptionalAttr<I64Attr>:$padding_idx);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat =
      "$table `,` $ids attr-dict `:` functional-type(operands, results)";
}

def Dtc_GatherElementsOp
    : Dtc_ShapedOp<"gather_elements", [Dtc_Differentiable]> {
  let summary = "Element lookup along one axis (ONNX GatherElements)";
  let description = [{
    `output[i0, ..., ia, ..., ir-1] = data[i0, ..., indices[i], ..., ir-1]`
    with `ia` replaced along `axis`; the result has the shape of `indices`
    and the element type of `data`, whose other dims equal the indices'.
    A negative index counts from the end of the axis (ONNX); one outside
    `[-s, s)` is an error at run time. Loops: the indices dims (parallel)
    and the data's axis (a reduction that is not a sum: a lookup needs the
    whole axis, so it is never split).

    ```mlir
    %p = dtc.gather_elements %t, %ids {axis = 1 : i64}
        : (tensor<2x512xi64>, tensor<2x8xi64>) -> tensor<2x8xi64>
    ```
  }];
  let arguments = (ins Dtc_Tensor:$data, Dtc_IndexTensor:$indices,
                   I64Attr:$axis);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat =
      "$data `,` $indices attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Transformer ops
//===----------------------------------------------------------------------===//

def Dtc_AttentionOp
    : Dtc_ShapedOp<"attention", [Dtc_MultiplyAdd, Dtc_Differentiable,
                                 Dtc_LocalForm, Dtc_ComputedDefaults,
                                 Dtc_SequenceMixing]> {
  let summary = "Scaled dot-product attention with grouped-query heads";
  let description = [{
    `query [b, h, s, d]`, `key [b, g, t, d]`, `value [b, g, t, e]` ->
    `[b, h, s, e]`, where `h` is a multiple of `g` and query head `i` reads
    key/value head `i floordiv (h / g)` (MHA when g = h, MQA when g = 1).
    `scale` defaults to `1/sqrt(d)`; `causal` masks key positions after the
    query position (aligned at the start, as in training).
  }];
  let arguments = (ins Dtc_FloatTensor:$query, Dtc_FloatTensor:$key,
                   Dtc_FloatTensor:$value, UnitAttr:$causal,
                   OptionalAttr<F64Attr>:$scale);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat = [{
    $query `,` $key `,` $value attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The scale applied to q.k: the attribute or 1/sqrt(head dim).
    double getEffectiveScale();
  }];
}

def Dtc_CrossEntropyOp
    : Dtc_ShapedOp<"cross_entropy", [Dtc_Differentiable]> {
  let summary = "Mean softmax cross-entropy of logits against integer labels";
  let description = [{
    `logits [..., v]`, `labels [...]` -> scalar mean over the positions whose
    label is not `ignore_index` (PyTorch's default -100).
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, Dtc_IndexTensor:$labels,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs 0DTensorOf<[F32]>:$loss);
  let assemblyFormat =
      "$logits `,` $labels attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    /// The positions average linearly; the vocabulary is a log-sum-exp the
    /// partitioner splits with the loss's statistics (ShardingRuleOpInterface).
    bool isSumReductionLoop(int64_t loop);
    bool isVocabParallelLoop(int64_t loop);
    /// The mean over the positions (all loops but the vocabulary).
    bool isMeanLoop(int64_t loop);
  }];
}

//===----------------------------------------------------------------------===//
// Ring attention (context parallelism, docs/partition.md)
//===----------------------------------------------------------------------===//

// The pieces partitioning (dtc-partition) splits dtc.attention and
// dtc.attention_grad into when the context axis splits the query positions;
// defined beside attention so that the attention family is one place.
//
// The sequence is cut into n chunks over `mesh_axes` (n the group size). A
// rank's queries are chunk c, its position in the group; the key/value
// chunk it holds after `kv_shift` hops of the ring is chunk
// (c - kv_shift) mod n. Positions are global, so `causal` masks keys after
// the query: chunk k is positions [k * t, (k + 1) * t), or, with `zigzag`,
// the sequence is cut into 2n halves and chunk k is halves k and
// 2n - 1 - k, one after the other (so that under a causal mask every rank
// has the same work: the load balance of Megatron's context parallelism).
class Dtc_RingAttentionOp<string mnemonic> : Dtc_Op<mnemonic, [Pure]> {
  let hasVerifier = 1;
}

def Dtc_AttentionBlockOp : Dtc_RingAttentionOp<"attention_block"> {
  let summary = "Attention of this rank's query chunk over one key chunk";
  let description = [{
    `query [b, h, s, d]`, `key [b, g, t, d]`, `value [b, g, t, e]` (heads
    as `dtc.attention`) -> `output [b, h, s, e]`, normalized over this
    chunk's keys, and `lse [b, h, s]` (f32), the log of each row's softmax
    denominator (scores scaled by `scale`). A row that sees no key of the
    chunk (causal, chunk after it) has output 0 and lse -inf.
    `dtc.attention_merge` combines the blocks of all chunks.
  }];
  let arguments = (ins Dtc_FloatTensor:$query, Dtc_FloatTensor:$key,
                   Dtc_FloatTensor:$value, StrArrayAttr:$mesh_axes,
                   I64Attr:$kv_shift, UnitAttr:$causal, F64Attr:$scale,
                   UnitAttr:$zigzag);
  let results = (outs Dtc_FloatTensor:$output, Dtc_FloatTensor:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value attr-dict `:`
    functional-type(operands, results)
  }];
}

def Dtc_AttentionMergeOp : Dtc_Op<"attention_merge", [Pure]> {
  let summary = "Attention over two key sets from the attention over each";
  let description = [{
    `(output_a, lse_a, output_b, lse_b) -> (output, lse)`: with
    `l = log(exp(lse_a) + exp(lse_b))`, `output = output_a * exp(lse_a - l)
    + output_b * exp(lse_b - l)` per row (the online-softmax merge); rows
    where both are -inf stay 0 and -inf.
  }];
  let arguments = (ins Dtc_FloatTensor:$output_a, Dtc_FloatTensor:$lse_a,
                   Dtc_FloatTensor:$output_b, Dtc_FloatTensor:$lse_b);
  let results = (outs Dtc_FloatTensor:$output, Dtc_FloatTensor:$lse);
  let assemblyFormat = [{
    $output_a `,` $lse_a `,` $output_b `,` $lse_b attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Dtc_AttentionBlockGradOp : Dtc_RingAttentionOp<"attention_block_grad"> {
  let summary = "One key chunk's share of the attention gradient";
  let description = [{
    Operands as `dtc.attention_block` plus the whole-sequence `output`,
    `lse` (merged over every chunk) and the output's gradient `grad`.
    Results: this chunk's contribution to the query gradient, and this
    rank's queries' contributions to the chunk's key and value gradients
    (summed over the query heads of a group). Summed over the ring, they
    are `dtc.attention_grad`'s results.
  }];
  let arguments = (ins Dtc_FloatTensor:$query, Dtc_FloatTensor:$key,
                   Dtc_FloatTensor:$value, Dtc_FloatTensor:$output,
                   Dtc_FloatTensor:$lse, Dtc_FloatTensor:$grad,
                   StrArrayAttr:$mesh_axes, I64Attr:$kv_shift,
                   UnitAttr:$causal, F64Attr:$scale, UnitAttr:$zigzag);
  let results = (outs Dtc_FloatTensor:$query_grad, Dtc_FloatTensor:$key_grad,
                      Dtc_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $output `,` $lse `,` $grad attr-dict `:`
    functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Mixture of experts (docs/moe.md)
//===----------------------------------------------------------------------===//

// A token-choice MoE layer is four ops around plain batched matmuls:
// moe_route picks each token's experts and fills per-sequence capacity
// slots, moe_dispatch gathers tokens into an expert buffer [b, E, C, h],
// the experts are matmuls batched over E, and moe_combine adds the expert
// outputs back into token order weighted by the gates. Capacity is per
// sequence, so a split of the batch computes exactly what one device does,
// and expert parallelism is the reshard of the buffer from a batch split
// to an expert split: one all-to-all before the experts, one after.

def Dtc_MoeRouteOp : Dtc_ShapedOp<"moe_route", [Dtc_Differentiable]> {
  let summary = "Top-k expert choice with capacity slots per sequence";
  let description = [{
    `logits [b, s, E]` -> `gates [b, s, E]`, `slots [b, E, C]` (i64),
    `aux [b]`. Each token's scores are the softmax (or `score = "sigmoid"`)
    of its router logits; it picks the `top_k` largest (ties: lower expert
    index), whose gates are their scores, divided by their sum when
    `normalize`. Slots fill by choice rank, then position (GShard's
    priority): the `c`-th token to reach expert `e` of sequence `b` lands in
    `slots[b, e, c]` when `c < capacity` (C), else it is dropped and its gate
    is 0; empty slots hold -1. `aux` is each sequence's load-balancing loss
    `E * sum_e f_e * P_e` (f_e: the fraction of the sequence's choices that
    picked e, P_e: its mean score), 1 when balanced. `layer` numbers the
    model's MoE layers from 0 (the runtime's routing metrics). Loops (b, s,
    e, c): only the batch splits; the rest read across positions and
    experts.
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, I64Attr:$top_k,
                   I64Attr:$capacity,
                   DefaultValuedAttr<StrAttr, "\"softmax\"">:$score,
                   UnitAttr:$normalize, OptionalAttr<I64Attr>:$layer);
  let results = (outs Dtc_FloatTensor:$gates, Dtc_IndexTensor:$slots,
                      Dtc_FloatTensor:$aux);
  let assemblyFormat =
      "$logits attr-dict `:` functional-type(operands, results)";
}

def Dtc_MoeDispatchOp : Dtc_ShapedOp<"moe_dispatch", [Dtc_Differentiable]> {
  let summary = "Gather tokens into the expert buffer";
  let description = [{
    `input [b, s, h]`, `slots [b, E, C]` -> `[b, E, C, h]` with
    `output[b, e, c] = input[b, slots[b, e, c]]`, zero for an empty slot.
    Loops (b, s, e, c, h); positions are a reduction that cannot split
    (slots address them globally).
  }];
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_IndexTensor:$slots);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat =
      "$input `,` $slots attr-dict `:` functional-type(operands, results)";
}

def Dtc_MoeCombineOp : Dtc_ShapedOp<"moe_combine", [Dtc_Differentiable]> {
  let summary = "Gate-weighted sum of the expert outputs in token order";
  let description = [{
    `experts [b, E, C, h]`, `slots [b, E, C]`, `gates [b, s, E]` ->
    `[b, s, h]`: `output[b, t] = sum over (e, c) with slots[b, e, c] = t of
    gates[b, t, e] * experts[b, e, c]`. Loops (b, s, e, c, h); e and c are
    sum reductions, so splitting the experts leaves partial sums.
  }];
  let arguments = (ins Dtc_FloatTensor:$experts, Dtc_IndexTensor:$slots,
                   Dtc_FloatTensor:$gates);
  let results = (outs Dtc_FloatTensor:$output);
  let assemblyFormat = [{
    $experts `,` $slots `,` $gates attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// Loops (b, s, e, c, h): the experts and slots of a token add up
    /// (ShardingRuleOpInterface).
    bool isSumReductionLoop(int64_t loop) { return loop == 2 || loop == 3; }
  }];
}

include "dialects/dtc/DtcGradOps.td"
include "dialects/dtc/DtcCollectiveOps.td"

#endif // DTC_OPS_TD
