// RUN: dtc-opt %s -split-input-file -dtc-bind-loss | FileCheck %s
// RUN: dtc-opt %s -split-input-file -dtc-bind-loss | dtc-opt -split-input-file | FileCheck %s

// dtc-bind-loss: the one function returns only its training loss, its data
// arguments tagged (dtc.feed), and what the runtime feeds is on the module.

// Logits over a vocabulary from token ids: next-token cross-entropy against
// a new labels argument is appended.
// CHECK: module attributes {dtc.step_info = {micro_batch = 2 : i64, moe_experts = 0 : i64, moe_layers = 0 : i64, objective = "next-token", seq_len = 8 : i64, vocab = 32 : i64}}
// CHECK-LABEL: func.func @lm
// CHECK-SAME: (%[[IDS:.*]]: tensor<2x8xi64> {dtc.feed = "tokens"}, %[[LABELS:.*]]: tensor<2x8xi64> {dtc.feed = "labels", dtc.name = "labels"})
// CHECK-SAME: -> (tensor<f32> {dtc.name = "loss"})
// CHECK: %[[LOGITS:.*]] = dtc.matmul
// CHECK-NEXT: %[[LOSS:.*]] = dtc.cross_entropy %[[LOGITS]], %[[LABELS]] : (tensor<2x8x32xf32>, tensor<2x8xi64>) -> tensor<f32>
// CHECK-NEXT: return %[[LOSS]] : tensor<f32>
func.func @lm(%ids: tensor<2x8xi64>) -> tensor<2x8x32xf32> {
  %wte = dtc.parameter "wte" : tensor<32x16xf32>
  %head = dtc.parameter "head" : tensor<16x32xf32>
  %e = dtc.embedding %wte, %ids : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %logits = dtc.matmul %e, %head : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  return %logits : tensor<2x8x32xf32>
}

// -----

// A scalar loss from two token tensors: tokens and labels, as they are.
// CHECK: module attributes {dtc.step_info = {{{.*}}objective = "model-loss"
// CHECK-LABEL: func.func @own_loss
// CHECK-SAME: (%{{.*}}: tensor<2x8xi64> {dtc.feed = "tokens"}, %{{.*}}: tensor<2x8xi64> {dtc.feed = "labels"})
// CHECK-SAME: -> (tensor<f32> {dtc.name = "loss"})
// CHECK-COUNT-1: dtc.cross_entropy
// CHECK-NEXT: return
func.func @own_loss(%ids: tensor<2x8xi64>, %labels: tensor<2x8xi64>) -> tensor<f32> {
  %wte = dtc.parameter "wte" : tensor<32x16xf32>
  %head = dtc.parameter "head" : tensor<16x32xf32>
  %e = dtc.embedding %wte, %ids : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %logits = dtc.matmul %e, %head : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %l = dtc.cross_entropy %logits, %labels : (tensor<2x8x32xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A classifier: logits [batch, classes] from float inputs get cross-entropy
// against labels [batch]; a sample counts as one token.
// CHECK: module attributes {dtc.step_info = {micro_batch = 4 : i64, moe_experts = 0 : i64, moe_layers = 0 : i64, objective = "classify", seq_len = 1 : i64, vocab = 3 : i64}}
// CHECK-LABEL: func.func @classifier
// CHECK-SAME: (%{{.*}}: tensor<4x8xf32> {dtc.feed = "input"}, %[[LABELS:.*]]: tensor<4xi64> {dtc.feed = "labels", dtc.name = "labels"})
// CHECK: dtc.cross_entropy %{{.*}}, %[[LABELS]] : (tensor<4x3xf32>, tensor<4xi64>) -> tensor<f32>
func.func @classifier(%x: tensor<4x8xf32>) -> tensor<4x3xf32> {
  %w = dtc.parameter "fc.weight" : tensor<8x3xf32>
  %y = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
  return %y : tensor<4x3xf32>
}
