// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=tp:2" | FileCheck %s --check-prefix=TP2
// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=tp:2" | FileCheck %s --check-prefix=CNT2
// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=tp:8" | FileCheck %s --check-prefix=TP8
// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=tp:8" | FileCheck %s --check-prefix=CNT8
// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=dp:2,tp:2" | FileCheck %s --check-prefix=DPTP
// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=tp:2 sequence-parallel=true" | FileCheck %s --check-prefix=SP
// RUN: dtc-opt %S/Inputs/dtc-propagate-sharding-errors.mlir -split-input-file -dtc-propagate-sharding="mesh=dp:2,tp:2" -verify-diagnostics
// RUN: not dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=tp" 2>&1 | FileCheck %s --check-prefix=MESH
// MESH: error: mesh: bad axis 'tp' in 'tp' (expected name:size pairs such as dp:2,tp:4)
// The real fixture, as `dtc compile` imports it:
// RUN: dtc compile %models/tiny-gpt.onnx --gpus 1 --seq-len 16 --emit imported | dtc-opt -dtc-propagate-sharding="mesh=tp:2" | FileCheck %s --check-prefix=GPT
// RUN: dtc compile %models/tiny-gpt.onnx --gpus 1 --seq-len 16 --emit imported | dtc-opt -dtc-propagate-sharding="mesh=tp:2" | FileCheck %s --check-prefix=GPTCNT
// RUN: dtc compile %models/cnn/cnn.onnx --gpus 1 --dim batch=8 --emit imported | dtc-opt -dtc-propagate-sharding="mesh=dp:2,tp:2" | FileCheck %s --check-prefix=CNN

// Megatron-LM's tensor parallelism emerges from the cost model: the fused
// QKV and the first MLP linear split by output columns (weights
// column-split; QKV interleaved per Q/K/V third, ":64"), attention by heads,
// the attention output projection and the second MLP linear by rows (their
// reduction loop, hence a partial value), and exactly one all-reduce per
// sub-block: two partial values per block, reduced before the bias add.

// TP2-LABEL: func.func @gpt_block
// TP2-SAME: dtc.sharding = #dtc.sharding<{{\[\[}}], [], [{{\]\]}}>
// TP2: dtc.parameter "attn.c_attn.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"]:64]>]}
// TP2: dtc.parameter "attn.c_proj.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>]}
// TP2: dtc.parameter "mlp.c_fc.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]}
// TP2: dtc.parameter "mlp.c_proj.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>]}
// TP2: dtc.layer_norm {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]
// TP2: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], ["tp"]:64]>]
// TP2: dtc.slice {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], ["tp"{{\]\]}}>]
// TP2: dtc.transpose {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [], [{{\]\]}}>]
// TP2: dtc.attention {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [], [{{\]\]}}>]
// TP2: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}, partial = ["tp"]>]
// TP2-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]
// TP2-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]
// TP2-NEXT: dtc.layer_norm {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]
// TP2-NEXT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], ["tp"{{\]\]}}>]
// TP2-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], ["tp"{{\]\]}}>]
// TP2-NEXT: dtc.gelu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], ["tp"{{\]\]}}>]
// TP2-NEXT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}, partial = ["tp"]>]
// TP2-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]
// TP2-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]

// Exactly two partial values in the block:
// CNT2-LABEL: func.func @gpt_block
// CNT2-COUNT-2: partial = ["tp"]
// CNT2-NOT: partial
// CNT2: return

// TP8-LABEL: func.func @gpt_block
// TP8: dtc.parameter "attn.c_attn.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"]:64]>]}
// TP8: dtc.parameter "attn.c_proj.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>]}
// TP8: dtc.parameter "mlp.c_fc.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]}
// TP8: dtc.parameter "mlp.c_proj.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>]}
// TP8: dtc.attention {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [], [{{\]\]}}>]
// TP8: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}, partial = ["tp"]>]
// TP8-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]
// TP8: dtc.gelu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], ["tp"{{\]\]}}>]
// TP8-NEXT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}, partial = ["tp"]>]
// TP8-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]
// CNT8-LABEL: func.func @gpt_block
// CNT8-COUNT-2: partial = ["tp"]
// CNT8-NOT: partial
// CNT8: return

