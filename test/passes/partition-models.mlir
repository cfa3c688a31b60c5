// Real fixtures. tiny-gpt through import, propagation and partitioning of
// its forward function over the mesh of a tp=2 plan (dp:1,tp:2); the
// per-rank program parses and verifies again. (`dtc compile --emit
// partitioned` prints the training step: cli/emit-partitioned-pipeline.test.)
// RUN: dtc compile %models/tiny-gpt.onnx --gpus 1 --seq-len 16 --micro-batch 2 --emit imported | dtc-opt -dtc-propagate-sharding="mesh=dp:1,tp:2" -dtc-partition="mesh=dp:1,tp:2" | FileCheck %s
// RUN: dtc compile %models/tiny-gpt.onnx --gpus 1 --seq-len 16 --micro-batch 2 --emit imported | dtc-opt -dtc-propagate-sharding="mesh=dp:1,tp:2" -dtc-partition="mesh=dp:1,tp:2" | dtc-opt | FileCheck %s

// CHECK-LABEL: func.func @main
// CHECK-SAME: (%arg0: tensor<2x16xi64> {dtc.name = "input_ids"
// The language-model head splits the vocabulary: the logits stay split.
// CHECK-SAME: -> (tensor<2x16x128xf32> {dtc.name = "logits", dtc.sharding = #dtc.sharding<{{\[\[}}"dp"], [], ["tp"{{\]\]}}>})
// CHECK-SAME: attributes {dtc.mesh = #dtc.mesh<[dp = 1, tp = 2]>}
// The embedding table is split by its hidden columns.
// CHECK: dtc.parameter "wte.weight" {dtc.global_type = tensor<256x64xf32>, dtc.shard = #dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>} : tensor<256x32xf32>
// Each of the two layers: column-parallel QKV (96 of 192 columns), half
// of the heads, a row-parallel MLP whose output is all-reduced once.
// CHECK-NOT: dtc.all_reduce_start
// CHECK: dtc.matmul {{.*}} : (tensor<2x16x64xf32>, tensor<64x96xf32>) -> tensor<2x16x96xf32>
// CHECK: dtc.attention {{.*}} -> tensor<2x2x16x16xf32>
// CHECK-NOT: dtc.all_reduce_start
// CHECK: dtc.all_reduce_start {{.*}}{mesh_axes = ["tp"]} : tensor<2x16x64xf32> -> !dtc.async<tensor<2x16x64xf32>>
// CHECK-NOT: dtc.all_reduce_start
// CHECK: dtc.matmul {{.*}} : (tensor<2x16x64xf32>, tensor<64x96xf32>) -> tensor<2x16x96xf32>
// CHECK: dtc.attention {{.*}} -> tensor<2x2x16x16xf32>
// CHECK-NOT: dtc.all_reduce_start
// CHECK: dtc.all_reduce_start {{.*}}{mesh_axes = ["tp"]} : tensor<2x16x64xf32> -> !dtc.async<tensor<2x16x64xf32>>
// CHECK-NOT: dtc.all_reduce_start
// CHECK: return {{.*}} : tensor<2x16x128xf32>

// The CNN fixture at dp=2 x tp=2 (see docs/sharding.md): convolutions run
// on 4 of the 8 images per rank with whole weights; the classifier reads its
// 32 features split on tp (a local slice) and its partial output is
// reduce-scattered onto the classes its bias add splits.
// RUN: dtc compile %models/cnn/cnn.onnx --gpus 1 --dim batch=8 --emit imported | dtc-opt -dtc-propagate-sharding="mesh=dp:2,tp:2" -dtc-partition="mesh=dp:2,tp:2" | FileCheck %s --check-prefix=CNN
// CNN-LABEL: func.func @main
// CNN-SAME: (%arg0: tensor<4x3x16x16xf32>
// CNN-SAME: -> (tensor<4x5xf32>
// CNN-NOT: _start
// CNN: dtc.conv {{.*}} : (tensor<4x3x16x16xf32>, tensor<16x3x3x3xf32>, tensor<16xf32>) -> tensor<4x16x16x16xf32>
// CNN: dtc.conv {{.*}} : (tensor<4x16x16x16xf32>, tensor<32x16x3x3xf32>, tensor<32xf32>) -> tensor<4x32x8x8xf32>
// CNN: dtc.shard_slice {{.*}}{dim = 1 : i64, mesh_axes = ["tp"]} : tensor<4x32xf32> -> tensor<4x16xf32>
// CNN-NEXT: dtc.matmul {{.*}} -> tensor<4x10xf32>
// CNN-NEXT: dtc.reduce_scatter_start {{.*}}{dim = 1 : i64, mesh_axes = ["tp"]} : tensor<4x10xf32> -> !dtc.async<tensor<4x5xf32>>
// CNN-NOT: _start
// CNN: return
