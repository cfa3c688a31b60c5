// RUN: dtc-opt %s -verify-diagnostics -dtc-build-apply

// dtc-build-apply reads the gradient table dtc-micro-step leaves.
// expected-error @+1 {{training step: the module has no dtc.step_gradients (run dtc-micro-step first)}}
module {
  func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}