// Data and tensor parallelism together: the batch stays on dp everywhere,
// Megatron's splits on tp.
// DPTP-LABEL: func.func @gpt_block
// DPTP-SAME: dtc.sharding = #dtc.sharding<{{\[\[}}"dp"], [], [{{\]\]}}>
// DPTP: dtc.parameter "attn.c_attn.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"]:64]>]}
// DPTP: dtc.attention {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], ["tp"], [], [{{\]\]}}>]
// DPTP: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [{{\]\]}}, partial = ["tp"]>]
// DPTP-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [{{\]\]}}>]
// DPTP: dtc.gelu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], ["tp"{{\]\]}}>]
// DPTP-NEXT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [{{\]\]}}, partial = ["tp"]>]
// DPTP-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [{{\]\]}}>]

// Sequence parallelism: between sub-blocks the activations are split over
// tokens on tp, so the all-reduce becomes a reduce-scatter (partial -> split)
// and an all-gather before the next column-parallel linear.
// SP-LABEL: func.func @gpt_block
// SP: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}, partial = ["tp"]>]
// SP-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [], [{{\]\]}}>]
// SP-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [], [{{\]\]}}>]
// SP-NEXT: dtc.layer_norm {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [], [{{\]\]}}>]
// SP-NEXT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], ["tp"{{\]\]}}>]

