// RUN: dtc-opt %s -split-input-file | dtc-opt -split-input-file | FileCheck %s
// RUN: dtc-opt %S/Inputs/sharding-attrs-invalid.mlir -split-input-file -verify-diagnostics

// CHECK-LABEL: func.func @round_trip
// CHECK-SAME: dtc.sharding = #dtc.sharding<{{\[\[}}"dp"], [], ["tp"{{\]\]}}>
// CHECK-SAME: dtc.sharding = #dtc.sharding<{{\[\[}}], ["tp"]:64]>
// CHECK-SAME: dtc.sharding = #dtc.sharding<{{\[\[}}], [{{\]\]}}, partial = ["tp"]>
// CHECK-SAME: dtc.sharding = #dtc.sharding<{{\[\[}}"dp", "tp"{{\]\]}}>
// CHECK-SAME: dtc.sharding = #dtc.sharding<[]>
func.func @round_trip(
    %a: tensor<2x4x8xf32> {dtc.sharding = #dtc.sharding<[["dp"], [], ["tp"]]>},
    %b: tensor<4x192xf32> {dtc.sharding = #dtc.sharding<[[], ["tp"]:64]>},
    %c: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<[[], []], partial = ["tp"]>},
    %d: tensor<8xf32> {dtc.sharding = #dtc.sharding<[["dp", "tp"]]>},
    %e: tensor<f32> {dtc.sharding = #dtc.sharding<[]>}) {
  return
}

// -----

// The pass writes one sharding per result, as an array on the op.
// CHECK-LABEL: func.func @on_op
// CHECK: dtc.sharding = [#dtc.sharding<{{\[\[}}], ["tp"{{\]\]}}>]
func.func @on_op(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = dtc.neg %x {dtc.sharding = [#dtc.sharding<[[], ["tp"]]>]} : tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}
