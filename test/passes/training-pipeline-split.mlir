// RUN: dtc-opt %s -dtc-training-pipeline="mesh=pp:2,dp:2 pipeline-stages=2 micro-batches=2" | FileCheck %s
// RUN: dtc-opt %s -dtc-training-pipeline="mesh=pp:2,dp:2 pipeline-stages=2 micro-batches=2" | dtc-opt | FileCheck %s
// RUN: dtc-opt %s -dtc-training-pipeline="mesh=pp:2 pipeline-stages=2 micro-batches=4 schedule=gpipe" | FileCheck %s --check-prefix=GPIPE
// RUN: not dtc-opt %s -dtc-training-pipeline="mesh=pp:2 pipeline-stages=2 virtual-stages=2 schedule=gpipe micro-batches=2" 2>&1 | FileCheck %s --check-prefix=VPP
// RUN: not dtc-opt %s -dtc-training-pipeline="mesh=pp:8 pipeline-stages=8 micro-batches=8" 2>&1 | FileCheck %s --check-prefix=CUTS
// RUN: not dtc-opt %s -dtc-pipeline-split="mesh=pp:2 stages=2" 2>&1 | FileCheck %s --check-prefix=UNBOUND
// RUN: dtc-opt %s -dtc-bind-loss -dtc-pipeline-split="mesh=pp:2,dp:2 stages=2 micro-batches=2" | FileCheck %s --check-prefix=CHUNKS
// RUN: dtc-opt %s -pass-pipeline="builtin.module(dtc-bind-loss,dtc-pipeline-split{mesh=pp:2,dp:2 stages=2 micro-batches=2},builtin.module(dtc-chunk-gradient,dtc-chunk-boundary{mesh=dp:2}))" | FileCheck %s --check-prefix=GRAD
// RUN: not dtc-opt %s -dtc-bind-loss -dtc-pipeline-assemble 2>&1 | FileCheck %s --check-prefix=UNSPLIT
// RUN: not dtc-opt %s -dtc-training-pipeline="mesh=pp:2 pipeline-stages=2 schedule=zb" 2>&1 | FileCheck %s --check-prefix=SCHEDULE

// The pipeline step as passes: dtc-pipeline-split cuts the loss-bound
// forward function into one nested module per model chunk; the registered
// passes run nested on each (sharding, dtc-chunk-gradient, recompute,
// dtc-chunk-boundary, partitioning, collective scheduling); and
// dtc-pipeline-assemble groups the chunks into one module per stage.

// The whole step: one nested module per stage. The cut falls at the residual stream after the block
// (the one point past the embedding where a single activation crosses and
// the FLOPs balance); stage 0 runs the embedding and the MLP block as a
// forward and a backward pass, stage 1 the head and the loss as one step.
// Each stage is partitioned over dp (its tokens [2, 8] of the 4 rows) and
// has its own schedule, loss and apply.

