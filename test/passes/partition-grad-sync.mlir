// Gradients returned with defer-gradient-sync (the training step reduces
// them once per step): a gradient stays a partial sum only over the axes
// that do not split its parameter. Over an axis that splits the parameter
// the ranks hold different parts of their summands, which no later
// all-reduce can add up, so the sum is reduce-scattered before the return.
// RUN: dtc-opt %s -split-input-file -dtc-partition="mesh=dp:2,tp:2 defer-gradient-sync=true" | FileCheck %s

// A sequence-parallel bias gradient: summed over this rank's sequences (dp)
// and tokens (tp); the bias is split over tp per Q/K/V third (block 64).
// CHECK-LABEL: func.func @bias_grad
// CHECK-SAME: (%[[DY:[^:]*]]: tensor<1x4x192xf32>
// CHECK-SAME: -> (tensor<96xf32> {dtc.grad_of = "b", dtc.sharding = #dtc.sharding<{{\[\[}}"tp"]:64], partial = ["dp"]>})
// CHECK: %[[S:.*]] = dtc.reduce_sum %[[DY]] {{.*}} -> tensor<192xf32>
// CHECK-NEXT: %[[H:.*]] = dtc.reduce_scatter_start %[[S]] {block = 64 : i64, dim = 0 : i64, mesh_axes = ["tp"]} : tensor<192xf32> -> !dtc.async<tensor<96xf32>>
// CHECK-NEXT: %[[G:.*]] = dtc.wait %[[H]]
// CHECK-NEXT: return %[[G]] : tensor<96xf32>
func.func @bias_grad(%dy: tensor<2x8x192xf32> {dtc.sharding = #dtc.sharding<[["dp"], ["tp"], []]>}) -> (tensor<192xf32> {dtc.grad_of = "b"}) {
  %b = dtc.parameter "b" {dtc.sharding = [#dtc.sharding<[["tp"]:64]>]} : tensor<192xf32>
  %g = dtc.reduce_sum %dy {dims = array<i64: 0, 1>, dtc.sharding = [#dtc.sharding<[[]], partial = ["dp", "tp"]>]} : (tensor<2x8x192xf32>) -> tensor<192xf32>
  return %g : tensor<192xf32>
}

// -----

// Partial over dp only (the parameter is split over tp, and so is its
// gradient): returned as it is, for the step's all-reduce over dp.
// CHECK-LABEL: func.func @column_grad
// CHECK-SAME: -> (tensor<16x16xf32> {dtc.grad_of = "w", dtc.sharding = #dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}, partial = ["dp"]>})
// CHECK-NOT: _start
// CHECK: return
func.func @column_grad(%x: tensor<8x16xf32> {dtc.sharding = #dtc.sharding<[["dp"], []]>}, %dy: tensor<8x32xf32> {dtc.sharding = #dtc.sharding<[["dp"], ["tp"]]>}) -> (tensor<16x32xf32> {dtc.grad_of = "w"}) {
  %w = dtc.parameter "w" {dtc.sharding = [#dtc.sharding<[[], ["tp"]]>]} : tensor<16x32xf32>
  %g = dtc.matmul %x, %dy {transpose_lhs, dtc.sharding = [#dtc.sharding<[[], ["tp"]], partial = ["dp"]>]} : (tensor<8x16xf32>, tensor<8x32xf32>) -> tensor<16x32xf32>
  return %g : tensor<16x32xf32>
}
