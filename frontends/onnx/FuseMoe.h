//===- FuseMoe.h - Hugging Face sparse MoE blocks -> one MoE node -*- C++
//-*-===//
//
// PyTorch exports Hugging Face's sparse MoE block (Mixtral, Qwen-MoE) as a
// loop unrolled over the experts whose shapes depend on the routing: TopK,
// OneHot, then per expert NonZero -> gather the chosen rows -> the expert's
// SwiGLU -> scale by the routing weight -> ScatterElements into an
// accumulator. No static graph can hold those shapes, so the block is
// recognized on the ONNX graph, before import, and replaced by one
// com.microsoft MoE node over stacked expert weights, which the importer
// lowers like any other MoE. transformers 5's batched experts (stacked
// weights gathered by the choices, then bmm) become the same node, with
// its gate and value projections fused (activation_type "swiglu").
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_ONNX_FUSEMOE_H
#define DTC_FRONTENDS_ONNX_FUSEMOE_H

#include "onnx/onnx_pb.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace dtc::onnx::detail {

/// A weight made by stacking per-expert initializers along a new leading
/// dim: [E, out, in] (torch Linear's layout). `transposed`: the members are
/// stored [in, out] (a constant-folded export) and each is transposed.
struct StackedWeight {
  std::string name;
  std::vector<std::string> members;
  bool transposed = false;
};

/// Replaces every Hugging Face sparse MoE block (either form) of `model`'s
/// graph by a
/// com.microsoft MoE node, adds the stacked weights as (data-less)
/// initializers and removes the nodes left dead. A block that starts like
/// one (softmax router, TopK, OneHot of the choices) but does not match the
/// rest is an error naming the node and what differs.
llvm::Expected<std::vector<StackedWeight>>
fuseSparseMoeBlocks(::onnx::ModelProto &model, llvm::StringRef path);

} // namespace dtc::onnx::detail

#endif // DTC_FRONTENDS_ONNX_FUSEMOE_H
