// RUN: dtc-opt %s -dtc-autodiff=wrt-arguments=1 -split-input-file -verify-diagnostics

// An op on the path from a differentiated input to the loss without a
// gradient rule: a located error, and no gradient function.
func.func @no_rule(%x: tensor<3xf32>) -> (tensor<f32>, tensor<f32>) {
  // expected-error @below {{dtc.softmax_grad has no gradient rule}}
  %s = dtc.softmax_grad %x, %x {axis = 0 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %l = dtc.reduce_sum %s {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %l, %l : tensor<f32>, tensor<f32>
}

// -----

// Gradients of gradients are not supported: the optimizer op has no rule
// either.
func.func @no_rule_for_parameters() -> (tensor<f32>, tensor<f32>) {
  %w = dtc.parameter "w" : tensor<3xf32>
  %s = dtc.constant dense<1.0> : tensor<f32>
  // expected-error @below {{dtc.adamw has no gradient rule}}
  %p, %m, %v = dtc.adamw %w, %w, %w, %w, %s, %s, %s {beta1 = 0.9 : f64, beta2 = 0.999 : f64, epsilon = 1.0e-8 : f64, weight_decay = 0.0 : f64} : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<f32>, tensor<f32>, tensor<f32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)
  %l = dtc.reduce_sum %p {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %l, %l : tensor<f32>, tensor<f32>
}

// -----

// Not a loss function (no 0-d float result at the loss index): skipped,
// no error.
func.func @not_a_loss(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %s = dtc.softmax_grad %x, %x {axis = 0 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %s, %s : tensor<3xf32>, tensor<3xf32>
}
