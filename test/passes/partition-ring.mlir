// Ring attention (context parallelism, docs/partition.md): attention and
// its gradient with query, key and value positions split over cp:4. The
// forward attends the local queries to each key/value chunk in turn, K and
// V going one hop (cyclic send to +1, receive from -1) before each of the
// cp - 1 = 3 later blocks, each block merged by its log-sum-exp. The
// gradient reuses that output and log-sum-exp, sends K and V 3 times and
// each chunk's gradient accumulators 4 times (the last hop brings them home).
// RUN: dtc-opt %s -dtc-propagate-sharding="mesh=cp:4" -dtc-partition="mesh=cp:4" | FileCheck %s
// RUN: dtc-opt %s -dtc-propagate-sharding="mesh=cp:4" -dtc-partition="mesh=cp:4" | FileCheck %s --check-prefix=COUNT

// CHECK-LABEL: func.func @ring
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x4x8xf32> {{.*}}, %[[K:.*]]: tensor<1x2x4x8xf32> {{.*}}, %[[V:.*]]: tensor<1x2x4x8xf32> {{.*}}, %[[DY:.*]]: tensor<1x4x4x8xf32> {{.*}})
// CHECK: %[[SK:.*]] = dtc.send_start %[[K]] {cyclic, mesh_axes = ["cp"], peer_offset = 1 : i64}
// CHECK: %[[RK:.*]] = dtc.recv_start {cyclic, mesh_axes = ["cp"], peer_offset = -1 : i64} : !dtc.async<tensor<1x2x4x8xf32>>
// CHECK: dtc.send_start %[[V]]
// CHECK: %[[O0:.*]], %[[L0:.*]] = dtc.attention_block %[[Q]], %[[K]], %[[V]] {causal, kv_shift = 0 : i64, mesh_axes = ["cp"], scale = 0.35355339059327373 : f64} : {{.*}} -> (tensor<1x4x4x8xf32>, tensor<1x4x4xf32>)
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
