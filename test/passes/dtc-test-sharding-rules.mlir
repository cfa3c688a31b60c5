// RUN: dtc-opt %s -dtc-test-sharding-rules -split-input-file -mlir-print-local-scope | FileCheck %s

// Each op's loop nest: dtc.iterator_types per loop, and dtc.indexing_maps
// from the loops to each operand, then the result.

//===----------------------------------------------------------------------===//
// Elementwise ops: one parallel loop per result dim
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<4x8xf32>) {
  // CHECK: dtc.neg %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]} : tensor<4x8xf32>
  %0 = dtc.neg %x : tensor<4x8xf32>
  // CHECK: dtc.abs %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %1 = dtc.abs %x : tensor<4x8xf32>
  // CHECK: dtc.exp %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %2 = dtc.exp %x : tensor<4x8xf32>
  // CHECK: dtc.log %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %3 = dtc.log %x : tensor<4x8xf32>
  // CHECK: dtc.sqrt %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %4 = dtc.sqrt %x : tensor<4x8xf32>
  // CHECK: dtc.rsqrt %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %5 = dtc.rsqrt %x : tensor<4x8xf32>
  // CHECK: dtc.reciprocal %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %6 = dtc.reciprocal %x : tensor<4x8xf32>
  // CHECK: dtc.tanh %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %7 = dtc.tanh %x : tensor<4x8xf32>
  // CHECK: dtc.erf %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %8 = dtc.erf %x : tensor<4x8xf32>
  // CHECK: dtc.sigmoid %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %9 = dtc.sigmoid %x : tensor<4x8xf32>
  // CHECK: dtc.relu %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %10 = dtc.relu %x : tensor<4x8xf32>
  // CHECK: dtc.silu %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %11 = dtc.silu %x : tensor<4x8xf32>
  // CHECK: dtc.gelu %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %12 = dtc.gelu %x : tensor<4x8xf32>
  // CHECK: dtc.gelu %{{.*}} {approximate_tanh, dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %13 = dtc.gelu %x {approximate_tanh} : tensor<4x8xf32>
  return
}

// -----

