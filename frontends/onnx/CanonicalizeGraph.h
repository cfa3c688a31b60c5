//===- CanonicalizeGraph.h - One spelling for equal subgraphs -*- C++ -*-===//
//
// Exporters spell one computation many ways: torch.onnx's dynamo exporter
// with optimize=False keeps every no-op torch.export traced (identity
// transposes, one-input concats, an index expanded onto its own shape,
// chunk() as a sequence, the same squeeze recorded twice), which the ONNX
// optimizer would have folded. Pattern matchers over the ONNX graph
// (FuseMoe) are written against one spelling; this rewrite brings the
// others to it first, so that a matcher keys on meaning rather than on
// which exporter options produced the file. Every rewrite keeps the graph's
// results bit for bit: it only drops or merges nodes whose value is provably
// another value already in the graph.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_ONNX_CANONICALIZEGRAPH_H
#define DTC_FRONTENDS_ONNX_CANONICALIZEGRAPH_H

#include "onnx/onnx_pb.h"

namespace dtc::onnx::detail {

/// Rewrites the main graph of `model` in place:
///   - a node whose result equals one of its inputs is dropped and its
///     readers read that input: Transpose with the identity permutation,
///     Concat / Max / Min / Sum / Mean of one input, and Expand to the
///     input's own shape (Shape of that same value, or a constant shape
///     that broadcasting leaves unchanged given the recorded shapes);
///   - SplitToSequence with a constant split whose sequence only SequenceAt
///     at constant positions reads becomes one Split (the split dim known)
///     or a Slice per read part;
///   - nodes repeating an earlier node (same op, attributes and inputs;
///     deterministic ops without subgraphs) are merged into it.
/// Nodes left unread by these rewrites are removed; graph outputs and
/// values that subgraphs read keep their producers. Returns how many nodes
/// were rewritten (0: the graph is unchanged).
int canonicalizeGraph(::onnx::ModelProto &model);

} // namespace dtc::onnx::detail

#endif // DTC_FRONTENDS_ONNX_CANONICALIZEGRAPH_H
