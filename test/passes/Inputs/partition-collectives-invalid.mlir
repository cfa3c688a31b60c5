// Verifier errors of the collective ops, run by ../partition-collectives.mlir.

func.func @no_mesh(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'dtc.all_reduce_start' op needs a valid `dtc.mesh` attribute on its function or module to size its group}}
  %h = dtc.all_reduce_start %x {mesh_axes = ["tp"]} : tensor<8xf32> -> !dtc.async<tensor<8xf32>>
  %y = dtc.wait %h : !dtc.async<tensor<8xf32>>
  return %y : tensor<8xf32>
}

// -----

func.func @unknown_axis(%x: tensor<8xf32>) -> tensor<8xf32> attributes {dtc.mesh = #dtc.mesh<[dp = 2, tp = 4]>} {
  // expected-error @+1 {{'dtc.all_reduce_start' op uses mesh axis "pp", which is not in the mesh (dp:2,tp:4)}}
  %h = dtc.all_reduce_start %x {mesh_axes = ["pp"]} : tensor<8xf32> -> !dtc.async<tensor<8xf32>>
  %y = dtc.wait %h : !dtc.async<tensor<8xf32>>
  return %y : tensor<8xf32>
}

// -----

func.func @bad_reduction(%x: tensor<8xf32>) -> tensor<8xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 4]>} {
  // expected-error @+1 {{'dtc.all_reduce_start' op reduction must be sum, max or min, got "prod"}}
  %h = dtc.all_reduce_start %x {mesh_axes = ["tp"], reduction = "prod"} : tensor<8xf32> -> !dtc.async<tensor<8xf32>>
  %y = dtc.wait %h : !dtc.async<tensor<8xf32>>
  return %y : tensor<8xf32>
}

// -----

// The gathered dim is the group size (4) times the local one, not 2 times.
func.func @gather_shape(%x: tensor<8x16xf32>) -> tensor<8x32xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 4]>} {
  // expected-error @+1 {{'dtc.all_gather_start' op the input must have size 8 in dim 1 (the result divided over a group of 4), got 16}}
  %h = dtc.all_gather_start %x {dim = 1 : i64, mesh_axes = ["tp"]} : tensor<8x16xf32> -> !dtc.async<tensor<8x32xf32>>
  %y = dtc.wait %h : !dtc.async<tensor<8x32xf32>>
  return %y : tensor<8x32xf32>
}

// -----

func.func @scatter_indivisible(%x: tensor<6x16xf32>) -> tensor<1x16xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 4]>} {
  // expected-error @+1 {{'dtc.reduce_scatter_start' op dim 0 of size 6 does not split over a group of 4}}
  %h = dtc.reduce_scatter_start %x {dim = 0 : i64, mesh_axes = ["tp"]} : tensor<6x16xf32> -> !dtc.async<tensor<1x16xf32>>
  %y = dtc.wait %h : !dtc.async<tensor<1x16xf32>>
  return %y : tensor<1x16xf32>
}

// -----

func.func @all_to_all_same_dim(%x: tensor<8x16xf32>) -> tensor<8x16xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 4]>} {
  // expected-error @+1 {{'dtc.all_to_all_start' op split_dim and concat_dim must differ}}
  %h = dtc.all_to_all_start %x {concat_dim = 1 : i64, mesh_axes = ["tp"], split_dim = 1 : i64} : tensor<8x16xf32> -> !dtc.async<tensor<8x16xf32>>
  %y = dtc.wait %h : !dtc.async<tensor<8x16xf32>>
  return %y : tensor<8x16xf32>
}

// -----

func.func @reduce_type(%x: tensor<8xf32>) -> tensor<4xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 4]>} {
  // expected-error @+1 {{'dtc.all_reduce_start' op handle must carry the input type 'tensor<8xf32>', got 'tensor<4xf32>'}}
  %h = dtc.all_reduce_start %x {mesh_axes = ["tp"]} : tensor<8xf32> -> !dtc.async<tensor<4xf32>>
  %y = dtc.wait %h : !dtc.async<tensor<4xf32>>
  return %y : tensor<4xf32>
}

// -----

// A started collective must be waited, exactly once.
func.func @never_waited(%x: tensor<8xf32>) -> tensor<8xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 4]>} {
  // expected-error @+1 {{'dtc.all_reduce_start' op handle must have exactly one use, a dtc.wait}}
  %h = dtc.all_reduce_start %x {mesh_axes = ["tp"]} : tensor<8xf32> -> !dtc.async<tensor<8xf32>>
  return %x : tensor<8xf32>
}

// -----

func.func @peer_off_axis(%x: tensor<8xf32>) attributes {dtc.mesh = #dtc.mesh<[pp = 2]>} {
  // expected-error @+1 {{'dtc.send_start' op peer_offset must be non-zero and within the axis of size 2, got 2}}
  %s = dtc.send_start %x {mesh_axes = ["pp"], peer_offset = 2 : i64} : tensor<8xf32> -> !dtc.async<none>
  dtc.wait %s : !dtc.async<none>
  return
}

// -----

func.func @send_two_axes(%x: tensor<8xf32>) attributes {dtc.mesh = #dtc.mesh<[pp = 2, tp = 2]>} {
  // expected-error @+1 {{'dtc.send_start' op needs exactly one mesh axis, got 2}}
  %s = dtc.send_start %x {mesh_axes = ["pp", "tp"], peer_offset = 1 : i64} : tensor<8xf32> -> !dtc.async<none>
  dtc.wait %s : !dtc.async<none>
  return
}

// -----

// expected-error @+1 {{!dtc.async holds a static tensor or none, got 'f32'}}
func.func @bad_handle(%h: !dtc.async<f32>) {
  return
}

// -----

func.func @slice_shape(%x: tensor<8x16xf32>) -> tensor<8x8xf32> attributes {dtc.mesh = #dtc.mesh<[tp = 4]>} {
  // expected-error @+1 {{'dtc.shard_slice' op the result must have size 4 in dim 1 (the input divided over a group of 4), got 8}}
  %y = dtc.shard_slice %x {dim = 1 : i64, mesh_axes = ["tp"]} : tensor<8x16xf32> -> tensor<8x8xf32>
  return %y : tensor<8x8xf32>
}