// A rank-0 value has no loops.
// CHECK-LABEL: func.func @unary_scalar
func.func @unary_scalar(%x: tensor<f32>) -> tensor<f32> {
  // CHECK: dtc.exp %{{.*}} {dtc.indexing_maps = [affine_map<() -> ()>, affine_map<() -> ()>], dtc.iterator_types = []} : tensor<f32>
  %0 = dtc.exp %x : tensor<f32>
  return %0 : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @cast
func.func @cast(%x: tensor<2x3xf32>) -> tensor<2x3xbf16> {
  // CHECK: dtc.cast %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]} : tensor<2x3xf32> to bf16
  %0 = dtc.cast %x : tensor<2x3xf32> to bf16
  return %0 : tensor<2x3xbf16>
}

// -----

// Operands broadcast numpy-style: trailing dims align with the result's
// loops, and a size-1 dim against a larger loop always reads index 0.
// CHECK-LABEL: func.func @binary_broadcast
func.func @binary_broadcast(%a: tensor<2x1x8xf32>, %b: tensor<4x1xf32>) -> tensor<2x4x8xf32> {
  // [2x1x8] + [4x1] -> [2x4x8]
  // CHECK: dtc.add %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, 0, d2)>, affine_map<(d0, d1, d2) -> (d1, 0)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "parallel"]}
  %0 = dtc.add %a, %b : (tensor<2x1x8xf32>, tensor<4x1xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// -----

// CHECK-LABEL: func.func @binary_scalar_and_rank
func.func @binary_scalar_and_rank(%s: tensor<f32>, %v: tensor<8xf32>, %m: tensor<4x8xf32>) {
  // A rank-0 operand reads no loop.
  // CHECK: dtc.sub %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0) -> ()>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], dtc.iterator_types = ["parallel"]}
  %0 = dtc.sub %s, %v : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  // A lower-rank operand reads the trailing loops.
  // CHECK: dtc.mul %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %1 = dtc.mul %m, %v : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: dtc.div %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %2 = dtc.div %v, %m : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

// A size-1 dim against a size-1 loop is an ordinary loop dim, not 0.
// CHECK-LABEL: func.func @binary_unit_dims
func.func @binary_unit_dims(%a: tensor<1x4xi64>, %b: tensor<1x1xi64>) {
  // CHECK: dtc.max %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, 0)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %0 = dtc.max %a, %b : (tensor<1x4xi64>, tensor<1x1xi64>) -> tensor<1x4xi64>
  // CHECK: dtc.min %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %1 = dtc.min %b, %b : (tensor<1x1xi64>, tensor<1x1xi64>) -> tensor<1x1xi64>
  return
}

// -----

// CHECK-LABEL: func.func @pow
func.func @pow(%a: tensor<3x5xf32>, %b: tensor<3x1xf32>) -> tensor<3x5xf32> {
  // CHECK: dtc.pow %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, 0)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]}
  %0 = dtc.pow %a, %b : (tensor<3x5xf32>, tensor<3x1xf32>) -> tensor<3x5xf32>
  return %0 : tensor<3x5xf32>
}

//===----------------------------------------------------------------------===//
// MatmulOp: loops are the result's batch dims, m, n (parallel), k (reduction)
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @matmul
func.func @matmul(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // (d0, d1, d2) = (m, n, k)
  // CHECK: dtc.matmul %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel", "reduction"]}
  %0 = dtc.matmul %a, %b : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

// CHECK-LABEL: func.func @matmul_transpose_lhs
func.func @matmul_transpose_lhs(%a: tensor<8x4xf32>, %b: tensor<8x16xf32>) -> tensor<4x16xf32> {
  // lhs is [k, m].
  // CHECK: dtc.matmul %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d0)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel", "reduction"], transpose_lhs}
  %0 = dtc.matmul %a, %b {transpose_lhs} : (tensor<8x4xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %0 : tensor<4x16xf32>
}

// -----

// x @ W^T with a batch dim that only x has: W [n, k] is read by (n, k) and
// does not depend on the batch loop.
// CHECK-LABEL: func.func @matmul_transpose_rhs_batch
func.func @matmul_transpose_rhs_batch(%x: tensor<2x4x8xf32>, %w: tensor<16x8xf32>) -> tensor<2x4x16xf32> {
  // (d0, d1, d2, d3) = (batch, m, n, k)
  // CHECK: dtc.matmul %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3) -> (d2, d3)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "reduction"], transpose_rhs}
  %0 = dtc.matmul %x, %w {transpose_rhs} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  return %0 : tensor<2x4x16xf32>
}

// -----

// CHECK-LABEL: func.func @matmul_batch_broadcast
func.func @matmul_batch_broadcast(%a: tensor<2x3x4x8xf32>, %b: tensor<2x1x8x5xf32>,
                                  %c: tensor<3x5x8xf32>) {
  // (d0, d1, d2, d3, d4) = (batch0, batch1, m, n, k); b's size-1 batch dim
  // reads index 0.
  // CHECK: dtc.matmul %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, 0, d4, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
  %0 = dtc.matmul %a, %b : (tensor<2x3x4x8xf32>, tensor<2x1x8x5xf32>) -> tensor<2x3x4x5xf32>
  // c's one batch dim aligns with the trailing batch loop; it is [n, k].
  // CHECK: dtc.matmul %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"], transpose_rhs}
  %1 = dtc.matmul %a, %c {transpose_rhs} : (tensor<2x3x4x8xf32>, tensor<3x5x8xf32>) -> tensor<2x3x4x5xf32>
  return
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @reduce
func.func @reduce(%x: tensor<2x4x8xf32>) {
  // CHECK: dtc.reduce_sum %{{.*}} {dims = array<i64: 1>, dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d2)>], dtc.iterator_types = ["parallel", "reduction", "parallel"]}
  %0 = dtc.reduce_sum %x {dims = array<i64: 1>} : (tensor<2x4x8xf32>) -> tensor<2x8xf32>
  // keep_dims: the reduced dims are size 1, indexed by 0.
  // CHECK: dtc.reduce_sum %{{.*}} {dims = array<i64: 0, 2>, dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (0, d1, 0)>], dtc.iterator_types = ["reduction", "parallel", "reduction"], keep_dims}
  %1 = dtc.reduce_sum %x {dims = array<i64: 0, 2>, keep_dims} : (tensor<2x4x8xf32>) -> tensor<1x4x1xf32>
  // CHECK: dtc.reduce_mean %{{.*}} {dims = array<i64: 0, 1, 2>, dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> ()>], dtc.iterator_types = ["reduction", "reduction", "reduction"]}
  %2 = dtc.reduce_mean %x {dims = array<i64: 0, 1, 2>} : (tensor<2x4x8xf32>) -> tensor<f32>
  // CHECK: dtc.reduce_max %{{.*}} {dims = array<i64: 2>, dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, 0)>], dtc.iterator_types = ["parallel", "parallel", "reduction"], keep_dims}
  %3 = dtc.reduce_max %x {dims = array<i64: 2>, keep_dims} : (tensor<2x4x8xf32>) -> tensor<2x4x1xf32>
  return
}

//===----------------------------------------------------------------------===//
// Normalizations: the normalized dims are reductions the output also indexes
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @softmax
func.func @softmax(%x: tensor<2x4x8xf32>) {
  // CHECK: dtc.softmax %{{.*}} {axis = 2 : i64, dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "reduction"]}
  %0 = dtc.softmax %x {axis = 2 : i64} : tensor<2x4x8xf32>
  // CHECK: dtc.softmax %{{.*}} {axis = 0 : i64, dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["reduction", "parallel", "parallel"]}
  %1 = dtc.softmax %x {axis = 0 : i64} : tensor<2x4x8xf32>
  return
}

// -----

// CHECK-LABEL: func.func @layer_norm
func.func @layer_norm(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>,
                      %w2: tensor<4x8xf32>) {
  // input, weight, bias, output.
  // CHECK: dtc.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "reduction"], epsilon = 1.000000e-05 : f64}
  %0 = dtc.layer_norm %x, %w, %b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  // No bias: input, weight, output.
  // CHECK: dtc.layer_norm %{{.*}}, %{{.*}} {axis = 1 : i64, dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "reduction", "reduction"], epsilon = 1.000000e-05 : f64}
  %1 = dtc.layer_norm %x, %w2 {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<4x8xf32>) -> tensor<2x4x8xf32>
  return
}

// -----

// CHECK-LABEL: func.func @rms_norm
func.func @rms_norm(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>) -> tensor<2x4x8xf32> {
  // CHECK: dtc.rms_norm %{{.*}}, %{{.*}} {axis = 2 : i64, dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "reduction"], epsilon = 1.000000e-05 : f64}
  %0 = dtc.rms_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

// -----

// Loops follow the output; loop i reads input dim permutation[i].
// CHECK-LABEL: func.func @transpose
func.func @transpose(%x: tensor<2x4x8xf32>) {
  // [2, 0, 1]: input dim 2 <- d0, dim 0 <- d1, dim 1 <- d2.
  // CHECK: dtc.transpose %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d2, d0)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "parallel"], permutation = array<i64: 2, 0, 1>} : (tensor<2x4x8xf32>) -> tensor<8x2x4xf32>
  %0 = dtc.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x4x8xf32>) -> tensor<8x2x4xf32>
  // [1, 2, 0] is the inverse: input dim 1 <- d0, dim 2 <- d1, dim 0 <- d2.
  // CHECK: dtc.transpose %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d0, d1)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "parallel"], permutation = array<i64: 1, 2, 0>} : (tensor<2x4x8xf32>) -> tensor<4x8x2xf32>
  %1 = dtc.transpose %x {permutation = array<i64: 1, 2, 0>} : (tensor<2x4x8xf32>) -> tensor<4x8x2xf32>
  return
}

// -----

// Output element i of a dim reads input element start + i * stride.
// CHECK-LABEL: func.func @slice
func.func @slice(%x: tensor<4x10xf32>) {
  // CHECK: dtc.slice %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0 * 3, d1 * 2 + 1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"], limits = array<i64: 4, 10>, starts = array<i64: 0, 1>, strides = array<i64: 3, 2>}
  %0 = dtc.slice %x {starts = array<i64: 0, 1>, limits = array<i64: 4, 10>, strides = array<i64: 3, 2>} : (tensor<4x10xf32>) -> tensor<2x5xf32>
  // CHECK: dtc.slice %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1) -> (d0 + 1, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"], limits = array<i64: 3, 10>, starts = array<i64: 1, 0>, strides = array<i64: 1, 1>}
  %1 = dtc.slice %x {starts = array<i64: 1, 0>, limits = array<i64: 3, 10>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<2x10xf32>
  return
}

// -----

// Loops: the ids dims and the embedding dim (parallel), then the table rows
// (reduction: a one-hot contraction over the vocabulary).
// CHECK-LABEL: func.func @embedding
func.func @embedding(%t: tensor<50x16xf32>, %ids: tensor<2x8xi64>, %ids1: tensor<8xi32>) {
  // (d0, d1, d2, d3) = (ids0, ids1, dim, row)
  // CHECK: dtc.embedding %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d3, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1)>, affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
  %0 = dtc.embedding %t, %ids : (tensor<50x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  // (d0, d1, d2) = (ids0, dim, row)
  // CHECK: dtc.embedding %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0)>, affine_map<(d0, d1, d2) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel", "reduction"]}
  %1 = dtc.embedding %t, %ids1 : (tensor<50x16xf32>, tensor<8xi32>) -> tensor<8x16xf32>
  return
}

//===----------------------------------------------------------------------===//
// Transformer ops
//===----------------------------------------------------------------------===//

// -----

// Loops (d0, d1, d2, d3, d4, d5) = (b, h, s, e, t, d).
// CHECK-LABEL: func.func @attention_mha
func.func @attention_mha(%q: tensor<2x4x16x32xf32>, %k: tensor<2x4x16x32xf32>,
                         %v: tensor<2x4x16x32xf32>) -> tensor<2x4x16x32xf32> {
  // CHECK: dtc.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
  %0 = dtc.attention %q, %k, %v {causal} : (tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>, tensor<2x4x16x32xf32>) -> tensor<2x4x16x32xf32>
  return %0 : tensor<2x4x16x32xf32>
}

// -----

// 8 query heads over 2 key/value heads: query head h reads kv head h floordiv 4.
// CHECK-LABEL: func.func @attention_gqa
func.func @attention_gqa(%q: tensor<2x8x16x32xf32>, %k: tensor<2x2x24x32xf32>,
                         %v: tensor<2x2x24x64xf32>) -> tensor<2x8x16x64xf32> {
  // CHECK: dtc.attention %{{.*}}, %{{.*}}, %{{.*}} {causal, dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"], scale = 1.250000e-01 : f64}
  %0 = dtc.attention %q, %k, %v {causal, scale = 0.125 : f64} : (tensor<2x8x16x32xf32>, tensor<2x2x24x32xf32>, tensor<2x2x24x64xf32>) -> tensor<2x8x16x64xf32>
  return %0 : tensor<2x8x16x64xf32>
}

// -----

// MQA: every query head reads the single kv head (h floordiv 3 = 0).
// CHECK-LABEL: func.func @attention_mqa
func.func @attention_mqa(%q: tensor<1x3x8x16xf32>, %k: tensor<1x1x8x16xf32>) -> tensor<1x3x8x16xf32> {
  // CHECK: dtc.attention %{{.*}}, %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 3, d4, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 3, d4, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]}
  %0 = dtc.attention %q, %k, %k : (tensor<1x3x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x3x8x16xf32>
  return %0 : tensor<1x3x8x16xf32>
}

// -----

// Every loop reduces into the scalar loss.
// CHECK-LABEL: func.func @cross_entropy
func.func @cross_entropy(%l: tensor<2x8x50xf32>, %y: tensor<2x8xi64>, %l1: tensor<50xf32>, %y1: tensor<i64>) {
  // CHECK: dtc.cross_entropy %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> ()>], dtc.iterator_types = ["reduction", "reduction", "reduction"]}
  %0 = dtc.cross_entropy %l, %y : (tensor<2x8x50xf32>, tensor<2x8xi64>) -> tensor<f32>
  // A single position: labels are rank 0.
  // CHECK: dtc.cross_entropy %{{.*}}, %{{.*}} {dtc.indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> ()>, affine_map<(d0) -> ()>], dtc.iterator_types = ["reduction"], ignore_index = 0 : i64}
  %1 = dtc.cross_entropy %l1, %y1 {ignore_index = 0 : i64} : (tensor<50xf32>, tensor<i64>) -> tensor<f32>
  return
}

//===----------------------------------------------------------------------===//
// Ops without a sharding rule
//===----------------------------------------------------------------------===//

// -----

// constant, parameter, reshape and concat have no affine rule: the pass
// leaves them alone.
// CHECK-LABEL: func.func @no_rule
// CHECK-NOT: dtc.indexing_maps
// CHECK-NOT: dtc.iterator_types
// CHECK: return
func.func @no_rule(%x: tensor<2x4xf32>) -> (tensor<4xf32>, tensor<8x4xf32>, tensor<8xf32>, tensor<4x4xf32>) {
  %c = dtc.constant dense<1.0> : tensor<4xf32>
  %p = dtc.parameter "w" : tensor<8x4xf32>
  %r = dtc.reshape %x : (tensor<2x4xf32>) -> tensor<8xf32>
  %cat = dtc.concat %x, %x {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  return %c, %p, %r, %cat : tensor<4xf32>, tensor<8x4xf32>, tensor<8xf32>, tensor<4x4xf32>
}

// -----

// Loops (n, f, oh, ow, c, kh, kw): the input map is over the padded input
// (pads only shift it), the window sums an output position with a kernel
// tap.
// CHECK-LABEL: func.func @conv
func.func @conv(%x: tensor<2x4x9x9xf32>, %w: tensor<8x4x3x3xf32>, %b: tensor<8xf32>) {
  // CHECK: dtc.conv %{{.*}}, %{{.*}}, %{{.*}} {dilations = array<i64: 2, 1>, dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d4, d2 * 2 + d5 * 2, d3 * 3 + d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction", "reduction"], pads = array<i64: 1, 0, 0, 0>, strides = array<i64: 2, 3>}
  %0 = dtc.conv %x, %w, %b {strides = array<i64: 2, 3>, dilations = array<i64: 2, 1>, pads = array<i64: 1, 0, 0, 0>} : (tensor<2x4x9x9xf32>, tensor<8x4x3x3xf32>, tensor<8xf32>) -> tensor<2x8x3x3xf32>
  return
}

// -----

// Groups: output channel f reads input channel (f floordiv (F/G)) * (C/G) + c.
// CHECK-LABEL: func.func @conv_grouped
func.func @conv_grouped(%x: tensor<1x4x5xf32>, %w: tensor<6x2x3xf32>, %dw: tensor<8x1x3xf32>) {
  // CHECK: dtc.conv %{{.*}}, %{{.*}} {dilations = array<i64: 1>, dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, (d1 floordiv 3) * 2 + d3, d2 + d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"], groups = 2 : i64, pads = array<i64: 0, 0>, strides = array<i64: 1>}
  %0 = dtc.conv %x, %w {strides = array<i64: 1>, dilations = array<i64: 1>, pads = array<i64: 0, 0>, groups = 2 : i64} : (tensor<1x4x5xf32>, tensor<6x2x3xf32>) -> tensor<1x6x3xf32>
  // Depthwise with channel multiplier 2.
  // CHECK: dtc.conv %{{.*}}, %{{.*}} {dilations = array<i64: 1>, dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1 floordiv 2 + d3, d2 + d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d1, d3, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction"], groups = 4 : i64, pads = array<i64: 0, 0>, strides = array<i64: 1>}
  %1 = dtc.conv %x, %dw {strides = array<i64: 1>, dilations = array<i64: 1>, pads = array<i64: 0, 0>, groups = 4 : i64} : (tensor<1x4x5xf32>, tensor<8x1x3xf32>) -> tensor<1x8x3xf32>
  return
}

// -----

// Loops (n, c, oh, ow, kh, kw): window taps are reductions.
// CHECK-LABEL: func.func @pool
func.func @pool(%x: tensor<2x4x9x9xf32>) {
  // CHECK: dtc.max_pool %{{.*}} {dilations = array<i64: 1, 2>, dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 + d5 * 2)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"], kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 2, 1>}
  %0 = dtc.max_pool %x {kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 1>, dilations = array<i64: 1, 2>, pads = array<i64: 1, 1, 1, 1>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x5x7xf32>
  // CHECK: dtc.avg_pool %{{.*}} {dilations = array<i64: 1, 1>, dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 * 2 + d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"], kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>}
  %1 = dtc.avg_pool %x {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x9x9xf32>) -> tensor<2x4x4x4xf32>
  return
}
