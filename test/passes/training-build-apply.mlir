// RUN: dtc-opt %s -dtc-step-gradient -dtc-micro-step -dtc-build-apply | FileCheck %s --check-prefix=ONE
// RUN: dtc-opt %s -dtc-propagate-sharding=mesh=dp:2 -dtc-step-gradient -dtc-propagate-sharding=mesh=dp:2 -dtc-partition="mesh=dp:2 defer-gradient-sync=1" -dtc-micro-step="mesh=dp:2 overlap=0" -dtc-build-apply="beta2=0.999 grad-clip=0" | FileCheck %s --check-prefix=DP
// RUN: dtc-opt %s -dtc-propagate-sharding=mesh=dp:2 -dtc-step-gradient -dtc-propagate-sharding=mesh=dp:2 -dtc-partition="mesh=dp:2 defer-gradient-sync=1" -dtc-micro-step=mesh=dp:2 -dtc-build-apply | FileCheck %s --check-prefix=SYNCED
// RUN: dtc-opt %s -dtc-propagate-sharding=mesh=dp:2 -dtc-step-gradient -dtc-propagate-sharding=mesh=dp:2 -dtc-partition="mesh=dp:2 defer-gradient-sync=1" -dtc-micro-step="mesh=dp:2 zero-stage=1" -dtc-build-apply | FileCheck %s --check-prefix=ZERO1

// dtc-build-apply: the optimizer step from dtc-micro-step's gradient table,
// which it consumes.

// One device: the global norm, clipped (default 1.0), scales every
// gradient; AdamW with the default hyperparameters.
// ONE-NOT: dtc.step_gradients
// ONE-LABEL: func.func @apply
// ONE-SAME: (%[[LR:[^:]*]]: tensor<f32> {dtc.feed = "lr"}, %[[STEP:[^:]*]]: tensor<f32> {dtc.feed = "step"}, %[[GRAD:[^:]*]]: tensor<32x16xf32> {dtc.state = "grad:wte"
// ONE-SAME: {dtc.feed = "inverse_micro_batches"}
// ONE-SAME: -> (tensor<f32> {dtc.name = "grad_norm"}, tensor<32x16xf32> {dtc.state = "wte"}, tensor<32x16xf32> {dtc.state = "exp_avg:wte"}, tensor<32x16xf32> {dtc.state = "exp_avg_sq:wte"}, tensor<32x16xf32> {dtc.state = "grad:wte"}
// ONE-NOT: _start
// ONE: dtc.sqrt
// ONE: dtc.min
// ONE: %[[W:.*]] = dtc.parameter "wte" : tensor<32x16xf32>
// ONE-NEXT: dtc.adamw %[[W]], %[[GRAD]], %{{.*}}, %{{.*}}, %[[LR]], %[[STEP]], %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, epsilon = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64}
// ONE-NEXT: dtc.constant dense<0.000000e+00> : tensor<32x16xf32>
// ONE: dtc.parameter "head"

// Two replicas, nothing synced in the step: apply all-reduces each
// gradient over dp. The pass options reach AdamW; grad-clip=0 clips nothing.
// DP-LABEL: func.func @apply
// DP: dtc.all_reduce_start %{{.*}} {mesh_axes = ["dp"]} : tensor<32x16xf32>
// DP: dtc.all_reduce_start %{{.*}} {mesh_axes = ["dp"]} : tensor<16x32xf32>
// DP-NOT: dtc.min
// DP: dtc.adamw {{.*}}beta2 = 0.99899999999999999 : f64
// DP-SAME: weight_decay = 1.000000e-01

// Gradients micro_step_sync reduced are not reduced again.
// SYNCED-LABEL: func.func @apply
// SYNCED-NOT: dtc.all_reduce_start {{.*}} : tensor<32x16xf32>
// SYNCED: dtc.adamw

// ZeRO-1: this rank updates its flat half of each parameter (its moments
// are halves) and all-gathers the updated parameter.
// ZERO1-LABEL: func.func @apply
// ZERO1: dtc.shard_slice %{{.*}} {dim = 0 : i64, mesh_axes = ["dp"]} : tensor<512xf32> -> tensor<256xf32>
// ZERO1: %[[NEW:.*]], %{{.*}}, %{{.*}} = dtc.adamw {{.*}} : (tensor<256xf32>
// ZERO1-NEXT: dtc.all_gather_start %[[NEW]] {dim = 0 : i64, mesh_axes = ["dp"]} : tensor<256xf32> -> !dtc.async<tensor<512xf32>>

func.func @main(%ids: tensor<2x8xi64> {dtc.feed = "tokens"}, %labels: tensor<2x8xi64> {dtc.feed = "labels"}) -> (tensor<f32> {dtc.name = "loss"}) {
  %wte = dtc.parameter "wte" : tensor<32x16xf32>
  %head = dtc.parameter "head" : tensor<16x32xf32>
  %e = dtc.embedding %wte, %ids : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %logits = dtc.matmul %e, %head : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %l = dtc.cross_entropy %logits, %labels : (tensor<2x8x32xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
