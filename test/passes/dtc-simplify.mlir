// RUN: dtc-opt %s -dtc-simplify -split-input-file | FileCheck %s
// One round cannot confirm a fixed point after a rewrite: the pass reports
// that it gave up, with the limit as a number.
// RUN: not dtc-opt %s -dtc-simplify=max-iterations=1 -split-input-file 2>&1 | FileCheck %s --check-prefix=LIMIT
// LIMIT: error: dtc-simplify did not converge in 1 iterations

//===----------------------------------------------------------------------===//
// Identities: x + 0, x - 0, x * 1, x / 1, x ^ 1
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @add_zero
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32>)
// CHECK-NEXT: return %[[X]], %[[X]] : tensor<2x4xf32>, tensor<2x4xf32>
func.func @add_zero(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
  %zero = dtc.constant dense<0.0> : tensor<2x4xf32>
  %0 = dtc.add %x, %zero : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  // add is commutative: the constant moves to the right and folds too.
  %1 = dtc.add %zero, %x : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %0, %1 : tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// A broadcast zero that leaves the lhs type unchanged folds.
// CHECK-LABEL: func.func @add_zero_broadcast_rhs
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32>)
// CHECK-NEXT: return %[[X]] : tensor<2x4xf32>
func.func @add_zero_broadcast_rhs(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %zero = dtc.constant dense<0.0> : tensor<4xf32>
  %0 = dtc.add %x, %zero : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// x + 0 must not fold when the zero broadcasts x to a larger type.
// CHECK-LABEL: func.func @add_zero_broadcast_lhs
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[Y:.*]]: tensor<1x4xf32>)
// CHECK-DAG: %[[ZERO:.*]] = dtc.constant dense<0.000000e+00> : tensor<2x4xf32>
// CHECK-DAG: %[[A:.*]] = dtc.add %[[X]], %[[ZERO]] : (tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// The commutative zero + x is reordered to x + zero, and still kept.
// CHECK-DAG: %[[B:.*]] = dtc.add %[[X]], %[[ZERO]] : (tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK-DAG: %[[C:.*]] = dtc.add %[[Y]], %[[ZERO]] : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: return %[[A]], %[[B]], %[[C]]
func.func @add_zero_broadcast_lhs(%x: tensor<4xf32>, %y: tensor<1x4xf32>)
    -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {
  %zero = dtc.constant dense<0.0> : tensor<2x4xf32>
  %0 = dtc.add %x, %zero : (tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %1 = dtc.add %zero, %x : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %2 = dtc.add %y, %zero : (tensor<1x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %0, %1, %2 : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// Adding a non-zero, or a zero that is not a splat constant, is kept.
// CHECK-LABEL: func.func @add_not_zero
// CHECK-SAME: (%[[X:.*]]: tensor<2xf32>)
// CHECK-DAG: %[[ONE:.*]] = dtc.constant dense<1.000000e+00> : tensor<2xf32>
// CHECK-DAG: %[[MIXED:.*]] = dtc.constant dense<[0.000000e+00, 1.000000e+00]> : tensor<2xf32>
// CHECK-DAG: %[[A:.*]] = dtc.add %[[X]], %[[ONE]]
// CHECK-DAG: %[[B:.*]] = dtc.add %[[X]], %[[MIXED]]
// CHECK: return %[[A]], %[[B]]
func.func @add_not_zero(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
  %one = dtc.constant dense<1.0> : tensor<2xf32>
  %mixed = dtc.constant dense<[0.0, 1.0]> : tensor<2xf32>
  %0 = dtc.add %x, %one : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = dtc.add %x, %mixed : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0, %1 : tensor<2xf32>, tensor<2xf32>
}

// -----

// CHECK-LABEL: func.func @add_zero_i64
// CHECK-SAME: (%[[X:.*]]: tensor<3xi64>)
// CHECK-NEXT: return %[[X]] : tensor<3xi64>
func.func @add_zero_i64(%x: tensor<3xi64>) -> tensor<3xi64> {
  %zero = dtc.constant dense<0> : tensor<3xi64>
  %0 = dtc.add %x, %zero : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  return %0 : tensor<3xi64>
}

// -----

// CHECK-LABEL: func.func @sub_zero
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT: return %[[X]] : tensor<4xf32>
func.func @sub_zero(%x: tensor<4xf32>) -> tensor<4xf32> {
  %zero = dtc.constant dense<0.0> : tensor<4xf32>
  %0 = dtc.sub %x, %zero : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// 0 - x is -x, not x: sub is not commutative.
// CHECK-LABEL: func.func @zero_sub
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK: %[[ZERO:.*]] = dtc.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK: %[[R:.*]] = dtc.sub %[[ZERO]], %[[X]]
// CHECK: return %[[R]]
func.func @zero_sub(%x: tensor<4xf32>) -> tensor<4xf32> {
  %zero = dtc.constant dense<0.0> : tensor<4xf32>
  %0 = dtc.sub %zero, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @mul_one
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32>, %[[I:.*]]: tensor<3xi32>)
// CHECK-NEXT: return %[[X]], %[[X]], %[[X]], %[[I]]
func.func @mul_one(%x: tensor<2x4xf32>, %i: tensor<3xi32>)
    -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<3xi32>) {
  %one = dtc.constant dense<1.0> : tensor<2x4xf32>
  %row = dtc.constant dense<1.0> : tensor<1x4xf32>
  %ione = dtc.constant dense<1> : tensor<3xi32>
  %0 = dtc.mul %x, %one : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %1 = dtc.mul %one, %x : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = dtc.mul %x, %row : (tensor<2x4xf32>, tensor<1x4xf32>) -> tensor<2x4xf32>
  %3 = dtc.mul %i, %ione : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  return %0, %1, %2, %3 : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<3xi32>
}

// -----

// x * 0 is not folded to 0 (NaN * 0 is NaN), and x * 1 that broadcasts x
// is kept.
// CHECK-LABEL: func.func @mul_not_folded
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-DAG: %[[ZERO:.*]] = dtc.constant dense<0.000000e+00> : tensor<4xf32>
// CHECK-DAG: %[[ONE:.*]] = dtc.constant dense<1.000000e+00> : tensor<3x4xf32>
// CHECK-DAG: %[[A:.*]] = dtc.mul %[[X]], %[[ZERO]] : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-DAG: %[[B:.*]] = dtc.mul %[[X]], %[[ONE]] : (tensor<4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
// CHECK: return %[[A]], %[[B]]
func.func @mul_not_folded(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<3x4xf32>) {
  %zero = dtc.constant dense<0.0> : tensor<4xf32>
  %one = dtc.constant dense<1.0> : tensor<3x4xf32>
  %0 = dtc.mul %x, %zero : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = dtc.mul %x, %one : (tensor<4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %0, %1 : tensor<4xf32>, tensor<3x4xf32>
}

// -----

// CHECK-LABEL: func.func @div_one
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>, %[[I:.*]]: tensor<4xi64>)
// CHECK-NEXT: return %[[X]], %[[I]] : tensor<4xf32>, tensor<4xi64>
func.func @div_one(%x: tensor<4xf32>, %i: tensor<4xi64>) -> (tensor<4xf32>, tensor<4xi64>) {
  %one = dtc.constant dense<1.0> : tensor<4xf32>
  %ione = dtc.constant dense<1> : tensor<4xi64>
  %0 = dtc.div %x, %one : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = dtc.div %i, %ione : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return %0, %1 : tensor<4xf32>, tensor<4xi64>
}

// -----

// 1 / x is a reciprocal, not x.
// CHECK-LABEL: func.func @one_div
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK: %[[ONE:.*]] = dtc.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[R:.*]] = dtc.div %[[ONE]], %[[X]]
// CHECK: return %[[R]]
func.func @one_div(%x: tensor<4xf32>) -> tensor<4xf32> {
  %one = dtc.constant dense<1.0> : tensor<4xf32>
  %0 = dtc.div %one, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @pow_one
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-DAG: %[[TWO:.*]] = dtc.constant dense<2.000000e+00> : tensor<4xf32>
// CHECK-DAG: %[[P:.*]] = dtc.pow %[[X]], %[[TWO]]
// CHECK: return %[[X]], %[[P]]
func.func @pow_one(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %one = dtc.constant dense<1.0> : tensor<4xf32>
  %two = dtc.constant dense<2.0> : tensor<4xf32>
  %0 = dtc.pow %x, %one : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = dtc.pow %x, %two : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// max and min have no identity fold: max(x, 0) is relu.
// CHECK-LABEL: func.func @max_min_not_identity
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-DAG: dtc.max %[[X]], %{{.*}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
// CHECK-DAG: dtc.min %[[X]], %{{.*}} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
func.func @max_min_not_identity(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %zero = dtc.constant dense<0.0> : tensor<4xf32>
  %0 = dtc.max %x, %zero : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = dtc.min %x, %zero : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

//===----------------------------------------------------------------------===//
// Constant folding
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @fold_f32
// CHECK-DAG: %[[ADD:.*]] = dtc.constant dense<[4.000000e+00, 6.500000e+00, 0.000000e+00]> : tensor<3xf32>
// CHECK-DAG: %[[SUB:.*]] = dtc.constant dense<[-2.000000e+00, -2.500000e+00, -6.000000e+00]> : tensor<3xf32>
// CHECK-DAG: %[[MUL:.*]] = dtc.constant dense<[3.000000e+00, 9.000000e+00, -9.000000e+00]> : tensor<3xf32>
// CHECK-DAG: %[[DIV:.*]] = dtc.constant dense<[2.500000e-01, 2.500000e-01, -1.000000e+00]> : tensor<3xf32>
// CHECK-DAG: %[[MAX:.*]] = dtc.constant dense<[3.000000e+00, 4.500000e+00, 3.000000e+00]> : tensor<3xf32>
// CHECK-DAG: %[[MIN:.*]] = dtc.constant dense<[1.000000e+00, 2.000000e+00, -3.000000e+00]> : tensor<3xf32>
// CHECK-NOT: dtc.add
// CHECK-NOT: dtc.sub
// CHECK-NOT: dtc.mul
// CHECK-NOT: dtc.div
// CHECK-NOT: dtc.max
// CHECK-NOT: dtc.min
// CHECK: return %[[ADD]], %[[SUB]], %[[MUL]], %[[DIV]], %[[MAX]], %[[MIN]]
func.func @fold_f32() -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>,
                          tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
  %a = dtc.constant dense<[1.0, 2.0, -3.0]> : tensor<3xf32>
  %b = dtc.constant dense<[3.0, 4.5, 3.0]> : tensor<3xf32>
  %d = dtc.constant dense<[4.0, 8.0, 3.0]> : tensor<3xf32>
  %0 = dtc.add %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %1 = dtc.sub %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %2 = dtc.mul %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %3 = dtc.div %a, %d : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %4 = dtc.max %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %5 = dtc.min %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>,
                                  tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
}

// -----

// Signed integer semantics: division truncates toward zero, max/min compare
// signed.
// CHECK-LABEL: func.func @fold_i64
// CHECK-DAG: %[[ADD:.*]] = dtc.constant dense<[-5, 3, 9223372036854775807]> : tensor<3xi64>
// CHECK-DAG: %[[SUB:.*]] = dtc.constant dense<[-9, -1, 9223372036854775805]> : tensor<3xi64>
// CHECK-DAG: %[[MUL:.*]] = dtc.constant dense<[-14, 2, 9223372036854775806]> : tensor<3xi64>
// CHECK-DAG: %[[DIV:.*]] = dtc.constant dense<[-3, 0, 9223372036854775806]> : tensor<3xi64>
// CHECK-DAG: %[[MAX:.*]] = dtc.constant dense<[2, 2, 9223372036854775806]> : tensor<3xi64>
// CHECK-DAG: %[[MIN:.*]] = dtc.constant dense<[-7, 1, 1]> : tensor<3xi64>
// CHECK-NOT: dtc.add
// CHECK-NOT: dtc.sub
// CHECK-NOT: dtc.mul
// CHECK-NOT: dtc.div
// CHECK-NOT: dtc.max
// CHECK-NOT: dtc.min
// CHECK: return %[[ADD]], %[[SUB]], %[[MUL]], %[[DIV]], %[[MAX]], %[[MIN]]
func.func @fold_i64() -> (tensor<3xi64>, tensor<3xi64>, tensor<3xi64>,
                          tensor<3xi64>, tensor<3xi64>, tensor<3xi64>) {
  %a = dtc.constant dense<[-7, 1, 9223372036854775806]> : tensor<3xi64>
  %b = dtc.constant dense<[2, 2, 1]> : tensor<3xi64>
  %0 = dtc.add %a, %b : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %1 = dtc.sub %a, %b : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %2 = dtc.mul %a, %b : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %3 = dtc.div %a, %b : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %4 = dtc.max %a, %b : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %5 = dtc.min %a, %b : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  return %0, %1, %2, %3, %4, %5 : tensor<3xi64>, tensor<3xi64>, tensor<3xi64>,
                                  tensor<3xi64>, tensor<3xi64>, tensor<3xi64>
}

// -----

// Splat operands fold to a splat; a splat and a non-splat fold elementwise.
// CHECK-LABEL: func.func @fold_splat
// CHECK-DAG: %[[S:.*]] = dtc.constant dense<3.750000e+00> : tensor<2x2xbf16>
// CHECK-DAG: %[[M:.*]] = dtc.constant dense<[2, 4, 6]> : tensor<3xi32>
// CHECK-NOT: dtc.add
// CHECK-NOT: dtc.mul
// CHECK: return %[[S]], %[[M]]
func.func @fold_splat() -> (tensor<2x2xbf16>, tensor<3xi32>) {
  %a = dtc.constant dense<1.5> : tensor<2x2xbf16>
  %b = dtc.constant dense<2.25> : tensor<2x2xbf16>
  %0 = dtc.add %a, %b : (tensor<2x2xbf16>, tensor<2x2xbf16>) -> tensor<2x2xbf16>
  %two = dtc.constant dense<2> : tensor<3xi32>
  %v = dtc.constant dense<[1, 2, 3]> : tensor<3xi32>
  %1 = dtc.mul %two, %v : (tensor<3xi32>, tensor<3xi32>) -> tensor<3xi32>
  return %0, %1 : tensor<2x2xbf16>, tensor<3xi32>
}

// -----

// Folds cascade through a chain of constant ops: (1 + 2) * 4 - 2 = 10.
// CHECK-LABEL: func.func @fold_chain
// CHECK-NEXT: %[[C:.*]] = dtc.constant dense<1.000000e+01> : tensor<4xf32>
// CHECK-NEXT: return %[[C]] : tensor<4xf32>
func.func @fold_chain() -> tensor<4xf32> {
  %one = dtc.constant dense<1.0> : tensor<4xf32>
  %two = dtc.constant dense<2.0> : tensor<4xf32>
  %four = dtc.constant dense<4.0> : tensor<4xf32>
  %0 = dtc.add %one, %two : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %1 = dtc.mul %0, %four : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = dtc.sub %1, %two : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

// max and min propagate NaN (llvm::maximum/minimum, like torch.maximum).
// CHECK-LABEL: func.func @fold_max_min_nan
// CHECK-NEXT: %[[C:.*]] = dtc.constant dense<[0x7FC00000, 2.000000e+00]> : tensor<2xf32>
// CHECK-NEXT: return %[[C]], %[[C]]
func.func @fold_max_min_nan() -> (tensor<2xf32>, tensor<2xf32>) {
  %a = dtc.constant dense<[0x7FC00000, 2.0]> : tensor<2xf32>
  %b = dtc.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %0 = dtc.max %a, %b : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  %1 = dtc.min %b, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0, %1 : tensor<2xf32>, tensor<2xf32>
}

// -----

// Constants that broadcast are not folded: only same-typed operands are.
// CHECK-LABEL: func.func @no_fold_broadcast
// CHECK-DAG: %[[A:.*]] = dtc.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK-DAG: %[[B:.*]] = dtc.constant dense<2.000000e+00> : tensor<2x4xf32>
// CHECK: %[[R:.*]] = dtc.add %[[A]], %[[B]] : (tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
// CHECK: return %[[R]]
func.func @no_fold_broadcast() -> tensor<2x4xf32> {
  %a = dtc.constant dense<1.0> : tensor<4xf32>
  %b = dtc.constant dense<2.0> : tensor<2x4xf32>
  %0 = dtc.add %a, %b : (tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// Integer division by zero is left for the runtime to report, whether the
// divisor is a zero splat or has a single zero element.
// CHECK-LABEL: func.func @no_fold_div_by_zero
// CHECK-DAG: %[[A:.*]] = dtc.constant dense<[6, 7]> : tensor<2xi64>
// CHECK-DAG: %[[Z:.*]] = dtc.constant dense<0> : tensor<2xi64>
// CHECK-DAG: %[[B:.*]] = dtc.constant dense<[2, 0]> : tensor<2xi64>
// CHECK-DAG: %[[R0:.*]] = dtc.div %[[A]], %[[Z]]
// CHECK-DAG: %[[R1:.*]] = dtc.div %[[A]], %[[B]]
// CHECK: return %[[R0]], %[[R1]]
func.func @no_fold_div_by_zero() -> (tensor<2xi64>, tensor<2xi64>) {
  %a = dtc.constant dense<[6, 7]> : tensor<2xi64>
  %zero = dtc.constant dense<0> : tensor<2xi64>
  %b = dtc.constant dense<[2, 0]> : tensor<2xi64>
  %0 = dtc.div %a, %zero : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  %1 = dtc.div %a, %b : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  return %0, %1 : tensor<2xi64>, tensor<2xi64>
}

// -----

// Ops without a folder are not constant-folded.
// CHECK-LABEL: func.func @no_fold_unary
// CHECK: %[[C:.*]] = dtc.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[R:.*]] = dtc.exp %[[C]] : tensor<4xf32>
// CHECK: return %[[R]]
func.func @no_fold_unary() -> tensor<4xf32> {
  %c = dtc.constant dense<1.0> : tensor<4xf32>
  %0 = dtc.exp %c : tensor<4xf32>
  return %0 : tensor<4xf32>
}

//===----------------------------------------------------------------------===//
// Transposes
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @transpose_identity
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]] : tensor<2x3xf32>
func.func @transpose_identity(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = dtc.transpose %x {permutation = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// [1, 0, 2] then [0, 2, 1]: output dim i reads input dim
// inner[outer[i]] = [1, 2, 0] (2x3x4 -> 3x2x4 -> 3x4x2).
// CHECK-LABEL: func.func @transpose_merge
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[T:.*]] = dtc.transpose %[[X]] {permutation = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_merge(%x: tensor<2x3x4xf32>) -> tensor<3x4x2xf32> {
  %0 = dtc.transpose %x {permutation = array<i64: 1, 0, 2>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  %1 = dtc.transpose %0 {permutation = array<i64: 0, 2, 1>} : (tensor<3x2x4xf32>) -> tensor<3x4x2xf32>
  return %1 : tensor<3x4x2xf32>
}

// -----

// Three rotations of a rank-4 value: [1, 2, 3, 0] three times is [3, 0, 1, 2].
// CHECK-LABEL: func.func @transpose_merge_chain
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4x5xf32>)
// CHECK-NEXT: %[[T:.*]] = dtc.transpose %[[X]] {permutation = array<i64: 3, 0, 1, 2>} : (tensor<2x3x4x5xf32>) -> tensor<5x2x3x4xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_merge_chain(%x: tensor<2x3x4x5xf32>) -> tensor<5x2x3x4xf32> {
  %0 = dtc.transpose %x {permutation = array<i64: 1, 2, 3, 0>} : (tensor<2x3x4x5xf32>) -> tensor<3x4x5x2xf32>
  %1 = dtc.transpose %0 {permutation = array<i64: 1, 2, 3, 0>} : (tensor<3x4x5x2xf32>) -> tensor<4x5x2x3xf32>
  %2 = dtc.transpose %1 {permutation = array<i64: 1, 2, 3, 0>} : (tensor<4x5x2x3xf32>) -> tensor<5x2x3x4xf32>
  return %2 : tensor<5x2x3x4xf32>
}

// -----

// A transpose and its inverse cancel out.
// CHECK-LABEL: func.func @transpose_inverse
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: return %[[X]] : tensor<2x3x4xf32>
func.func @transpose_inverse(%x: tensor<2x3x4xf32>) -> tensor<2x3x4xf32> {
  %0 = dtc.transpose %x {permutation = array<i64: 1, 2, 0>} : (tensor<2x3x4xf32>) -> tensor<3x4x2xf32>
  %1 = dtc.transpose %0 {permutation = array<i64: 2, 0, 1>} : (tensor<3x4x2xf32>) -> tensor<2x3x4xf32>
  return %1 : tensor<2x3x4xf32>
}

// -----

// The inner transpose stays when it has another use.
// CHECK-LABEL: func.func @transpose_merge_shared
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-DAG: %[[A:.*]] = dtc.transpose %[[X]] {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
// CHECK-DAG: %[[B:.*]] = dtc.transpose %[[X]] {permutation = array<i64: 2, 1, 0>} : (tensor<2x3x4xf32>) -> tensor<4x3x2xf32>
// CHECK: return %[[A]], %[[B]]
func.func @transpose_merge_shared(%x: tensor<2x3x4xf32>) -> (tensor<4x2x3xf32>, tensor<4x3x2xf32>) {
  %0 = dtc.transpose %x {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %1 = dtc.transpose %0 {permutation = array<i64: 0, 2, 1>} : (tensor<4x2x3xf32>) -> tensor<4x3x2xf32>
  return %0, %1 : tensor<4x2x3xf32>, tensor<4x3x2xf32>
}

//===----------------------------------------------------------------------===//
// Reshapes
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @reshape_identity
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>)
// CHECK-NEXT: return %[[X]] : tensor<2x3xf32>
func.func @reshape_identity(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = dtc.reshape %x : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_merge
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[R:.*]] = dtc.reshape %[[X]] : (tensor<2x3x4xf32>) -> tensor<4x6xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_merge(%x: tensor<2x3x4xf32>) -> tensor<4x6xf32> {
  %0 = dtc.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %1 = dtc.reshape %0 : (tensor<6x4xf32>) -> tensor<24xf32>
  %2 = dtc.reshape %1 : (tensor<24xf32>) -> tensor<4x6xf32>
  return %2 : tensor<4x6xf32>
}

// -----

// Reshaping back to the original shape leaves nothing.
// CHECK-LABEL: func.func @reshape_round_trip
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xi64>)
// CHECK-NEXT: return %[[X]] : tensor<2x3xi64>
func.func @reshape_round_trip(%x: tensor<2x3xi64>) -> tensor<2x3xi64> {
  %0 = dtc.reshape %x : (tensor<2x3xi64>) -> tensor<6xi64>
  %1 = dtc.reshape %0 : (tensor<6xi64>) -> tensor<2x3xi64>
  return %1 : tensor<2x3xi64>
}

// -----

// The inner reshape stays when it has another use.
// CHECK-LABEL: func.func @reshape_merge_shared
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>)
// CHECK-DAG: %[[A:.*]] = dtc.reshape %[[X]] : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK-DAG: %[[B:.*]] = dtc.reshape %[[X]] : (tensor<2x3x4xf32>) -> tensor<24xf32>
// CHECK: return %[[A]], %[[B]]
func.func @reshape_merge_shared(%x: tensor<2x3x4xf32>) -> (tensor<6x4xf32>, tensor<24xf32>) {
  %0 = dtc.reshape %x : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
  %1 = dtc.reshape %0 : (tensor<6x4xf32>) -> tensor<24xf32>
  return %0, %1 : tensor<6x4xf32>, tensor<24xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_constant
// CHECK-DAG: %[[V:.*]] = dtc.constant dense<[1, 2, 3, 4, 5, 6]> : tensor<6xi64>
// CHECK-DAG: %[[S:.*]] = dtc.constant dense<5.000000e-01> : tensor<2x1x2xf32>
// CHECK-NOT: dtc.reshape
// CHECK: return %[[V]], %[[S]]
func.func @reshape_constant() -> (tensor<6xi64>, tensor<2x1x2xf32>) {
  %a = dtc.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
  %0 = dtc.reshape %a : (tensor<2x3xi64>) -> tensor<6xi64>
  %b = dtc.constant dense<0.5> : tensor<4xf32>
  %1 = dtc.reshape %b : (tensor<4xf32>) -> tensor<2x1x2xf32>
  return %0, %1 : tensor<6xi64>, tensor<2x1x2xf32>
}

// -----

// A reshape of a transposed constant: the transpose is not folded, so
// neither is the reshape.
// CHECK-LABEL: func.func @reshape_of_transpose
// CHECK: dtc.transpose
// CHECK: dtc.reshape
func.func @reshape_of_transpose() -> tensor<6xi64> {
  %a = dtc.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
  %0 = dtc.transpose %a {permutation = array<i64: 1, 0>} : (tensor<2x3xi64>) -> tensor<3x2xi64>
  %1 = dtc.reshape %0 : (tensor<3x2xi64>) -> tensor<6xi64>
  return %1 : tensor<6xi64>
}

//===----------------------------------------------------------------------===//
// Slices, casts, concats
//===----------------------------------------------------------------------===//

// -----

// CHECK-LABEL: func.func @slice_identity
// CHECK-SAME: (%[[X:.*]]: tensor<4x10xf32>)
// CHECK-NEXT: return %[[X]] : tensor<4x10xf32>
func.func @slice_identity(%x: tensor<4x10xf32>) -> tensor<4x10xf32> {
  %0 = dtc.slice %x {starts = array<i64: 0, 0>, limits = array<i64: 4, 10>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<4x10xf32>
  return %0 : tensor<4x10xf32>
}

// -----

// CHECK-LABEL: func.func @slice_not_identity
// CHECK-SAME: (%[[X:.*]]: tensor<4x10xf32>)
// CHECK-DAG: %[[A:.*]] = dtc.slice %[[X]] {limits = array<i64: 4, 10>, starts = array<i64: 0, 1>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<4x9xf32>
// CHECK-DAG: %[[B:.*]] = dtc.slice %[[X]] {limits = array<i64: 4, 10>, starts = array<i64: 0, 0>, strides = array<i64: 1, 2>} : (tensor<4x10xf32>) -> tensor<4x5xf32>
// CHECK: return %[[A]], %[[B]]
func.func @slice_not_identity(%x: tensor<4x10xf32>) -> (tensor<4x9xf32>, tensor<4x5xf32>) {
  %0 = dtc.slice %x {starts = array<i64: 0, 1>, limits = array<i64: 4, 10>, strides = array<i64: 1, 1>} : (tensor<4x10xf32>) -> tensor<4x9xf32>
  %1 = dtc.slice %x {starts = array<i64: 0, 0>, limits = array<i64: 4, 10>, strides = array<i64: 1, 2>} : (tensor<4x10xf32>) -> tensor<4x5xf32>
  return %0, %1 : tensor<4x9xf32>, tensor<4x5xf32>
}

// -----

// CHECK-LABEL: func.func @cast_identity
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT: %[[C:.*]] = dtc.cast %[[X]] : tensor<4xf32> to bf16
// CHECK-NEXT: return %[[X]], %[[C]] : tensor<4xf32>, tensor<4xbf16>
func.func @cast_identity(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xbf16>) {
  %0 = dtc.cast %x : tensor<4xf32> to f32
  %1 = dtc.cast %x : tensor<4xf32> to bf16
  return %0, %1 : tensor<4xf32>, tensor<4xbf16>
}

// -----

// CHECK-LABEL: func.func @concat_single
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32>)
// CHECK-NEXT: %[[C:.*]] = dtc.concat %[[X]], %[[X]] {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// CHECK-NEXT: return %[[X]], %[[C]] : tensor<2x4xf32>, tensor<4x4xf32>
func.func @concat_single(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<4x4xf32>) {
  %0 = dtc.concat %x {axis = 1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %1 = dtc.concat %x, %x {axis = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  return %0, %1 : tensor<2x4xf32>, tensor<4x4xf32>
}

//===----------------------------------------------------------------------===//
// Dead code
//===----------------------------------------------------------------------===//

// -----

// Unused side-effect-free ops are erased, including parameters.
// CHECK-LABEL: func.func @dead_ops
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[W:.*]] = dtc.parameter "used" : tensor<8x16xf32>
// CHECK-NEXT: %[[M:.*]] = dtc.matmul %[[X]], %[[W]]
// CHECK-NEXT: return %[[M]]
func.func @dead_ops(%x: tensor<4x8xf32>) -> tensor<4x16xf32> {
  %unused = dtc.parameter "unused" : tensor<8x16xf32>
  %w = dtc.parameter "used" : tensor<8x16xf32>
  %c = dtc.constant dense<1.0> : tensor<4x8xf32>
  %0 = dtc.add %x, %c : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = dtc.matmul %0, %unused : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %2 = dtc.softmax %1 {axis = 1 : i64} : tensor<4x16xf32>
  %3 = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  return %3 : tensor<4x16xf32>
}

// -----

// Already simple IR is left alone (and the pass succeeds on it).
// CHECK-LABEL: func.func @nothing_to_do
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK-NEXT: %[[R:.*]] = dtc.neg %[[X]] : tensor<4xf32>
// CHECK-NEXT: return %[[R]]
func.func @nothing_to_do(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = dtc.neg %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}
