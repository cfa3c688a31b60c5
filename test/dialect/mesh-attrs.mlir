// RUN: dtc-opt %s -split-input-file | dtc-opt -split-input-file | FileCheck %s
// RUN: dtc-opt %S/Inputs/mesh-attrs-invalid.mlir -split-input-file -verify-diagnostics

// Axes keep their order (outermost first); a name that is not an
// identifier is quoted; the empty mesh is one rank.
// CHECK-LABEL: module
// CHECK-SAME: mesh.empty = #dtc.mesh<[]>
// CHECK-SAME: mesh.one = #dtc.mesh<[dp = 8]>
// CHECK-SAME: mesh.quoted = #dtc.mesh<["data axis" = 2, tp = 1]>
// CHECK-SAME: mesh.three = #dtc.mesh<[pp = 2, dp = 4, tp = 2]>
module attributes {
    mesh.three = #dtc.mesh<[pp = 2, dp = 4, tp = 2]>,
    mesh.one = #dtc.mesh<[dp = 8]>,
    mesh.quoted = #dtc.mesh<["data axis" = 2, "tp" = 1]>,
    mesh.empty = #dtc.mesh<[]>} {
}

// -----

// CHECK-LABEL: func.func @on_function
// CHECK-SAME: dtc.mesh = #dtc.mesh<[dp = 2, tp = 4]>
func.func @on_function() attributes {dtc.mesh = #dtc.mesh<[dp = 2, tp = 4]>} {
  return
}