// A GPT-2 block as the ONNX importer raises it: fused QKV projection, slices
// into Q, K, V, reshape/transpose to 8 heads, causal attention, output
// projection, residual, MLP with gelu, residual.
func.func @gpt_block(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  %ln1w = dtc.parameter "ln_1.weight" : tensor<64xf32>
  %ln1b = dtc.parameter "ln_1.bias" : tensor<64xf32>
  %wqkv = dtc.parameter "attn.c_attn.weight" : tensor<64x192xf32>
  %bqkv = dtc.parameter "attn.c_attn.bias" : tensor<192xf32>
  %wo = dtc.parameter "attn.c_proj.weight" : tensor<64x64xf32>
  %bo = dtc.parameter "attn.c_proj.bias" : tensor<64xf32>
  %ln2w = dtc.parameter "ln_2.weight" : tensor<64xf32>
  %ln2b = dtc.parameter "ln_2.bias" : tensor<64xf32>
  %w1 = dtc.parameter "mlp.c_fc.weight" : tensor<64x256xf32>
  %b1 = dtc.parameter "mlp.c_fc.bias" : tensor<256xf32>
  %w2 = dtc.parameter "mlp.c_proj.weight" : tensor<256x64xf32>
  %b2 = dtc.parameter "mlp.c_proj.bias" : tensor<64xf32>
  %ln1 = dtc.layer_norm %x, %ln1w, %ln1b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %qkv0 = dtc.matmul %ln1, %wqkv : (tensor<2x8x64xf32>, tensor<64x192xf32>) -> tensor<2x8x192xf32>
  %qkv = dtc.add %bqkv, %qkv0 : (tensor<192xf32>, tensor<2x8x192xf32>) -> tensor<2x8x192xf32>
  %q0 = dtc.slice %qkv {limits = array<i64: 2, 8, 64>, starts = array<i64: 0, 0, 0>, strides = array<i64: 1, 1, 1>} : (tensor<2x8x192xf32>) -> tensor<2x8x64xf32>
  %k0 = dtc.slice %qkv {limits = array<i64: 2, 8, 128>, starts = array<i64: 0, 0, 64>, strides = array<i64: 1, 1, 1>} : (tensor<2x8x192xf32>) -> tensor<2x8x64xf32>
  %v0 = dtc.slice %qkv {limits = array<i64: 2, 8, 192>, starts = array<i64: 0, 0, 128>, strides = array<i64: 1, 1, 1>} : (tensor<2x8x192xf32>) -> tensor<2x8x64xf32>
  %q1 = dtc.reshape %q0 : (tensor<2x8x64xf32>) -> tensor<2x8x8x8xf32>
  %q = dtc.transpose %q1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %k1 = dtc.reshape %k0 : (tensor<2x8x64xf32>) -> tensor<2x8x8x8xf32>
  %k = dtc.transpose %k1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %v1 = dtc.reshape %v0 : (tensor<2x8x64xf32>) -> tensor<2x8x8x8xf32>
  %v = dtc.transpose %v1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %att = dtc.attention %q, %k, %v {causal} : (tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>, tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %att1 = dtc.transpose %att {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x8x8xf32>) -> tensor<2x8x8x8xf32>
  %att2 = dtc.reshape %att1 : (tensor<2x8x8x8xf32>) -> tensor<2x8x64xf32>
  %o0 = dtc.matmul %att2, %wo : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
  %o = dtc.add %bo, %o0 : (tensor<64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %h = dtc.add %x, %o : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %ln2 = dtc.layer_norm %h, %ln2w, %ln2b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %f0 = dtc.matmul %ln2, %w1 : (tensor<2x8x64xf32>, tensor<64x256xf32>) -> tensor<2x8x256xf32>
  %f1 = dtc.add %b1, %f0 : (tensor<256xf32>, tensor<2x8x256xf32>) -> tensor<2x8x256xf32>
  %f2 = dtc.gelu %f1 : tensor<2x8x256xf32>
  %m0 = dtc.matmul %f2, %w2 : (tensor<2x8x256xf32>, tensor<256x64xf32>) -> tensor<2x8x64xf32>
  %m = dtc.add %b2, %m0 : (tensor<64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  %y = dtc.add %h, %m : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}


// -----

// TP2-LABEL: func.func @mlp
// TP2: dtc.parameter "fc1.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>]}
// TP2: dtc.parameter "fc2.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]}
// TP2: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]
// TP2-NEXT: dtc.gelu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]
// TP2-NEXT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [{{\]\]}}, partial = ["tp"]>]
// DPTP-LABEL: func.func @mlp
// DPTP-SAME: dtc.sharding = #dtc.sharding<{{\[\[}}"dp"], [{{\]\]}}>
// DPTP: dtc.gelu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], ["tp"{{\]\]}}>]
// DPTP-NEXT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [{{\]\]}}, partial = ["tp"]>]

// Two linears and a gelu (PyTorch Linear: x @ W^T).
func.func @mlp(%x: tensor<16x128xf32>) -> tensor<16x128xf32> {
  %w1 = dtc.parameter "fc1.weight" : tensor<512x128xf32>
  %w2 = dtc.parameter "fc2.weight" : tensor<128x512xf32>
  %h0 = dtc.matmul %x, %w1 {transpose_rhs} : (tensor<16x128xf32>, tensor<512x128xf32>) -> tensor<16x512xf32>
  %h = dtc.gelu %h0 : tensor<16x512xf32>
  %y = dtc.matmul %h, %w2 {transpose_rhs} : (tensor<16x512xf32>, tensor<128x512xf32>) -> tensor<16x128xf32>
  return %y : tensor<16x128xf32>
}


// -----

// The projection splits by columns, the mean over them leaves a partial
// [32] vector: one all-reduce of 128 bytes instead of gathering [32x1024].
// TP2-LABEL: func.func @score
// TP2: dtc.parameter "proj.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]}
// TP2: dtc.relu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]
// TP2-NEXT: dtc.reduce_mean {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}{{\]\]}}, partial = ["tp"]>]

// Not a transformer: a wide projection scored by a mean over its features.
func.func @score(%x: tensor<32x256xf32>) -> tensor<32xf32> {
  %w = dtc.parameter "proj.weight" : tensor<256x1024xf32>
  %h0 = dtc.matmul %x, %w : (tensor<32x256xf32>, tensor<256x1024xf32>) -> tensor<32x1024xf32>
  %h = dtc.relu %h0 : tensor<32x1024xf32>
  %s = dtc.reduce_mean %h {dims = array<i64: 1>} : (tensor<32x1024xf32>) -> tensor<32xf32>
  return %s : tensor<32xf32>
}


// -----

// TP2-LABEL: func.func @gqa
// TP2: dtc.parameter "wq" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]}
// TP2-NEXT: dtc.parameter "wk" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]}
// TP2-NEXT: dtc.parameter "wv" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]}
// TP2: dtc.attention {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [], [{{\]\]}}>]} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>)
// Grouped-query attention: 4 query heads read 2 kv heads (h floordiv 2).
func.func @gqa(%x: tensor<2x8x64xf32>) -> tensor<2x8x64xf32> {
  %wq = dtc.parameter "wq" : tensor<64x64xf32>
  %wk = dtc.parameter "wk" : tensor<64x32xf32>
  %wv = dtc.parameter "wv" : tensor<64x32xf32>
  %wo = dtc.parameter "wo" : tensor<64x64xf32>
  %q0 = dtc.matmul %x, %wq : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
  %k0 = dtc.matmul %x, %wk : (tensor<2x8x64xf32>, tensor<64x32xf32>) -> tensor<2x8x32xf32>
  %v0 = dtc.matmul %x, %wv : (tensor<2x8x64xf32>, tensor<64x32xf32>) -> tensor<2x8x32xf32>
  %q1 = dtc.reshape %q0 : (tensor<2x8x64xf32>) -> tensor<2x8x4x16xf32>
  %k1 = dtc.reshape %k0 : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
  %v1 = dtc.reshape %v0 : (tensor<2x8x32xf32>) -> tensor<2x8x2x16xf32>
  %q = dtc.transpose %q1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %k = dtc.transpose %k1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %v = dtc.transpose %v1 {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x8x2x16xf32>) -> tensor<2x2x8x16xf32>
  %a = dtc.attention %q, %k, %v {causal} : (tensor<2x4x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>) -> tensor<2x4x8x16xf32>
  %a1 = dtc.transpose %a {permutation = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  %a2 = dtc.reshape %a1 : (tensor<2x8x4x16xf32>) -> tensor<2x8x64xf32>
  %o = dtc.matmul %a2, %wo : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
  %y = dtc.add %x, %o : (tensor<2x8x64xf32>, tensor<2x8x64xf32>) -> tensor<2x8x64xf32>
  return %y : tensor<2x8x64xf32>
}


// -----

// TP2-LABEL: func.func @reshape_groups
// TP2: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]
// TP2-NEXT: dtc.reshape {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [{{\]\]}}>]} : (tensor<8x192xf32>) -> tensor<8x4x48xf32>
// TP2-NEXT: dtc.gelu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [{{\]\]}}>]
// TP2-NEXT: dtc.reshape {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [{{\]\]}}>]} : (tensor<8x4x48xf32>) -> tensor<8x2x96xf32>
// A split dim of 192 carried through reshapes by dimension groups:
// 192 -> (4, 48) puts the split on the 4; (4, 48) -> (2, 96) on the 2.
func.func @reshape_groups(%x: tensor<8x192xf32>) -> tensor<8x2x96xf32> {
  %w = dtc.parameter "w" : tensor<192x192xf32>
  %h = dtc.matmul %x, %w : (tensor<8x192xf32>, tensor<192x192xf32>) -> tensor<8x192xf32>
  %r = dtc.reshape %h : (tensor<8x192xf32>) -> tensor<8x4x48xf32>
  %g = dtc.gelu %r : tensor<8x4x48xf32>
  %r2 = dtc.reshape %g : (tensor<8x4x48xf32>) -> tensor<8x2x96xf32>
  %t = dtc.tanh %r2 : tensor<8x2x96xf32>
  return %t : tensor<8x2x96xf32>
}


// -----

// Ops without a rule: a call is opaque (read and produce replicated values),
// a concatenation drops the split of its axis; the loss is a partial sum
// over the data-parallel batch.
// DPTP-LABEL: func.func @calls
// DPTP: call @ext({{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [{{\]\]}}>]
// DPTP: dtc.concat {{.*}}axis = 0 : i64, dtc.sharding = [#dtc.sharding<{{\[\[}}], [{{.*}}{{\]\]}}>]
// DPTP-LABEL: func.func @loss
// DPTP: dtc.cross_entropy {{.*}}dtc.sharding = [#dtc.sharding<[], partial = ["dp"]>]
func.func private @ext(tensor<4x8xf32>) -> tensor<4x8xf32>
func.func @calls(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<8x8xf32> {
  %a = func.call @ext(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %b = dtc.neg %a : tensor<4x8xf32>
  %c = dtc.concat %b, %y {axis = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<8x8xf32>
  return %c : tensor<8x8xf32>
}
func.func @loss(%logits: tensor<4x8x16xf32>, %labels: tensor<4x8xi64>) -> tensor<f32> {
  %l = dtc.cross_entropy %logits, %labels : (tensor<4x8x16xf32>, tensor<4x8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// tiny-gpt (2 layers, 4 heads, hidden 64) at tp=2.
// GPT-LABEL: func.func @main
// GPT: dtc.parameter "onnx::MatMul_278" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"]:64]>]}
// GPT-NEXT: dtc.parameter "onnx::MatMul_282" {dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>]}
// GPT-NEXT: dtc.parameter "onnx::MatMul_283" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]}
// GPT-NEXT: dtc.parameter "onnx::MatMul_284" {dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>]}
// The language-model head splits the vocabulary: logits stay split.
// GPT: dtc.parameter "onnx::MatMul_292" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]}
// GPT: dtc.attention {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [], [{{\]\]}}>]
// GPT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}, partial = ["tp"]>]
// GPT-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]
// GPT: dtc.gelu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], ["tp"{{\]\]}}>]
// GPT-NEXT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}, partial = ["tp"]>]
// GPT-NEXT: dtc.add {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [{{\]\]}}>]
// GPT: dtc.attention {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [], [{{\]\]}}>]
// Two partial values per block, none elsewhere:
// GPTCNT-LABEL: func.func @main
// GPTCNT-COUNT-4: partial = ["tp"]
// GPTCNT-NOT: partial

// tiny CNN (scripts/export_cnn.py: conv 3->16, conv 16->32 stride 2,
// global average pool, linear 32->10; batch 8) at dp=2, tp=2. The batch is
// split on dp everywhere; the convolutions stay whole on tp (weights of
// 1.8 and 18 KB: splitting output channels would save little compute and
// cost an all-reduce of the second conv's activation), and output positions
// are never split (that needs halos). Only the classifier uses tp.
// CNN-LABEL: func.func @main
// CNN-SAME: dtc.sharding = #dtc.sharding<{{\[\[}}"dp"], [], [], [{{\]\]}}>
// CNN: dtc.parameter "conv1.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [], [{{\]\]}}>]}
// CNN: dtc.parameter "conv2.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [], [{{\]\]}}>]}
// CNN: dtc.conv {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [], [{{\]\]}}>]
// CNN-NEXT: dtc.relu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [], [{{\]\]}}>]
// CNN-NEXT: dtc.conv {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [], [{{\]\]}}>]
// CNN-NEXT: dtc.relu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [], [{{\]\]}}>]
// CNN-NEXT: dtc.reduce_mean {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [], [{{\]\]}}>]
// CNN-NEXT: dtc.reshape {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [{{\]\]}}>]
// CNN-NEXT: dtc.matmul {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [{{\]\]}}, partial = ["tp"]>]

// -----

// Wide convolutions (2.4M-parameter weights, small activations): Megatron's
// pattern for convs. The first splits output channels (weight dim 0), the
// second reads them as a split reduction (weight dim 1) and leaves a partial
// sum: one all-reduce per pair. Spatial dims stay whole.
// TP2-LABEL: func.func @wide_convs
// TP2: dtc.parameter "conv1.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}"tp"], [], [], [{{\]\]}}>]}
// TP2: dtc.parameter "conv2.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [], [{{\]\]}}>]}
// TP2: dtc.conv {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [], [{{\]\]}}>]
// TP2-NEXT: dtc.relu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"], [], [{{\]\]}}>]
// TP2-NEXT: dtc.conv {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [], [{{\]\]}}, partial = ["tp"]>]
// DPTP-LABEL: func.func @wide_convs
// DPTP-SAME: dtc.sharding = #dtc.sharding<{{\[\[}}"dp"], [], [], [{{\]\]}}>
// DPTP: dtc.conv {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], ["tp"], [], [{{\]\]}}>]
// DPTP-NEXT: dtc.relu {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], ["tp"], [], [{{\]\]}}>]
// DPTP-NEXT: dtc.conv {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [], [{{\]\]}}, partial = ["tp"]>]
func.func @wide_convs(%x: tensor<8x256x8x8xf32>) -> tensor<8x256x8x8xf32> {
  %w1 = dtc.parameter "conv1.weight" : tensor<1024x256x3x3xf32>
  %w2 = dtc.parameter "conv2.weight" : tensor<256x1024x3x3xf32>
  %0 = dtc.conv %x, %w1 {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (tensor<8x256x8x8xf32>, tensor<1024x256x3x3xf32>) -> tensor<8x1024x8x8xf32>
  %1 = dtc.relu %0 : tensor<8x1024x8x8xf32>
  %2 = dtc.conv %1, %w2 {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>} : (tensor<8x1024x8x8xf32>, tensor<256x1024x3x3xf32>) -> tensor<8x256x8x8xf32>
  return %2 : tensor<8x256x8x8xf32>
}

// -----

// A grouped convolution reads input channel (f floordiv 256) * 256 + c: no
// channel split is offered (docs/sharding.md), so even 9.4 MB of weights stay
// whole and only the batch splits.
// TP2-LABEL: func.func @grouped_conv
// TP2: dtc.parameter "conv.weight" {dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [], [{{\]\]}}>]}
// TP2: dtc.conv {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}], [], [], [{{\]\]}}>], groups = 4
// DPTP-LABEL: func.func @grouped_conv
// DPTP: dtc.conv {{.*}}dtc.sharding = [#dtc.sharding<{{\[\[}}"dp"], [], [], [{{\]\]}}>], groups = 4
func.func @grouped_conv(%x: tensor<8x1024x8x8xf32>) -> tensor<8x1024x8x8xf32> {
  %w = dtc.parameter "conv.weight" : tensor<1024x256x3x3xf32>
  %0 = dtc.conv %x, %w {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, groups = 4 : i64} : (tensor<8x1024x8x8xf32>, tensor<1024x256x3x3xf32>) -> tensor<8x1024x8x8xf32>
  return %0 : tensor<8x1024x8x8xf32>
}
