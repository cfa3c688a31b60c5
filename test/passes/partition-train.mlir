// RUN: dtc-opt %s -dtc-autodiff -dtc-propagate-sharding="mesh=dp:2,tp:2" -dtc-partition="mesh=dp:2,tp:2" | FileCheck %s
// RUN: dtc-opt %s -dtc-autodiff -dtc-propagate-sharding="mesh=dp:2,tp:2" -dtc-partition="mesh=dp:2,tp:2" | FileCheck %s --check-prefix=COUNT

// A training step on dp=2 x tp=2: the gradient function of a tiny language
// model (embedding, a Megatron MLP, a head, cross-entropy). Each rank runs
// 2 of the 4 sequences with half of the MLP and half of the head's
// vocabulary (the vocabulary-parallel loss). The weight gradients
// are partial sums over dp (each rank summed over its own tokens) and are
// all-reduced over dp exactly once, in their tp-local shapes: the data-
// parallel gradient sync moves each gradient byte once per step.

// CHECK-LABEL: func.func @loss_grad
// CHECK-SAME: (%arg0: tensor<2x8xi64> {dtc.sharding = #dtc.sharding<{{\[\[}}"dp"], [{{\]\]}}>}, %arg1: tensor<2x8xi64>
// CHECK-SAME: tensor<32x8xf32> {dtc.grad_of = "wte", dtc.sharding = #dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>}
// CHECK-SAME: tensor<16x32xf32> {dtc.grad_of = "fc1.weight", dtc.sharding = #dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>}
// CHECK-SAME: tensor<32x16xf32> {dtc.grad_of = "fc2.weight", dtc.sharding = #dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>}
// CHECK-SAME: tensor<16x16xf32> {dtc.grad_of = "head.weight", dtc.sharding = #dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>}
// The loss over the vocabulary halves: each rank's row statistics, one
// all-gather of them over tp. The local loss is the mean over this rank's
// positions, weighed by its share of the labels counted over dp (one
// exchange of a count: ignored labels make the shares unequal), so the sum
// over dp is the global mean; its gradient (this rank's vocabulary half,
// from the same statistics) by the same share.
// CHECK: %[[LOGITS:.*]] = dtc.matmul {{.*}}tensor<16x16xf32>) -> tensor<2x8x16xf32>
// CHECK-NEXT: %[[STATS:.*]] = dtc.cross_entropy_stats %[[LOGITS]], %arg1 {mesh_axes = ["tp"]} : {{.*}} -> tensor<2x8x3xf32>
// CHECK-NEXT: %[[GATHER:.*]] = dtc.all_gather_start %[[STATS]] {dim = 2 : i64, mesh_axes = ["tp"]}
// CHECK-NEXT: %[[ALL:.*]] = dtc.wait %[[GATHER]]
// CHECK-NEXT: %[[L:.*]] = dtc.cross_entropy_from_stats %[[ALL]], %arg1 : {{.*}} -> tensor<f32>
// CHECK-NEXT: %[[IGNORED:.*]] = dtc.constant dense<-100> : tensor<i64>
// CHECK-NEXT: %[[COUNTS:.*]] = dtc.compare %arg1, %[[IGNORED]] {predicate = "ne"}
// CHECK-NEXT: %[[ONES:.*]] = dtc.cast %[[COUNTS]]
// CHECK-NEXT: %[[LOCAL:.*]] = dtc.reduce_sum %[[ONES]]
// CHECK-NEXT: %[[EXCHANGE:.*]] = dtc.all_reduce_start %[[LOCAL]] {mesh_axes = ["dp"]} : tensor<f32>
// CHECK-NEXT: %[[TOTAL:.*]] = dtc.wait %[[EXCHANGE]]
// CHECK: %[[SHARE:.*]] = dtc.div %[[LOCAL]],
// CHECK: %[[W:.*]] = dtc.mul %[[L]], %[[SHARE]]
// CHECK: %[[LOSS:.*]] = dtc.select %{{.*}}, %[[W]],
// CHECK: dtc.cross_entropy_shard_grad %[[LOGITS]], %arg1, %[[ALL]], {{.*}} -> tensor<2x8x16xf32>
// CHECK-NEXT: dtc.mul %{{.*}}, %[[SHARE]]
// CHECK: dtc.embedding_grad {{.*}} -> tensor<32x8xf32>
// CHECK-NEXT: dtc.all_reduce_start %[[LOSS]] {mesh_axes = ["dp"]} : tensor<f32>
// CHECK: dtc.all_reduce_start {{.*}}{mesh_axes = ["dp"]} : tensor<32x8xf32>
// CHECK: dtc.all_reduce_start {{.*}}{mesh_axes = ["dp"]} : tensor<16x32xf32>
// CHECK: dtc.all_reduce_start {{.*}}{mesh_axes = ["dp"]} : tensor<32x16xf32>
// CHECK: dtc.all_reduce_start {{.*}}{mesh_axes = ["dp"]} : tensor<16x16xf32>
// CHECK-NOT: _start
// CHECK: return

// COUNT-LABEL: func.func @loss_grad
// COUNT-COUNT-6: mesh_axes = ["dp"]
// COUNT-NOT: mesh_axes = ["dp"]
// COUNT: return

func.func @loss(%ids: tensor<4x8xi64>, %labels: tensor<4x8xi64>) -> tensor<f32> {
  %wte = dtc.parameter "wte" : tensor<32x16xf32>
  %w1 = dtc.parameter "fc1.weight" : tensor<16x64xf32>
  %w2 = dtc.parameter "fc2.weight" : tensor<64x16xf32>
  %head = dtc.parameter "head.weight" : tensor<16x32xf32>
  %e = dtc.embedding %wte, %ids : (tensor<32x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
  %h0 = dtc.matmul %e, %w1 : (tensor<4x8x16xf32>, tensor<16x64xf32>) -> tensor<4x8x64xf32>
  %h = dtc.gelu %h0 : tensor<4x8x64xf32>
  %y0 = dtc.matmul %h, %w2 : (tensor<4x8x64xf32>, tensor<64x16xf32>) -> tensor<4x8x16xf32>
  %y = dtc.add %e, %y0 : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %logits = dtc.matmul %y, %head : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
  %l = dtc.cross_entropy %logits, %labels : (tensor<4x8x32xf32>, tensor<4x8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
