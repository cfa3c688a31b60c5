// RUN: dtc-opt %s -dtc-autodiff -dtc-recompute="mode=full report=1" -mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s --check-prefix=FULL
// RUN: dtc-opt %s -dtc-autodiff -dtc-recompute="mode=selective report=1" -mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s --check-prefix=SEL
// RUN: dtc-opt %s -dtc-autodiff -dtc-recompute="mode=none report=1" -mlir-print-op-on-diagnostic=false 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: not dtc-opt %s -dtc-recompute=mode=some 2>&1 | FileCheck %s --check-prefix=BAD
//
// Activation recompute on a gradient function (docs/recompute.md): a
// pre-norm block with unfused attention (scores, softmax) and a GELU MLP,
// then a final norm. Checkpoints under full recompute: the norm inputs
// %x (an argument, free), %r and %y. Byte counts by hand, f32:
//   saved without recompute: h, q, k, p, r, h2, f, g, y, z (10 values):
//     8x4 x 4 B = 128 B each for h q k r h2 y z (7 x 128 = 896),
//     p 8x8 = 256 B, f and g 8x16 = 512 B each: 2176 B.
//   selective: g (from f, saved for gelu_grad) and p (scores from q, k,
//     both saved for the score matmul's backward) recomputed: 512 + 256.
//   full: only r and y (256 B) stay; the other 8 (1920 B) are recomputed.

// The forward function itself has nothing after its loss: unchanged.
// FULL: remark: @block: recompute full: 0 values saved (0 bytes), 0 recomputed (0 bytes), 0 ops cloned
// FULL: remark: @block_grad: recompute full: 2 values saved (256 bytes), 8 recomputed (1920 bytes), 10 ops cloned
// SEL: remark: @block_grad: recompute selective: 8 values saved (1408 bytes), 2 recomputed (768 bytes), 4 ops cloned
// NONE: remark: @block_grad: recompute none: 10 values saved (2176 bytes), 0 recomputed (0 bytes), 0 ops cloned

// FULL: func.func @block(%arg0
// FULL-NOT: dtc.recomputed
// FULL-LABEL: func.func @block_grad(
// FULL-SAME: %[[X:[^:]*]]: tensor<8x4xf32>
// The forward part, unchanged.
// FULL: %[[N1:.*]] = dtc.parameter "norm1"
// FULL: %[[N2:.*]] = dtc.parameter "norm2"
// FULL: %[[H:.*]] = dtc.rms_norm %[[X]], %[[N1]]
// FULL: %[[R:.*]] = dtc.add %[[X]],
// FULL: %[[Y:.*]] = dtc.add %[[R]],
// FULL: %[[N3:.*]] = dtc.parameter "norm3"
// FULL: dtc.rms_norm %[[Y]], %[[N3]]
// FULL: %[[LOSS:.*]] = dtc.reduce_sum
// The backward starts with the seed; nothing is recomputed before it.
// FULL-NOT: dtc.recomputed
// FULL: dtc.constant dense<1.000000e+00> : tensor<f32>
// The final norm's output, recomputed from checkpoint y right before the
// loss's backward reads it.
// FULL: %[[Z2:.*]] = dtc.rms_norm %[[Y]], %[[N3]] {{.*}}dtc.recomputed
// FULL-NEXT: dtc.mul %{{.*}}, %[[Z2]]
// FULL: dtc.rms_norm_grad %[[Y]], %[[N3]]
// The MLP segment, from checkpoint r, right before the MLP's backward.
// FULL: %[[H2:.*]] = dtc.rms_norm %[[R]], %[[N2]] {{.*}}dtc.recomputed
// FULL-NEXT: %[[F:.*]] = dtc.matmul %[[H2]], %{{.*}} {dtc.recomputed}
// FULL-NEXT: %[[G:.*]] = dtc.gelu %[[F]] {dtc.recomputed}
// FULL-NEXT: dtc.matmul %[[G]], %{{.*}} {transpose_lhs}
// FULL-NEXT: dtc.gelu_grad %[[F]],
// FULL: dtc.rms_norm_grad %[[R]], %[[N2]]
// The attention segment, from the argument, once: the norm output, then
// Q, K, scores and probabilities, each where the backward first needs it.
// FULL: %[[H1:.*]] = dtc.rms_norm %[[X]], %[[N1]] {{.*}}dtc.recomputed
// FULL-NEXT: dtc.matmul %{{.*}}, %[[H1]] {transpose_rhs}
// FULL-NEXT: %[[Q:.*]] = dtc.matmul %[[H1]], %{{.*}} {dtc.recomputed}
// FULL-NEXT: %[[K:.*]] = dtc.matmul %[[H1]], %{{.*}} {dtc.recomputed}
// FULL-NEXT: %[[S:.*]] = dtc.matmul %[[Q]], %[[K]] {dtc.recomputed, transpose_rhs}
// FULL-NEXT: %[[SS:.*]] = dtc.mul %[[S]], %{{.*}} {dtc.recomputed}
// FULL-NEXT: %[[P:.*]] = dtc.softmax %[[SS]] {{.*}}dtc.recomputed}
// FULL: dtc.softmax_grad %[[P]],
// FULL-NOT: dtc.rms_norm {{.*}}dtc.recomputed
// FULL: dtc.rms_norm_grad %[[X]], %[[N1]]
// FULL: return %[[LOSS]],

