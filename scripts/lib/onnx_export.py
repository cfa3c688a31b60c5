"""What the fixture scripts keep of torch.onnx.export's (dynamo) metadata."""

# The module scope of each node: which module's parameter a node reads, how
# dtc finds a tied weight's other state_dict name.
KEPT_NODE_METADATA = ("pkg.torch.onnx.name_scopes",)


def strip_node_metadata(proto):
    """Drops the nodes' metadata but their module scopes: the rest is the
    export machine's Python stack traces. The initializers' value_info
    metadata (the graph signature's PARAMETER / BUFFER tags) and the graph's
    are kept."""
    for node in proto.graph.node:
        kept = [(p.key, p.value) for p in node.metadata_props
                if p.key in KEPT_NODE_METADATA]
        del node.metadata_props[:]
        for key, value in kept:
            entry = node.metadata_props.add()
            entry.key, entry.value = key, value
