// RUN: dtc-opt %s | FileCheck %s
// Verify the printed output can be parsed.
// RUN: dtc-opt %s | dtc-opt | FileCheck %s
// Verify the generic form can be parsed.
// RUN: dtc-opt %s --mlir-print-op-generic | dtc-opt | FileCheck %s

//===----------------------------------------------------------------------===//
// Leaves
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @constant
func.func @constant() -> (tensor<4xf32>, tensor<2x2xi64>, tensor<3xi1>, tensor<bf16>) {
  // CHECK: dtc.constant dense<1.000000e+00> : tensor<4xf32>
  %0 = dtc.constant dense<1.0> : tensor<4xf32>
  // CHECK: dtc.constant dense<{{\[}}[1, 2], [3, 4]]> : tensor<2x2xi64>
  %1 = dtc.constant dense<[[1, 2], [3, 4]]> : tensor<2x2xi64>
  // CHECK: dtc.constant dense<[true, false, true]> : tensor<3xi1>
  %2 = dtc.constant dense<[true, false, true]> : tensor<3xi1>
  // CHECK: dtc.constant dense<5.000000e-01> : tensor<bf16>
  %3 = dtc.constant dense<0.5> : tensor<bf16>
  return %0, %1, %2, %3 : tensor<4xf32>, tensor<2x2xi64>, tensor<3xi1>, tensor<bf16>
}

// CHECK-LABEL: func.func @parameter
func.func @parameter() -> tensor<64x192xf32> {
  // CHECK: dtc.parameter "transformer.h.0.attn.c_attn.weight" : tensor<64x192xf32>
  %0 = dtc.parameter "transformer.h.0.attn.c_attn.weight" : tensor<64x192xf32>
  return %0 : tensor<64x192xf32>
}

//===----------------------------------------------------------------------===//
// Elementwise ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @unary
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>, %[[H:.*]]: tensor<2xf16>
func.func @unary(%x: tensor<4x8xf32>, %h: tensor<2xf16>) {
  // CHECK: dtc.neg %[[X]] : tensor<4x8xf32>
  %0 = dtc.neg %x : tensor<4x8xf32>
  // CHECK: dtc.abs %[[X]] : tensor<4x8xf32>
  %1 = dtc.abs %x : tensor<4x8xf32>
  // CHECK: dtc.exp %[[X]] : tensor<4x8xf32>
  %2 = dtc.exp %x : tensor<4x8xf32>
  // CHECK: dtc.log %[[X]] : tensor<4x8xf32>
  %3 = dtc.log %x : tensor<4x8xf32>
  // CHECK: dtc.sqrt %[[X]] : tensor<4x8xf32>
  %4 = dtc.sqrt %x : tensor<4x8xf32>
  // CHECK: dtc.rsqrt %[[X]] : tensor<4x8xf32>
  %5 = dtc.rsqrt %x : tensor<4x8xf32>
  // CHECK: dtc.reciprocal %[[X]] : tensor<4x8xf32>
  %6 = dtc.reciprocal %x : tensor<4x8xf32>
  // CHECK: dtc.tanh %[[X]] : tensor<4x8xf32>
  %7 = dtc.tanh %x : tensor<4x8xf32>
  // CHECK: dtc.erf %[[X]] : tensor<4x8xf32>
  %8 = dtc.erf %x : tensor<4x8xf32>
  // CHECK: dtc.sigmoid %[[X]] : tensor<4x8xf32>
  %9 = dtc.sigmoid %x : tensor<4x8xf32>
  // CHECK: dtc.relu %[[X]] : tensor<4x8xf32>
  %10 = dtc.relu %x : tensor<4x8xf32>
  // CHECK: dtc.silu %[[H]] : tensor<2xf16>
  %11 = dtc.silu %h : tensor<2xf16>
  return
}

