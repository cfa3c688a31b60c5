//===- DtcGradOps.td - dtc gradient, mask and optimizer ops -*- tablegen -*-===//
//
// The ops the autodiff pass emits: fused gradients of the ops whose
// derivative is not a short composition of forward ops, the compare/select
// pair for piecewise derivatives, and the optimizer update. Included from
// DtcOps.td; shape and sharding rules live in DtcOps.cpp like every other
// op's. A gradient op's loops mirror its forward op's loops, with the
// iterator types of the transposed computation (a loop the forward op
// reads through and the gradient sums over becomes a reduction).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_GRAD_OPS_TD
#define DTC_GRAD_OPS_TD

//===----------------------------------------------------------------------===//
// Masks: compare and select
//===----------------------------------------------------------------------===//

def Dtc_CompareOp : Dtc_ShapedOp<"compare", [Dtc_Recomputable]> {
  let summary = "Elementwise comparison with numpy broadcasting, to i1";
  let description = [{
    `predicate` is one of `eq`, `ne`, `lt`, `le`, `gt`, `ge`. Both operands
    have the same element type; the result is an `i1` tensor of the
    broadcast shape. Floats compare as IEEE (every predicate but `ne` is
    false on NaN).
  }];
  let arguments = (ins Dtc_Tensor:$lhs, Dtc_Tensor:$rhs, StrAttr:$predicate);
  let results = (outs StaticShapeTensorOf<[I1]>:$output);
  let assemblyFormat =
      "$lhs `,` $rhs attr-dict `:` functional-type(operands, results)";
}

def Dtc_SelectOp
    : Dtc_ShapedOp<"select", [Dtc_Differentiable, Dtc_Recomputable]> {
  let summary = "Elementwise `cond ? on_true : on_false` with broadcasting";
  let description = [{
    The three operands broadcast together (numpy rules); `on_true` and
    `on_false` share the result's element type.
  }];
  let arguments = (ins StaticShapeTensorOf<[I1]>:$cond, Dtc_Tensor:$on_true,
                   Dtc_Tensor:$on_false);
  let results = (outs Dtc_Tensor:$output);
  let assemblyFormat = [{
    $cond `,` $on_true `,` $on_false attr-dict `:`
    functional-type(operands, results)
  }];
}

//===----------------------------------------------------------------------===//
// Gradient ops
//===----------------------------------------------------------------------===//

def Dtc_SoftmaxGradOp : Dtc_ShapedOp<"softmax_grad"> {
  let summary = "Gradient of softmax from its output";
  let description = [{
    `dx = y * (dy - sum_axis(dy * y))` where `y` is softmax's output and `dy`
    its gradient. Loops as `dtc.softmax`: `axis` is a reduction the result
    also indexes.
  }];
  let arguments = (ins Dtc_FloatTensor:$output, Dtc_FloatTensor:$grad,
                   I64Attr:$axis);
  let results = (outs Dtc_FloatTensor:$input_grad);
  let assemblyFormat =
      "$output `,` $grad attr-dict `:` functional-type(operands, results)";
}

def Dtc_LayerNormGradOp
    : Dtc_ShapedOp<"layer_norm_grad", [Dtc_SumsOverParallelLoops]> {
  let summary = "Gradient of layer_norm: input, weight and bias gradients";
  let description = [{
    Recomputes the statistics of `input` over dims `[axis, rank)`.
    `weight_grad = sum(dy * xhat)` and `bias_grad = sum(dy)` over the leading
    dims, both with the weight's shape (`bias_grad` is unused when the
    forward op has no bias). Loops as `dtc.layer_norm`.
  }];
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_FloatTensor:$weight,
                   Dtc_FloatTensor:$grad, I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$input_grad,
                      Dtc_FloatTensor:$weight_grad,
                      Dtc_FloatTensor:$bias_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad attr-dict `:`
    functional-type(operands, results)
  }];
}

