// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=tp:4" -dtc-partition="mesh=tp:4" | FileCheck %s --check-prefix=TP4
// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=tp:4" -dtc-partition="mesh=tp:4" | FileCheck %s --check-prefix=TP4CNT
// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=tp:4 sequence-parallel=true" -dtc-partition="mesh=tp:4" | FileCheck %s --check-prefix=SP
// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=dp:2,tp:2" -dtc-partition="mesh=dp:2,tp:2" | FileCheck %s --check-prefix=DPTP
// The partitioned program parses and verifies again (collective shape rules).
// RUN: dtc-opt %s -split-input-file -dtc-propagate-sharding="mesh=dp:2,tp:2" -dtc-partition="mesh=dp:2,tp:2" | dtc-opt -split-input-file | FileCheck %s --check-prefix=DPTP

// A GPT-2 block (hidden 64, 8 heads, batch 2 x 8 tokens) at tp=4: Megatron's
// layout, so the forward pass has exactly two all-reduces, each of the full
// b*s*h = 2*8*64 activation, after the row-parallel attention output
// projection and the second MLP linear; nothing else communicates.

// TP4-LABEL: func.func @gpt_block
// TP4-SAME: (%arg0: tensor<2x8x64xf32> {dtc.sharding = #dtc.sharding<{{\[\[}}], [], [{{\]\]}}>})
// TP4-SAME: attributes {dtc.mesh = #dtc.mesh<[tp = 4]>}
// The fused QKV weight keeps a quarter of each of Q, K and V (":64").
// TP4: dtc.parameter "attn.c_attn.weight" {dtc.global_type = tensor<64x192xf32>, dtc.shard = #dtc.sharding<{{\[\[}}], ["tp"]:64]>} : tensor<64x48xf32>
// TP4: dtc.parameter "attn.c_attn.bias" {{.*}} : tensor<48xf32>
// TP4: dtc.parameter "attn.c_proj.weight" {dtc.global_type = tensor<64x64xf32>, dtc.shard = #dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>} : tensor<16x64xf32>
// TP4: dtc.parameter "mlp.c_fc.weight" {dtc.global_type = tensor<64x256xf32>, dtc.shard = #dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>} : tensor<64x64xf32>
// TP4: dtc.parameter "mlp.c_fc.bias" {{.*}} : tensor<64xf32>
// TP4: dtc.parameter "mlp.c_proj.weight" {dtc.global_type = tensor<256x64xf32>, dtc.shard = #dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>} : tensor<64x64xf32>
// TP4: dtc.matmul {{.*}} : (tensor<2x8x64xf32>, tensor<64x48xf32>) -> tensor<2x8x48xf32>
// Q, K and V are the local thirds of the local 48 columns.
// TP4: dtc.slice {{.*}}limits = array<i64: 2, 8, 16>, starts = array<i64: 0, 0, 0>{{.*}} -> tensor<2x8x16xf32>
// TP4: dtc.slice {{.*}}limits = array<i64: 2, 8, 32>, starts = array<i64: 0, 0, 16>{{.*}} -> tensor<2x8x16xf32>
// TP4: dtc.slice {{.*}}limits = array<i64: 2, 8, 48>, starts = array<i64: 0, 0, 32>{{.*}} -> tensor<2x8x16xf32>
// Two of the eight heads per rank; the scale stays that of the global head dim.
// TP4: dtc.attention {{.*}}{causal, scale = 0.35355339059327373 : f64} : (tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>, tensor<2x2x8x8xf32>) -> tensor<2x2x8x8xf32>
// TP4: %[[O:.*]] = dtc.matmul {{.*}} : (tensor<2x8x16xf32>, tensor<16x64xf32>) -> tensor<2x8x64xf32>
// TP4-NEXT: %[[H1:.*]] = dtc.all_reduce_start %[[O]] {mesh_axes = ["tp"]} : tensor<2x8x64xf32> -> !dtc.async<tensor<2x8x64xf32>>
// TP4-NEXT: %[[O1:.*]] = dtc.wait %[[H1]] : !dtc.async<tensor<2x8x64xf32>>
// TP4-NEXT: dtc.add %{{.*}}, %[[O1]]
// TP4: dtc.matmul {{.*}} : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
// TP4: dtc.gelu {{.*}} : tensor<2x8x64xf32>
// TP4-NEXT: %[[M:.*]] = dtc.matmul {{.*}} : (tensor<2x8x64xf32>, tensor<64x64xf32>) -> tensor<2x8x64xf32>
// TP4-NEXT: %[[H2:.*]] = dtc.all_reduce_start %[[M]] {mesh_axes = ["tp"]} : tensor<2x8x64xf32> -> !dtc.async<tensor<2x8x64xf32>>
// TP4-NEXT: dtc.wait %[[H2]]
// TP4: return {{.*}} : tensor<2x8x64xf32>

