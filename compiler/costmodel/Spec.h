//===- Spec.h - What the cost model is asked about --------------*- C++ -*-===//
//
// Plain structs, no MLIR: the model (a stack of identical transformer blocks
// between an embedding and an output layer) and one candidate parallel plan.
// The frontend fills TransformerSpec from the IR; the planner enumerates
// ParallelPlans.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_SPEC_H
#define DTC_COMPILER_COSTMODEL_SPEC_H

#include "compiler/costmodel/Cluster.h"

#include "llvm/ADT/StringRef.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace dtc {

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

  int64_t kvHeadCount() const { return kvHeads ? kvHeads : heads; }
  int64_t ffn() const { return ffnHidden ? ffnHidden : 4 * hidden; }
  int64_t headDim() const { return heads ? hidden / heads : 0; }
  /// Bytes per stored element (weights, activations, gradients).
  int64_t bytes() const { return storageBytes(dtype); }
  bool moe() const { return experts > 1; }
};

enum class Recompute { None, Selective, Full };
enum class Schedule { GPipe, OneFOneB, Interleaved };
/// Mesh axes; expert parallelism subdivides the dp axis.
enum class MeshAxis { TP, CP, DP, PP };

llvm::StringRef recomputeName(Recompute recompute);
std::optional<Recompute> parseRecompute(llvm::StringRef name);
llvm::StringRef scheduleName(Schedule schedule);
std::optional<Schedule> parseSchedule(llvm::StringRef name);
llvm::StringRef meshAxisName(MeshAxis axis);
/// The four mesh axes, innermost first (ParallelPlan::meshOrder).
using MeshOrder = std::array<MeshAxis, 4>;
/// "pp,dp,cp,tp": the order as plan.json, the mesh text and --mesh-order
/// write it, outermost first.
std::string meshOrderName(const MeshOrder &order);
/// Parses meshOrderName()'s form: each of dp, tp, pp and cp once.
std::optional<MeshOrder> parseMeshOrder(llvm::StringRef outermostFirst);

/// The pieces context parallelism cuts the sequence into: two zigzag
/// halves per rank, so that causal attention is balanced over the ring
/// (docs/partition.md); the sequence length must divide by it.
inline int64_t contextPieces(int64_t cp) { return cp > 1 ? 2 * cp : 1; }

struct ParallelPlan {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1, ep = 1;
  int64_t vpp = 1; ///< Model chunks per pipeline stage (interleaved only).
  int zero = 0;    ///< 0..3: shards optimizer states, +grads, +params.
  int64_t microBatch = 1;
  int64_t globalBatch = 1;
  Recompute recompute = Recompute::None;
  bool sequenceParallel = false;
  Schedule schedule = Schedule::OneFOneB;
  /// Innermost first: the first axes fill an NVLink domain. Megatron's order.
  MeshOrder meshOrder = {MeshAxis::TP, MeshAxis::CP, MeshAxis::DP,
                         MeshAxis::PP};
  // Execution choices the compiler makes, priced rather than assumed.
  bool fusedAttention = true;    ///< FlashAttention-style kernel.
  bool overlapGradReduce = true; ///< DP reduction behind the last backward.
  /// TP reduction of a column-parallel input gradient behind its weight
  /// gradient GEMM (Megatron's async TP all-reduce).
  bool overlapTpComm = true;
  bool overlapParamGather = true; ///< ZeRO param all-gather prefetched.
  /// With overlapTpComm: row blocks each TP GEMM and its collective are
  /// split into, so that one block communicates while the next multiplies
  /// (1: whole). 0 asks the cost model for the fastest of 1, 2 and 4.
  int64_t tpCommChunks = 0;

  int64_t gpus() const { return dp * tp * pp * cp; }
  int64_t microBatches() const {
    return dp > 0 && microBatch > 0 ? globalBatch / (dp * microBatch) : 0;
  }
  int64_t degree(MeshAxis axis) const;
  /// Rank distance between neighbours of `axis` under meshOrder.
  int64_t stride(MeshAxis axis) const;
};

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_SPEC_H