def Dtc_RmsNormGradOp
    : Dtc_ShapedOp<"rms_norm_grad", [Dtc_SumsOverParallelLoops]> {
  let summary = "Gradient of rms_norm: input and weight gradients";
  let description = [{
    Recomputes `rms` over dims `[axis, rank)`; `weight_grad = sum(dy * x /
    rms)` over the leading dims. Loops as `dtc.rms_norm`.
  }];
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_FloatTensor:$weight,
                   Dtc_FloatTensor:$grad, I64Attr:$axis, F64Attr:$epsilon);
  let results = (outs Dtc_FloatTensor:$input_grad,
                      Dtc_FloatTensor:$weight_grad);
  let assemblyFormat = [{
    $input `,` $weight `,` $grad attr-dict `:`
    functional-type(operands, results)
  }];
}

def Dtc_AttentionGradOp
    : Dtc_ShapedOp<"attention_grad", [Dtc_SumsOverParallelLoops,
                                      Dtc_ComputedDefaults,
                                      Dtc_SequenceMixing]> {
  let summary = "Gradient of attention: query, key and value gradients";
  let description = [{
    Operands and attributes as `dtc.attention` plus the output's gradient
    `grad [b, h, s, e]`; results have the shapes of query, key and value.
    With grouped-query heads the key and value gradients sum over the query
    heads of their group. Probabilities are recomputed row by row (no
    `[s, t]` tensor per head is kept). Loops as `dtc.attention`.
  }];
  let arguments = (ins Dtc_FloatTensor:$query, Dtc_FloatTensor:$key,
                   Dtc_FloatTensor:$value, Dtc_FloatTensor:$grad,
                   UnitAttr:$causal, OptionalAttr<F64Attr>:$scale);
  let results = (outs Dtc_FloatTensor:$query_grad, Dtc_FloatTensor:$key_grad,
                      Dtc_FloatTensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $grad attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The scale applied to q.k: the attribute or 1/sqrt(head dim).
    double getEffectiveScale();
  }];
}

def Dtc_SelectiveScanGradOp
    : Dtc_ShapedOp<"selective_scan_grad", [Dtc_SumsOverParallelLoops]> {
  let summary = "Gradient of selective_scan: a, x and c gradients";
  let description = [{
    Operands as `dtc.selective_scan` plus the result's gradient
    `grad [b, d, t]`; results have the shapes of `a`, `x` and `c`. Recomputes
    the states `h` forward, then runs the recurrence backwards in time:
    `g_t = grad_t * c_t + a_{t+1} * g_{t+1}` is `x_grad`, `a_grad_t = g_t *
    h_{t-1}`, and `c_grad[b, t, n] = sum_d grad[b, d, t] * h_t[n]` sums over
    the channels. Loops `(b, d, t, n)` as the forward op's, the state now
    parallel (every result indexes it); `c_grad` is a partial sum when the
    channels are split.
  }];
  let arguments = (ins Dtc_FloatTensor:$a, Dtc_FloatTensor:$x,
                   Dtc_FloatTensor:$c, Dtc_FloatTensor:$grad);
  let results = (outs Dtc_FloatTensor:$a_grad, Dtc_FloatTensor:$x_grad,
                      Dtc_FloatTensor:$c_grad);
  let assemblyFormat = [{
    $a `,` $x `,` $c `,` $grad attr-dict `:`
    functional-type(operands, results)
  }];
}

def Dtc_EmbeddingGradOp
    : Dtc_ShapedOp<"embedding_grad", [Dtc_SumReductions, Dtc_RowLookup]> {
  let summary = "Gradient of embedding: scatter-add of rows into the table";
  let description = [{
    `grad [..., d]`, `ids [...]` -> `[num_rows, d]`, row `r` the sum of the
    gradient rows whose id is `r`, accumulated in index order. Ids outside
    `[0, num_rows)` are an error at run time. Loops: the transposed
    one-hot contraction of `dtc.embedding`: the ids dims are reductions,
    the embedding dim and the table rows parallel.
  }];
  let arguments = (ins Dtc_FloatTensor:$grad, Dtc_IndexTensor:$ids,
                   I64Attr:$num_rows);
  let results = (outs Dtc_FloatTensor:$table_grad);
  let assemblyFormat =
      "$grad `,` $ids attr-dict `:` functional-type(operands, results)";
}

