// RUN: dtc-opt %s -split-input-file -verify-diagnostics -dtc-micro-step

// dtc-micro-step runs on the gradient function dtc-step-gradient builds.
// expected-error @+1 {{training step: the module has no @micro_step (run dtc-step-gradient first)}}
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// A model whose loss reads no parameter has nothing to train.
// expected-error @+1 {{the model has no trainable parameters (no float initializer reaches the loss)}}
module {
  func.func @micro_step(%x: tensor<4xf32> {dtc.feed = "input"}) -> (tensor<f32> {dtc.name = "loss"}) {
    %l = dtc.reduce_sum %x {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
