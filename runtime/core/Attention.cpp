//===- Attention.cpp - dtc.attention operand checks -----------------------===//

#include "runtime/core/Attention.h"

#include <utility>

namespace dtc::runtime {

llvm::Expected<AttentionOperands> readAttentionInputs(const KernelCall &call) {
  const TensorRef &q = call.input(0), &k = call.input(1), &v = call.input(2);
  for (auto [t, what] :
       {std::pair{&q, "query"}, std::pair{&k, "key"}, std::pair{&v, "value"}})
    if (llvm::Error err = expectFloat(call, *t, what))
      return std::move(err);
  if (q.rank() != 4 || k.rank() != 4 || v.rank() != 4)
    return call.error("query, key and value must be [batch, heads, seq, dim]");
  AttentionOperands a;
  a.batch = q.shape[0];
  a.heads = q.shape[1];
  a.queries = q.shape[2];
  a.headDim = q.shape[3];
  a.groups = k.shape[1];
  a.keys = k.shape[2];
  a.valueDim = v.shape[3];
  if (k.shape[0] != a.batch || k.shape[3] != a.headDim ||
      v.shape[0] != a.batch || v.shape[1] != a.groups || v.shape[2] != a.keys ||
      a.groups < 1 || a.heads % a.groups != 0)
    return call.error("query " + shapeString(q.shape) + ", key " +
                      shapeString(k.shape) + " and value " +
                      shapeString(v.shape) + " are inconsistent");
  llvm::Expected<double> scale = call.requiredF64("scale");
  if (!scale)
    return scale.takeError();
  a.scale = *scale;
  a.causal = call.flag("causal");
  return a;
}

llvm::Expected<AttentionOperands> readAttention(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 3, 1))
    return std::move(err);
  auto a = readAttentionInputs(call);
  if (!a)
    return a.takeError();
  if (llvm::Error err = expectFloatShape(
          call, call.output(0), {a->batch, a->heads, a->queries, a->valueDim},
          "result"))
    return std::move(err);
  return a;
}

llvm::Expected<AttentionOperands> readAttentionGrad(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 4, 3))
    return std::move(err);
  auto a = readAttentionInputs(call);
  if (!a)
    return a.takeError();
  const TensorRef &dy = call.input(3);
  if (llvm::Error err = expectFloatShape(
          call, dy, {a->batch, a->heads, a->queries, a->valueDim}, "grad"))
    return std::move(err);
  for (int i = 0; i < 3; ++i)
    if (llvm::Error err = expectFloatShape(call, call.output(i),
                                           call.input(i).shape, "gradient"))
      return std::move(err);
  return a;
}

} // namespace dtc::runtime