def Dtc_GatherElementsGradOp : Dtc_ShapedOp<"gather_elements_grad"> {
  let summary = "Gradient of gather_elements: scatter-add into zeros";
  let description = [{
    `grad` and `indices` have the forward's result shape; the result is the
    forward's data shape (the indices' with `dim_size` along `axis`), each
    gradient element added at its (normalized) index along `axis`, in index
    order. Loops: the indices dims, whose `axis` is a sum (a split of it
    leaves partial sums), and the result's axis (a reduction that is not a
    sum, so never split: each element may land anywhere along it).
  }];
  let arguments = (ins Dtc_FloatTensor:$grad, Dtc_IndexTensor:$indices,
                   I64Attr:$axis, I64Attr:$dim_size);
  let results = (outs Dtc_FloatTensor:$data_grad);
  let assemblyFormat =
      "$grad `,` $indices attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    bool isSumReductionLoop(int64_t loop);
  }];
}

def Dtc_CrossEntropyGradOp : Dtc_ShapedOp<"cross_entropy_grad"> {
  let summary = "Gradient of the mean cross-entropy with respect to logits";
  let description = [{
    `(softmax(logits) - onehot(labels)) * grad_loss / count`, `count` the
    number of positions whose label is not `ignore_index`; those positions
    get zero rows. `grad_loss` is the 0-d f32 gradient of the loss.
    Loops: the positions are parallel, the vocabulary a reduction the
    result indexes (as softmax).
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, Dtc_IndexTensor:$labels,
                   0DTensorOf<[F32]>:$grad_loss,
                   DefaultValuedAttr<I64Attr, "-100">:$ignore_index);
  let results = (outs Dtc_FloatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $labels `,` $grad_loss attr-dict `:`
    functional-type(operands, results)
  }];
  let extraClassDeclaration = [{
    /// The vocabulary, split like the logits (ShardingRuleOpInterface).
    bool isVocabParallelLoop(int64_t loop);
    /// The loss's 1/positions (all loops but the vocabulary).
    bool isMeanLoop(int64_t loop);
  }];
}

class Dtc_ActivationGradOp<string mnemonic, string forward>
    : Dtc_ShapedOp<mnemonic> {
  let summary = "Gradient of `dtc." # forward # "`: dy * f'(x)";
  let results = (outs Dtc_FloatTensor:$input_grad);
  let assemblyFormat =
      "$input `,` $grad attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(
        ::mlir::MLIRContext *, std::optional<::mlir::Location> loc,
        Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return detail::inferSameTypeGrad(loc, adaptor.getInput().getType(),
                                       adaptor.getGrad().getType(), types);
    }
    ::llvm::SmallVector<::mlir::utils::IteratorType>
    $cppClass::getLoopIteratorTypes() {
      return detail::elementwiseIteratorTypes(getOperation());
    }
    ::llvm::SmallVector<::mlir::AffineMap> $cppClass::getIndexingMaps() {
      return detail::elementwiseIndexingMaps(getOperation());
    }
  }];
}

def Dtc_GeluGradOp : Dtc_ActivationGradOp<"gelu_grad", "gelu"> {
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_FloatTensor:$grad,
                   UnitAttr:$approximate_tanh);
}

def Dtc_SiluGradOp : Dtc_ActivationGradOp<"silu_grad", "silu"> {
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_FloatTensor:$grad);
}

def Dtc_SliceGradOp : Dtc_ShapedOp<"slice_grad", [Dtc_LocalForm]> {
  let summary = "Gradient of slice: zeros of input_shape, grad scattered in";
  let description = [{
    `grad` has the shape of the slice's result; element `i` lands at
    `starts + i * strides` of the `input_shape` result. Loops as
    `dtc.slice` (over the slice).
  }];
  let arguments = (ins Dtc_Tensor:$grad, DenseI64ArrayAttr:$input_shape,
                   DenseI64ArrayAttr:$starts, DenseI64ArrayAttr:$strides);
  let results = (outs Dtc_Tensor:$input_grad);
  let assemblyFormat = "$grad attr-dict `:` functional-type(operands, results)";
}

