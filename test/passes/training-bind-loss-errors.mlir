// RUN: dtc-opt %s -split-input-file -verify-diagnostics -dtc-bind-loss

// A regressor (one value per sample) is neither a token model nor a
// classifier: refused in one line that names its inputs and output.
// expected-error @+1 {{cannot bind training data: the graph must output a scalar loss from two integer [batch, seq] inputs (tokens, labels), logits [batch, seq, vocab] from one integer input, or logits [batch, classes] from float [batch, ...] inputs (a classifier); it has inputs ([4, 8] f32) and first output [4] f32}}
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
