// RUN: dtc-opt %s -split-input-file -verify-diagnostics

// Shape rules report through inferReturnTypes: their message comes first,
// then the op's "failed to infer returned types".

//===----------------------------------------------------------------------===//
// Type constraints (ODS)
//===----------------------------------------------------------------------===//

func.func @dynamic_shape(%x: tensor<?x4xf32>) {
  // expected-error @+1 {{'dtc.neg' op operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float or 64-bit float values, but got 'tensor<?x4xf32>'}}
  %0 = dtc.neg %x : tensor<?x4xf32>
  return
}

// -----

func.func @unranked(%x: tensor<*xf32>) {
  // expected-error @+1 {{'dtc.reshape' op operand #0 must be statically shaped tensor of}}
  %0 = dtc.reshape %x : (tensor<*xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @dynamic_parameter() {
  // expected-error @+1 {{'dtc.parameter' op result #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float or 64-bit float or 64-bit signless integer or 32-bit signless integer or 8-bit signless integer or 1-bit signless integer values, but got 'tensor<?x16xf32>'}}
  %0 = dtc.parameter "w" : tensor<?x16xf32>
  return
}

// -----

func.func @unsupported_element_type(%x: tensor<4xi16>) {
  // expected-error @+1 {{'dtc.add' op operand #0 must be statically shaped tensor of}}
  %0 = dtc.add %x, %x : (tensor<4xi16>, tensor<4xi16>) -> tensor<4xi16>
  return
}

// -----

func.func @integer_unary(%x: tensor<4xi32>) {
  // expected-error @+1 {{'dtc.exp' op operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float or 64-bit float values, but got 'tensor<4xi32>'}}
  %0 = dtc.exp %x : tensor<4xi32>
  return
}

// -----

func.func @integer_matmul(%a: tensor<4x8xi32>, %b: tensor<8x16xi32>) {
  // expected-error @+1 {{'dtc.matmul' op operand #0 must be statically shaped tensor of 32-bit float or bfloat16 type or 16-bit float or 64-bit float values, but got 'tensor<4x8xi32>'}}
  %0 = dtc.matmul %a, %b : (tensor<4x8xi32>, tensor<8x16xi32>) -> tensor<4x16xi32>
  return
}

// -----

func.func @float_ids(%t: tensor<50x16xf32>, %ids: tensor<8xf32>) {
  // expected-error @+1 {{'dtc.embedding' op operand #1 must be statically shaped tensor of 64-bit signless integer or 32-bit signless integer values, but got 'tensor<8xf32>'}}
  %0 = dtc.embedding %t, %ids : (tensor<50x16xf32>, tensor<8xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @i8_labels(%l: tensor<4x10xf32>, %y: tensor<4xi8>) {
  // expected-error @+1 {{'dtc.cross_entropy' op operand #1 must be statically shaped tensor of 64-bit signless integer or 32-bit signless integer values, but got 'tensor<4xi8>'}}
  %0 = dtc.cross_entropy %l, %y : (tensor<4x10xf32>, tensor<4xi8>) -> tensor<f32>
  return
}

// -----

func.func @cast_to_unsupported(%x: tensor<4xf32>) {
  // The result type is inferred as tensor<4xi16>, which is no dtc tensor.
  // expected-error @+1 {{'dtc.cast' op result #0 must be statically shaped tensor of}}
  %0 = dtc.cast %x : tensor<4xf32> to i16
  return
}

// -----

func.func @cast_changes_shape(%x: tensor<4xf32>) {
  // expected-error @+1 {{'dtc.cast' op requires the same shape for all operands and results}}
  %0 = "dtc.cast"(%x) <{to = f16}> : (tensor<4xf32>) -> tensor<2x2xf16>
  return
}

// -----

func.func @cast_wrong_element_type(%x: tensor<4xf32>) {
  // expected-error @+2 {{'dtc.cast' op inferred type(s) 'tensor<4xf16>' are incompatible with return type(s) of operation 'tensor<4xbf16>'}}
  // expected-error @+1 {{'dtc.cast' op failed to infer returned types}}
  %0 = "dtc.cast"(%x) <{to = f16}> : (tensor<4xf32>) -> tensor<4xbf16>
  return
}

// -----

func.func @unary_result_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{'dtc.tanh' op requires the same type for all operands and results}}
  %0 = "dtc.tanh"(%x) : (tensor<4xf32>) -> tensor<4xf16>
  return
}

// -----

func.func @constant_type_mismatch() {
  // expected-error @+1 {{'dtc.constant' op failed to verify that all of {value, output} have same type}}
  %0 = "dtc.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<2x2xf32>
  return
}

// -----

func.func @constant_unsupported_type() {
  // expected-error @+1 {{'dtc.constant' op result #0 must be statically shaped tensor of}}
  %0 = dtc.constant dense<1> : tensor<4xi16>
  return
}

// -----

func.func @wrong_inferred_type(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{'dtc.add' op inferred type(s) 'tensor<4x8xf32>' are incompatible with return type(s) of operation 'tensor<8xf32>'}}
  // expected-error @+1 {{'dtc.add' op failed to infer returned types}}
  %0 = dtc.add %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @wrong_matmul_type(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+2 {{'dtc.matmul' op inferred type(s) 'tensor<4x16xf32>' are incompatible with return type(s) of operation 'tensor<16x4xf32>'}}
  // expected-error @+1 {{'dtc.matmul' op failed to infer returned types}}
  %0 = dtc.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<16x4xf32>
  return
}

// -----

func.func @wrong_reduce_type(%x: tensor<2x4xf32>) {
  // Without keep_dims the reduced dim is dropped.
  // expected-error @+2 {{'dtc.reduce_sum' op inferred type(s) 'tensor<2xf32>' are incompatible with return type(s) of operation 'tensor<2x1xf32>'}}
  // expected-error @+1 {{'dtc.reduce_sum' op failed to infer returned types}}
  %0 = dtc.reduce_sum %x {dims = array<i64: 1>} : (tensor<2x4xf32>) -> tensor<2x1xf32>
  return
}

// -----

func.func @wrong_loss_type(%l: tensor<4x10xf32>, %y: tensor<4xi64>) {
  // expected-error @+1 {{'dtc.cross_entropy' op result #0 must be 0D tensor of 32-bit float values, but got 'tensor<4xf32>'}}
  %0 = dtc.cross_entropy %l, %y : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

func.func @scale_not_f64(%q: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{'dtc.attention' op attribute 'scale' failed to satisfy constraint: 64-bit float attribute}}
  %0 = dtc.attention %q, %q, %q {scale = 0.5 : f32} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// ParameterOp
//===----------------------------------------------------------------------===//

// -----

func.func @parameter_empty_name() {
  // expected-error @+1 {{'dtc.parameter' op needs a non-empty name}}
  %0 = dtc.parameter "" : tensor<4xf32>
  return
}

//===----------------------------------------------------------------------===//
// Binary elementwise ops
//===----------------------------------------------------------------------===//

// -----

func.func @binary_element_types(%a: tensor<4xf32>, %b: tensor<4xbf16>) {
  // expected-error @+2 {{operand element types differ: 'f32' vs 'bf16'}}
  // expected-error @+1 {{'dtc.mul' op failed to infer returned types}}
  %0 = dtc.mul %a, %b : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xf32>
  return
}

// -----

func.func @binary_no_broadcast(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) {
  // expected-error @+2 {{shapes [2x3] and [4x3] do not broadcast}}
  // expected-error @+1 {{'dtc.sub' op failed to infer returned types}}
  %0 = dtc.sub %a, %b : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @binary_no_broadcast_trailing(%a: tensor<4x3xi64>, %b: tensor<4xi64>) {
  // Trailing dims align: 3 against 4.
  // expected-error @+2 {{shapes [4x3] and [4] do not broadcast}}
  // expected-error @+1 {{'dtc.max' op failed to infer returned types}}
  %0 = dtc.max %a, %b : (tensor<4x3xi64>, tensor<4xi64>) -> tensor<4x3xi64>
  return
}

//===----------------------------------------------------------------------===//
// MatmulOp
//===----------------------------------------------------------------------===//

// -----

func.func @matmul_rank(%a: tensor<8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+2 {{operands must have rank >= 2, got 1 and 2}}
  // expected-error @+1 {{'dtc.matmul' op failed to infer returned types}}
  %0 = dtc.matmul %a, %b : (tensor<8xf32>, tensor<8x16xf32>) -> tensor<16xf32>
  return
}

// -----

func.func @matmul_element_types(%a: tensor<4x8xf32>, %b: tensor<8x16xf16>) {
  // expected-error @+2 {{operand element types differ: 'f32' vs 'f16'}}
  // expected-error @+1 {{'dtc.matmul' op failed to infer returned types}}
  %0 = dtc.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf16>) -> tensor<4x16xf32>
  return
}

// -----

func.func @matmul_contraction(%a: tensor<4x8xf32>, %b: tensor<16x8xf32>) {
  // Without transpose_rhs, rhs [16x8] contracts over 16.
  // expected-error @+2 {{contraction sizes differ: lhs [4x8] gives k=8, rhs [16x8] gives k=16}}
  // expected-error @+1 {{'dtc.matmul' op failed to infer returned types}}
  %0 = dtc.matmul %a, %b : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @matmul_contraction_transposed(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) {
  // transpose_lhs reads lhs [4x8] as [8x4]: k=4.
  // expected-error @+2 {{contraction sizes differ: lhs [4x8] gives k=4, rhs [8x16] gives k=8}}
  // expected-error @+1 {{'dtc.matmul' op failed to infer returned types}}
  %0 = dtc.matmul %a, %b {transpose_lhs} : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<2x3x4x8xf32>, %b: tensor<3x2x8x16xf32>) {
  // expected-error @+2 {{batch dimensions of [2x3x4x8] and [3x2x8x16] do not broadcast}}
  // expected-error @+1 {{'dtc.matmul' op failed to infer returned types}}
  %0 = dtc.matmul %a, %b : (tensor<2x3x4x8xf32>, tensor<3x2x8x16xf32>) -> tensor<2x3x4x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// -----

func.func @reduce_dim_out_of_range(%x: tensor<2x4x8xf32>) {
  // expected-error @+2 {{reduction dim 3 is out of range for rank 3}}
  // expected-error @+1 {{'dtc.reduce_sum' op failed to infer returned types}}
  %0 = dtc.reduce_sum %x {dims = array<i64: 3>} : (tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @reduce_negative_dim(%x: tensor<2x4x8xf32>) {
  // expected-error @+2 {{reduction dim -1 is out of range for rank 3}}
  // expected-error @+1 {{'dtc.reduce_max' op failed to infer returned types}}
  %0 = dtc.reduce_max %x {dims = array<i64: -1>} : (tensor<2x4x8xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @reduce_dims_unsorted(%x: tensor<2x4x8xf32>) {
  // expected-error @+2 {{reduction dims must be sorted and unique, got 0 after 2}}
  // expected-error @+1 {{'dtc.reduce_mean' op failed to infer returned types}}
  %0 = dtc.reduce_mean %x {dims = array<i64: 2, 0>} : (tensor<2x4x8xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @reduce_dims_duplicate(%x: tensor<2x4x8xf32>) {
  // expected-error @+2 {{reduction dims must be sorted and unique, got 1 after 1}}
  // expected-error @+1 {{'dtc.reduce_sum' op failed to infer returned types}}
  %0 = dtc.reduce_sum %x {dims = array<i64: 1, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// Normalizations
//===----------------------------------------------------------------------===//

// -----

func.func @softmax_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = dtc.softmax %x {axis = 2 : i64} : tensor<4x8xf32>
  return
}

// -----

func.func @softmax_axis_huge(%x: tensor<4x8xf32>) {
  // Far out of range: the sharding rule must not index by it before the
  // verifier reports it.
  // expected-error @+1 {{axis 100000000000 is out of range for rank 2}}
  %0 = dtc.softmax %x {axis = 100000000000 : i64} : tensor<4x8xf32>
  return
}

// -----

func.func @softmax_negative_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{axis -1 is out of range for rank 2}}
  %0 = dtc.softmax %x {axis = -1 : i64} : tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_axis(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2}}
  // expected-error @+1 {{'dtc.layer_norm' op failed to infer returned types}}
  %0 = dtc.layer_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_weight_shape(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) {
  // axis 1 normalizes [4x8]: the weight must be [4x8].
  // expected-error @+2 {{scale/bias shape [8] must equal the normalized shape [4x8]}}
  // expected-error @+1 {{'dtc.layer_norm' op failed to infer returned types}}
  %0 = dtc.layer_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

func.func @layer_norm_bias_shape(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{scale/bias shape [4] must equal the normalized shape [8]}}
  // expected-error @+1 {{'dtc.layer_norm' op failed to infer returned types}}
  %0 = dtc.layer_norm %x, %w, %b {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_bias_element_type(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xbf16>) {
  // expected-error @+2 {{scale/bias element type 'bf16' differs from the input's 'f32'}}
  // expected-error @+1 {{'dtc.layer_norm' op failed to infer returned types}}
  %0 = dtc.layer_norm %x, %w, %b {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xbf16>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_axis(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+2 {{axis -1 is out of range for rank 2}}
  // expected-error @+1 {{'dtc.rms_norm' op failed to infer returned types}}
  %0 = dtc.rms_norm %x, %w {axis = -1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_weight_shape(%x: tensor<4x8xf32>, %w: tensor<4x8xf32>) {
  // expected-error @+2 {{scale/bias shape [4x8] must equal the normalized shape [8]}}
  // expected-error @+1 {{'dtc.rms_norm' op failed to infer returned types}}
  %0 = dtc.rms_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_weight_element_type(%x: tensor<4x8xbf16>, %w: tensor<8xf32>) {
  // expected-error @+2 {{scale/bias element type 'f32' differs from the input's 'bf16'}}
  // expected-error @+1 {{'dtc.rms_norm' op failed to infer returned types}}
  %0 = dtc.rms_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xbf16>, tensor<8xf32>) -> tensor<4x8xbf16>
  return
}

//===----------------------------------------------------------------------===//
// ReshapeOp
//===----------------------------------------------------------------------===//

// -----

func.func @reshape_element_type(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{'dtc.reshape' op changes the element type from 'f32' to 'i32'}}
  %0 = dtc.reshape %x : (tensor<2x4xf32>) -> tensor<8xi32>
  return
}

// -----

func.func @reshape_element_count(%x: tensor<2x4xf32>) {
  // expected-error @+1 {{'dtc.reshape' op cannot reshape [2x4] (8 elements) to [3x3] (9 elements)}}
  %0 = dtc.reshape %x : (tensor<2x4xf32>) -> tensor<3x3xf32>
  return
}

//===----------------------------------------------------------------------===//
// TransposeOp
//===----------------------------------------------------------------------===//

// -----

func.func @transpose_rank(%x: tensor<2x4x8xf32>) {
  // expected-error @+2 {{permutation has 2 entries for a rank-3 input}}
  // expected-error @+1 {{'dtc.transpose' op failed to infer returned types}}
  %0 = dtc.transpose %x {permutation = array<i64: 1, 0>} : (tensor<2x4x8xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @transpose_repeated(%x: tensor<2x4x8xf32>) {
  // expected-error @+2 {{permutation [0, 2, 0] is not a permutation of 0..2}}
  // expected-error @+1 {{'dtc.transpose' op failed to infer returned types}}
  %0 = dtc.transpose %x {permutation = array<i64: 0, 2, 0>} : (tensor<2x4x8xf32>) -> tensor<2x8x2xf32>
  return
}

// -----

func.func @transpose_out_of_range(%x: tensor<2x4xf32>) {
  // expected-error @+2 {{permutation [2, 0] is not a permutation of 0..1}}
  // expected-error @+1 {{'dtc.transpose' op failed to infer returned types}}
  %0 = dtc.transpose %x {permutation = array<i64: 2, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  return
}

//===----------------------------------------------------------------------===//
// ConcatOp
//===----------------------------------------------------------------------===//

// -----

func.func @concat_no_inputs() {
  // SameOperandsElementType rejects this before the shape rule's "needs at
  // least one input" (reachable only from C++ builders) runs.
  // expected-error @+1 {{'dtc.concat' op expected 1 or more operands, but found 0}}
  %0 = dtc.concat {axis = 0 : i64} : () -> tensor<2xf32>
  return
}

// -----

func.func @concat_axis(%a: tensor<2x4xf32>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2}}
  // expected-error @+1 {{'dtc.concat' op failed to infer returned types}}
  %0 = dtc.concat %a, %a {axis = 2 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @concat_ranks(%a: tensor<2x4xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{inputs have different ranks}}
  // expected-error @+1 {{'dtc.concat' op failed to infer returned types}}
  %0 = dtc.concat %a, %b {axis = 0 : i64} : (tensor<2x4xf32>, tensor<8xf32>) -> tensor<2x12xf32>
  return
}

// -----

func.func @concat_shapes(%a: tensor<2x4xf32>, %b: tensor<3x4xf32>) {
  // expected-error @+2 {{input shapes [2x4] and [3x4] differ outside axis 1}}
  // expected-error @+1 {{'dtc.concat' op failed to infer returned types}}
  %0 = dtc.concat %a, %b {axis = 1 : i64} : (tensor<2x4xf32>, tensor<3x4xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @concat_element_types(%a: tensor<2x4xf32>, %b: tensor<2x4xf16>) {
  // expected-error @+1 {{'dtc.concat' op requires the same element type for all operands}}
  %0 = dtc.concat %a, %b {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf16>) -> tensor<4x4xf32>
  return
}

// -----

func.func @concat_wrong_type(%a: tensor<2x4xf32>, %b: tensor<2x3xf32>) {
  // expected-error @+2 {{'dtc.concat' op inferred type(s) 'tensor<2x7xf32>' are incompatible with return type(s) of operation 'tensor<4x4xf32>'}}
  // expected-error @+1 {{'dtc.concat' op failed to infer returned types}}
  %0 = dtc.concat %a, %b {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x3xf32>) -> tensor<4x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// SliceOp
//===----------------------------------------------------------------------===//

// -----

func.func @slice_entries(%x: tensor<4x10xf32>) {
  // expected-error @+2 {{starts, limits and strides need 2 entries each}}
  // expected-error @+1 {{'dtc.slice' op failed to infer returned types}}
  %0 = dtc.slice %x {starts = array<i64: 0, 0>, limits = array<i64: 4, 10>, strides = array<i64: 1>} : (tensor<4x10xf32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @slice_stride(%x: tensor<4x10xf32>) {
  // expected-error @+2 {{stride 0 of dim 1 must be positive}}
  // expected-error @+1 {{'dtc.slice' op failed to infer returned types}}
  %0 = dtc.slice %x {starts = array<i64: 0, 0>, limits = array<i64: 4, 10>, strides = array<i64: 1, 0>} : (tensor<4x10xf32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @slice_limit(%x: tensor<4x10xf32>) {
  // expected-error @+2 {{range [2, 11) of dim 1 is not within [0, 10]}}
  // expected-error @+1 {{'dtc.slice' op failed to infer returned types}}
  %0 = dtc.slice %x {starts = array<i64: 0, 2>, limits = array<i64: 4, 11>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<4x9xf32>
  return
}

// -----

func.func @slice_reversed(%x: tensor<4x10xf32>) {
  // expected-error @+2 {{range [3, 1) of dim 0 is not within [0, 4]}}
  // expected-error @+1 {{'dtc.slice' op failed to infer returned types}}
  %0 = dtc.slice %x {starts = array<i64: 3, 0>, limits = array<i64: 1, 10>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<0x10xf32>
  return
}

// -----

func.func @slice_negative_start(%x: tensor<4x10xf32>) {
  // expected-error @+2 {{range [-1, 4) of dim 0 is not within [0, 4]}}
  // expected-error @+1 {{'dtc.slice' op failed to infer returned types}}
  %0 = dtc.slice %x {starts = array<i64: -1, 0>, limits = array<i64: 4, 10>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<5x10xf32>
  return
}

// -----

func.func @slice_wrong_type(%x: tensor<4x10xf32>) {
  // ceil((10 - 1) / 2) = 5, not 4.
  // expected-error @+2 {{'dtc.slice' op inferred type(s) 'tensor<4x5xf32>' are incompatible with return type(s) of operation 'tensor<4x4xf32>'}}
  // expected-error @+1 {{'dtc.slice' op failed to infer returned types}}
  %0 = dtc.slice %x {starts = array<i64: 0, 1>, limits = array<i64: 4, 10>, strides = array<i64: 1, 2>} : (tensor<4x10xf32>) -> tensor<4x4xf32>
  return
}

//===----------------------------------------------------------------------===//
// EmbeddingOp
//===----------------------------------------------------------------------===//

// -----

func.func @embedding_table_rank(%t: tensor<50x4x16xf32>, %ids: tensor<8xi64>) {
  // expected-error @+2 {{table must be [rows, dim], got rank 3}}
  // expected-error @+1 {{'dtc.embedding' op failed to infer returned types}}
  %0 = dtc.embedding %t, %ids : (tensor<50x4x16xf32>, tensor<8xi64>) -> tensor<8x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// AttentionOp
//===----------------------------------------------------------------------===//

// -----

func.func @attention_rank(%q: tensor<2x16x32xf32>, %k: tensor<2x4x16x32xf32>) {
  // expected-error @+2 {{query, key and value must be [batch, heads, seq, head_dim]}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %k : (tensor<2x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>) -> tensor<2x16x32xf32>
  return
}

// -----

func.func @attention_element_types(%q: tensor<2x4x16x32xf32>, %k: tensor<2x4x16x32xf32>, %v: tensor<2x4x16x32xbf16>) {
  // expected-error @+2 {{query, key and value element types differ}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %v : (tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x4x16x32xbf16>) -> tensor<2x4x16x32xf32>
  return
}

// -----

func.func @attention_batch(%q: tensor<2x4x16x32xf32>, %k: tensor<2x4x16x32xf32>, %v: tensor<3x4x16x32xf32>) {
  // expected-error @+2 {{batch sizes differ}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %v : (tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>, tensor<3x4x16x32xf32>) -> tensor<2x4x16x32xf32>
  return
}

// -----

func.func @attention_kv_heads(%q: tensor<2x4x16x32xf32>, %k: tensor<2x4x16x32xf32>, %v: tensor<2x2x16x32xf32>) {
  // expected-error @+2 {{key [2x4x16x32] and value [2x2x16x32] disagree on heads or sequence length}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %v : (tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x2x16x32xf32>) -> tensor<2x4x16x32xf32>
  return
}

// -----

func.func @attention_kv_length(%q: tensor<2x4x16x32xf32>, %k: tensor<2x4x16x32xf32>, %v: tensor<2x4x8x32xf32>) {
  // expected-error @+2 {{key [2x4x16x32] and value [2x4x8x32] disagree on heads or sequence length}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %v : (tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x4x8x32xf32>) -> tensor<2x4x16x32xf32>
  return
}

// -----

func.func @attention_head_groups(%q: tensor<2x6x16x32xf32>, %k: tensor<2x4x16x32xf32>) {
  // expected-error @+2 {{query heads (6) must be a positive multiple of key/value heads (4)}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %k : (tensor<2x6x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>) -> tensor<2x6x16x32xf32>
  return
}

// -----

func.func @attention_zero_kv_heads(%q: tensor<2x4x16x32xf32>, %k: tensor<2x0x16x32xf32>) {
  // expected-error @+2 {{query heads (4) must be a positive multiple of key/value heads (0)}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %k : (tensor<2x4x16x32xf32>, tensor<2x0x16x32xf32>, tensor<2x0x16x32xf32>) -> tensor<2x4x16x32xf32>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<2x4x16x32xf32>, %k: tensor<2x4x16x64xf32>) {
  // expected-error @+2 {{query head dim 32 differs from key head dim 64}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %k : (tensor<2x4x16x32xf32>, tensor<2x4x16x64xf32>, tensor<2x4x16x64xf32>) -> tensor<2x4x16x64xf32>
  return
}

// -----

func.func @attention_wrong_type(%q: tensor<2x4x16x32xf32>, %k: tensor<2x4x8x32xf32>, %v: tensor<2x4x8x64xf32>) {
  // The output takes the value's head dim (64).
  // expected-error @+2 {{'dtc.attention' op inferred type(s) 'tensor<2x4x16x64xf32>' are incompatible with return type(s) of operation 'tensor<2x4x16x32xf32>'}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %v : (tensor<2x4x16x32xf32>, tensor<2x4x8x32xf32>, tensor<2x4x8x64xf32>) -> tensor<2x4x16x32xf32>
  return
}

//===----------------------------------------------------------------------===//
// CrossEntropyOp
//===----------------------------------------------------------------------===//

// -----

func.func @cross_entropy_labels(%l: tensor<4x10xf32>, %y: tensor<10xi64>) {
  // expected-error @+2 {{labels [10] must have the shape of logits [4x10] without its last (vocabulary) dim}}
  // expected-error @+1 {{'dtc.cross_entropy' op failed to infer returned types}}
  %0 = dtc.cross_entropy %l, %y : (tensor<4x10xf32>, tensor<10xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_scalar_logits(%l: tensor<f32>, %y: tensor<i64>) {
  // expected-error @+2 {{labels [] must have the shape of logits [] without its last (vocabulary) dim}}
  // expected-error @+1 {{'dtc.cross_entropy' op failed to infer returned types}}
  %0 = dtc.cross_entropy %l, %y : (tensor<f32>, tensor<i64>) -> tensor<f32>
  return
}

// -----

func.func @attention_zero_query_heads(%q: tensor<2x0x16x32xf32>, %k: tensor<2x2x16x32xf32>) {
  // expected-error @+2 {{query heads (0) must be a positive multiple of key/value heads (2)}}
  // expected-error @+1 {{'dtc.attention' op failed to infer returned types}}
  %0 = dtc.attention %q, %k, %k : (tensor<2x0x16x32xf32>, tensor<2x2x16x32xf32>, tensor<2x2x16x32xf32>) -> tensor<2x0x16x32xf32>
  return
}

// -----

func.func @conv_rank(%x: tensor<2x4xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+2 {{input must be [n, c, spatial...], got rank 2}}
  // expected-error @+1 {{'dtc.conv' op failed to infer returned types}}
  %0 = dtc.conv %x, %w {strides = array<i64>, dilations = array<i64>, pads = array<i64>} : (tensor<2x4xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @conv_weight_rank(%x: tensor<2x4x9x9xf32>, %w: tensor<8x4x3xf32>) {
  // expected-error @+2 {{weight rank 3 differs from the input rank 4}}
  // expected-error @+1 {{'dtc.conv' op failed to infer returned types}}
  %0 = dtc.conv %x, %w {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>, tensor<8x4x3xf32>) -> tensor<2x8x7x7xf32>
  return
}

// -----

func.func @conv_element_types(%x: tensor<2x4x9x9xf32>, %w: tensor<8x4x3x3xbf16>) {
  // expected-error @+2 {{operand element types differ: 'f32' vs 'bf16'}}
  // expected-error @+1 {{'dtc.conv' op failed to infer returned types}}
  %0 = dtc.conv %x, %w {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xbf16>) -> tensor<2x8x7x7xf32>
  return
}

// -----

func.func @conv_attr_sizes(%x: tensor<2x4x9x9xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+2 {{strides and dilations need 2 entries and pads 4 for 2 spatial dims}}
  // expected-error @+1 {{'dtc.conv' op failed to infer returned types}}
  %0 = dtc.conv %x, %w {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x7x7xf32>
  return
}

// -----

func.func @conv_groups(%x: tensor<2x4x9x9xf32>, %w: tensor<6x1x3x3xf32>) {
  // expected-error @+2 {{groups 4 must be positive and divide the input channels (4) and output channels (6)}}
  // expected-error @+1 {{'dtc.conv' op failed to infer returned types}}
  %0 = dtc.conv %x, %w {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, groups = 4 : i64} : (tensor<2x4x9x9xf32>, tensor<6x1x3x3xf32>) -> tensor<2x6x7x7xf32>
  return
}

// -----

func.func @conv_weight_channels(%x: tensor<2x4x9x9xf32>, %w: tensor<8x2x3x3xf32>) {
  // expected-error @+2 {{weight [8x2x3x3] must have input channels / groups = 4 in dim 1}}
  // expected-error @+1 {{'dtc.conv' op failed to infer returned types}}
  %0 = dtc.conv %x, %w {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>, tensor<8x2x3x3xf32>) -> tensor<2x8x7x7xf32>
  return
}

// -----

func.func @conv_bias(%x: tensor<2x4x9x9xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{bias must be a 8-element 'f32' vector, got 'tensor<4xf32>'}}
  // expected-error @+1 {{'dtc.conv' op failed to infer returned types}}
  %0 = dtc.conv %x, %w, %b {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>, tensor<4xf32>) -> tensor<2x8x7x7xf32>
  return
}

// -----

func.func @conv_stride(%x: tensor<2x4x9x9xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+2 {{spatial dim 1: strides and dilations must be positive and pads non-negative}}
  // expected-error @+1 {{'dtc.conv' op failed to infer returned types}}
  %0 = dtc.conv %x, %w {strides = array<i64: 1, 0>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x7x7xf32>
  return
}

// -----

func.func @conv_window(%x: tensor<2x4x9x9xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+2 {{spatial dim 0: kernel window 11 exceeds the padded input 10}}
  // expected-error @+1 {{'dtc.conv' op failed to infer returned types}}
  %0 = dtc.conv %x, %w {strides = array<i64: 1, 1>, dilations = array<i64: 5, 1>, pads = array<i64: 1, 0, 0, 0>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x7x7xf32>
  return
}

// -----

func.func @pool_rank(%x: tensor<2x4xf32>) {
  // expected-error @+2 {{input must be [n, c, spatial...], got rank 2}}
  // expected-error @+1 {{'dtc.max_pool' op failed to infer returned types}}
  %0 = dtc.max_pool %x {kernel_shape = array<i64>, strides = array<i64>, dilations = array<i64>, pads = array<i64>} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @pool_attr_sizes(%x: tensor<2x4x9x9xf32>) {
  // expected-error @+2 {{kernel_shape, strides and dilations need 2 entries and pads 4 for 2 spatial dims}}
  // expected-error @+1 {{'dtc.avg_pool' op failed to infer returned types}}
  %0 = dtc.avg_pool %x {kernel_shape = array<i64: 3>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x7x7xf32>
  return
}

// -----

func.func @pool_kernel(%x: tensor<2x4x9x9xf32>) {
  // expected-error @+2 {{spatial dim 0: kernel, strides and dilations must be positive and pads non-negative}}
  // expected-error @+1 {{'dtc.max_pool' op failed to infer returned types}}
  %0 = dtc.max_pool %x {kernel_shape = array<i64: 0, 3>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x7x7xf32>
  return
}

// -----

func.func @pool_window(%x: tensor<2x4x9x9xf32>) {
  // expected-error @+2 {{spatial dim 1: kernel window 10 exceeds the padded input 9}}
  // expected-error @+1 {{'dtc.max_pool' op failed to infer returned types}}
  %0 = dtc.max_pool %x {kernel_shape = array<i64: 3, 10>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x7x1xf32>
  return
}
