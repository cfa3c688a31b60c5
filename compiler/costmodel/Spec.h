//===- Spec.h - What the cost model is asked about --------------*- C++ -*-===//
//
// Plain structs, no MLIR: the model (a stack of identical transformer blocks
// between an embedding and an output layer). The frontend fills
// TransformerSpec from the IR; the planner enumerates ParallelPlans
// (runtime/support/ParallelPlan.h).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_SPEC_H
#define DTC_COMPILER_COSTMODEL_SPEC_H

#include "compiler/costmodel/Cluster.h"
#include "runtime/support/ParallelPlan.h"

#include "llvm/ADT/StringRef.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace dtc {

/// Memory-bound ops (norms, adds, activations, layout copies) per token:
/// float elements, priced at the plan's element size, and other bytes
/// (indices, masks).
struct StreamPerToken {
  double floats = 0, other = 0;
  double bytes(double elementBytes) const {
    return floats * elementBytes + other;
  }
  StreamPerToken &operator+=(const StreamPerToken &o) {
    floats += o.floats;
    other += o.other;
    return *this;
  }
};

/// The kernels of a model's IR, which the program runs one each, where
/// they differ from Megatron-LM's fused ones: the streaming ops of a
/// block's attention and MLP halves (each split into what every
/// tensor-parallel rank runs whole and what it runs a 1/tp part of, between
/// the half's first and last GEMM), of the embedding and of the output
/// layer; and whether the Q, K and V projections and the gate and up
/// projections are separate GEMMs.
struct IrKernels {
  struct Half {
    StreamPerToken whole, split;
  };
  Half attention, mlp;
  StreamPerToken embedding, output;
  bool separateQkv = false, separateGateUp = false;
  /// The forward's GEMM and attention FLOPs per token, heads included
  /// (an MLM transform, a classifier on one token).
  double modelFlopsPerToken = 0;
};

struct TransformerSpec {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0;   ///< 0 = heads (multi-head attention).
  int64_t ffnHidden = 0; ///< 0 = 4 * hidden.
  int64_t vocab = 0;
  int64_t seqLen = 0;
  bool gatedMlp = false; ///< SwiGLU-style: three FFN matrices, not two.
  int64_t experts = 1;   ///< > 1: every block's MLP is a mixture of experts.
  int64_t topK = 1;
  /// Expert rows computed and exchanged per token: 0 for a ragged dispatch
  /// (Megatron's dropless grouped GEMM: top-k, the busiest expert's load
  /// scaled by `routingImbalance`), else the static buffer of dtc's own MoE
  /// ops, experts x capacity / sequence (filled or not; docs/moe.md).
  double expertRowsPerToken = 0;
  /// A ragged dispatch's busiest expert over the mean load (1: balanced).
  double routingImbalance = 1;
  /// The rows of expert work and of the dispatch all-to-all per token.
  double expertRows() const {
    return expertRowsPerToken > 0 ? expertRowsPerToken
                                  : static_cast<double>(topK);
  }
  bool tiedEmbeddings = false;
  /// fp8 primary weights (Transformer Engine's fp8 parameters, NeMo's
  /// fp8_params / fp8_param_gather): one byte per stored weight; the
  /// optimizer keeps its fp32 master copy.
  bool fp8Weights = false;
  bool causal = true;
  /// Dropout after attention probabilities and after each block's two
  /// output projections (GPT-2/3, Megatron's GPT); modern LLMs have none.
  bool dropout = false;
  DType dtype = DType::BF16;
  /// Read off the IR of a model dtc compiles (dense blocks only). Without
  /// it (a config, a published run) the streaming ops and the loss are
  /// priced as Megatron-LM's fused kernels.
  std::optional<IrKernels> irKernels;

  int64_t kvHeadCount() const { return kvHeads ? kvHeads : heads; }
  int64_t ffn() const { return ffnHidden ? ffnHidden : 4 * hidden; }
  int64_t headDim() const { return heads ? hidden / heads : 0; }
  /// Bytes per stored element (weights, activations, gradients).
  int64_t bytes() const { return storageBytes(dtype); }
  bool moe() const { return experts > 1; }
};

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_SPEC_H
