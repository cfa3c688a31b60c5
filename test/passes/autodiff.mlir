// RUN: dtc-opt %s -dtc-autodiff=wrt-arguments=1 -split-input-file | FileCheck %s
// One case per gradient rule family: the backward ops each rule emits.
// Refusals are in autodiff-errors.mlir.

//===----------------------------------------------------------------------===//
// Signature: forward results, parameter gradients (first appearance order,
// repeated reads summed), argument gradients; the forward is unchanged
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @signature(
// CHECK-SAME: -> tensor<f32>
// CHECK-LABEL: func.func @signature_grad(
// CHECK-SAME: %[[X:.*]]: tensor<3xf32>, %[[IDS:.*]]: tensor<3xi64>)
// CHECK-SAME: -> (tensor<f32>, tensor<3xf32> {dtc.grad_of = "w"}, tensor<2xf32> {dtc.grad_of = "unused"}, tensor<3xf32> {dtc.grad_of_arg = 0 : i64})
// CHECK-DAG: %[[W1:.*]] = dtc.parameter "w"
// CHECK-DAG: %[[W2:.*]] = dtc.parameter "w"
// CHECK: %[[LOSS:.*]] = dtc.reduce_sum
// The seed is 1, broadcast back over the summed dims.
// CHECK: %[[ONE:.*]] = dtc.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[SEED:.*]] = dtc.reshape %[[ONE]] : (tensor<f32>) -> tensor<1xf32>
// CHECK: %[[G:.*]] = dtc.add %[[SEED]], %{{.*}} : (tensor<1xf32>, tensor<3xf32>) -> tensor<3xf32>
// mul(w2, x), the last use, first: its cotangents g * x and g * w2.
// CHECK: %[[GW2:.*]] = dtc.mul %[[G]], %[[X]]
// CHECK: %[[GX2:.*]] = dtc.mul %[[G]], %[[W2]]
// mul(x, w1).
// CHECK: %[[GX1:.*]] = dtc.mul %[[G]], %[[W1]]
// CHECK: %[[GW1:.*]] = dtc.mul %[[G]], %[[X]]
// CHECK: %[[GX:.*]] = dtc.add %[[GX2]], %[[GX1]]
// The two reads of "w" are summed; "unused" gets zeros.
// CHECK: %[[GW:.*]] = dtc.add %[[GW1]], %[[GW2]]
// CHECK: %[[ZERO:.*]] = dtc.constant dense<0.000000e+00> : tensor<2xf32>
// CHECK: return %[[LOSS]], %[[GW]], %[[ZERO]], %[[GX]]
func.func @signature(%x: tensor<3xf32>, %ids: tensor<3xi64>) -> tensor<f32> {
  %w1 = dtc.parameter "w" : tensor<3xf32>
  %unused = dtc.parameter "unused" : tensor<2xf32>
  %w2 = dtc.parameter "w" : tensor<3xf32>
  %0 = dtc.mul %x, %w1 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %1 = dtc.mul %w2, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %2 = dtc.add %0, %1 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %l = dtc.reduce_sum %2 {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A function without a 0-d float result at the loss index gets no gradient.
// CHECK-LABEL: func.func @no_loss
// CHECK-NOT: @no_loss_grad
func.func @no_loss(%x: tensor<3xf32>) -> tensor<3xf32> {
  return %x : tensor<3xf32>
}

// -----

// Ops that no differentiated input reaches are not differentiated, even
// without a rule (softmax_grad has none).
// CHECK-LABEL: func.func @skipped_grad(
// CHECK: %[[S:.*]] = dtc.softmax_grad
// CHECK-NOT: dtc.softmax_grad
// CHECK: %[[GX:.*]] = dtc.mul %{{.*}}, %[[S]]
// CHECK-NOT: dtc.softmax_grad
// CHECK: return %{{.*}}, %[[GX]]
func.func @skipped(%x: tensor<3xf32>) -> tensor<f32> {
  %c = dtc.constant dense<[0.2, 0.3, 0.5]> : tensor<3xf32>
  %s = dtc.softmax_grad %c, %c {axis = 0 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %0 = dtc.mul %s, %x : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %l = dtc.reduce_sum %0 {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

//===----------------------------------------------------------------------===//
// Unary ops: f'(x) from dtc ops, in terms of the saved input or output
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @unary_grad(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x3xf32>
// CHECK: %[[T:.*]] = dtc.tanh %[[X]]
// CHECK: %[[S:.*]] = dtc.sigmoid %[[T]]
// CHECK: %[[E:.*]] = dtc.exp %[[S]]
// CHECK: %[[L:.*]] = dtc.log %[[E]]
// CHECK: %[[SQ:.*]] = dtc.sqrt %[[L]]
// CHECK: %[[RS:.*]] = dtc.rsqrt %[[SQ]]
// CHECK: %[[RC:.*]] = dtc.reciprocal %[[RS]]
// CHECK: %[[N:.*]] = dtc.neg %[[RC]]
// CHECK: dtc.erf %[[N]]
// erf: 2/sqrt(pi) exp(-x^2)
// CHECK: %[[N2:.*]] = dtc.mul %[[N]], %[[N]]
// CHECK: %[[MN2:.*]] = dtc.neg %[[N2]]
// CHECK: %[[GAUSS:.*]] = dtc.exp %[[MN2]]
// CHECK: dtc.constant dense<1.12837923> : tensor<f32>
// CHECK: %[[GN0:.*]] = dtc.mul %{{.*}}, %[[GAUSS]]
// neg
// CHECK: %[[GRC:.*]] = dtc.neg %[[GN0]]
// reciprocal: -g y^2
// CHECK: %[[Y2:.*]] = dtc.mul %[[RC]], %[[RC]]
// CHECK: %[[GY2:.*]] = dtc.mul %[[GRC]], %[[Y2]]
// CHECK: %[[GRS:.*]] = dtc.neg %[[GY2]]
// rsqrt: -1/2 g y^3
// CHECK: %[[RS2:.*]] = dtc.mul %[[RS]], %[[RS]]
// CHECK: %[[RS3:.*]] = dtc.mul %[[RS2]], %[[RS]]
// CHECK: dtc.constant dense<-5.000000e-01>
// CHECK: %[[H:.*]] = dtc.mul %[[GRS]], %{{.*}}
// CHECK: %[[GSQ:.*]] = dtc.mul %[[H]], %[[RS3]]
// sqrt: g / 2y
// CHECK: dtc.constant dense<5.000000e-01>
// CHECK: %[[H2:.*]] = dtc.mul %[[GSQ]], %{{.*}}
// CHECK: %[[GL:.*]] = dtc.div %[[H2]], %[[SQ]]
// log: g / x
// CHECK: %[[GE:.*]] = dtc.div %[[GL]], %[[E]]
// exp: g y
// CHECK: %[[GS:.*]] = dtc.mul %[[GE]], %[[E]]
// sigmoid: g y (1 - y)
// CHECK: %[[ONE:.*]] = dtc.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[OMS:.*]] = dtc.sub %[[ONE]], %[[S]]
// CHECK: %[[DS:.*]] = dtc.mul %[[S]], %[[OMS]]
// CHECK: %[[GT:.*]] = dtc.mul %[[GS]], %[[DS]]
// tanh: g (1 - y^2)
// CHECK: %[[ONE2:.*]] = dtc.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[TT:.*]] = dtc.mul %[[T]], %[[T]]
// CHECK: %[[OMT:.*]] = dtc.sub %[[ONE2]], %[[TT]]
// CHECK: %[[GX:.*]] = dtc.mul %[[GT]], %[[OMT]]
// CHECK: return %{{.*}}, %[[GX]]
func.func @unary(%x: tensor<2x3xf32>) -> tensor<f32> {
  %0 = dtc.tanh %x : tensor<2x3xf32>
  %1 = dtc.sigmoid %0 : tensor<2x3xf32>
  %2 = dtc.exp %1 : tensor<2x3xf32>
  %3 = dtc.log %2 : tensor<2x3xf32>
  %4 = dtc.sqrt %3 : tensor<2x3xf32>
  %5 = dtc.rsqrt %4 : tensor<2x3xf32>
  %6 = dtc.reciprocal %5 : tensor<2x3xf32>
  %7 = dtc.neg %6 : tensor<2x3xf32>
  %8 = dtc.erf %7 : tensor<2x3xf32>
  %l = dtc.reduce_sum %8 {dims = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// relu/abs through compare + select, gelu/silu through their gradient ops,
// reduce_max shares the cotangent among the maxima.
// CHECK-LABEL: func.func @masks_grad(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x3xf32>
// CHECK: %[[R:.*]] = dtc.relu %[[X]]
// CHECK: %[[A:.*]] = dtc.abs %[[R]]
// CHECK: %[[GE:.*]] = dtc.gelu %[[A]] {approximate_tanh}
// CHECK: %[[SI:.*]] = dtc.silu %[[GE]]
// CHECK: %[[M:.*]] = dtc.reduce_max %[[SI]]
// CHECK: %[[MK:.*]] = dtc.reshape %[[M]] : (tensor<f32>) -> tensor<1x1xf32>
// CHECK: %[[ISMAX:.*]] = dtc.compare %[[SI]], %[[MK]] {predicate = "eq"} : (tensor<2x3xf32>, tensor<1x1xf32>) -> tensor<2x3xi1>
// CHECK: %[[ONES:.*]] = dtc.select %[[ISMAX]], %{{.*}}, %{{.*}} : (tensor<2x3xi1>, tensor<f32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK: %[[COUNT:.*]] = dtc.reduce_sum %[[ONES]] {dims = array<i64: 0, 1>, keep_dims}
// CHECK: %[[SHARE:.*]] = dtc.div %{{.*}}, %[[COUNT]]
// CHECK: %[[GSI:.*]] = dtc.select %[[ISMAX]], %[[SHARE]], %{{.*}} : (tensor<2x3xi1>, tensor<1x1xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK: %[[GGE:.*]] = dtc.silu_grad %[[GE]], %[[GSI]]
// CHECK: %[[GA:.*]] = dtc.gelu_grad %[[A]], %[[GGE]] {approximate_tanh}
// CHECK: %[[POSR:.*]] = dtc.compare %[[R]], %{{.*}} {predicate = "gt"}
// CHECK: %[[GPOS:.*]] = dtc.select %[[POSR]], %[[GA]], %{{.*}}
// CHECK: %[[NEGR:.*]] = dtc.compare %[[R]], %{{.*}} {predicate = "lt"}
// CHECK: %[[MGA:.*]] = dtc.neg %[[GA]]
// CHECK: %[[GR:.*]] = dtc.select %[[NEGR]], %[[MGA]], %[[GPOS]]
// CHECK: %[[POS:.*]] = dtc.compare %[[X]], %{{.*}} {predicate = "gt"}
// CHECK: %[[GX:.*]] = dtc.select %[[POS]], %[[GR]], %{{.*}} : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
// CHECK: return %[[M]], %[[GX]]
func.func @masks(%x: tensor<2x3xf32>) -> tensor<f32> {
  %0 = dtc.relu %x : tensor<2x3xf32>
  %1 = dtc.abs %0 : tensor<2x3xf32>
  %2 = dtc.gelu %1 {approximate_tanh} : tensor<2x3xf32>
  %3 = dtc.silu %2 : tensor<2x3xf32>
  %l = dtc.reduce_max %3 {dims = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

//===----------------------------------------------------------------------===//
// Binary ops: numpy broadcasting undone by reduce_sum + reshape
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @binary_broadcast_grad(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x3xf32>, %[[Y:[^:]*]]: tensor<3xf32>, %[[Z:[^:]*]]: tensor<2x1xf32>)
// CHECK: %[[SUM:.*]] = dtc.add %[[X]], %[[Y]]
// CHECK: %[[PROD:.*]] = dtc.mul %[[SUM]], %[[Z]]
// CHECK: %[[QUOT:.*]] = dtc.div %[[PROD]], %[[Y]]
// reduce_mean: the seed times 1/6, broadcast back.
// CHECK: dtc.constant dense<0.166666672> : tensor<f32>
// CHECK: %[[G:.*]] = dtc.add %{{.*}}, %{{.*}} : (tensor<1x1xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
// sub: -g summed over the broadcast dim of z.
// CHECK: %[[NG:.*]] = dtc.neg %[[G]]
// CHECK: %[[NGS:.*]] = dtc.reduce_sum %[[NG]] {dims = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
// CHECK: %[[GZ1:.*]] = dtc.reshape %[[NGS]] : (tensor<2xf32>) -> tensor<2x1xf32>
// div: g / r for the dividend, -(g y) / r for the divisor.
// CHECK: %[[GPROD:.*]] = dtc.div %[[G]], %[[Y]]
// CHECK: %[[GQ:.*]] = dtc.mul %[[G]], %[[QUOT]]
// CHECK: %[[GQR:.*]] = dtc.div %[[GQ]], %[[Y]]
// CHECK: %[[GY1F:.*]] = dtc.neg %[[GQR]]
// CHECK: %[[GY1:.*]] = dtc.reduce_sum %[[GY1F]] {dims = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
// mul: g * other operand.
// CHECK: %[[GSUM:.*]] = dtc.mul %[[GPROD]], %[[Z]]
// CHECK: %[[GZF:.*]] = dtc.mul %[[GPROD]], %[[SUM]]
// CHECK: %[[GZ2S:.*]] = dtc.reduce_sum %[[GZF]] {dims = array<i64: 1>}
// CHECK: %[[GZ2:.*]] = dtc.reshape %[[GZ2S]] : (tensor<2xf32>) -> tensor<2x1xf32>
// CHECK: %[[GZ:.*]] = dtc.add %[[GZ1]], %[[GZ2]]
// add: the cotangent itself, summed for the broadcast operand.
// CHECK: %[[GY2:.*]] = dtc.reduce_sum %[[GSUM]] {dims = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
// CHECK: %[[GY:.*]] = dtc.add %[[GY1]], %[[GY2]]
// CHECK: return %{{.*}}, %[[GSUM]], %[[GY]], %[[GZ]]
func.func @binary_broadcast(%x: tensor<2x3xf32>, %y: tensor<3xf32>, %z: tensor<2x1xf32>) -> tensor<f32> {
  %0 = dtc.add %x, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %1 = dtc.mul %0, %z : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  %2 = dtc.div %1, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %3 = dtc.sub %2, %z : (tensor<2x3xf32>, tensor<2x1xf32>) -> tensor<2x3xf32>
  %l = dtc.reduce_mean %3 {dims = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// pow: r l^(r-1) for the base, y log(l) for the exponent (only when the
// exponent is differentiated); max/min: compare + select, lhs on ties.
// CHECK-LABEL: func.func @pow_max_min_grad(
// CHECK-SAME: %[[X:[^:]*]]: tensor<4xf32>, %[[Y:[^:]*]]: tensor<4xf32>)
// CHECK: %[[TWO:.*]] = dtc.constant dense<2.000000e+00>
// CHECK: %[[SQ:.*]] = dtc.pow %[[X]], %[[TWO]]
// CHECK: %[[MX:.*]] = dtc.max %[[SQ]], %[[Y]]
// CHECK: %[[MN:.*]] = dtc.min %[[MX]], %[[X]]
// CHECK: %[[P:.*]] = dtc.pow %[[X]], %[[MN]]
// CHECK: %[[RM1:.*]] = dtc.sub %[[MN]], %{{.*}}
// CHECK: %[[PW:.*]] = dtc.pow %[[X]], %[[RM1]]
// CHECK: %[[GB:.*]] = dtc.mul %{{.*}}, %[[PW]]
// CHECK: dtc.mul %[[GB]], %[[MN]]
// CHECK: %[[LOG:.*]] = dtc.log %[[X]]
// CHECK: %[[GYP:.*]] = dtc.mul %{{.*}}, %[[P]]
// CHECK: %[[GEXP:.*]] = dtc.mul %[[GYP]], %[[LOG]]
// CHECK: %[[LHSWINS:.*]] = dtc.compare %[[MX]], %[[X]] {predicate = "le"}
// CHECK: %[[GMX:.*]] = dtc.select %[[LHSWINS]], %[[GEXP]]
// CHECK: %[[RHSWINS:.*]] = dtc.compare %[[MX]], %[[X]] {predicate = "gt"}
// CHECK: dtc.select %[[RHSWINS]], %[[GEXP]]
// CHECK: %[[SQWINS:.*]] = dtc.compare %[[SQ]], %[[Y]] {predicate = "ge"}
// CHECK: dtc.select %[[SQWINS]], %[[GMX]]
// CHECK: %[[YWINS:.*]] = dtc.compare %[[SQ]], %[[Y]] {predicate = "lt"}
// CHECK: %[[GY:.*]] = dtc.select %[[YWINS]], %[[GMX]]
// The constant exponent gets no cotangent: no log of the base for it.
// CHECK-NOT: dtc.log
// CHECK: return %{{.*}}, %{{.*}}, %[[GY]]
func.func @pow_max_min(%x: tensor<4xf32>, %y: tensor<4xf32>) -> tensor<f32> {
  %c = dtc.constant dense<2.0> : tensor<f32>
  %0 = dtc.pow %x, %c : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = dtc.max %0, %y : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = dtc.min %1, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %3 = dtc.pow %x, %2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %l = dtc.reduce_sum %3 {dims = array<i64: 0>} : (tensor<4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

//===----------------------------------------------------------------------===//
// Matmul: transposes through the flags; broadcast batch dims summed; a
// Linear layer's weight gradient as one GEMM over all rows
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @matmul_grad(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x3x4xf32>, %[[A:[^:]*]]: tensor<5x3xf32>, %[[B:[^:]*]]: tensor<2x5x6xf32>)
// CHECK: %[[W:.*]] = dtc.parameter "w" : tensor<8x4xf32>
// CHECK: %[[G2:.*]] = dtc.add %{{.*}}, %{{.*}} : (tensor<1x1x1xf32>, tensor<2x3x6xf32>) -> tensor<2x3x6xf32>
// CHECK: %[[G1:.*]] = dtc.add %{{.*}}, %{{.*}} : (tensor<1x1x1xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
// d a = (B G^T) summed over the batch (a is read transposed).
// CHECK: %[[GAB:.*]] = dtc.matmul %[[B]], %[[G2]] {transpose_rhs} : (tensor<2x5x6xf32>, tensor<2x3x6xf32>) -> tensor<2x5x3xf32>
// CHECK: %[[GA:.*]] = dtc.reduce_sum %[[GAB]] {dims = array<i64: 0>} : (tensor<2x5x3xf32>) -> tensor<5x3xf32>
// d b = a G (a^T^T).
// CHECK: %[[GB:.*]] = dtc.matmul %[[A]], %[[G2]] : (tensor<5x3xf32>, tensor<2x3x6xf32>) -> tensor<2x5x6xf32>
// d x = G W (W is read transposed), rows folded.
// CHECK: %[[G1F:.*]] = dtc.reshape %[[G1]] : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
// CHECK: %[[GXF:.*]] = dtc.matmul %[[G1F]], %[[W]] : (tensor<6x8xf32>, tensor<8x4xf32>) -> tensor<6x4xf32>
// CHECK: %[[GX:.*]] = dtc.reshape %[[GXF]] : (tensor<6x4xf32>) -> tensor<2x3x4xf32>
// d W = G^T x over all 6 rows.
// CHECK: %[[XF:.*]] = dtc.reshape %[[X]] : (tensor<2x3x4xf32>) -> tensor<6x4xf32>
// CHECK: %[[G1F2:.*]] = dtc.reshape %[[G1]] : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
// CHECK: %[[GW:.*]] = dtc.matmul %[[G1F2]], %[[XF]] {transpose_lhs} : (tensor<6x8xf32>, tensor<6x4xf32>) -> tensor<8x4xf32>
// CHECK: return %{{.*}}, %[[GW]], %[[GX]], %[[GA]], %[[GB]]
func.func @matmul(%x: tensor<2x3x4xf32>, %a: tensor<5x3xf32>, %b: tensor<2x5x6xf32>) -> tensor<f32> {
  %w = dtc.parameter "w" : tensor<8x4xf32>
  %0 = dtc.matmul %x, %w {transpose_rhs} : (tensor<2x3x4xf32>, tensor<8x4xf32>) -> tensor<2x3x8xf32>
  %1 = dtc.matmul %a, %b {transpose_lhs} : (tensor<5x3xf32>, tensor<2x5x6xf32>) -> tensor<2x3x6xf32>
  %2 = dtc.reduce_sum %0 {dims = array<i64: 0, 1, 2>} : (tensor<2x3x8xf32>) -> tensor<f32>
  %3 = dtc.reduce_sum %1 {dims = array<i64: 0, 1, 2>} : (tensor<2x3x6xf32>) -> tensor<f32>
  %l = dtc.add %2, %3 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

//===----------------------------------------------------------------------===//
// Softmax and normalizations: the dialect's gradient ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @norms_grad(
// CHECK-SAME: %[[X:[^:]*]]: tensor<2x4xf32>)
// CHECK-SAME: {dtc.grad_of = "ln.weight"}
// CHECK-SAME: {dtc.grad_of = "ln.bias"}
// CHECK-SAME: {dtc.grad_of = "rms.weight"}
// CHECK: %[[W:.*]] = dtc.parameter "ln.weight"
// CHECK: %[[G:.*]] = dtc.parameter "rms.weight"
// CHECK: %[[LN:.*]] = dtc.layer_norm
// CHECK: %[[SM:.*]] = dtc.softmax
// CHECK: %[[GSM:.*]] = dtc.select %{{.*}} : (tensor<2x4xi1>, tensor<1x1xf32>, tensor<f32>) -> tensor<2x4xf32>
// CHECK: %[[GRMS:.*]] = dtc.softmax_grad %[[SM]], %[[GSM]] {axis = 1 : i64}
// CHECK: %[[GLN:.*]], %[[GG:.*]] = dtc.rms_norm_grad %[[LN]], %[[G]], %[[GRMS]] {axis = 1 : i64, epsilon = 9.9999999999999995E-7 : f64}
// CHECK: %[[GX:.*]], %[[GW:.*]], %[[GB:.*]] = dtc.layer_norm_grad %[[X]], %[[W]], %[[GLN]] {axis = 1 : i64, epsilon = 1.000000e-05 : f64}
// CHECK: return %{{.*}}, %[[GW]], %[[GB]], %[[GG]], %[[GX]]
func.func @norms(%x: tensor<2x4xf32>) -> tensor<f32> {
  %w = dtc.parameter "ln.weight" : tensor<4xf32>
  %b = dtc.parameter "ln.bias" : tensor<4xf32>
  %g = dtc.parameter "rms.weight" : tensor<4xf32>
  %0 = dtc.layer_norm %x, %w, %b {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %1 = dtc.rms_norm %0, %g {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %2 = dtc.softmax %1 {axis = 1 : i64} : tensor<2x4xf32>
  %l = dtc.reduce_max %2 {dims = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

//===----------------------------------------------------------------------===//
// Data movement: the inverse movement; cast back
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @movement_grad(
// CHECK-SAME: -> (tensor<bf16>, tensor<2x6xf32> {dtc.grad_of_arg = 0 : i64}, tensor<2x2xf32> {dtc.grad_of_arg = 1 : i64})
// A bf16 loss gets a bf16 seed.
// CHECK: dtc.constant dense<1.000000e+00> : tensor<bf16>
// CHECK: %[[GB:.*]] = dtc.add %{{.*}}, %{{.*}} : (tensor<1x1xbf16>, tensor<2x4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[G:.*]] = dtc.cast %[[GB]] : tensor<2x4xbf16> to f32
// CHECK: %[[G0:.*]] = dtc.slice %[[G]] {limits = array<i64: 2, 2>, starts = array<i64: 0, 0>, strides = array<i64: 1, 1>} : (tensor<2x4xf32>) -> tensor<2x2xf32>
// CHECK: %[[G1:.*]] = dtc.slice %[[G]] {limits = array<i64: 2, 4>, starts = array<i64: 0, 2>, strides = array<i64: 1, 1>} : (tensor<2x4xf32>) -> tensor<2x2xf32>
// CHECK: %[[GT:.*]] = dtc.slice_grad %[[G0]] {input_shape = array<i64: 4, 3>, starts = array<i64: 0, 1>, strides = array<i64: 2, 1>} : (tensor<2x2xf32>) -> tensor<4x3xf32>
// CHECK: %[[GR:.*]] = dtc.transpose %[[GT]] {permutation = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
// CHECK: %[[GX:.*]] = dtc.reshape %[[GR]] : (tensor<3x4xf32>) -> tensor<2x6xf32>
// CHECK: return %{{.*}}, %[[GX]], %[[G1]]
func.func @movement(%x: tensor<2x6xf32>, %y: tensor<2x2xf32>) -> tensor<bf16> {
  %0 = dtc.reshape %x : (tensor<2x6xf32>) -> tensor<3x4xf32>
  %1 = dtc.transpose %0 {permutation = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
  %2 = dtc.slice %1 {starts = array<i64: 0, 1>, limits = array<i64: 4, 3>, strides = array<i64: 2, 1>} : (tensor<4x3xf32>) -> tensor<2x2xf32>
  %3 = dtc.concat %2, %y {axis = 1 : i64} : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x4xf32>
  %4 = dtc.cast %3 : tensor<2x4xf32> to bf16
  %l = dtc.reduce_sum %4 {dims = array<i64: 0, 1>} : (tensor<2x4xbf16>) -> tensor<bf16>
  return %l : tensor<bf16>
}

// -----

//===----------------------------------------------------------------------===//
// Embedding, attention, cross-entropy (integer ids and labels are not
// differentiated)
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @gpt_ops_grad(
// CHECK-SAME: %[[IDS:[^:]*]]: tensor<2x3xi64>, %[[LABELS:[^:]*]]: tensor<2x3xi64>)
// CHECK-SAME: -> (tensor<f32>, tensor<10x8xf32> {dtc.grad_of = "wte"})
// CHECK: %[[WTE:.*]] = dtc.parameter "wte"
// CHECK: %[[Q:.*]] = dtc.reshape
// CHECK: %[[LOGITS:.*]] = dtc.matmul
// CHECK: %[[SEED:.*]] = dtc.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[GLOGITS:.*]] = dtc.cross_entropy_grad %[[LOGITS]], %[[LABELS]], %[[SEED]] {ignore_index = 0 : i64} : (tensor<2x3x10xf32>, tensor<2x3xi64>, tensor<f32>) -> tensor<2x3x10xf32>
// CHECK: %[[GHEAD:.*]] = dtc.matmul %{{.*}}, %{{.*}} {transpose_lhs} : (tensor<6x10xf32>, tensor<6x8xf32>) -> tensor<10x8xf32>
// CHECK: %[[GA:.*]] = dtc.reshape %{{.*}} : (tensor<2x3x8xf32>) -> tensor<2x1x3x8xf32>
// CHECK: %[[GQ:.*]], %[[GK:.*]], %[[GV:.*]] = dtc.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[GA]] {causal}
// Three uses of one value: the cotangents are summed.
// CHECK: %[[S1:.*]] = dtc.add %[[GQ]], %[[GK]]
// CHECK: %[[S2:.*]] = dtc.add %[[S1]], %[[GV]]
// CHECK: %[[GE:.*]] = dtc.reshape %[[S2]]
// CHECK: %[[GEMB:.*]] = dtc.embedding_grad %[[GE]], %[[IDS]] {num_rows = 10 : i64} : (tensor<2x3x8xf32>, tensor<2x3xi64>) -> tensor<10x8xf32>
// CHECK: %[[GWTE:.*]] = dtc.add %[[GHEAD]], %[[GEMB]]
// CHECK: return %{{.*}}, %[[GWTE]]
func.func @gpt_ops(%ids: tensor<2x3xi64>, %labels: tensor<2x3xi64>) -> tensor<f32> {
  %wte = dtc.parameter "wte" : tensor<10x8xf32>
  %e = dtc.embedding %wte, %ids : (tensor<10x8xf32>, tensor<2x3xi64>) -> tensor<2x3x8xf32>
  %q = dtc.reshape %e : (tensor<2x3x8xf32>) -> tensor<2x1x3x8xf32>
  %a = dtc.attention %q, %q, %q {causal} : (tensor<2x1x3x8xf32>, tensor<2x1x3x8xf32>, tensor<2x1x3x8xf32>) -> tensor<2x1x3x8xf32>
  %h = dtc.reshape %a : (tensor<2x1x3x8xf32>) -> tensor<2x3x8xf32>
  %logits = dtc.matmul %h, %wte {transpose_rhs} : (tensor<2x3x8xf32>, tensor<10x8xf32>) -> tensor<2x3x10xf32>
  %l = dtc.cross_entropy %logits, %labels {ignore_index = 0 : i64} : (tensor<2x3x10xf32>, tensor<2x3xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// CHECK-LABEL: func.func @attention_scale_grad(
// CHECK: dtc.attention_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 2.500000e-01 : f64} : (tensor<1x4x2x8xf32>, tensor<1x2x3x8xf32>, tensor<1x2x3x4xf32>, tensor<1x4x2x4xf32>) -> (tensor<1x4x2x8xf32>, tensor<1x2x3x8xf32>, tensor<1x2x3x4xf32>)
func.func @attention_scale(%q: tensor<1x4x2x8xf32>, %k: tensor<1x2x3x8xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<f32> {
  %a = dtc.attention %q, %k, %v {scale = 0.25 : f64} : (tensor<1x4x2x8xf32>, tensor<1x2x3x8xf32>, tensor<1x2x3x4xf32>) -> tensor<1x4x2x4xf32>
  %l = dtc.reduce_sum %a {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x4x2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @conv_pool_grad(
// CHECK-SAME: %[[X:[^:]*]]: tensor<1x2x6x6xf32>)
// CHECK: %[[W:.*]] = dtc.parameter "conv.weight"
// CHECK: %[[CONV:.*]] = dtc.conv
// CHECK: %[[GAVG:.*]] = dtc.add %{{.*}}, %{{.*}} : (tensor<1x1x1x1xf32>, tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
// CHECK: %[[GMAX:.*]] = dtc.avg_pool_grad %[[GAVG]] {count_include_pad, dilations = array<i64: 1, 1>, input_shape = array<i64: 1, 4, 3, 3>, kernel_shape = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>}
// CHECK: %[[GCONV:.*]] = dtc.max_pool_grad %[[CONV]], %[[GMAX]] {dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>}
// CHECK: %[[GX:.*]] = dtc.conv_grad_input %[[GCONV]], %[[W]] {dilations = array<i64: 1, 1>, groups = 2 : i64, input_shape = array<i64: 1, 2, 6, 6>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x4x6x6xf32>, tensor<4x1x3x3xf32>) -> tensor<1x2x6x6xf32>
// CHECK: %[[GW:.*]] = dtc.conv_grad_weight %[[X]], %[[GCONV]] {dilations = array<i64: 1, 1>, groups = 2 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, weight_shape = array<i64: 4, 1, 3, 3>} : (tensor<1x2x6x6xf32>, tensor<1x4x6x6xf32>) -> tensor<4x1x3x3xf32>
// The bias: summed over batch and positions.
// CHECK: %[[GB:.*]] = dtc.reduce_sum %[[GCONV]] {dims = array<i64: 0, 2, 3>} : (tensor<1x4x6x6xf32>) -> tensor<4xf32>
// CHECK: return %{{.*}}, %[[GW]], %[[GB]], %[[GX]]
func.func @conv_pool(%x: tensor<1x2x6x6xf32>) -> tensor<f32> {
  %w = dtc.parameter "conv.weight" : tensor<4x1x3x3xf32>
  %b = dtc.parameter "conv.bias" : tensor<4xf32>
  %0 = dtc.conv %x, %w, %b {strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, groups = 2 : i64} : (tensor<1x2x6x6xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>) -> tensor<1x4x6x6xf32>
  %1 = dtc.max_pool %0 {kernel_shape = array<i64: 2, 2>, strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 0, 0, 0, 0>} : (tensor<1x4x6x6xf32>) -> tensor<1x4x3x3xf32>
  %2 = dtc.avg_pool %1 {kernel_shape = array<i64: 3, 3>, strides = array<i64: 1, 1>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, count_include_pad} : (tensor<1x4x3x3xf32>) -> tensor<1x4x3x3xf32>
  %l = dtc.reduce_sum %2 {dims = array<i64: 0, 1, 2, 3>} : (tensor<1x4x3x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

//===----------------------------------------------------------------------===//
// Select as a forward op: the cotangent goes to the chosen side
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @select_grad(
// CHECK-SAME: %[[C:[^:]*]]: tensor<2x3xi1>, %[[T:[^:]*]]: tensor<2x3xf32>, %[[F:[^:]*]]: tensor<3xf32>)
// CHECK: %[[ZERO:.*]] = dtc.constant dense<0.000000e+00> : tensor<f32>
// CHECK: %[[GT:.*]] = dtc.select %[[C]], %[[G:.*]], %[[ZERO]]
// CHECK: %[[GFF:.*]] = dtc.select %[[C]], %[[ZERO]], %[[G]]
// CHECK: %[[GF:.*]] = dtc.reduce_sum %[[GFF]] {dims = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
// CHECK: return %{{.*}}, %[[GT]], %[[GF]]
func.func @select(%c: tensor<2x3xi1>, %t: tensor<2x3xf32>, %f: tensor<3xf32>) -> tensor<f32> {
  %0 = dtc.select %c, %t, %f : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %l = dtc.reduce_sum %0 {dims = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
