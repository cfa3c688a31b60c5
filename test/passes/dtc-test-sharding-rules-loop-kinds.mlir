// RUN: dtc-opt %s -dtc-test-sharding-rules=loop-kinds | FileCheck %s

// What a split of each loop leaves, as each op states it through
// ShardingRuleOpInterface (its Dtc_SumReductions / Dtc_SumsOverParallelLoops
// traits or its own methods): propagation and partitioning read only this.
// Mean loops (Dtc_MeanReductions or isMeanLoop): a split of them leaves a
// copy divided by its local extent, which the partitioner rescales.

// CHECK-LABEL: func.func @kinds
func.func @kinds(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %l: tensor<4x8x32xf32>, %y: tensor<4x8xi64>, %g: tensor<f32>, %v: tensor<8xf32>, %d: tensor<4x8xf32>) {
  // A contraction: its k loop leaves a partial sum.
  // CHECK: dtc.matmul {{.*}}dtc.loop_kinds = ["parallel", "parallel", "sum"]
  %mm = dtc.matmul %x, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  // CHECK: dtc.reduce_sum {{.*}}dtc.loop_kinds = ["parallel", "sum"]
  // CHECK-NOT: dtc.mean_loops
  %rs = dtc.reduce_sum %x {dims = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  // CHECK: dtc.reduce_mean {{.*}}dtc.loop_kinds = ["parallel", "sum"], dtc.mean_loops = array<i64: 1>
  %rn = dtc.reduce_mean %x {dims = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  // A max is not a sum: a split of it needs the op's own statistics.
  // CHECK: dtc.reduce_max {{.*}}dtc.loop_kinds = ["parallel", "max-like"]
  %rm = dtc.reduce_max %x {dims = array<i64: 1>} : (tensor<4x8xf32>) -> tensor<4xf32>
  // The loss averages its positions; its vocabulary is a log-sum-exp the
  // partitioner splits with the loss's statistics exchange.
  // CHECK: dtc.cross_entropy {{.*}}dtc.loop_kinds = ["sum", "sum", "vocab-parallel"], dtc.mean_loops = array<i64: 0, 1>
  %ce = dtc.cross_entropy %l, %y : (tensor<4x8x32xf32>, tensor<4x8xi64>) -> tensor<f32>
  // CHECK: dtc.cross_entropy_grad {{.*}}dtc.loop_kinds = ["parallel", "parallel", "vocab-parallel"], dtc.mean_loops = array<i64: 0, 1>
  %cg = dtc.cross_entropy_grad %l, %y, %g : (tensor<4x8x32xf32>, tensor<4x8xi64>, tensor<f32>) -> tensor<4x8x32xf32>
  // The weight gradient sums over the rows it does not index.
  // CHECK: dtc.rms_norm_grad {{.*}}dtc.sums_over_parallel_loops
  %n:2 = dtc.rms_norm_grad %x, %v, %d {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  // A lookup along an axis reads the whole data axis (its last loop), so
  // that loop is not a sum; its gradient scatters each split of the
  // indices' axis into zeros (a partial sum) and never splits the result's.
  // CHECK: dtc.gather_elements {{.*}}dtc.loop_kinds = ["parallel", "parallel", "max-like"]
  %ge = dtc.gather_elements %x, %y {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xi64>) -> tensor<4x8xf32>
  // CHECK: dtc.gather_elements_grad {{.*}}dtc.loop_kinds = ["parallel", "sum", "max-like"]
  %gg = dtc.gather_elements_grad %x, %y {axis = 1 : i64, dim_size = 16 : i64} : (tensor<4x8xf32>, tensor<4x8xi64>) -> tensor<4x16xf32>
  // A running sum needs the sums of the parts before: not a sum loop.
  // CHECK: dtc.cumsum {{.*}}dtc.loop_kinds = ["parallel", "max-like"]
  %cs = dtc.cumsum %x {axis = 1 : i64} : tensor<4x8xf32>
  // CHECK: dtc.exp {{.*}}dtc.loop_kinds = ["parallel", "parallel"]
  // CHECK-NOT: dtc.sums_over_parallel_loops
  %e = dtc.exp %x : tensor<4x8xf32>
  return
}

// Mamba's scan, loops (b, d, t, n): batch and channels split freely, the
// positions are a scan (never split), the state a sum of the readout. Its
// gradient makes the state parallel and sums c's gradient over the
// channels.
// CHECK-LABEL: func.func @scan
func.func @scan(%a: tensor<2x6x8x4xf32>, %c: tensor<2x8x4xf32>, %dy: tensor<2x6x8xf32>) {
  // CHECK: dtc.selective_scan {{.*}}dtc.loop_kinds = ["parallel", "parallel", "max-like", "sum"]
  // CHECK-NOT: dtc.sums_over_parallel_loops
  %y = dtc.selective_scan %a, %a, %c : (tensor<2x6x8x4xf32>, tensor<2x6x8x4xf32>, tensor<2x8x4xf32>) -> tensor<2x6x8xf32>
  // CHECK: dtc.selective_scan_grad {{.*}}dtc.loop_kinds = ["parallel", "parallel", "max-like", "parallel"]{{.*}}dtc.sums_over_parallel_loops
  %g:3 = dtc.selective_scan_grad %a, %a, %c, %dy : (tensor<2x6x8x4xf32>, tensor<2x6x8x4xf32>, tensor<2x8x4xf32>, tensor<2x6x8xf32>) -> (tensor<2x6x8x4xf32>, tensor<2x6x8x4xf32>, tensor<2x8x4xf32>)
  return
}