// TP4CNT-LABEL: func.func @gpt_block
// TP4CNT-COUNT-2: dtc.all_reduce_start {{.*}} : tensor<2x8x64xf32> -> !dtc.async<tensor<2x8x64xf32>>
// TP4CNT-NOT: _start
// TP4CNT-NOT: dtc.shard_slice
// TP4CNT: return

// Sequence parallelism with the residual stream arriving split over tokens:
// each all-reduce becomes a reduce-scatter to tokens, and each
// column-parallel linear reads its input all-gathered (2 + 2 collectives of
// b*s*h elements); layer norms and residual adds run on a quarter of the
// tokens.
// SP-LABEL: func.func @gpt_block_sp
// SP-SAME: (%arg0: tensor<2x2x64xf32> {dtc.sharding = #dtc.sharding<{{\[\[}}], ["tp"], [{{\]\]}}>})
// SP: dtc.layer_norm {{.*}} -> tensor<2x2x64xf32>
// SP-NEXT: dtc.all_gather_start {{.*}}{dim = 1 : i64, mesh_axes = ["tp"]} : tensor<2x2x64xf32> -> !dtc.async<tensor<2x8x64xf32>>
// SP: dtc.reduce_scatter_start {{.*}}{dim = 1 : i64, mesh_axes = ["tp"]} : tensor<2x8x64xf32> -> !dtc.async<tensor<2x2x64xf32>>
// SP: dtc.layer_norm {{.*}} -> tensor<2x2x64xf32>
// SP-NEXT: dtc.all_gather_start {{.*}}{dim = 1 : i64, mesh_axes = ["tp"]} : tensor<2x2x64xf32> -> !dtc.async<tensor<2x8x64xf32>>
// SP: dtc.reduce_scatter_start {{.*}}{dim = 1 : i64, mesh_axes = ["tp"]} : tensor<2x8x64xf32> -> !dtc.async<tensor<2x2x64xf32>>
// SP-NOT: _start
// SP-NOT: dtc.shard_slice
// SP: return {{.*}} : tensor<2x2x64xf32>

// dp=2 x tp=2: each rank holds one of the two sequences and half of the
// heads; the two all-reduces are over "tp" only.
// DPTP-LABEL: func.func @gpt_block
// DPTP-SAME: (%arg0: tensor<1x8x64xf32> {dtc.sharding = #dtc.sharding<{{\[\[}}"dp"], [], [{{\]\]}}>})
// DPTP-SAME: attributes {dtc.mesh = #dtc.mesh<[dp = 2, tp = 2]>}
// DPTP: dtc.parameter "attn.c_attn.weight" {{.*}} : tensor<64x96xf32>
// DPTP: dtc.parameter "mlp.c_fc.weight" {{.*}} : tensor<64x128xf32>
// DPTP: dtc.attention {{.*}} -> tensor<1x4x8x8xf32>
// DPTP: dtc.all_reduce_start {{.*}}{mesh_axes = ["tp"]} : tensor<1x8x64xf32>
// DPTP: dtc.all_reduce_start {{.*}}{mesh_axes = ["tp"]} : tensor<1x8x64xf32>
// DPTP-NOT: _start
// DPTP: return {{.*}} : tensor<1x8x64xf32>

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

func.func @gpt_block_sp(%x: tensor<2x8x64xf32> {dtc.sharding = #dtc.sharding<[[], ["tp"], []]>}) -> tensor<2x8x64xf32> {
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