// CHECK-LABEL: func.func @gelu
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>
func.func @gelu(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  // CHECK: dtc.gelu %[[X]] : tensor<4x8xf32>
  %0 = dtc.gelu %x : tensor<4x8xf32>
  // CHECK: dtc.gelu %[[X]] {approximate_tanh} : tensor<4x8xf32>
  %1 = dtc.gelu %x {approximate_tanh} : tensor<4x8xf32>
  return %0, %1 : tensor<4x8xf32>, tensor<4x8xf32>
}

// CHECK-LABEL: func.func @cast
// CHECK-SAME: %[[X:.*]]: tensor<4x8xf32>, %[[I:.*]]: tensor<3xi64>
func.func @cast(%x: tensor<4x8xf32>, %i: tensor<3xi64>)
    -> (tensor<4x8xbf16>, tensor<3xf32>, tensor<4x8xi1>) {
  // CHECK: %[[C0:.*]] = dtc.cast %[[X]] : tensor<4x8xf32> to bf16
  %0 = dtc.cast %x : tensor<4x8xf32> to bf16
  // CHECK: %[[C1:.*]] = dtc.cast %[[I]] : tensor<3xi64> to f32
  %1 = dtc.cast %i : tensor<3xi64> to f32
  // CHECK: %[[C2:.*]] = dtc.cast %[[X]] : tensor<4x8xf32> to i1
  %2 = dtc.cast %x : tensor<4x8xf32> to i1
  // The result type is inferred from `to`.
  // CHECK: return %[[C0]], %[[C1]], %[[C2]] : tensor<4x8xbf16>, tensor<3xf32>, tensor<4x8xi1>
  return %0, %1, %2 : tensor<4x8xbf16>, tensor<3xf32>, tensor<4x8xi1>
}

