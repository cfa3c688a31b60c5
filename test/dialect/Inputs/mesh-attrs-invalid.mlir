// Invalid #dtc.mesh attributes, run by ../mesh-attrs.mlir.

// expected-error @+1 {{mesh axis "dp" appears twice}}
func.func @axis_twice() attributes {dtc.mesh = #dtc.mesh<[dp = 2, dp = 4]>}

// -----

// expected-error @+1 {{mesh axis must have a non-empty name}}
func.func @empty_name() attributes {dtc.mesh = #dtc.mesh<["" = 2]>}

// -----

// expected-error @+1 {{mesh axis "tp" must have size >= 1, got 0}}
func.func @zero_size() attributes {dtc.mesh = #dtc.mesh<[tp = 0]>}

// -----

// expected-error @+1 {{mesh axis "tp" must have size >= 1, got -2}}
func.func @negative_size() attributes {dtc.mesh = #dtc.mesh<[tp = -2]>}

// -----

// expected-error @+1 {{expected '='}}
func.func @no_size() attributes {dtc.mesh = #dtc.mesh<[dp]>}

// -----

// The text form is the command line's, not the attribute's.
// expected-error @+1 {{expected '['}}
func.func @text_form() attributes {dtc.mesh = #dtc.mesh<"dp:2">}