def Dtc_ConvGradInputOp
    : Dtc_ShapedOp<"conv_grad_input", [Dtc_SumReductions, Dtc_LocalForm]> {
  let summary = "Gradient of conv with respect to its input";
  let description = [{
    `grad [n, f, o1..ok]` (the conv result's gradient) and `weight` ->
    `input_shape`; attributes as `dtc.conv`. Loops as `dtc.conv`
    `(n, f, o1..ok, c', k1..kk)` with the output channels now a reduction
    and the input channels parallel.
  }];
  let arguments = (ins Dtc_FloatTensor:$grad, Dtc_FloatTensor:$weight,
                   DenseI64ArrayAttr:$input_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                   DenseI64ArrayAttr:$pads,
                   DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Dtc_FloatTensor:$input_grad);
  let assemblyFormat =
      "$grad `,` $weight attr-dict `:` functional-type(operands, results)";
}

def Dtc_ConvGradWeightOp
    : Dtc_ShapedOp<"conv_grad_weight", [Dtc_SumReductions, Dtc_LocalForm]> {
  let summary = "Gradient of conv with respect to its weight";
  let description = [{
    `input` and `grad [n, f, o1..ok]` -> `weight_shape`; attributes as
    `dtc.conv`. Loops as `dtc.conv` with batch and output positions now
    reductions and the weight's dims parallel.
  }];
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_FloatTensor:$grad,
                   DenseI64ArrayAttr:$weight_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                   DenseI64ArrayAttr:$pads,
                   DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Dtc_FloatTensor:$weight_grad);
  let assemblyFormat =
      "$input `,` $grad attr-dict `:` functional-type(operands, results)";
}

def Dtc_MaxPoolGradOp : Dtc_ShapedOp<"max_pool_grad"> {
  let summary = "Gradient of max_pool: each window's gradient to its max";
  let description = [{
    The gradient of a window goes to the first position (in row-major window
    order) holding its maximum, as PyTorch does. Loops as `dtc.max_pool`.
  }];
  let arguments = (ins Dtc_FloatTensor:$input, Dtc_FloatTensor:$grad,
                   DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                   DenseI64ArrayAttr:$pads);
  let results = (outs Dtc_FloatTensor:$input_grad);
  let assemblyFormat =
      "$input `,` $grad attr-dict `:` functional-type(operands, results)";
}