// CHECK-LABEL: func.func @binary
// CHECK-SAME: %[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<4x8xf32>
func.func @binary(%a: tensor<4x8xf32>, %b: tensor<4x8xf32>) {
  // CHECK: dtc.add %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %0 = dtc.add %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.sub %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = dtc.sub %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.mul %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = dtc.mul %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.div %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = dtc.div %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.max %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = dtc.max %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.min %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = dtc.min %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.pow %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %6 = dtc.pow %a, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// CHECK-LABEL: func.func @binary_broadcast
// CHECK-SAME: %[[A:.*]]: tensor<2x1x8xf32>, %[[B:.*]]: tensor<4x1xf32>, %[[S:.*]]: tensor<f32>, %[[I:.*]]: tensor<3xi32>, %[[J:.*]]: tensor<1xi32>
func.func @binary_broadcast(%a: tensor<2x1x8xf32>, %b: tensor<4x1xf32>,
                            %s: tensor<f32>, %i: tensor<3xi32>,
                            %j: tensor<1xi32>) {
  // CHECK: dtc.add %[[A]], %[[B]] : (tensor<2x1x8xf32>, tensor<4x1xf32>) -> tensor<2x4x8xf32>
  %0 = dtc.add %a, %b : (tensor<2x1x8xf32>, tensor<4x1xf32>) -> tensor<2x4x8xf32>
  // CHECK: dtc.mul %[[S]], %[[A]] : (tensor<f32>, tensor<2x1x8xf32>) -> tensor<2x1x8xf32>
  %1 = dtc.mul %s, %a : (tensor<f32>, tensor<2x1x8xf32>) -> tensor<2x1x8xf32>
  // CHECK: dtc.sub %[[J]], %[[I]] : (tensor<1xi32>, tensor<3xi32>) -> tensor<3xi32>
  %2 = dtc.sub %j, %i : (tensor<1xi32>, tensor<3xi32>) -> tensor<3xi32>
  return
}

//===----------------------------------------------------------------------===//
// Contractions and reductions
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @matmul
// CHECK-SAME: %[[A:.*]]: tensor<4x8xf32>, %[[B:.*]]: tensor<8x16xf32>, %[[W:.*]]: tensor<16x8xf32>, %[[T:.*]]: tensor<8x4xf32>
func.func @matmul(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>,
                  %w: tensor<16x8xf32>, %t: tensor<8x4xf32>) {
  // CHECK: dtc.matmul %[[A]], %[[B]] : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %0 = dtc.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  // x @ W^T, a PyTorch Linear.
  // CHECK: dtc.matmul %[[A]], %[[W]] {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %1 = dtc.matmul %a, %w {transpose_rhs} : (tensor<4x8xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  // CHECK: dtc.matmul %[[T]], %[[B]] {transpose_lhs} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %2 = dtc.matmul %t, %b {transpose_lhs} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  // CHECK: dtc.matmul %[[T]], %[[W]] {transpose_lhs, transpose_rhs} : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  %3 = dtc.matmul %t, %w {transpose_lhs, transpose_rhs} : (tensor<8x4xf32>, tensor<16x8xf32>) -> tensor<4x16xf32>
  return
}

// CHECK-LABEL: func.func @matmul_batch
// CHECK-SAME: %[[A:.*]]: tensor<2x3x4x8xbf16>, %[[B:.*]]: tensor<8x16xbf16>, %[[C:.*]]: tensor<3x16x8xbf16>, %[[D:.*]]: tensor<2x1x8x5xbf16>
func.func @matmul_batch(%a: tensor<2x3x4x8xbf16>, %b: tensor<8x16xbf16>,
                        %c: tensor<3x16x8xbf16>, %d: tensor<2x1x8x5xbf16>) {
  // A 2-d rhs broadcasts over both batch dims.
  // CHECK: dtc.matmul %[[A]], %[[B]] : (tensor<2x3x4x8xbf16>, tensor<8x16xbf16>) -> tensor<2x3x4x16xbf16>
  %0 = dtc.matmul %a, %b : (tensor<2x3x4x8xbf16>, tensor<8x16xbf16>) -> tensor<2x3x4x16xbf16>
  // A rank-3 rhs aligns with the trailing batch dim.
  // CHECK: dtc.matmul %[[A]], %[[C]] {transpose_rhs} : (tensor<2x3x4x8xbf16>, tensor<3x16x8xbf16>) -> tensor<2x3x4x16xbf16>
  %1 = dtc.matmul %a, %c {transpose_rhs} : (tensor<2x3x4x8xbf16>, tensor<3x16x8xbf16>) -> tensor<2x3x4x16xbf16>
  // A size-1 batch dim broadcasts.
  // CHECK: dtc.matmul %[[A]], %[[D]] : (tensor<2x3x4x8xbf16>, tensor<2x1x8x5xbf16>) -> tensor<2x3x4x5xbf16>
  %2 = dtc.matmul %a, %d : (tensor<2x3x4x8xbf16>, tensor<2x1x8x5xbf16>) -> tensor<2x3x4x5xbf16>
  return
}

// CHECK-LABEL: func.func @reduce
// CHECK-SAME: %[[X:.*]]: tensor<2x4x8xf32>, %[[I:.*]]: tensor<6xi64>
func.func @reduce(%x: tensor<2x4x8xf32>, %i: tensor<6xi64>) {
  // CHECK: dtc.reduce_sum %[[X]] {dims = array<i64: 1>} : (tensor<2x4x8xf32>) -> tensor<2x8xf32>
  %0 = dtc.reduce_sum %x {dims = array<i64: 1>} : (tensor<2x4x8xf32>) -> tensor<2x8xf32>
  // CHECK: dtc.reduce_sum %[[X]] {dims = array<i64: 0, 2>, keep_dims} : (tensor<2x4x8xf32>) -> tensor<1x4x1xf32>
  %1 = dtc.reduce_sum %x {dims = array<i64: 0, 2>, keep_dims} : (tensor<2x4x8xf32>) -> tensor<1x4x1xf32>
  // CHECK: dtc.reduce_mean %[[X]] {dims = array<i64: 2>, keep_dims} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  %2 = dtc.reduce_mean %x {dims = array<i64: 2>, keep_dims} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  // CHECK: dtc.reduce_mean %[[X]] {dims = array<i64: 0, 1, 2>} : (tensor<2x4x8xf32>) -> tensor<f32>
  %3 = dtc.reduce_mean %x {dims = array<i64: 0, 1, 2>} : (tensor<2x4x8xf32>) -> tensor<f32>
  // CHECK: dtc.reduce_max %[[X]] {dims = array<i64: 0>} : (tensor<2x4x8xf32>) -> tensor<4x8xf32>
  %4 = dtc.reduce_max %x {dims = array<i64: 0>} : (tensor<2x4x8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.reduce_max %[[I]] {dims = array<i64: 0>, keep_dims} : (tensor<6xi64>) -> tensor<1xi64>
  %5 = dtc.reduce_max %i {dims = array<i64: 0>, keep_dims} : (tensor<6xi64>) -> tensor<1xi64>
  return
}

//===----------------------------------------------------------------------===//
// Normalizations
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @softmax
// CHECK-SAME: %[[X:.*]]: tensor<2x4x8xf32>
func.func @softmax(%x: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  // CHECK: dtc.softmax %[[X]] {axis = 2 : i64} : tensor<2x4x8xf32>
  %0 = dtc.softmax %x {axis = 2 : i64} : tensor<2x4x8xf32>
  // CHECK: dtc.softmax %[[X]] {axis = 0 : i64} : tensor<2x4x8xf32>
  %1 = dtc.softmax %x {axis = 0 : i64} : tensor<2x4x8xf32>
  return %0, %1 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: %[[X:.*]]: tensor<2x4x8xf32>, %[[W:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8xf32>, %[[W2:.*]]: tensor<4x8xf32>
func.func @layer_norm(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>,
                      %b: tensor<8xf32>, %w2: tensor<4x8xf32>) {
  // CHECK: dtc.layer_norm %[[X]], %[[W]], %[[B]] {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %0 = dtc.layer_norm %x, %w, %b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // Without bias.
  // CHECK: dtc.layer_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %1 = dtc.layer_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // Normalized over the last two dims.
  // CHECK: dtc.layer_norm %[[X]], %[[W2]] {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  %2 = dtc.layer_norm %x, %w2 {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// CHECK-LABEL: func.func @rms_norm
// CHECK-SAME: %[[X:.*]]: tensor<2x4x8xbf16>, %[[W:.*]]: tensor<8xbf16>
func.func @rms_norm(%x: tensor<2x4x8xbf16>, %w: tensor<8xbf16>) -> tensor<2x4x8xbf16> {
  // CHECK: dtc.rms_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<2x4x8xbf16>, tensor<8xbf16>) -> tensor<2x4x8xbf16>
  %0 = dtc.rms_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xbf16>, tensor<8xbf16>) -> tensor<2x4x8xbf16>
  return %0 : tensor<2x4x8xbf16>
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @reshape
// CHECK-SAME: %[[X:.*]]: tensor<2x4x8xf32>, %[[I:.*]]: tensor<6xi64>
func.func @reshape(%x: tensor<2x4x8xf32>, %i: tensor<6xi64>) {
  // CHECK: dtc.reshape %[[X]] : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  %0 = dtc.reshape %x : (tensor<2x4x8xf32>) -> tensor<8x8xf32>
  // CHECK: dtc.reshape %[[X]] : (tensor<2x4x8xf32>) -> tensor<64xf32>
  %1 = dtc.reshape %x : (tensor<2x4x8xf32>) -> tensor<64xf32>
  // CHECK: dtc.reshape %[[I]] : (tensor<6xi64>) -> tensor<1x2x3xi64>
  %2 = dtc.reshape %i : (tensor<6xi64>) -> tensor<1x2x3xi64>
  return
}

// CHECK-LABEL: func.func @transpose
// CHECK-SAME: %[[X:.*]]: tensor<2x4x8xf32>
func.func @transpose(%x: tensor<2x4x8xf32>) {
  // CHECK: dtc.transpose %[[X]] {permutation = array<i64: 2, 0, 1>} : (tensor<2x4x8xf32>) -> tensor<8x2x4xf32>
  %0 = dtc.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x4x8xf32>) -> tensor<8x2x4xf32>
  // CHECK: dtc.transpose %[[X]] {permutation = array<i64: 0, 2, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  %1 = dtc.transpose %x {permutation = array<i64: 0, 2, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
  return
}

// CHECK-LABEL: func.func @concat
// CHECK-SAME: %[[A:.*]]: tensor<2x4xf32>, %[[B:.*]]: tensor<2x3xf32>, %[[C:.*]]: tensor<5x4xf32>
func.func @concat(%a: tensor<2x4xf32>, %b: tensor<2x3xf32>, %c: tensor<5x4xf32>) {
  // CHECK: dtc.concat %[[A]], %[[B]], %[[A]] {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x11xf32>
  %0 = dtc.concat %a, %b, %a {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x11xf32>
  // CHECK: dtc.concat %[[A]], %[[C]] {axis = 0 : i64} : (tensor<2x4xf32>, tensor<5x4xf32>) -> tensor<7x4xf32>
  %1 = dtc.concat %a, %c {axis = 0 : i64} : (tensor<2x4xf32>, tensor<5x4xf32>) -> tensor<7x4xf32>
  // CHECK: dtc.concat %[[A]] {axis = 0 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = dtc.concat %a {axis = 0 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// CHECK-LABEL: func.func @slice
// CHECK-SAME: %[[X:.*]]: tensor<4x10xf32>
func.func @slice(%x: tensor<4x10xf32>) {
  // CHECK: dtc.slice %[[X]] {limits = array<i64: 3, 10>, starts = array<i64: 1, 0>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<2x10xf32>
  %0 = dtc.slice %x {starts = array<i64: 1, 0>, limits = array<i64: 3, 10>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<2x10xf32>
  // Strided: ceil((10 - 1) / 2) = 5 and ceil((4 - 0) / 3) = 2 elements.
  // CHECK: dtc.slice %[[X]] {limits = array<i64: 4, 10>, starts = array<i64: 0, 1>, strides = array<i64: 3, 2>} : (tensor<4x10xf32>) -> tensor<2x5xf32>
  %1 = dtc.slice %x {starts = array<i64: 0, 1>, limits = array<i64: 4, 10>, strides = array<i64: 3, 2>} : (tensor<4x10xf32>) -> tensor<2x5xf32>
  // An empty range.
  // CHECK: dtc.slice %[[X]] {limits = array<i64: 2, 10>, starts = array<i64: 2, 0>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<0x10xf32>
  %2 = dtc.slice %x {starts = array<i64: 2, 0>, limits = array<i64: 2, 10>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<0x10xf32>
  return
}

// CHECK-LABEL: func.func @embedding
// CHECK-SAME: %[[T:.*]]: tensor<50x16xf32>, %[[I:.*]]: tensor<2x8xi64>, %[[J:.*]]: tensor<8xi32>
func.func @embedding(%t: tensor<50x16xf32>, %i: tensor<2x8xi64>, %j: tensor<8xi32>) {
  // CHECK: dtc.embedding %[[T]], %[[I]] : (tensor<50x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %0 = dtc.embedding %t, %i : (tensor<50x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  // CHECK: dtc.embedding %[[T]], %[[J]] : (tensor<50x16xf32>, tensor<8xi32>) -> tensor<8x16xf32>
  %1 = dtc.embedding %t, %j : (tensor<50x16xf32>, tensor<8xi32>) -> tensor<8x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// Transformer ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @attention_mha
// CHECK-SAME: %[[Q:.*]]: tensor<2x4x16x32xf32>, %[[K:.*]]: tensor<2x4x16x32xf32>, %[[V:.*]]: tensor<2x4x16x32xf32>
func.func @attention_mha(%q: tensor<2x4x16x32xf32>, %k: tensor<2x4x16x32xf32>,
                         %v: tensor<2x4x16x32xf32>) {
  // CHECK: dtc.attention %[[Q]], %[[K]], %[[V]] : (tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>) -> tensor<2x4x16x32xf32>
  %0 = dtc.attention %q, %k, %v : (tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>) -> tensor<2x4x16x32xf32>
  // CHECK: dtc.attention %[[Q]], %[[K]], %[[V]] {causal} : (tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>) -> tensor<2x4x16x32xf32>
  %1 = dtc.attention %q, %k, %v {causal} : (tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>) -> tensor<2x4x16x32xf32>
  return
}

// CHECK-LABEL: func.func @attention_gqa
// CHECK-SAME: %[[Q:.*]]: tensor<2x8x16x32xbf16>, %[[K:.*]]: tensor<2x2x24x32xbf16>, %[[V:.*]]: tensor<2x2x24x64xbf16>
func.func @attention_gqa(%q: tensor<2x8x16x32xbf16>, %k: tensor<2x2x24x32xbf16>,
                         %v: tensor<2x2x24x64xbf16>) -> tensor<2x8x16x64xbf16> {
  // 8 query heads over 2 key/value heads; the value head dim (64) differs
  // from the query/key one (32), and the key length (24) from the query's.
  // CHECK: dtc.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 1.250000e-01 : f64} : (tensor<2x8x16x32xbf16>, tensor<2x2x24x32xbf16>, tensor<2x2x24x64xbf16>) -> tensor<2x8x16x64xbf16>
  %0 = dtc.attention %q, %k, %v {causal, scale = 0.125 : f64} : (tensor<2x8x16x32xbf16>, tensor<2x2x24x32xbf16>, tensor<2x2x24x64xbf16>) -> tensor<2x8x16x64xbf16>
  return %0 : tensor<2x8x16x64xbf16>
}

// CHECK-LABEL: func.func @attention_mqa
// CHECK-SAME: %[[Q:.*]]: tensor<1x4x8x16xf32>, %[[K:.*]]: tensor<1x1x8x16xf32>
func.func @attention_mqa(%q: tensor<1x4x8x16xf32>, %k: tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32> {
  // CHECK: dtc.attention %[[Q]], %[[K]], %[[K]] {scale = 2.500000e-01 : f64} : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  %0 = dtc.attention %q, %k, %k {scale = 0.25 : f64} : (tensor<1x4x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x4x8x16xf32>
  return %0 : tensor<1x4x8x16xf32>
}

// CHECK-LABEL: func.func @cross_entropy
// CHECK-SAME: %[[L:.*]]: tensor<2x8x50xf32>, %[[Y:.*]]: tensor<2x8xi64>, %[[L2:.*]]: tensor<4x10xbf16>, %[[Y2:.*]]: tensor<4xi32>
func.func @cross_entropy(%l: tensor<2x8x50xf32>, %y: tensor<2x8xi64>,
                         %l2: tensor<4x10xbf16>, %y2: tensor<4xi32>) {
  // The default ignore_index (-100) is not printed.
  // CHECK: dtc.cross_entropy %[[L]], %[[Y]] : (tensor<2x8x50xf32>, tensor<2x8xi64>) -> tensor<f32>
  %0 = dtc.cross_entropy %l, %y : (tensor<2x8x50xf32>, tensor<2x8xi64>) -> tensor<f32>
  // CHECK: dtc.cross_entropy %[[L]], %[[Y]] {ignore_index = -1 : i64} : (tensor<2x8x50xf32>, tensor<2x8xi64>) -> tensor<f32>
  %1 = dtc.cross_entropy %l, %y {ignore_index = -1 : i64} : (tensor<2x8x50xf32>, tensor<2x8xi64>) -> tensor<f32>
  // The loss is f32 whatever the logits' type.
  // CHECK: dtc.cross_entropy %[[L2]], %[[Y2]] {ignore_index = 0 : i64} : (tensor<4x10xbf16>, tensor<4xi32>) -> tensor<f32>
  %2 = dtc.cross_entropy %l2, %y2 {ignore_index = 0 : i64} : (tensor<4x10xbf16>, tensor<4xi32>) -> tensor<f32>
  return
}

//===----------------------------------------------------------------------===//
// Convolution
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @conv
// CHECK-SAME: %[[X:.*]]: tensor<2x4x9x9xf32>, %[[W:.*]]: tensor<8x4x3x3xf32>, %[[B:.*]]: tensor<8xf32>, %[[DW:.*]]: tensor<4x1x3x3xf32>, %[[X1:.*]]: tensor<1x2x7xf32>, %[[W1:.*]]: tensor<3x2x2xf32>
func.func @conv(%x: tensor<2x4x9x9xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>,
                %dw: tensor<4x1x3x3xf32>, %x1: tensor<1x2x7xf32>, %w1: tensor<3x2x2xf32>) {
  // Same padding, with a bias; the default groups (1) is not printed.
  // CHECK: dtc.conv %[[X]], %[[W]], %[[B]] {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<2x8x9x9xf32>
  %0 = dtc.conv %x, %w, %b {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<2x8x9x9xf32>
  // Strided, dilated, asymmetric pads: (9 + 1 + 0 - 5) floordiv 2 + 1 = 3.
  // CHECK: dtc.conv %[[X]], %[[W]] {dilations = array<i64: 2, 1>, pads = array<i64: 1, 0, 0, 0>, strides = array<i64: 2, 3>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x3x3xf32>
  %1 = dtc.conv %x, %w {strides = array<i64: 2, 3>, dilations = array<i64: 2, 1>, pads = array<i64: 1, 0, 0, 0>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>) -> tensor<2x8x3x3xf32>
  // Depthwise.
  // CHECK: dtc.conv %[[X]], %[[DW]] {dilations = array<i64: 1, 1>, groups = 4 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<2x4x9x9xf32>, tensor<4x1x3x3xf32>) -> tensor<2x4x7x7xf32>
  %2 = dtc.conv %x, %dw {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, groups = 4 : i64} : (tensor<2x4x9x9xf32>, tensor<4x1x3x3xf32>) -> tensor<2x4x7x7xf32>
  // 1-d.
  // CHECK: dtc.conv %[[X1]], %[[W1]] {dilations = array<i64: 1>, pads = array<i64: 0, 0>, strides = array<i64: 1>} : (tensor<1x2x7xf32>, tensor<3x2x2xf32>) -> tensor<1x3x6xf32>
  %3 = dtc.conv %x1, %w1 {strides = array<i64: 1>, dilations = array<i64: 1>, pads = array<i64: 0, 0>} : (tensor<1x2x7xf32>, tensor<3x2x2xf32>) -> tensor<1x3x6xf32>
  return
}

// CHECK-LABEL: func.func @pool
// CHECK-SAME: %[[X:.*]]: tensor<2x4x9x9xf32>
func.func @pool(%x: tensor<2x4x9x9xf32>) {
  // CHECK: dtc.max_pool %[[X]] {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 2>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x5x5xf32>
  %0 = dtc.max_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x5x5xf32>
  // CHECK: dtc.avg_pool %[[X]] {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x4x4xf32>
  %1 = dtc.avg_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x4x4xf32>
  // CHECK: dtc.avg_pool %[[X]] {count_include_pad, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x9x9xf32>
  %2 = dtc.avg_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, count_include_pad} : (tensor<2x4x9x9xf32>) -> tensor<2x4x9x9xf32>
  return
}
