// RUN: dtc-opt %s -dtc-step-gradient | FileCheck %s
// RUN: dtc-opt %s -dtc-step-gradient=step-name=step | FileCheck %s --check-prefix=NAMED

// dtc-step-gradient: the loss-bound forward function is replaced by its
// gradient function, the loss first, then one gradient per parameter; the
// op computing the loss ends the forward part.
// CHECK-NOT: func.func @main
// CHECK-LABEL: func.func @micro_step
// CHECK-SAME: (%{{.*}}: tensor<2x8xi64> {dtc.feed = "tokens"}, %[[LABELS:.*]]: tensor<2x8xi64> {dtc.feed = "labels"})
// CHECK-SAME: -> (tensor<f32> {dtc.name = "loss"}, tensor<32x16xf32> {dtc.grad_of = "wte"}, tensor<16x32xf32> {dtc.grad_of = "head"})
// CHECK: %[[LOSS:.*]] = dtc.cross_entropy %{{.*}}, %[[LABELS]] {dtc.forward_end}
// CHECK-NOT: dtc.forward_end
// CHECK: %[[WTE:.*]] = dtc.embedding_grad
// CHECK: return %[[LOSS]], %[[WTE]], %{{.*}} : tensor<f32>, tensor<32x16xf32>, tensor<16x32xf32>
// NAMED-LABEL: func.func @step(
func.func @main(%ids: tensor<2x8xi64> {dtc.feed = "tokens"}, %labels: tensor<2x8xi64> {dtc.feed = "labels"}) -> (tensor<f32> {dtc.name = "loss"}) {
  %wte = dtc.parameter "wte" : tensor<32x16xf32>
  %head = dtc.parameter "head" : tensor<16x32xf32>
  %e = dtc.embedding %wte, %ids : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %logits = dtc.matmul %e, %head : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %l = dtc.cross_entropy %logits, %labels : (tensor<2x8x32xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

