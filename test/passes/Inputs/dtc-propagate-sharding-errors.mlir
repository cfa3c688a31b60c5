// Errors of dtc-propagate-sharding, run by ../dtc-propagate-sharding.mlir
// with mesh=dp:2,tp:2.

// The batch of 3 cannot be split over dp:2.
func.func @indivisible_batch(
    // expected-error @+1 {{dimension 0 of size 3 is not divisible by 2, the size of mesh axes "dp"}}
    %x: tensor<3x8xf32>) -> tensor<3x8xf32> {
  return %x : tensor<3x8xf32>
}

// -----

func.func @unknown_axis(
    // expected-error @+1 {{sharding uses mesh axis "sp", which is not in the mesh (dp:2,tp:2)}}
    %x: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<[[], ["sp"]]>}) -> tensor<4x8xf32> {
  return %x : tensor<4x8xf32>
}

// -----

func.func @indivisible_annotation(
    // expected-error @+1 {{dimension 1 of size 6 is not divisible by 4, the size of mesh axes "dp", "tp"}}
    %x: tensor<4x6xf32> {dtc.sharding = #dtc.sharding<[[], ["dp", "tp"]]>}) -> tensor<4x6xf32> {
  return %x : tensor<4x6xf32>
}

// -----

func.func @indivisible_block(
    // expected-error @+1 {{dimension 0 of size 12 (interleave block 6) is not divisible by 4, the size of mesh axes "dp", "tp"}}
    %x: tensor<12xf32> {dtc.sharding = #dtc.sharding<[["dp", "tp"]:6]>}) -> tensor<12xf32> {
  return %x : tensor<12xf32>
}

// -----

// expected-error @+1 {{dtc-propagate-sharding handles static tensors only, got 'index'}}
func.func @not_a_tensor(%x: index) {
  return
}
