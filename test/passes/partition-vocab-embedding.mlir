// RUN: dtc-opt %s -dtc-autodiff -dtc-propagate-sharding="mesh=dp:2,tp:2" -dtc-partition="mesh=dp:2,tp:2" | FileCheck %s
// RUN: dtc-opt %s -dtc-autodiff -dtc-propagate-sharding="mesh=dp:2,tp:2" -dtc-partition="mesh=dp:2,tp:2" | FileCheck %s --check-prefix=COUNT

// The vocabulary-parallel embedding (Megatron's VocabParallelEmbedding) of
// a language model whose head is tied to its embedding, on dp=2 x tp=2.
// The table (512 rows) is much larger than the tokens' activations, so
// each tp rank holds half of its rows, for the lookup and for the head:
// the lookup reads every id in the rank's half (zeros for the others) and
// one all-reduce over tp sums the halves; the head's logits and the loss
// stay split over the vocabulary; the table's gradient rows need no tp
// exchange. The table is stored as the lookup reads it, so the head never
// moves it, and its two gradient contributions (head and lookup), partial
// sums over dp, are added before the one dp all-reduce (at the return,
// where the gradient is needed whole).

// CHECK-LABEL: func.func @loss_grad
// CHECK: %[[WTE:.*]] = dtc.parameter "wte" {dtc.global_type = tensor<512x16xf32>, dtc.shard = #dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>} : tensor<256x16xf32>
// CHECK: %[[LOOKUP:.*]] = dtc.embedding_shard %[[WTE]], %arg0 {mesh_axes = ["tp"]} : (tensor<256x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
// CHECK-NEXT: dtc.all_reduce_start %[[LOOKUP]] {mesh_axes = ["tp"]} : tensor<2x8x16xf32>
// CHECK-NOT: %[[WTE]]
// CHECK: %[[LOGITS:.*]] = dtc.matmul %{{.*}}, %[[WTE]] {transpose_rhs} : (tensor<2x8x16xf32>, tensor<256x16xf32>) -> tensor<2x8x256xf32>
// CHECK-NEXT: dtc.cross_entropy_stats %[[LOGITS]], %arg1 {mesh_axes = ["tp"]}
// CHECK: %[[HEAD:.*]] = dtc.matmul {{.*}} -> tensor<256x16xf32>
// CHECK: %[[ROWS:.*]] = dtc.embedding_shard_grad %{{.*}}, %arg0 {mesh_axes = ["tp"], num_rows = 256 : i64} : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<256x16xf32>
// CHECK-NEXT: %[[SUM:.*]] = dtc.add %[[HEAD]], %[[ROWS]] : (tensor<256x16xf32>, tensor<256x16xf32>) -> tensor<256x16xf32>
// CHECK: dtc.all_reduce_start %[[SUM]] {mesh_axes = ["dp"]} : tensor<256x16xf32>

// The table never moves whole, and its gradient crosses dp once.
// COUNT-LABEL: func.func @loss_grad
// COUNT-NOT: tensor<512x16xf32>>
// COUNT-NOT: {{(all_gather|all_to_all)_start %0 }}
// COUNT-COUNT-1: mesh_axes = ["dp"]} : tensor<256x16xf32>
// COUNT-NOT: mesh_axes = ["dp"]} : tensor<256x16xf32>
// COUNT: return

func.func @loss(%ids: tensor<4x8xi64>, %labels: tensor<4x8xi64>) -> tensor<f32> {
  %wte = dtc.parameter "wte" : tensor<512x16xf32>
  %w1 = dtc.parameter "fc1.weight" : tensor<16x64xf32>
  %w2 = dtc.parameter "fc2.weight" : tensor<64x16xf32>
  %e = dtc.embedding %wte, %ids : (tensor<512x16xf32>, tensor<4x8xi64>) -> tensor<4x8x16xf32>
  %h0 = dtc.matmul %e, %w1 : (tensor<4x8x16xf32>, tensor<16x64xf32>) -> tensor<4x8x64xf32>
  %h = dtc.gelu %h0 : tensor<4x8x64xf32>
  %y0 = dtc.matmul %h, %w2 : (tensor<4x8x64xf32>, tensor<64x16xf32>) -> tensor<4x8x16xf32>
  %y = dtc.add %e, %y0 : (tensor<4x8x16xf32>, tensor<4x8x16xf32>) -> tensor<4x8x16xf32>
  %logits = dtc.matmul %y, %wte {transpose_rhs} : (tensor<4x8x16xf32>, tensor<512x16xf32>) -> tensor<4x8x512xf32>
  %l = dtc.cross_entropy %logits, %labels : (tensor<4x8x512xf32>, tensor<4x8xi64>) -> tensor<f32>
  return %l : tensor<f32>
}