// CHECK: module attributes {dtc.step_info = {micro_batch = 4 : i64, micro_batches_per_call = 2 : i64{{.*}}stacked
// CHECK-NOT: func.func @main
// CHECK-LABEL: module @stage0 {
// CHECK-LABEL: func.func @chunk0_forward(
// CHECK-SAME: tensor<2x8xi64> {dtc.feed = "tokens", dtc.sharding = #dtc.sharding<{{\[\["dp"\], \[\]\]}}>}
// CHECK: dtc.embedding
// CHECK: dtc.gelu
// CHECK-NOT: head.weight
// CHECK: return
// CHECK-LABEL: func.func @chunk0_backward(
// CHECK-SAME: dtc.state = "grad:fc1.weight"
// CHECK: dtc.embedding_grad
// CHECK-LABEL: func.func @pipeline_loss(
// CHECK: dtc.all_reduce_start {{.*}}{mesh_axes = ["pp"]}
// CHECK-LABEL: func.func @pipeline_step(
// CHECK-SAME: tensor<2x2x8xi64> {dtc.feed = "tokens"}
// CHECK-SAME: dtc.pipeline = {axis = "pp", chunks = [{backward = "chunk0_backward", data = array<i64: 0>, forward = "chunk0_forward"}], loss = "pipeline_loss", micro_batches = 2 : i64, overlap = true, schedule = "1f1b", stage = 0 : i64, stages = 2 : i64, virtual_stages = 1 : i64}
// CHECK-SAME: dtc.schedule = ["F0.0", "F0.1", "B0.0", "B0.1"]
// CHECK-LABEL: func.func @apply(
// CHECK-SAME: dtc.state = "grad:wte"
// CHECK-NOT: head.weight
// CHECK: dtc.adamw
// CHECK-LABEL: module @stage1 {
// CHECK-LABEL: func.func @chunk1_step(
// CHECK-SAME: tensor<2x8x16xf32> {dtc.sharding = #dtc.sharding<{{\[\["dp"\], \[\], \[\]\]}}>}
// CHECK: dtc.parameter "head.weight"
// CHECK: dtc.cross_entropy
// CHECK: dtc.all_reduce_start {{.*}}{mesh_axes = ["dp"]}
// CHECK: dtc.cross_entropy_grad
// CHECK-LABEL: func.func @pipeline_step(
// CHECK-SAME: stage = 1 : i64
// CHECK-SAME: dtc.schedule = ["F1.0", "B1.0", "F1.1", "B1.1"]
// CHECK-LABEL: func.func @apply(
// CHECK-SAME: dtc.state = "grad:head.weight"
// CHECK-NOT: grad:wte

// GPipe: every forward before any backward; no data axis, whole rows.
// GPIPE-LABEL: module @stage0 {
// GPIPE-LABEL: func.func @chunk0_forward(
// GPIPE-SAME: tensor<4x8xi64>
// GPIPE-LABEL: func.func @pipeline_step(
// GPIPE-SAME: tensor<4x4x8xi64>
// GPIPE-SAME: schedule = "gpipe"
// GPIPE-SAME: dtc.schedule = ["F0.0", "F0.1", "F0.2", "F0.3", "B0.0", "B0.1", "B0.2", "B0.3"]
// GPIPE-LABEL: module @stage1 {

// VPP: error: pipeline: virtual stages (vpp=2) need the 1f1b schedule
// CUTS: error: pipeline: cannot cut the model into 8 stages
// UNBOUND: error: training step: the module has no dtc.step_info (run dtc-bind-loss first)

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

// CHUNKS: module attributes {dtc.pipeline_shape = {mesh = #dtc.mesh<[pp = 2, dp = 2]>, micro_batches = 2 : i64, overlap = true, schedule = "1f1b", stages = 2 : i64, virtual_stages = 1 : i64}, dtc.step_info
// CHUNKS: func.func @main(
// CHUNKS-LABEL: module @chunk0 attributes {dtc.chunk = {data = array<i64: 0>, first = true, index = 0 : i64, last = false}} {
// CHUNKS: func.func @stage(%{{.*}}: tensor<4x8xi64> {dtc.feed = "tokens"}, %{{.*}}: tensor<4x8x16xf32>) -> tensor<f32>
// CHUNKS-LABEL: module @chunk1 attributes {dtc.chunk = {data = array<i64: 1>, first = false, index = 1 : i64, last = true}} {
// CHUNKS: func.func @stage(%{{.*}}: tensor<4x8x16xf32>

// GRAD-LABEL: module @chunk0
// GRAD: func.func @backward({{.*}} -> (tensor<f32>, {{.*}}tensor<4x8x16xf32> {dtc.chunk_output, dtc.sharding = #dtc.sharding<{{\[\["dp"\], \[\], \[\]\]}}>})
// GRAD: dtc.reduce_sum {{.*}}dtc.forward_end
// GRAD-LABEL: module @chunk1
// GRAD: func.func @backward({{.*}}dtc.grad_of_arg = 0 : i64, dtc.sharding = #dtc.sharding<{{\[\["dp"\], \[\], \[\]\]}}>

// UNSPLIT: error: dtc-pipeline-assemble: the module holds no pipeline chunks (run dtc-pipeline-split first)
// SCHEDULE: error: pipeline: schedule 'zb' is not known (1f1b, its interleaved form with virtual stages, gpipe and zb-h1 are)