def Dtc_AvgPoolGradOp : Dtc_ShapedOp<"avg_pool_grad", [Dtc_LocalForm]> {
  let summary = "Gradient of avg_pool: each window's gradient spread evenly";
  let description = [{
    `grad` (the pooled result's gradient) -> `input_shape`; attributes as
    `dtc.avg_pool`. Loops as `dtc.avg_pool`.
  }];
  let arguments = (ins Dtc_FloatTensor:$grad, DenseI64ArrayAttr:$input_shape,
                   DenseI64ArrayAttr:$kernel_shape,
                   DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$dilations,
                   DenseI64ArrayAttr:$pads, UnitAttr:$count_include_pad);
  let results = (outs Dtc_FloatTensor:$input_grad);
  let assemblyFormat = "$grad attr-dict `:` functional-type(operands, results)";
}

//===----------------------------------------------------------------------===//
// Optimizer ops
//===----------------------------------------------------------------------===//

def Dtc_AdamWOp : Dtc_ShapedOp<"adamw", [DeclareOpInterfaceMethods<
    Dtc_InPlaceOpInterface, ["getInPlaceOperands"]>]> {
  let summary = "One AdamW step (PyTorch's decoupled weight decay)";
  let description = [{
    ```
    g = grad * grad_scale
    m = beta1 m + (1 - beta1) g
    v = beta2 v + (1 - beta2) g^2
    param = param (1 - lr wd) - lr (m / (1 - beta1^step))
                                   / (sqrt(v / (1 - beta2^step)) + epsilon)
    ```
    `lr`, `step` (1-based) and `grad_scale` are 0-d f32 tensors; `grad` and
    the moments have the parameter's shape (any float types). Results are
    the new parameter and moments, typed like the operands they replace;
    the kernel allows them to share those operands' buffers. Loops: the
    parameter's dims, all parallel; the scalars are read by every loop.
  }];
  let arguments = (ins Dtc_FloatTensor:$param, Dtc_FloatTensor:$grad,
                   Dtc_FloatTensor:$exp_avg, Dtc_FloatTensor:$exp_avg_sq,
                   0DTensorOf<[F32]>:$lr, 0DTensorOf<[F32]>:$step,
                   0DTensorOf<[F32]>:$grad_scale, F64Attr:$beta1,
                   F64Attr:$beta2, F64Attr:$epsilon, F64Attr:$weight_decay);
  let results = (outs Dtc_FloatTensor:$new_param, Dtc_FloatTensor:$new_exp_avg,
                      Dtc_FloatTensor:$new_exp_avg_sq);
  let assemblyFormat = [{
    $param `,` $grad `,` $exp_avg `,` $exp_avg_sq `,` $lr `,` $step `,`
    $grad_scale attr-dict `:` functional-type(operands, results)
  }];
}


def Dtc_MoeRouteGradOp : Dtc_ShapedOp<"moe_route_grad"> {
  let summary = "Gradient of moe_route: the router logits' gradient";
  let description = [{
    `logits [b, s, E]`, `gates_grad [b, s, E]`, `aux_grad [b]` -> `[b, s,
    E]`, with the attributes of the `dtc.moe_route` it differentiates; the
    choices are made again from the logits. The choice and the drops are
    piecewise constant, so the gradient flows through the scores of the
    chosen experts and the mean scores of the auxiliary loss.
  }];
  let arguments = (ins Dtc_FloatTensor:$logits, Dtc_FloatTensor:$gates_grad,
                   Dtc_FloatTensor:$aux_grad, I64Attr:$top_k,
                   I64Attr:$capacity,
                   DefaultValuedAttr<StrAttr, "\"softmax\"">:$score,
                   UnitAttr:$normalize);
  let results = (outs Dtc_FloatTensor:$logits_grad);
  let assemblyFormat = [{
    $logits `,` $gates_grad `,` $aux_grad attr-dict `:`
    functional-type(operands, results)
  }];
}

def Dtc_MoeDispatchGradOp : Dtc_ShapedOp<"moe_dispatch_grad"> {
  let summary = "Gradient of moe_dispatch: buffer gradients summed per token";
  let description = [{
    `grad [b, E, C, h]`, `slots [b, E, C]` -> `[b, seq_len, h]`, the sum of
    the slots' gradients of each token. Loops as `dtc.moe_combine`.
  }];
  let arguments = (ins Dtc_FloatTensor:$grad, Dtc_IndexTensor:$slots,
                   I64Attr:$seq_len);
  let results = (outs Dtc_FloatTensor:$input_grad);
  let assemblyFormat =
      "$grad `,` $slots attr-dict `:` functional-type(operands, results)";
  let extraClassDeclaration = [{
    /// Loops (b, s, e, c, h): the experts and slots of a token add up
    /// (ShardingRuleOpInterface).
    bool isSumReductionLoop(int64_t loop) { return loop == 2 || loop == 3; }
  }];
}

def Dtc_MoeCombineGradOp
    : Dtc_ShapedOp<"moe_combine_grad", [Dtc_SumsOverParallelLoops]> {
  let summary = "Gradient of moe_combine: expert-buffer and gate gradients";
  let description = [{
    Operands of `dtc.moe_combine` plus the output's gradient `grad [b, s,
    h]`; results `experts_grad [b, E, C, h]` (the gate-weighted gradient of
    each slot's token) and `gates_grad [b, s, E]` (the dot product of the
    slot's expert output with its token's gradient). Loops (b, s, e, c, h),
    all parallel; each result sums over the loops it does not index.
  }];
  let arguments = (ins Dtc_FloatTensor:$experts, Dtc_IndexTensor:$slots,
                   Dtc_FloatTensor:$gates, Dtc_FloatTensor:$grad);
  let results = (outs Dtc_FloatTensor:$experts_grad,
                      Dtc_FloatTensor:$gates_grad);
  let assemblyFormat = [{
    $experts `,` $slots `,` $gates `,` $grad attr-dict `:`
    functional-type(operands, results)
  }];
}

#endif // DTC_GRAD_OPS_TD
