// RUN: dtc-opt %s -split-input-file -verify-diagnostics -dtc-bind-loss

// A regressor (one value per sample) is neither a token model nor a
// classifier: refused in one line that names its inputs and outputs.
// expected-error @+1 {{objective classify (read off the graph; --loss picks another): no output is logits over classes ([4, ..., classes]); the graph's inputs are #0 [4, 8] f32 and its outputs #0 [4] f32}}
func.func @regressor(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  %w = dtc.parameter "w" : tensor<8x1xf32>
  %y = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x1xf32>) -> tensor<4x1xf32>
  %s = dtc.reduce_sum %y {dims = array<i64: 1>} : (tensor<4x1xf32>) -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// The step is built from one forward function.
// expected-error @+1 {{training step: expected one forward function, found 2}}
module {
  func.func @a(%x: tensor<4x8xf32>) -> tensor<4x3xf32> {
    %w = dtc.parameter "w" : tensor<8x3xf32>
    %y = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x3xf32>) -> tensor<4x3xf32>
    return %y : tensor<4x3xf32>
  }
  func.func @b(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
    return %x : tensor<4x8xf32>
  }
}

