// RUN: dtc-opt %s -dtc-chunk-tp-collectives=chunks=2 | FileCheck %s
// RUN: dtc-opt %s -dtc-chunk-tp-collectives | FileCheck %s --check-prefix=WHOLE

// dtc-chunk-tp-collectives: a tensor-parallel GEMM and its collective are
// split into row blocks, so block i communicates while block i+1
// multiplies (after dtc-schedule-collectives).

// A row-parallel GEMM's partial sums: one GEMM and one all-reduce per block
// of rows, joined after.
// CHECK-LABEL: func.func @row_parallel
// CHECK: %[[X0:.*]] = dtc.slice %arg0 {limits = array<i64: 2, 8, 8>, starts = array<i64: 0, 0, 0>
// CHECK-NEXT: %[[Y0:.*]] = dtc.matmul %[[X0]], %arg1 : (tensor<2x8x8xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
// CHECK-NEXT: %[[X1:.*]] = dtc.slice %arg0 {limits = array<i64: 4, 8, 8>, starts = array<i64: 2, 0, 0>
// CHECK-NEXT: %[[Y1:.*]] = dtc.matmul %[[X1]], %arg1
// CHECK-NEXT: %[[S0:.*]] = dtc.all_reduce_start %[[Y0]] {mesh_axes = ["tp"]} : tensor<2x8x16xf32>
// CHECK-NEXT: %[[S1:.*]] = dtc.all_reduce_start %[[Y1]] {mesh_axes = ["tp"]} : tensor<2x8x16xf32>
// CHECK-NEXT: %[[R0:.*]] = dtc.wait %[[S0]]
// CHECK-NEXT: %[[R1:.*]] = dtc.wait %[[S1]]
// CHECK-NEXT: %[[R:.*]] = dtc.concat %[[R0]], %[[R1]] {axis = 0 : i64} : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<4x8x16xf32>
// CHECK-NEXT: return %[[R]]
// WHOLE-LABEL: func.func @row_parallel
// WHOLE-NOT: dtc.slice
// WHOLE-COUNT-1: dtc.all_reduce_start
// WHOLE-NOT: dtc.concat

// A column-parallel GEMM reading gathered activations: one gather per block,
// each block multiplied as it arrives.
// CHECK-LABEL: func.func @column_parallel
// CHECK: dtc.all_gather_start %{{.*}} {dim = 2 : i64, mesh_axes = ["tp"]} : tensor<2x8x4xf32> -> !dtc.async<tensor<2x8x8xf32>>
// CHECK-NEXT: dtc.all_gather_start %{{.*}} {dim = 2 : i64, mesh_axes = ["tp"]} : tensor<2x8x4xf32> -> !dtc.async<tensor<2x8x8xf32>>
// CHECK-COUNT-2: dtc.wait
// CHECK-COUNT-2: dtc.matmul {{.*}} -> tensor<2x8x16xf32>
// CHECK-NEXT: dtc.concat

// Data-parallel collectives are not a GEMM's: left whole.
// CHECK-LABEL: func.func @data_parallel
// CHECK-NOT: dtc.slice
// CHECK: dtc.all_reduce_start %arg0 {mesh_axes = ["dp"]} : tensor<8x16xf32>

func.func @row_parallel(%x: tensor<4x8x8xf32>, %w: tensor<8x16xf32>) -> tensor<4x8x16xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 2]>} {
  %y = dtc.matmul %x, %w : (tensor<4x8x8xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
  %s = dtc.all_reduce_start %y {mesh_axes = ["tp"]} : tensor<4x8x16xf32> -> !dtc.async<tensor<4x8x16xf32>>
  %r = dtc.wait %s : !dtc.async<tensor<4x8x16xf32>>
  return %r : tensor<4x8x16xf32>
}
func.func @column_parallel(%x: tensor<4x8x4xf32>, %w: tensor<8x16xf32>) -> tensor<4x8x16xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 2]>} {
  %s = dtc.all_gather_start %x {dim = 2 : i64, mesh_axes = ["tp"]} : tensor<4x8x4xf32> -> !dtc.async<tensor<4x8x8xf32>>
  %g = dtc.wait %s : !dtc.async<tensor<4x8x8xf32>>
  %y = dtc.matmul %g, %w : (tensor<4x8x8xf32>, tensor<8x16xf32>) -> tensor<4x8x16xf32>
  return %y : tensor<4x8x16xf32>
}
func.func @data_parallel(%g: tensor<8x16xf32>) -> tensor<8x16xf32> attributes {dtc.mesh = #dtc.mesh<[dp = 2]>} {
  %s = dtc.all_reduce_start %g {mesh_axes = ["dp"]} : tensor<8x16xf32> -> !dtc.async<tensor<8x16xf32>>
  %r = dtc.wait %s : !dtc.async<tensor<8x16xf32>>
  return %r : tensor<8x16xf32>
}
