// Ring attention (context parallelism, docs/partition.md): attention and
// its gradient with query, key and value positions split over cp:4. The
// forward attends the local queries to each key/value chunk in turn, K and
// V going one hop (cyclic send to +1, receive from -1) before each of the
// cp - 1 = 3 later blocks, each block merged by its log-sum-exp. The
// gradient reuses that output and log-sum-exp, sends K and V 3 times and
// each chunk's gradient accumulators 4 times (the last hop brings them home).
// RUN: dtc-opt %s -dtc-propagate-sharding="mesh=cp:4" -dtc-partition="mesh=cp:4" | FileCheck %s
// RUN: dtc-opt %s -dtc-propagate-sharding="mesh=cp:4" -dtc-partition="mesh=cp:4" | FileCheck %s --check-prefix=COUNT
// Contiguous chunks on request: the ring ops lose `zigzag`, and no
// reordering is inserted.
// RUN: dtc-opt %s -dtc-propagate-sharding="mesh=cp:4" -dtc-partition="mesh=cp:4 context-zigzag=false" | FileCheck %s --check-prefix=PLAIN
// PLAIN-NOT: zigzag

// CHECK-LABEL: func.func @ring
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x4x8xf32> {{.*}}, %[[K:.*]]: tensor<1x2x4x8xf32> {{.*}}, %[[V:.*]]: tensor<1x2x4x8xf32> {{.*}}, %[[DY:.*]]: tensor<1x4x4x8xf32> {{.*}})
// CHECK: %[[SK:.*]] = dtc.send_start %[[K]] {cyclic, mesh_axes = ["cp"], peer_offset = 1 : i64}
// CHECK: %[[RK:.*]] = dtc.recv_start {cyclic, mesh_axes = ["cp"], peer_offset = -1 : i64} : !dtc.async<tensor<1x2x4x8xf32>>
// CHECK: dtc.send_start %[[V]]
// CHECK: %[[O0:.*]], %[[L0:.*]] = dtc.attention_block %[[Q]], %[[K]], %[[V]] {causal, kv_shift = 0 : i64, mesh_axes = ["cp"], scale = 0.35355339059327373 : f64, zigzag} : {{.*}} -> (tensor<1x4x4x8xf32>, tensor<1x4x4xf32>)
// CHECK: %[[K1:.*]] = dtc.wait %[[RK]]
// CHECK: %[[O1:.*]], %[[L1:.*]] = dtc.attention_block %[[Q]], %[[K1]], %{{.*}} {causal, kv_shift = 1 : i64
// CHECK-NEXT: dtc.attention_merge %[[O0]], %[[L0]], %[[O1]], %[[L1]]
// CHECK: dtc.attention_block {{.*}}kv_shift = 2
// CHECK: dtc.attention_block {{.*}}kv_shift = 3
// CHECK-NEXT: %[[O:.*]], %[[L:.*]] = dtc.attention_merge
// CHECK-NOT: dtc.attention_block %
// CHECK: dtc.attention_block_grad %[[Q]], %[[K]], %[[V]], %[[O]], %[[L]], %[[DY]] {causal, kv_shift = 0 : i64
// CHECK: dtc.attention_block_grad {{.*}}kv_shift = 3
// CHECK: return %[[O]],

// COUNT-LABEL: func.func @ring
// COUNT-COUNT-3: dtc.attention_merge
// COUNT-NOT: dtc.attention_merge
// COUNT-NOT: all_gather
// COUNT-COUNT-4: dtc.attention_block_grad
// COUNT-NOT: dtc.attention_block_grad

