// RUN: dtc-opt %s -split-input-file -verify-diagnostics -dtc-step-gradient

// One forward function, or the step has nothing to differentiate.
// expected-error @+1 {{training step: expected one forward function, found 0}}
module {
}

// -----

// An op on the path to the loss without a gradient rule: an error at it,
// and the pass fails.
func.func @main(%x: tensor<3xf32> {dtc.feed = "input"}) -> (tensor<f32> {dtc.name = "loss"}) {
  %w = dtc.parameter "w" : tensor<3xf32>
  %y = dtc.mul %x, %w : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  // expected-error @below {{dtc.softmax_grad has no gradient rule}}
  %s = dtc.softmax_grad %y, %y {axis = 0 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %l = dtc.reduce_sum %s {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
