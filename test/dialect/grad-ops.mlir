// The gradient, mask and optimizer ops (DtcGradOps.td): round trip in the
// custom and generic forms, their sharding rules, and their shape errors.
// RUN: split-file %s %t
// RUN: dtc-opt %t/ops.mlir | FileCheck %s
// RUN: dtc-opt %t/ops.mlir | dtc-opt | FileCheck %s
// RUN: dtc-opt %t/ops.mlir --mlir-print-op-generic | dtc-opt | FileCheck %s
// RUN: dtc-opt %t/ops.mlir -dtc-test-sharding-rules -mlir-print-local-scope | FileCheck %s --check-prefix=RULE
// RUN: dtc-opt %t/invalid.mlir -split-input-file -verify-diagnostics
// RUN: dtc-opt %t/propagate.mlir -dtc-propagate-sharding="mesh=dp:2" | FileCheck %s --check-prefix=PROP

// Sharding rules (RULE): a gradient op's loops mirror its forward op's.
// Loops the forward op reads through and the gradient sums over become
// reductions: the ids of embedding_grad, the output channels of
// conv_grad_input, batch and output positions of conv_grad_weight.
//
// Propagation (PROP): data parallelism splits the batch of a weight
// gradient's loops and leaves the weight gradient a partial sum over the
// data-parallel axis (the all-reduce of data-parallel training).

//--- ops.mlir

