//===- Memory.h - Bytes per GPU ---------------------------------*- C++ -*-===//
//
// Parameters, gradients and optimizer states under ZeRO (Rajbhandari et al.:
// 2 + 2 + 12 bytes per parameter in mixed precision), and the activations a
// transformer block keeps for its backward (Korthikanti et al., MLSys'23,
// generalized to grouped-query attention, gated and expert MLPs, fused
// attention and no dropout; for their GPT it reduces to their Table 2).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_COSTMODEL_MEMORY_H
#define DTC_COMPILER_COSTMODEL_MEMORY_H

#include "compiler/costmodel/Spec.h"

namespace dtc {

/// Bytes of one block for one micro-batch on one GPU.
struct LayerActivations {
  double stored = 0; ///< Kept from forward to backward under the plan.
  /// The attention half's part of `stored` (the rest is the MLP half's):
  /// a pipeline stage may start or end between them.
  double attentionStored = 0;
  double working = 0; ///< Recomputed during its backward, then freed.
  double full = 0;    ///< Everything, as with no recompute.
};
LayerActivations layerActivationBytes(const TransformerSpec &spec,
                                      const ParallelPlan &plan);

/// Parameter elements of one block on one GPU (after TP and EP sharding).
struct LayerParams {
  double dense = 0;  ///< Replicated over dp x cp.
  double expert = 0; ///< Replicated over dp x cp / ep.
  double total() const { return dense + expert; }
};
LayerParams layerParamCount(const TransformerSpec &spec,
                            const ParallelPlan &plan);
/// The attention half's part of them (its projections and norm).
LayerParams attentionParamCount(const TransformerSpec &spec,
                                const ParallelPlan &plan);

/// Parameter elements of the model as a whole (unsharded).
double totalParamCount(const TransformerSpec &spec);

struct StateBytes {
  double params = 0;
  double grads = 0;
  double optimizer = 0;
};
/// Model states for `params` on one GPU before ZeRO sharding, of which
/// `expertParams` are reduced over the expert data-parallel group.
StateBytes modelStateBytes(const TransformerSpec &spec,
                           const ParallelPlan &plan, double params,
                           double expertParams);
/// The same for a model trained in `type` (no TransformerSpec); weights in
/// one byte with `fp8Weights`.
StateBytes modelStateBytes(DType type, const ParallelPlan &plan, double params,
                           double expertParams, bool fp8Weights = false);

/// Bytes of optimizer state per parameter (fp32 Adam moments, plus an fp32
/// master copy when compute is in 16 bits).
double optimizerBytesPerParam(DType type);

} // namespace dtc

#endif // DTC_COMPILER_COSTMODEL_MEMORY_H
