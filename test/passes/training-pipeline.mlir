// RUN: dtc-opt %s -dtc-training-pipeline="mesh=dp:2,tp:2 zero-stage=1" | FileCheck %s
// RUN: dtc-opt %s -dtc-training-pipeline="mesh=dp:2,tp:2 zero-stage=1" | dtc-opt | FileCheck %s
// RUN: dtc-opt %s -dtc-training-pipeline | FileCheck %s --check-prefix=ONE
// RUN: not dtc-opt %s -dtc-training-pipeline="recompute=sometimes" 2>&1 | FileCheck %s --check-prefix=BAD

// dtc-training-pipeline: the step `dtc compile` builds, from the forward
// function to `micro_step`, `micro_step_sync` and `apply`
// (cli/emit-partitioned-pipeline.test checks it against dtc compile).

// CHECK-NOT: dtc.step_gradients
// CHECK-LABEL: func.func @micro_step(
// CHECK-SAME: dtc.feed = "tokens"
// CHECK-SAME: attributes {dtc.mesh = #dtc.mesh<[dp = 2, tp = 2]>}
// CHECK: dtc.cross_entropy{{.*}}dtc.forward_end
// CHECK-LABEL: func.func @micro_step_sync(
// CHECK: dtc.all_reduce_start {{.*}}{mesh_axes = ["dp"]}
// CHECK-LABEL: func.func @apply(
// CHECK: dtc.adamw {{.*}} : (tensor<{{[0-9]+}}xf32>

// One device: no collectives, no micro_step_sync.
// ONE-LABEL: func.func @micro_step(
// ONE-NOT: _start
// ONE-NOT: @micro_step_sync
// ONE-LABEL: func.func @apply(
// ONE-NOT: _start

// BAD: error: dtc-recompute: mode must be none, selective or full, got 'sometimes'

func.func @main(%ids: tensor<4x8xi64>) -> tensor<4x8x32xf32> {
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
  return %logits : tensor<4x8x32xf32>
}
