// Invalid #dtc.sharding attributes, run by ../sharding-attrs.mlir.

// expected-error @+1 {{mesh axis "tp" used more than once}}
func.func @axis_twice(%a: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<[["tp"], ["tp"]]>})

// -----

// expected-error @+1 {{mesh axis "tp" used more than once}}
func.func @split_and_partial(%a: tensor<4x8xf32> {dtc.sharding = #dtc.sharding<[["tp"], []], partial = ["tp"]>})

// -----

// expected-error @+1 {{mesh axis must be a non-empty string}}
func.func @empty_axis(%a: tensor<4xf32> {dtc.sharding = #dtc.sharding<[[""]]>})

// -----

// expected-error @+1 {{interleave block on a dim that is not split}}
func.func @block_unsplit(%a: tensor<4xf32> {dtc.sharding = #dtc.sharding<[[]:2]>})

// -----

// expected-error @+1 {{expected '['}}
func.func @no_dims(%a: tensor<4xf32> {dtc.sharding = #dtc.sharding<partial = ["tp"]>})