// SEL-LABEL: func.func @block_grad(
// SEL: %[[WFC:.*]] = dtc.parameter "wfc"
// SEL: %[[H:.*]] = dtc.rms_norm
// SEL: %[[Q:.*]] = dtc.matmul %[[H]],
// SEL: %[[K:.*]] = dtc.matmul %[[H]],
// SEL: %[[C:.*]] = dtc.constant dense<5.000000e-01>
// SEL: %[[F:.*]] = dtc.matmul %{{.*}}, %[[WFC]]
// SEL: %[[Z:.*]] = dtc.rms_norm
// SEL: dtc.constant dense<1.000000e+00> : tensor<f32>
// Norm outputs and GEMM outputs stay saved: no norm or weight GEMM is
// cloned.
// SEL-NOT: dtc.rms_norm {{.*}}dtc.recomputed
// SEL: dtc.mul %{{.*}}, %[[Z]]
// The GELU output, recomputed from its saved input.
// SEL: %[[G:.*]] = dtc.gelu %[[F]] {dtc.recomputed}
// SEL-NEXT: dtc.matmul %[[G]], %{{.*}} {transpose_lhs}
// SEL-NEXT: dtc.gelu_grad %[[F]],
// The probabilities, recomputed from the saved Q and K: scores, scale,
// softmax.
// SEL: %[[S:.*]] = dtc.matmul %[[Q]], %[[K]] {dtc.recomputed, transpose_rhs}
// SEL-NEXT: %[[SS:.*]] = dtc.mul %[[S]], %[[C]] {dtc.recomputed}
// SEL-NEXT: %[[P:.*]] = dtc.softmax %[[SS]] {{.*}}dtc.recomputed}
// SEL-NEXT: dtc.matmul %[[P]], %{{.*}} {transpose_lhs}
// SEL-NEXT: dtc.softmax_grad %[[P]],
// SEL-NOT: dtc.recomputed
// SEL: return

// NONE-NOT: dtc.recomputed

// BAD: mode must be none, selective or full, got 'some'
func.func @block(%x: tensor<8x4xf32>) -> tensor<f32> {
  %n1 = dtc.parameter "norm1" : tensor<4xf32>
  %wq = dtc.parameter "wq" : tensor<4x4xf32>
  %wk = dtc.parameter "wk" : tensor<4x4xf32>
  %n2 = dtc.parameter "norm2" : tensor<4xf32>
  %wfc = dtc.parameter "wfc" : tensor<4x16xf32>
  %wout = dtc.parameter "wout" : tensor<16x4xf32>
  %h = dtc.rms_norm %x, %n1 {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %q = dtc.matmul %h, %wq : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %k = dtc.matmul %h, %wk : (tensor<8x4xf32>, tensor<4x4xf32>) -> tensor<8x4xf32>
  %s = dtc.matmul %q, %k {transpose_rhs} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x8xf32>
  %c = dtc.constant dense<0.5> : tensor<f32>
  %ss = dtc.mul %s, %c : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %p = dtc.softmax %ss {axis = 1 : i64} : tensor<8x8xf32>
  %a = dtc.matmul %p, %h : (tensor<8x8xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %r = dtc.add %x, %a : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %h2 = dtc.rms_norm %r, %n2 {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %f = dtc.matmul %h2, %wfc : (tensor<8x4xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
  %g = dtc.gelu %f : tensor<8x16xf32>
  %o = dtc.matmul %g, %wout : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %y = dtc.add %r, %o : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %n3 = dtc.parameter "norm3" : tensor<4xf32>
  %z = dtc.rms_norm %y, %n3 {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<8x4xf32>, tensor<4xf32>) -> tensor<8x4xf32>
  %zz = dtc.mul %z, %z : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  %l = dtc.reduce_sum %zz {dims = array<i64: 0, 1>} : (tensor<8x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
