//===- ParallelPlan.h - The one typed parallel plan -------------*- C++ -*-===//
//
// The plan the planner returns and everything after it reads: degrees, the
// mesh order, ZeRO, micro-batching, the schedule, recompute and the
// execution choices the cost model prices. Plain structs in the bottom
// library, so the cost model, the passes, the driver, the runtime and the
// inspection tools share one vocabulary (issue 62).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_SUPPORT_PARALLELPLAN_H
#define DTC_RUNTIME_SUPPORT_PARALLELPLAN_H

#include "llvm/ADT/StringRef.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace dtc {

/// What the backward keeps of the forward (Korthikanti et al., 2022;
/// docs/recompute.md): every value it reads; all but the values of cheap
/// ops computable from kept ones; only checkpoints (the norms' inputs, the
/// loss op's operands).
enum class Recompute { None, Selective, Full };
/// Pipeline schedules (docs/runtime.md, "Pipeline schedules"). ZeroBubbleH1
/// is Qi et al.'s ZB-H1 (arXiv:2401.10241): 1F1B with each backward split
/// into the input gradient (B) and the weight gradient (W), W deferred into
/// the bubble at 1F1B's peak memory.
enum class Schedule { GPipe, OneFOneB, Interleaved, ZeroBubbleH1 };
/// Mesh axes; expert parallelism subdivides the dp axis.
enum class MeshAxis { TP, CP, DP, PP };

llvm::StringRef recomputeName(Recompute recompute);
std::optional<Recompute> parseRecompute(llvm::StringRef name);
llvm::StringRef scheduleName(Schedule schedule);
std::optional<Schedule> parseSchedule(llvm::StringRef name);
/// "gpipe, 1f1b, interleaved, zb-h1": every name parseSchedule accepts.
std::string scheduleNames();
/// Whether the schedule runs each backward as two passes, the input
/// gradient (B) and the weight gradient (W): the zero-bubble schedules.
inline bool splitsBackward(Schedule schedule) {
  return schedule == Schedule::ZeroBubbleH1;
}
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

#endif // DTC_RUNTIME_SUPPORT_PARALLELPLAN_H
