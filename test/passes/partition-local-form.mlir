// RUN: dtc-opt %s -split-input-file -dtc-partition="mesh=cp:2" -verify-diagnostics | FileCheck %s
// RUN: dtc-opt %s -split-input-file -dtc-partition="mesh=cp:2 context-zigzag=false" | FileCheck %s --check-prefix=PLAIN

// The local forms of ops whose attributes hold global positions or shapes
// (LocalFormOpInterface::localize), on a sequence split over the context
// axis: zigzag chunks by default, contiguous halves with
// context-zigzag=false.

// A slice of another dim keeps its bounds there; the split dim's limit
// becomes the local length.
// CHECK-LABEL: func.func @slice_of_other_dim
// CHECK: dtc.slice {{.*}}limits = array<i64: 2, 4, 16>, starts = array<i64: 0, 0, 8>{{.*}} -> tensor<2x4x8xf32>
// PLAIN-LABEL: func.func @slice_of_other_dim
// PLAIN: dtc.slice {{.*}}limits = array<i64: 2, 4, 16>, starts = array<i64: 0, 0, 8>{{.*}} -> tensor<2x4x8xf32>
func.func @slice_of_other_dim(%x: tensor<2x8x16xf32> {dtc.sharding = #dtc.sharding<[[], ["cp"], []]>}) -> tensor<2x8x8xf32> {
  %y = dtc.slice %x {limits = array<i64: 2, 8, 16>, starts = array<i64: 0, 0, 8>, strides = array<i64: 1, 1, 1>, dtc.sharding = [#dtc.sharding<[[], ["cp"], []]>]} : (tensor<2x8x16xf32>) -> tensor<2x8x8xf32>
  return %y : tensor<2x8x8xf32>
}

// -----

// The first half of the sequence: contiguous halves reshard the input into
// runs of the slice's length, and each rank's local slice is its first
// quarter. Zigzag chunks hold positions of both halves: no local form.
// PLAIN-LABEL: func.func @half_sequence_slice
// PLAIN: dtc.shard_slice {{.*}}block = 8
// PLAIN: dtc.slice {{.*}}limits = array<i64: 2, 4, 4>, starts = array<i64: 0, 0, 0>{{.*}} -> tensor<2x4x4xf32>
func.func @half_sequence_slice(%x: tensor<2x16x4xf32> {dtc.sharding = #dtc.sharding<[[], ["cp"], []]>}) -> tensor<2x8x4xf32> {
  // expected-error @+1 {{'dtc.slice' op a slice of the sequence split over "cp" (zigzag chunks) is not supported yet}}
  %y = dtc.slice %x {limits = array<i64: 2, 8, 4>, starts = array<i64: 0, 0, 0>, strides = array<i64: 1, 1, 1>, dtc.sharding = [#dtc.sharding<[[], ["cp"], []]>]} : (tensor<2x16x4xf32>) -> tensor<2x8x4xf32>
  return %y : tensor<2x8x4xf32>
}

// -----

// A gradient op's shape attribute describes its result: local after the
// split (slice_grad's starts too).
// CHECK-LABEL: func.func @slice_grad_shape
// CHECK: dtc.slice_grad {{.*}}input_shape = array<i64: 2, 4, 16>, starts = array<i64: 0, 0, 8>{{.*}} -> tensor<2x4x16xf32>
func.func @slice_grad_shape(%g: tensor<2x8x8xf32> {dtc.sharding = #dtc.sharding<[[], ["cp"], []]>}) -> tensor<2x8x16xf32> {
  %x = dtc.slice_grad %g {input_shape = array<i64: 2, 8, 16>, starts = array<i64: 0, 0, 8>, strides = array<i64: 1, 1, 1>, dtc.sharding = [#dtc.sharding<[[], ["cp"], []]>]} : (tensor<2x8x8xf32>) -> tensor<2x8x16xf32>
  return %x : tensor<2x8x16xf32>
}
