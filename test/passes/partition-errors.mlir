// RUN: dtc-opt %s -split-input-file -dtc-partition="mesh=dp:2,tp:2" -verify-diagnostics
// RUN: not dtc-opt %s -split-input-file -dtc-partition="mesh=tp" 2>&1 | FileCheck %s --check-prefix=MESH
// MESH: error: mesh: bad axis 'tp' in 'tp' (expected name:size pairs such as dp:2,tp:4)
// RUN: not dtc-opt %s -split-input-file -dtc-partition 2>&1 | FileCheck %s --check-prefix=NOMESH
// NOMESH: error: dtc-partition needs a mesh, such as mesh=dp:2,tp:4

// Errors of dtc-partition on hand-written annotations (mesh dp:2,tp:2).

func.func @missing_annotation(%x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<[["dp"], []]>}) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.relu' op has no dtc.sharding annotation; run dtc-propagate-sharding first}}
  %y = dtc.relu %x : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

func.func @unknown_axis(
    // expected-error @+1 {{sharding uses mesh axis "sp", which is not in the mesh (dp:2,tp:2)}}
    %x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<[[], ["sp"]]>}) -> tensor<4x8xf32> {
  return %x : tensor<4x8xf32>
}

// -----

func.func @indivisible(
    // expected-error @+1 {{dimension 0 of size 3 is not divisible by 2, the size of mesh axis "dp"}}
    %x: tensor<3x8xf32> {dtc.sharding = #dtc.sharding<[["dp"], []]>}) -> tensor<3x8xf32> {
  return %x : tensor<3x8xf32>
}

// -----

// Several axes on one dim cut it in mesh order, outermost first.
func.func @two_axes_out_of_mesh_order(
    // expected-error @+1 {{dimension 1 lists its mesh axes out of mesh order (dp:2,tp:2)}}
    %x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<[[], ["tp", "dp"]]>}) -> tensor<4x8xf32> {
  return %x : tensor<4x8xf32>
}

// -----

func.func @two_axes_indivisible(
    // expected-error @+1 {{dimension 1 of size 6 is not divisible by 4, the size of mesh axes "dp", "tp"}}
    %x: tensor<4x6xf32> {dtc.sharding = #dtc.sharding<[[], ["dp", "tp"]]>}) -> tensor<4x6xf32> {
  return %x : tensor<4x6xf32>
}

// -----

// An elementwise op has no reduction loop to leave a partial sum.
func.func @partial_without_reduction(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{'dtc.relu' op result is partial over "tp" but no loop of the op can be split}}
  %y = dtc.relu %x {dtc.sharding = [#dtc.sharding<[[], []], partial = ["tp"]>]} : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Rows split over dp leave the weight gradient a partial sum; annotating it
// replicated would claim a value the local op does not compute.
func.func @inconsistent(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>) {
  // expected-error @+1 {{'dtc.layer_norm_grad' op sharding of result 1 does not match the loops its other results split over mesh axis "dp"}}
  %dx, %dw, %db = dtc.layer_norm_grad %x, %w, %x {axis = 1 : i64, epsilon = 1.0e-5 : f64, dtc.sharding = [#dtc.sharding<[["dp"], []]>, #dtc.sharding<[[]]>, #dtc.sharding<[[]], partial = ["dp"]>]} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  return %dx, %dw : tensor<4x8xf32>, tensor<8xf32>
}

// -----

// Splitting the query positions of causal attention would need each rank's
// position offset in the mask.
func.func @causal_query_split(%q: tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  // expected-error @+1 {{'dtc.attention' op causal attention with query positions split over "tp" needs a position offset, which is not supported yet}}
  %a = dtc.attention %q, %q, %q {causal, dtc.sharding = [#dtc.sharding<[[], [], ["tp"], []]>]} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %a : tensor<2x4x8x16xf32>
}

// -----

// A vocabulary-parallel embedding reads its rank's rows as one block.
func.func @interleaved_vocab_embedding(%ids: tensor<2x8xi64>) -> tensor<2x8x16xf32> {
  %table = dtc.parameter "wte" {dtc.sharding = [#dtc.sharding<[["tp"]:8, []]>]} : tensor<32x16xf32>
  // expected-error @+1 {{'dtc.embedding' op an interleaved split of the vocabulary over "tp" is not supported}}
  %e = dtc.embedding %table, %ids {dtc.sharding = [#dtc.sharding<[[], [], []], partial = ["tp"]>]} : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  return %e : tensor<2x8x16xf32>
}

