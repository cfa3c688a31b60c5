// Every kind of resharding, on hand-written annotations (mesh tp:4): a split
// that moves to another dim (all-to-all), a split read replicated
// (all-gather), a replicated value read split (a local slice, no
// communication), a partial mean read whole (scaled by 1/4 where it is
// computed, all-reduced where it is read).
// RUN: dtc-opt %s -dtc-partition="mesh=tp:4" | FileCheck %s --check-prefix=RESHARD
// RESHARD-LABEL: func.func @reshard
// RESHARD-SAME: (%[[X:.*]]: tensor<2x16xf32> {dtc.sharding = #dtc.sharding<{{\[\[}}"tp"], [{{\]\]}}>})
// RESHARD-SAME: -> (tensor<8x4xf32> {dtc.sharding = #dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>}, tensor<8xf32> {dtc.sharding = #dtc.sharding<{{\[\[}}{{\]\]}}>})
// RESHARD-NEXT: %[[H0:.*]] = dtc.all_to_all_start %[[X]] {concat_dim = 0 : i64, mesh_axes = ["tp"], split_dim = 1 : i64} : tensor<2x16xf32> -> !dtc.async<tensor<8x4xf32>>
// RESHARD-NEXT: %[[A0:.*]] = dtc.wait %[[H0]]
// RESHARD-NEXT: %[[A:.*]] = dtc.relu %[[A0]] : tensor<8x4xf32>
// RESHARD-NEXT: %[[H1:.*]] = dtc.all_gather_start %[[A]] {dim = 1 : i64, mesh_axes = ["tp"]} : tensor<8x4xf32> -> !dtc.async<tensor<8x16xf32>>
// RESHARD-NEXT: %[[A1:.*]] = dtc.wait %[[H1]]
// RESHARD-NEXT: %[[B:.*]] = dtc.exp %[[A1]] : tensor<8x16xf32>
// RESHARD-NEXT: %[[B1:.*]] = dtc.shard_slice %[[B]] {dim = 1 : i64, mesh_axes = ["tp"]} : tensor<8x16xf32> -> tensor<8x4xf32>
// RESHARD-NEXT: %[[C:.*]] = dtc.neg %[[B1]] : tensor<8x4xf32>
// The same replicated value read split a second time: the slice is reused.
// RESHARD-NEXT: %[[D:.*]] = dtc.sub %[[C]], %[[B1]]
// RESHARD-NEXT: %[[M:.*]] = dtc.reduce_mean %[[D]] {dims = array<i64: 1>} : (tensor<8x4xf32>) -> tensor<8xf32>
// RESHARD-NEXT: %[[Q:.*]] = dtc.constant dense<2.500000e-01> : tensor<f32>
// RESHARD-NEXT: %[[MQ:.*]] = dtc.mul %[[M]], %[[Q]]
// RESHARD-NEXT: %[[H2:.*]] = dtc.all_reduce_start %[[MQ]] {mesh_axes = ["tp"]} : tensor<8xf32> -> !dtc.async<tensor<8xf32>>
// RESHARD-NEXT: %[[S:.*]] = dtc.wait %[[H2]]
// RESHARD-NEXT: return %[[D]], %[[S]] : tensor<8x4xf32>, tensor<8xf32>
func.func @reshard(%x: tensor<8x16xf32> {dtc.sharding = #dtc.sharding<[["tp"], []]>}) -> (tensor<8x16xf32>, tensor<8xf32>) {
  %a = dtc.relu %x {dtc.sharding = [#dtc.sharding<[[], ["tp"]]>]} : tensor<8x16xf32>
  %b = dtc.exp %a {dtc.sharding = [#dtc.sharding<[[], []]>]} : tensor<8x16xf32>
  %c = dtc.neg %b {dtc.sharding = [#dtc.sharding<[[], ["tp"]]>]} : tensor<8x16xf32>
  %d = dtc.sub %c, %b {dtc.sharding = [#dtc.sharding<[[], ["tp"]]>]} : (tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x16xf32>
  %m = dtc.reduce_mean %d {dims = array<i64: 1>, dtc.sharding = [#dtc.sharding<[[]], partial = ["tp"]>]} : (tensor<8x16xf32>) -> tensor<8xf32>
  return %d, %m : tensor<8x16xf32>, tensor<8xf32>
}
