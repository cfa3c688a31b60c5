// RUN: dtc-opt %s -split-input-file | FileCheck %s
// RUN: dtc-opt %s -split-input-file | dtc-opt -split-input-file | FileCheck %s
// RUN: dtc-opt %S/Inputs/partition-collectives-invalid.mlir -split-input-file -verify-diagnostics

// The collective ops that dtc-partition emits, as written by hand: each
// start returns a !dtc.async handle, dtc.wait yields the result. Group sizes
// come from the function's mesh (tp:4 here, dp:2 outside it).

// CHECK-LABEL: func.func @collectives
// CHECK-SAME: attributes {dtc.mesh = #dtc.mesh<[dp = 2, tp = 4]>}
// CHECK: %[[H0:.*]] = dtc.all_reduce_start %{{.*}} {mesh_axes = ["tp"]} : tensor<8x64xf32> -> !dtc.async<tensor<8x64xf32>>
// CHECK-NEXT: dtc.wait %[[H0]] : !dtc.async<tensor<8x64xf32>>
// CHECK: dtc.all_reduce_start %{{.*}} {mesh_axes = ["dp", "tp"], reduction = "max"} : tensor<8x64xf32> -> !dtc.async<tensor<8x64xf32>>
// CHECK: dtc.all_gather_start %{{.*}} {dim = 1 : i64, mesh_axes = ["tp"]} : tensor<8x16xf32> -> !dtc.async<tensor<8x64xf32>>
// CHECK: dtc.all_gather_start %{{.*}} {block = 64 : i64, dim = 1 : i64, mesh_axes = ["tp"]} : tensor<8x48xf32> -> !dtc.async<tensor<8x192xf32>>
// CHECK: dtc.reduce_scatter_start %{{.*}} {dim = 0 : i64, mesh_axes = ["tp"]} : tensor<8x64xf32> -> !dtc.async<tensor<2x64xf32>>
// CHECK: dtc.all_to_all_start %{{.*}} {concat_dim = 0 : i64, mesh_axes = ["tp"], split_dim = 1 : i64} : tensor<2x64xf32> -> !dtc.async<tensor<8x16xf32>>
// CHECK: dtc.shard_slice %{{.*}} {dim = 0 : i64, mesh_axes = ["dp"]} : tensor<8x64xf32> -> tensor<4x64xf32>
func.func @collectives(%x: tensor<8x64xf32>, %y: tensor<8x16xf32>, %z: tensor<8x48xf32>) -> (tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x192xf32>, tensor<8x16xf32>, tensor<4x64xf32>) attributes {dtc.mesh = #dtc.mesh<[dp = 2, tp = 4]>} {
  %h0 = dtc.all_reduce_start %x {mesh_axes = ["tp"]} : tensor<8x64xf32> -> !dtc.async<tensor<8x64xf32>>
  %r0 = dtc.wait %h0 : !dtc.async<tensor<8x64xf32>>
  %h1 = dtc.all_reduce_start %x {mesh_axes = ["dp", "tp"], reduction = "max"} : tensor<8x64xf32> -> !dtc.async<tensor<8x64xf32>>
  %r1 = dtc.wait %h1 : !dtc.async<tensor<8x64xf32>>
  %h2 = dtc.all_gather_start %y {dim = 1 : i64, mesh_axes = ["tp"]} : tensor<8x16xf32> -> !dtc.async<tensor<8x64xf32>>
  %r2 = dtc.wait %h2 : !dtc.async<tensor<8x64xf32>>
  %h3 = dtc.all_gather_start %z {block = 64 : i64, dim = 1 : i64, mesh_axes = ["tp"]} : tensor<8x48xf32> -> !dtc.async<tensor<8x192xf32>>
  %r3 = dtc.wait %h3 : !dtc.async<tensor<8x192xf32>>
  %h4 = dtc.reduce_scatter_start %x {dim = 0 : i64, mesh_axes = ["tp"]} : tensor<8x64xf32> -> !dtc.async<tensor<2x64xf32>>
  %r4 = dtc.wait %h4 : !dtc.async<tensor<2x64xf32>>
  %h5 = dtc.all_to_all_start %r4 {concat_dim = 0 : i64, mesh_axes = ["tp"], split_dim = 1 : i64} : tensor<2x64xf32> -> !dtc.async<tensor<8x16xf32>>
  %r5 = dtc.wait %h5 : !dtc.async<tensor<8x16xf32>>
  %r6 = dtc.shard_slice %x {dim = 0 : i64, mesh_axes = ["dp"]} : tensor<8x64xf32> -> tensor<4x64xf32>
  return %r0, %r1, %r2, %r3, %r5, %r6 : tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x192xf32>, tensor<8x16xf32>, tensor<4x64xf32>
}

// -----

// Pipeline neighbours along "pp"; the mesh may also sit on the module.
// CHECK-LABEL: func.func @send_recv
// CHECK: %[[S:.*]] = dtc.send_start %{{.*}} {mesh_axes = ["pp"], peer_offset = 1 : i64} : tensor<4x64xf32> -> !dtc.async<none>
// CHECK-NEXT: dtc.wait %[[S]] : !dtc.async<none>
// CHECK: %[[R:.*]] = dtc.recv_start {mesh_axes = ["pp"], peer_offset = -1 : i64} : !dtc.async<tensor<4x64xf32>>
// CHECK-NEXT: dtc.wait %[[R]] : !dtc.async<tensor<4x64xf32>>
module attributes {dtc.mesh = #dtc.mesh<[pp = 4, tp = 2]>} {
  func.func @send_recv(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
    %s = dtc.send_start %x {mesh_axes = ["pp"], peer_offset = 1 : i64} : tensor<4x64xf32> -> !dtc.async<none>
    dtc.wait %s : !dtc.async<none>
    %r = dtc.recv_start {mesh_axes = ["pp"], peer_offset = -1 : i64} : !dtc.async<tensor<4x64xf32>>
    %y = dtc.wait %r : !dtc.async<tensor<4x64xf32>>
    return %y : tensor<4x64xf32>
  }
}
