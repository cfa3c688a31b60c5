// RUN: dtc-opt %s -dtc-step-gradient -dtc-micro-step | FileCheck %s --check-prefix=ONE
// RUN: dtc-opt %s -dtc-propagate-sharding=mesh=dp:2 -dtc-step-gradient -dtc-propagate-sharding=mesh=dp:2 -dtc-partition="mesh=dp:2 defer-gradient-sync=1" -dtc-micro-step=mesh=dp:2 | FileCheck %s --check-prefix=SYNC
// RUN: dtc-opt %s -dtc-propagate-sharding=mesh=dp:2 -dtc-step-gradient -dtc-propagate-sharding=mesh=dp:2 -dtc-partition="mesh=dp:2 defer-gradient-sync=1" -dtc-micro-step="mesh=dp:2 overlap=0" | FileCheck %s --check-prefix=NOSYNC
// RUN: dtc-opt %s -dtc-propagate-sharding=mesh=dp:2 -dtc-step-gradient -dtc-propagate-sharding=mesh=dp:2 -dtc-partition="mesh=dp:2 defer-gradient-sync=1" -dtc-micro-step="mesh=dp:2 zero-stage=2" | FileCheck %s --check-prefix=ZERO2
// RUN: dtc-opt %s -dtc-propagate-sharding=mesh=dp:2 -dtc-step-gradient -dtc-propagate-sharding=mesh=dp:2 -dtc-partition="mesh=dp:2 defer-gradient-sync=1" -dtc-micro-step="mesh=dp:2 zero-stage=3" | FileCheck %s --check-prefix=ZERO3

// dtc-micro-step: every gradient is added to its accumulator (a dtc.state
// argument and result); the gradient table for dtc-build-apply is left on
// the module.

// One device: accumulate, nothing to sync.
// ONE: module attributes {dtc.step_gradients = {gradients = [{parameter = "wte", parameter_attrs = {}, split_axes = [], sync_axes = [], type = tensor<32x16xf32>}, {parameter = "head", parameter_attrs = {}, split_axes = [], sync_axes = [], type = tensor<16x32xf32>}], mesh = #dtc.mesh<[]>, zero_axes = [], zero_parts = 1 : i64, zero_sharded = [], zero_stage = 0 : i64}}
// ONE-LABEL: func.func @micro_step
// ONE-SAME: %[[ACC:[^:]*]]: tensor<32x16xf32> {dtc.state = "grad:wte", dtc.state_of = "wte", dtc.state_role = "grad"}, %{{.*}}: tensor<16x32xf32> {dtc.state = "grad:head", dtc.state_of = "head", dtc.state_role = "grad"}
// ONE-SAME: -> (tensor<f32> {dtc.name = "loss"}, tensor<32x16xf32> {dtc.state = "grad:wte"}, tensor<16x32xf32> {dtc.state = "grad:head"})
// ONE: %[[G:.*]] = dtc.embedding_grad
// ONE-NEXT: %[[SUM:.*]] = dtc.add %[[ACC]], %[[G]]
// ONE: return %{{.*}}, %[[SUM]], %{{.*}} :
// ONE-NOT: @micro_step_sync

// Two data-parallel replicas with overlap: `micro_step` keeps its partial
// sums (apply reduces them) and `micro_step_sync`, the last micro-batch,
// all-reduces both gradients in one bucket while the backward pass runs.
// SYNC: sync_axes = ["dp"], synced_in_step, type = tensor<32x16xf32>
// SYNC-LABEL: func.func @micro_step(
// SYNC-NOT: tensor<512xf32>
// SYNC-LABEL: func.func @micro_step_sync(
// SYNC: dtc.concat %{{.*}}, %{{.*}} {axis = 0 : i64} : (tensor<512xf32>, tensor<512xf32>) -> tensor<1024xf32>
// SYNC-NEXT: dtc.all_reduce_start %{{.*}} {mesh_axes = ["dp"]} : tensor<1024xf32>

// Without overlap apply syncs everything.
// NOSYNC-NOT: synced_in_step
// NOSYNC-NOT: @micro_step_sync

// ZeRO-2: each gradient is reduce-scattered as soon as it exists and this
// rank's flat half is accumulated.
// ZERO2: zero_axes = ["dp"], zero_parts = 2 : i64, zero_sharded = ["wte", "head"], zero_stage = 2 : i64
// ZERO2-LABEL: func.func @micro_step
// ZERO2-SAME: tensor<256xf32> {dtc.flat_shard = ["dp"], dtc.state = "grad:wte"
// ZERO2: dtc.parameter "wte" {{.*}} : tensor<32x16xf32>
// ZERO2: dtc.reduce_scatter_start %{{.*}} {dim = 0 : i64, mesh_axes = ["dp"]} : tensor<512xf32> -> !dtc.async<tensor<256xf32>>
// ZERO2: dtc.reduce_scatter_start %{{.*}} {dim = 0 : i64, mesh_axes = ["dp"]} : tensor<512xf32> -> !dtc.async<tensor<256xf32>>

// ZeRO-3: parameters are stored as their flat halves and gathered before
// use.
// ZERO3: zero_stage = 3 : i64
// ZERO3-LABEL: func.func @micro_step
// ZERO3: %[[WTE:.*]] = dtc.parameter "wte" {dtc.flat_shard = ["dp"], {{.*}}} : tensor<256xf32>
// ZERO3: dtc.all_gather_start %[[WTE]] {dim = 0 : i64, mesh_axes = ["dp"]} : tensor<256xf32> -> !dtc.async<tensor<512xf32>>
// ZERO3: dtc.reduce_scatter_start

func.func @main(%ids: tensor<2x8xi64> {dtc.feed = "tokens"}, %labels: tensor<2x8xi64> {dtc.feed = "labels"}) -> (tensor<f32> {dtc.name = "loss"}) {
  %wte = dtc.parameter "wte" : tensor<32x16xf32>
  %head = dtc.parameter "head" : tensor<16x32xf32>
  %e = dtc.embedding %wte, %ids : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %logits = dtc.matmul %e, %head : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %l = dtc.cross_entropy %logits, %labels : (tensor<2x8x32xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
