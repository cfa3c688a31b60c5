// RUN: dtc-opt %s -dtc-schedule-collectives | FileCheck %s

// dtc-schedule-collectives: each collective starts as soon as its operand
// exists and is waited right before its result is read, so independent
// compute runs in between; neither moves past an op marked
// dtc.forward_end.

// CHECK-LABEL: func.func @overlap
// CHECK: %[[A:.*]] = dtc.matmul %arg0, %arg1
// CHECK-NEXT: %[[S:.*]] = dtc.all_reduce_start %[[A]]
// CHECK-NEXT: %[[B:.*]] = dtc.matmul %arg0, %arg1
// CHECK-NEXT: %[[C:.*]] = dtc.gelu %[[B]]
// CHECK-NEXT: %[[R:.*]] = dtc.wait %[[S]]
// CHECK-NEXT: dtc.add %[[R]], %[[C]]

// The start stays below the forward pass's end.
// CHECK-LABEL: func.func @barrier
// CHECK: dtc.matmul
// CHECK-NEXT: dtc.gelu %arg0 {dtc.forward_end}
// CHECK-NEXT: dtc.all_reduce_start
// CHECK-NEXT: dtc.wait

func.func @overlap(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 2]>} {
  %a = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %s = dtc.all_reduce_start %a {mesh_axes = ["tp"]} : tensor<4x8xf32> -> !dtc.async<tensor<4x8xf32>>
  %r = dtc.wait %s : !dtc.async<tensor<4x8xf32>>
  %c = dtc.gelu %b : tensor<4x8xf32>
  %d = dtc.add %r, %c : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}
func.func @barrier(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 2]>} {
  %a = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %b = dtc.gelu %x {dtc.forward_end} : tensor<4x8xf32>
  %s = dtc.all_reduce_start %a {mesh_axes = ["tp"]} : tensor<4x8xf32> -> !dtc.async<tensor<4x8xf32>>
  %r = dtc.wait %s : !dtc.async<tensor<4x8xf32>>
  %d = dtc.add %r, %b : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %d : tensor<4x8xf32>
}
