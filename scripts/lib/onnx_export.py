"""What the fixture scripts keep of torch.onnx.export's (dynamo) metadata."""

# The module scope of each node: which module's parameter a node reads, how
# dtc finds a tied weight's other state_dict name.
KEPT_NODE_METADATA = ("pkg.torch.onnx.name_scopes",)
# The FX call of an embedding lookup: its padding_idx (a row with no
# gradient), which the ONNX Gather does not carry.
KEPT_FX_NODE = ("pkg.torch.onnx.fx_node", "aten.embedding.default")


def strip_node_metadata(proto):
    """Drops the nodes' metadata but their module scopes and an embedding's
    FX call: the rest is the export machine's Python stack traces. The initializers' value_info
    metadata (the graph signature's PARAMETER / BUFFER tags) and the graph's
    are kept."""
    for node in proto.graph.node:
        kept = [(p.key, p.value) for p in node.metadata_props
                if p.key in KEPT_NODE_METADATA
                or (p.key == KEPT_FX_NODE[0] and KEPT_FX_NODE[1] in p.value)]
        del node.metadata_props[:]
        for key, value in kept:
            entry = node.metadata_props.add()
            entry.key, entry.value = key, value
