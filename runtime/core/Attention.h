//===- Attention.h - dtc.attention operand checks ---------------*- C++ -*-===//
//
// The shapes and attributes of dtc.attention and dtc.attention_grad, read
// and checked once for every backend (as Window.h does for convolutions):
// a kernel that gets past these reads only in bounds.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_ATTENTION_H
#define DTC_RUNTIME_CORE_ATTENTION_H

#include "runtime/core/Kernel.h"

namespace dtc::runtime {

/// query [batch, heads, queries, headDim], key [batch, groups, keys,
/// headDim], value [batch, groups, keys, valueDim], heads a multiple of
/// groups (query head i reads key/value head i / (heads / groups)).
struct AttentionOperands {
  int64_t batch = 0, heads = 0, groups = 0, queries = 0, keys = 0, headDim = 0,
          valueDim = 0;
  bool causal = false;
  double scale = 0;
};

/// Inputs 0-2 (query, key, value) and the scale and causal attributes, as
/// every attention op (the ring blocks too) reads them.
llvm::Expected<AttentionOperands> readAttentionInputs(const KernelCall &call);

/// dtc.attention: float query, key, value -> float result [batch, heads,
/// queries, valueDim].
llvm::Expected<AttentionOperands> readAttention(const KernelCall &call);

/// dtc.attention_grad: query, key, value and d result -> float d query,
/// d key, d value, each shaped as its primal.
llvm::Expected<AttentionOperands> readAttentionGrad(const KernelCall &call);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_ATTENTION_H