// CHECK-LABEL: func.func @compare_select
// RULE-LABEL: func.func @compare_select
func.func @compare_select(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %c: tensor<4x1xi1>, %i: tensor<3xi64>) {
  // CHECK: dtc.compare %{{.*}}, %{{.*}} {predicate = "gt"} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  // RULE: dtc.compare {{.*}}dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]
  %0 = dtc.compare %a, %b {predicate = "gt"} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  // CHECK: dtc.compare %{{.*}}, %{{.*}} {predicate = "eq"} : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
  // RULE: dtc.compare {{.*}}dtc.indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>], dtc.iterator_types = ["parallel"]
  %1 = dtc.compare %i, %i {predicate = "eq"} : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi1>
  // CHECK: dtc.select %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x1xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // RULE: dtc.select {{.*}}dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, 0)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]
  %2 = dtc.select %c, %a, %b : (tensor<4x1xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// CHECK-LABEL: func.func @softmax_grad
// RULE-LABEL: func.func @softmax_grad
func.func @softmax_grad(%y: tensor<2x4x8xf32>, %dy: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  // CHECK: dtc.softmax_grad %{{.*}}, %{{.*}} {axis = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  // RULE: dtc.softmax_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "reduction"]
  %0 = dtc.softmax_grad %y, %dy {axis = 2 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// CHECK-LABEL: func.func @norm_grads
// RULE-LABEL: func.func @norm_grads
func.func @norm_grads(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %dy: tensor<2x4x8xf32>) {
  // CHECK: dtc.layer_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  // RULE: dtc.layer_norm_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d2)>], dtc.iterator_types = ["parallel", "parallel", "reduction"]
  %0:3 = dtc.layer_norm_grad %x, %w, %dy {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  // CHECK: dtc.rms_norm_grad %{{.*}}, %{{.*}}, %{{.*}} {axis = 2 : i64, epsilon = 9.9999999999999995E-7 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
  // RULE: dtc.rms_norm_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d2)>], dtc.iterator_types = ["parallel", "parallel", "reduction"]
  %1:2 = dtc.rms_norm_grad %x, %w, %dy {axis = 2 : i64, epsilon = 1.0e-6 : f64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
  return
}

// CHECK-LABEL: func.func @attention_grad
// RULE-LABEL: func.func @attention_grad
func.func @attention_grad(%q: tensor<2x8x16x32xf32>, %k: tensor<2x2x16x32xf32>, %v: tensor<2x2x16x64xf32>, %dy: tensor<2x8x16x64xf32>) {
  // CHECK: dtc.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {causal} : (tensor<2x8x16x32xf32>, tensor<2x2x16x32xf32>, tensor<2x2x16x64xf32>, tensor<2x8x16x64xf32>) -> (tensor<2x8x16x32xf32>, tensor<2x2x16x32xf32>, tensor<2x2x16x64xf32>)
  // RULE: dtc.attention_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]
  %0:3 = dtc.attention_grad %q, %k, %v, %dy {causal} : (tensor<2x8x16x32xf32>, tensor<2x2x16x32xf32>, tensor<2x2x16x64xf32>, tensor<2x8x16x64xf32>) -> (tensor<2x8x16x32xf32>, tensor<2x2x16x32xf32>, tensor<2x2x16x64xf32>)
  // CHECK: dtc.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f64} : (tensor<2x8x16x32xf32>, tensor<2x2x16x32xf32>, tensor<2x2x16x64xf32>, tensor<2x8x16x64xf32>) -> (tensor<2x8x16x32xf32>, tensor<2x2x16x32xf32>, tensor<2x2x16x64xf32>)
  // RULE: dtc.attention_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1 floordiv 4, d4, d3)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]
  %1:3 = dtc.attention_grad %q, %k, %v, %dy {scale = 0.125 : f64} : (tensor<2x8x16x32xf32>, tensor<2x2x16x32xf32>, tensor<2x2x16x64xf32>, tensor<2x8x16x64xf32>) -> (tensor<2x8x16x32xf32>, tensor<2x2x16x32xf32>, tensor<2x2x16x64xf32>)
  return
}

// CHECK-LABEL: func.func @embedding_grad
// RULE-LABEL: func.func @embedding_grad
func.func @embedding_grad(%dy: tensor<2x16x64xf32>, %ids: tensor<2x16xi64>) -> tensor<50x64xf32> {
  // CHECK: dtc.embedding_grad %{{.*}}, %{{.*}} {num_rows = 50 : i64} : (tensor<2x16x64xf32>, tensor<2x16xi64>) -> tensor<50x64xf32>
  // RULE: dtc.embedding_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>, affine_map<(d0, d1, d2, d3) -> (d0, d1)>, affine_map<(d0, d1, d2, d3) -> (d3, d2)>], dtc.iterator_types = ["reduction", "reduction", "parallel", "parallel"]
  %0 = dtc.embedding_grad %dy, %ids {num_rows = 50 : i64} : (tensor<2x16x64xf32>, tensor<2x16xi64>) -> tensor<50x64xf32>
  return %0 : tensor<50x64xf32>
}

// CHECK-LABEL: func.func @cross_entropy_grad
// RULE-LABEL: func.func @cross_entropy_grad
func.func @cross_entropy_grad(%logits: tensor<2x16x50xf32>, %labels: tensor<2x16xi64>, %dl: tensor<f32>) {
  // CHECK: dtc.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x16x50xf32>, tensor<2x16xi64>, tensor<f32>) -> tensor<2x16x50xf32>
  // RULE: dtc.cross_entropy_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> ()>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "reduction"]
  %0 = dtc.cross_entropy_grad %logits, %labels, %dl : (tensor<2x16x50xf32>, tensor<2x16xi64>, tensor<f32>) -> tensor<2x16x50xf32>
  // CHECK: dtc.cross_entropy_grad %{{.*}}, %{{.*}}, %{{.*}} {ignore_index = 0 : i64} : (tensor<2x16x50xf32>, tensor<2x16xi64>, tensor<f32>) -> tensor<2x16x50xf32>
  // RULE: dtc.cross_entropy_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> ()>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>], dtc.iterator_types = ["parallel", "parallel", "reduction"]
  %1 = dtc.cross_entropy_grad %logits, %labels, %dl {ignore_index = 0 : i64} : (tensor<2x16x50xf32>, tensor<2x16xi64>, tensor<f32>) -> tensor<2x16x50xf32>
  return
}

// CHECK-LABEL: func.func @activation_grads
// RULE-LABEL: func.func @activation_grads
func.func @activation_grads(%x: tensor<4x8xbf16>, %dy: tensor<4x8xbf16>) {
  // CHECK: dtc.gelu_grad %{{.*}}, %{{.*}} : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  // RULE: dtc.gelu_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]
  %0 = dtc.gelu_grad %x, %dy : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  // CHECK: dtc.gelu_grad %{{.*}}, %{{.*}} {approximate_tanh} : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  // RULE: dtc.gelu_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]
  %1 = dtc.gelu_grad %x, %dy {approximate_tanh} : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  // CHECK: dtc.silu_grad %{{.*}}, %{{.*}} : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  // RULE: dtc.silu_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]
  %2 = dtc.silu_grad %x, %dy : (tensor<4x8xbf16>, tensor<4x8xbf16>) -> tensor<4x8xbf16>
  return
}

// CHECK-LABEL: func.func @slice_grad
// RULE-LABEL: func.func @slice_grad
func.func @slice_grad(%dy: tensor<4x3xf32>) -> tensor<4x8xf32> {
  // CHECK: dtc.slice_grad %{{.*}} {input_shape = array<i64: 4, 8>, starts = array<i64: 0, 2>, strides = array<i64: 1, 2>} : (tensor<4x3xf32>) -> tensor<4x8xf32>
  // RULE: dtc.slice_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1 * 2 + 2)>], dtc.iterator_types = ["parallel", "parallel"]
  %0 = dtc.slice_grad %dy {input_shape = array<i64: 4, 8>, starts = array<i64: 0, 2>, strides = array<i64: 1, 2>} : (tensor<4x3xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// CHECK-LABEL: func.func @conv_grads
// RULE-LABEL: func.func @conv_grads
func.func @conv_grads(%x: tensor<2x4x9x9xf32>, %w: tensor<8x2x3x3xf32>, %dy: tensor<2x8x4x4xf32>) {
  // CHECK: dtc.conv_grad_input %{{.*}}, %{{.*}} {dilations = array<i64: 1, 1>, groups = 2 : i64, input_shape = array<i64: 2, 4, 9, 9>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x8x4x4xf32>, tensor<8x2x3x3xf32>) -> tensor<2x4x9x9xf32>
  // RULE: dtc.conv_grad_input {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 floordiv 4) * 2 + d4, d2 * 2 + d5, d3 * 2 + d6)>], dtc.iterator_types = ["parallel", "reduction", "parallel", "parallel", "parallel", "reduction", "reduction"]
  %0 = dtc.conv_grad_input %dy, %w {input_shape = array<i64: 2, 4, 9, 9>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, groups = 2 : i64} : (tensor<2x8x4x4xf32>, tensor<8x2x3x3xf32>) -> tensor<2x4x9x9xf32>
  // CHECK: dtc.conv_grad_weight %{{.*}}, %{{.*}} {dilations = array<i64: 1, 1>, groups = 2 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>, weight_shape = array<i64: 8, 2, 3, 3>} : (tensor<2x4x9x9xf32>, tensor<2x8x4x4xf32>) -> tensor<8x2x3x3xf32>
  // RULE: dtc.conv_grad_weight {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, (d1 floordiv 4) * 2 + d4, d2 * 2 + d5, d3 * 2 + d6)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3, d4, d5, d6) -> (d1, d4, d5, d6)>], dtc.iterator_types = ["reduction", "parallel", "reduction", "reduction", "parallel", "parallel", "parallel"]
  %1 = dtc.conv_grad_weight %x, %dy {weight_shape = array<i64: 8, 2, 3, 3>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, groups = 2 : i64} : (tensor<2x4x9x9xf32>, tensor<2x8x4x4xf32>) -> tensor<8x2x3x3xf32>
  return
}

// CHECK-LABEL: func.func @pool_grads
// RULE-LABEL: func.func @pool_grads
func.func @pool_grads(%x: tensor<2x4x8x8xf32>, %dy: tensor<2x4x4x4xf32>) {
  // CHECK: dtc.max_pool_grad %{{.*}}, %{{.*}} {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x8x8xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x8x8xf32>
  // RULE: dtc.max_pool_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 * 2 + d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 * 2 + d5)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]
  %0 = dtc.max_pool_grad %x, %dy {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x8x8xf32>, tensor<2x4x4x4xf32>) -> tensor<2x4x8x8xf32>
  // CHECK: dtc.avg_pool_grad %{{.*}} {count_include_pad, dilations = array<i64: 1, 1>, input_shape = array<i64: 2, 4, 8, 8>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x4x4xf32>) -> tensor<2x4x8x8xf32>
  // RULE: dtc.avg_pool_grad {{.*}}dtc.indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2 * 2 + d4, d3 * 2 + d5)>], dtc.iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction", "reduction"]
  %1 = dtc.avg_pool_grad %dy {input_shape = array<i64: 2, 4, 8, 8>, kernel_shape = array<i64: 3, 3>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 0, 0>, count_include_pad} : (tensor<2x4x4x4xf32>) -> tensor<2x4x8x8xf32>
  return
}

// CHECK-LABEL: func.func @adamw
// RULE-LABEL: func.func @adamw
func.func @adamw(%p: tensor<4x8xbf16>, %g: tensor<4x8xbf16>, %m: tensor<4x8xf32>, %v: tensor<4x8xf32>, %lr: tensor<f32>, %step: tensor<f32>, %scale: tensor<f32>) {
  // CHECK: dtc.adamw %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {beta1 = 9.000000e-01 : f64, beta2 = 0.94999999999999996 : f64, epsilon = 1.000000e-08 : f64, weight_decay = 1.000000e-01 : f64} : (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>)
  // RULE: dtc.adamw {{.*}}dtc.indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>], dtc.iterator_types = ["parallel", "parallel"]
  %0:3 = dtc.adamw %p, %g, %m, %v, %lr, %step, %scale {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.1 : f64} : (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

//--- invalid.mlir

// Shape rules report through inferReturnTypes: their message comes first,
// then the op's "failed to infer returned types".

func.func @compare_predicate(%a: tensor<4xf32>) {
  // expected-error @+2 {{predicate 'lg' is not one of eq, ne, lt, le, gt, ge}}
  // expected-error @+1 {{'dtc.compare' op failed to infer returned types}}
  %0 = dtc.compare %a, %a {predicate = "lg"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  return
}

// -----

func.func @compare_element_types(%a: tensor<4xf32>, %b: tensor<4xi64>) {
  // expected-error @+2 {{operand element types differ: 'f32' vs 'i64'}}
  // expected-error @+1 {{'dtc.compare' op failed to infer returned types}}
  %0 = dtc.compare %a, %b {predicate = "eq"} : (tensor<4xf32>, tensor<4xi64>) -> tensor<4xi1>
  return
}

// -----

func.func @compare_result_type(%a: tensor<4xf32>) {
  // expected-error @+1 {{'dtc.compare' op result #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = dtc.compare %a, %a {predicate = "eq"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @select_condition_type(%c: tensor<4xf32>, %a: tensor<4xf32>) {
  // expected-error @+1 {{'dtc.select' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = dtc.select %c, %a, %a : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @select_condition_shape(%c: tensor<3xi1>, %a: tensor<4xf32>) {
  // expected-error @+2 {{condition shape [3] does not broadcast with [4]}}
  // expected-error @+1 {{'dtc.select' op failed to infer returned types}}
  %0 = dtc.select %c, %a, %a : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @softmax_grad_axis(%y: tensor<4x8xf32>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2}}
  // expected-error @+1 {{'dtc.softmax_grad' op failed to infer returned types}}
  %0 = dtc.softmax_grad %y, %y {axis = 2 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @softmax_grad_shape(%y: tensor<4x8xf32>, %dy: tensor<4x7xf32>) {
  // expected-error @+2 {{gradient type 'tensor<4x7xf32>' differs from the softmax output type 'tensor<4x8xf32>'}}
  // expected-error @+1 {{'dtc.softmax_grad' op failed to infer returned types}}
  %0 = dtc.softmax_grad %y, %dy {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x7xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_grad_weight(%x: tensor<4x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+2 {{scale/bias shape [4] must equal the normalized shape [8]}}
  // expected-error @+1 {{'dtc.layer_norm_grad' op failed to infer returned types}}
  %0:3 = dtc.layer_norm_grad %x, %w, %x {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @rms_norm_grad_result(%x: tensor<4x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+2 {{'dtc.rms_norm_grad' op inferred type(s) 'tensor<4x8xf32>', 'tensor<8xf32>' are incompatible with return type(s) of operation 'tensor<4x8xf32>', 'tensor<4x8xf32>'}}
  // expected-error @+1 {{'dtc.rms_norm_grad' op failed to infer returned types}}
  %0:2 = dtc.rms_norm_grad %x, %w, %x {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @attention_grad_heads(%q: tensor<1x6x4x8xf32>, %k: tensor<1x4x4x8xf32>, %dy: tensor<1x6x4x8xf32>) {
  // expected-error @+2 {{query heads (6) must be a positive multiple of key/value heads (4)}}
  // expected-error @+1 {{'dtc.attention_grad' op failed to infer returned types}}
  %0:3 = dtc.attention_grad %q, %k, %k, %dy : (tensor<1x6x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x6x4x8xf32>) -> (tensor<1x6x4x8xf32>, tensor<1x4x4x8xf32>, tensor<1x4x4x8xf32>)
  return
}

// -----

func.func @attention_grad_grad(%q: tensor<1x4x4x8xf32>, %v: tensor<1x2x4x16xf32>, %k: tensor<1x2x4x8xf32>) {
  // expected-error @+2 {{gradient type 'tensor<1x4x4x8xf32>' differs from the attention output type 'tensor<1x4x4x16xf32>'}}
  // expected-error @+1 {{'dtc.attention_grad' op failed to infer returned types}}
  %0:3 = dtc.attention_grad %q, %k, %v, %q : (tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x16xf32>, tensor<1x4x4x8xf32>) -> (tensor<1x4x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x16xf32>)
  return
}

// -----

func.func @embedding_grad_shape(%dy: tensor<2x8x16xf32>, %ids: tensor<2x4xi64>) {
  // expected-error @+2 {{gradient [2x8x16] must be the ids' shape [2x4] plus the embedding dim}}
  // expected-error @+1 {{'dtc.embedding_grad' op failed to infer returned types}}
  %0 = dtc.embedding_grad %dy, %ids {num_rows = 50 : i64} : (tensor<2x8x16xf32>, tensor<2x4xi64>) -> tensor<50x16xf32>
  return
}

// -----

func.func @embedding_grad_rows(%dy: tensor<2x16xf32>, %ids: tensor<2xi64>) {
  // expected-error @+2 {{num_rows must be positive, got 0}}
  // expected-error @+1 {{'dtc.embedding_grad' op failed to infer returned types}}
  %0 = dtc.embedding_grad %dy, %ids {num_rows = 0 : i64} : (tensor<2x16xf32>, tensor<2xi64>) -> tensor<0x16xf32>
  return
}

// -----

func.func @cross_entropy_grad_labels(%logits: tensor<4x10xf32>, %labels: tensor<5xi64>, %dl: tensor<f32>) {
  // expected-error @+2 {{labels [5] must have the shape of logits [4x10] without its last (vocabulary) dim}}
  // expected-error @+1 {{'dtc.cross_entropy_grad' op failed to infer returned types}}
  %0 = dtc.cross_entropy_grad %logits, %labels, %dl : (tensor<4x10xf32>, tensor<5xi64>, tensor<f32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @cross_entropy_grad_loss(%logits: tensor<4x10xf32>, %labels: tensor<4xi64>, %dl: tensor<1xf32>) {
  // expected-error @+1 {{'dtc.cross_entropy_grad' op operand #2 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %0 = dtc.cross_entropy_grad %logits, %labels, %dl : (tensor<4x10xf32>, tensor<4xi64>, tensor<1xf32>) -> tensor<4x10xf32>
  return
}

// -----

func.func @gelu_grad_shape(%x: tensor<4x8xf32>, %dy: tensor<4x8xbf16>) {
  // expected-error @+2 {{gradient type 'tensor<4x8xbf16>' differs from the input type 'tensor<4x8xf32>'}}
  // expected-error @+1 {{'dtc.gelu_grad' op failed to infer returned types}}
  %0 = dtc.gelu_grad %x, %dy : (tensor<4x8xf32>, tensor<4x8xbf16>) -> tensor<4x8xf32>
  return
}

// -----

func.func @slice_grad_fit(%dy: tensor<4x3xf32>) {
  // expected-error @+2 {{dim 1: 3 elements from 2 by 3 do not fit in 8}}
  // expected-error @+1 {{'dtc.slice_grad' op failed to infer returned types}}
  %0 = dtc.slice_grad %dy {input_shape = array<i64: 4, 8>, starts = array<i64: 0, 2>, strides = array<i64: 1, 3>} : (tensor<4x3xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @slice_grad_rank(%dy: tensor<4x3xf32>) {
  // expected-error @+2 {{input_shape, starts and strides need 2 entries each}}
  // expected-error @+1 {{'dtc.slice_grad' op failed to infer returned types}}
  %0 = dtc.slice_grad %dy {input_shape = array<i64: 4, 8>, starts = array<i64: 0>, strides = array<i64: 1, 2>} : (tensor<4x3xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @conv_grad_input_shape(%dy: tensor<2x8x5x5xf32>, %w: tensor<8x4x3x3xf32>) {
  // expected-error @+2 {{gradient [2x8x5x5] differs from the conv result [2x8x7x7]}}
  // expected-error @+1 {{'dtc.conv_grad_input' op failed to infer returned types}}
  %0 = dtc.conv_grad_input %dy, %w {input_shape = array<i64: 2, 4, 9, 9>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x8x5x5xf32>, tensor<8x4x3x3xf32>) -> tensor<2x4x9x9xf32>
  return
}

// -----

func.func @conv_grad_weight_groups(%x: tensor<2x4x9x9xf32>, %dy: tensor<2x6x7x7xf32>) {
  // expected-error @+2 {{groups 4 must be positive and divide the input channels (4) and output channels (6)}}
  // expected-error @+1 {{'dtc.conv_grad_weight' op failed to infer returned types}}
  %0 = dtc.conv_grad_weight %x, %dy {weight_shape = array<i64: 6, 1, 3, 3>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>, groups = 4 : i64} : (tensor<2x4x9x9xf32>, tensor<2x6x7x7xf32>) -> tensor<6x1x3x3xf32>
  return
}

// -----

func.func @max_pool_grad_shape(%x: tensor<2x4x8x8xf32>, %dy: tensor<2x4x3x3xf32>) {
  // expected-error @+2 {{gradient type 'tensor<2x4x3x3xf32>' differs from the pooled result type 'tensor<2x4x4x4xf32>'}}
  // expected-error @+1 {{'dtc.max_pool_grad' op failed to infer returned types}}
  %0 = dtc.max_pool_grad %x, %dy {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x8x8xf32>, tensor<2x4x3x3xf32>) -> tensor<2x4x8x8xf32>
  return
}

// -----

func.func @avg_pool_grad_input_shape(%dy: tensor<2x4x4x4xf32>) {
  // expected-error @+2 {{input_shape [2x4x-1x8] must be non-negative}}
  // expected-error @+1 {{'dtc.avg_pool_grad' op failed to infer returned types}}
  %0 = dtc.avg_pool_grad %dy {input_shape = array<i64: 2, 4, -1, 8>, kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<2x4x4x4xf32>) -> tensor<2x4x8x8xf32>
  return
}

// -----

func.func @adamw_moment_shape(%p: tensor<4x8xf32>, %m: tensor<8x4xf32>, %s: tensor<f32>) {
  // expected-error @+2 {{gradient and moments must have the parameter's shape [4x8], got [8x4]}}
  // expected-error @+1 {{'dtc.adamw' op failed to infer returned types}}
  %0:3 = dtc.adamw %p, %p, %m, %m, %s, %s, %s {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.1 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4x8xf32>, tensor<8x4xf32>, tensor<8x4xf32>)
  return
}

// -----

func.func @adamw_scalar(%p: tensor<4x8xf32>, %s: tensor<1xf32>) {
  // expected-error @+1 {{'dtc.adamw' op operand #4 must be 0D tensor of 32-bit float values, but got 'tensor<1xf32>'}}
  %0:3 = dtc.adamw %p, %p, %p, %p, %s, %s, %s {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.1 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<1xf32>, tensor<1xf32>, tensor<1xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

// -----

func.func @adamw_missing_attr(%p: tensor<4x8xf32>, %s: tensor<f32>) {
  // expected-error @+1 {{'dtc.adamw' op requires attribute 'weight_decay'}}
  %0:3 = dtc.adamw %p, %p, %p, %p, %s, %s, %s {beta1 = 0.9 : f64, beta2 = 0.95 : f64, epsilon = 1.0e-8 : f64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>)
  return
}

//--- propagate.mlir

// PROP-LABEL: func.func @weight_grads
func.func @weight_grads(%x: tensor<4x16x64xf32>, %dy: tensor<4x16x64xf32>, %ids: tensor<4x16xi64>, %img: tensor<4x8x9x9xf32>, %dimg: tensor<4x8x7x7xf32>) -> (tensor<4x16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<256x64xf32>, tensor<8x8x3x3xf32>) {
  %w = dtc.parameter "ln.weight" : tensor<64xf32>
  // PROP: dtc.layer_norm_grad {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], []]>, #dtc.sharding<{{\[\[}}]], partial = ["dp"]>, #dtc.sharding<{{\[\[}}]], partial = ["dp"]>]
  %0:3 = dtc.layer_norm_grad %x, %w, %dy {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x16x64xf32>, tensor<64xf32>, tensor<4x16x64xf32>) -> (tensor<4x16x64xf32>, tensor<64xf32>, tensor<64xf32>)
  // PROP: dtc.rms_norm_grad {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], []]>, #dtc.sharding<{{\[\[}}]], partial = ["dp"]>]
  %1:2 = dtc.rms_norm_grad %x, %w, %dy {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x16x64xf32>, tensor<64xf32>, tensor<4x16x64xf32>) -> (tensor<4x16x64xf32>, tensor<64xf32>)
  // PROP: dtc.embedding_grad {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], []], partial = ["dp"]>]
  %2 = dtc.embedding_grad %dy, %ids {num_rows = 256 : i64} : (tensor<4x16x64xf32>, tensor<4x16xi64>) -> tensor<256x64xf32>
  // PROP: dtc.conv_grad_weight {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [], []], partial = ["dp"]>]
  %3 = dtc.conv_grad_weight %img, %dimg {weight_shape = array<i64: 8, 8, 3, 3>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<4x8x9x9xf32>, tensor<4x8x7x7xf32>) -> tensor<8x8x3x3xf32>
  return %0#0, %0#1, %0#2, %1#1, %2, %3 : tensor<4x16x64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<64xf32>, tensor<256x64xf32>, tensor<8x8x3x3xf32>
}