func.func @ring(%q: tensor<1x4x16x8xf32> {dtc.sharding = #dtc.sharding<[[], [], ["cp"], []]>}, %k: tensor<1x2x16x8xf32> {dtc.sharding = #dtc.sharding<[[], [], ["cp"], []]>}, %v: tensor<1x2x16x8xf32> {dtc.sharding = #dtc.sharding<[[], [], ["cp"], []]>}, %dy: tensor<1x4x16x8xf32> {dtc.sharding = #dtc.sharding<[[], [], ["cp"], []]>}) -> (tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) {
  %y = dtc.attention %q, %k, %v {causal} : (tensor<1x4x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>) -> tensor<1x4x16x8xf32>
  %dq, %dk, %dv = dtc.attention_grad %q, %k, %v, %dy {causal} : (tensor<1x4x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x4x16x8xf32>) -> (tensor<1x4x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>)
  return %y, %dq, %dk, %dv : tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x2x16x8xf32>, tensor<1x2x16x8xf32>
}

// Zigzag chunks: a sequence split over cp holds halves k and 7 - k of 8
// (the arguments say so for the data loader); a replicated table read split
// is reordered before its slice, a split value gathered for an op that
// reads whole sequences is reordered back after the gather.
// CHECK-LABEL: func.func @sequence_table
// CHECK-SAME: (%[[X:.*]]: tensor<1x4x8xf32> {dtc.sharding = {{.*}}, dtc.zigzag})
// CHECK: %[[T:.*]] = dtc.constant
// CHECK-NEXT: %[[TZ:.*]] = dtc.zigzag_order %[[T]] {dim = 1 : i64, parts = 4 : i64} : tensor<1x16x8xf32> -> tensor<1x16x8xf32>
// CHECK-NEXT: %[[TS:.*]] = dtc.shard_slice %[[TZ]] {dim = 1 : i64, mesh_axes = ["cp"]} : tensor<1x16x8xf32> -> tensor<1x4x8xf32>
// CHECK-NEXT: %[[Y:.*]] = dtc.add %[[X]], %[[TS]]
// CHECK-NEXT: %[[H:.*]] = dtc.all_gather_start %[[Y]] {dim = 1 : i64, mesh_axes = ["cp"]}
// CHECK-NEXT: %[[G:.*]] = dtc.wait %[[H]]
// CHECK-NEXT: %[[N:.*]] = dtc.zigzag_order %[[G]] {dim = 1 : i64, inverse, parts = 4 : i64}
// CHECK-NEXT: dtc.softmax %[[N]]
func.func @sequence_table(%x: tensor<1x16x8xf32>) -> tensor<1x16x8xf32> {
  %t = dtc.constant dense<[[[0.0,1.0,2.0,3.0,4.0,5.0,6.0,0.0],[1.0,2.0,3.0,4.0,5.0,6.0,0.0,1.0],[2.0,3.0,4.0,5.0,6.0,0.0,1.0,2.0],[3.0,4.0,5.0,6.0,0.0,1.0,2.0,3.0],[4.0,5.0,6.0,0.0,1.0,2.0,3.0,4.0],[5.0,6.0,0.0,1.0,2.0,3.0,4.0,5.0],[6.0,0.0,1.0,2.0,3.0,4.0,5.0,6.0],[0.0,1.0,2.0,3.0,4.0,5.0,6.0,0.0],[1.0,2.0,3.0,4.0,5.0,6.0,0.0,1.0],[2.0,3.0,4.0,5.0,6.0,0.0,1.0,2.0],[3.0,4.0,5.0,6.0,0.0,1.0,2.0,3.0],[4.0,5.0,6.0,0.0,1.0,2.0,3.0,4.0],[5.0,6.0,0.0,1.0,2.0,3.0,4.0,5.0],[6.0,0.0,1.0,2.0,3.0,4.0,5.0,6.0],[0.0,1.0,2.0,3.0,4.0,5.0,6.0,0.0],[1.0,2.0,3.0,4.0,5.0,6.0,0.0,1.0]]]> : tensor<1x16x8xf32>
  %y = dtc.add %x, %t : (tensor<1x16x8xf32>, tensor<1x16x8xf32>) -> tensor<1x16x8xf32>
  %z = dtc.softmax %y {axis = 1 : i64} : tensor<1x16x8xf32>
  return %z : tensor<1x16x8xf32>
}
