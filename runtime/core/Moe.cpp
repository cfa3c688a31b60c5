//===- Moe.cpp - Mixture-of-experts operand checks ------------------------===//

#include "runtime/core/Moe.h"

#include <string>

namespace dtc::runtime {

namespace {

llvm::Expected<MoeRouting> readRouting(const KernelCall &call,
                                       const TensorRef &logits) {
  if (logits.rank() != 3)
    return call.error("router logits must be [batch, seq, experts], got " +
                      shapeString(logits.shape));
  MoeRouting r;
  r.batch = logits.shape[0];
  r.positions = logits.shape[1];
  r.experts = logits.shape[2];
  llvm::Expected<int64_t> topK = call.requiredI64("top_k");
  if (!topK)
    return topK.takeError();
  llvm::Expected<int64_t> capacity = call.requiredI64("capacity");
  if (!capacity)
    return capacity.takeError();
  r.topK = *topK;
  r.capacity = *capacity;
  r.sigmoid = call.str("score") == "sigmoid";
  r.normalize = call.flag("normalize");
  if (r.topK < 1 || r.topK > r.experts || r.capacity < 1)
    return call.error("top_k " + std::to_string(r.topK) + " or capacity " +
                      std::to_string(r.capacity) + " out of range for " +
                      std::to_string(r.experts) + " experts");
  return r;
}

/// Slots [batch, E, C] of an integer dtype; E and C must be `experts` and
/// `capacity` when those are given.
llvm::Expected<MoeSlots> readSlots(const KernelCall &call,
                                   const TensorRef &slots, int64_t batch,
                                   int64_t positions, int64_t hidden,
                                   int64_t experts = -1,
                                   int64_t capacity = -1) {
  if (slots.rank() != 3 ||
      (slots.dtype != DType::I64 && slots.dtype != DType::I32))
    return call.error("slots must be an i64 or i32 [batch, experts, "
                      "capacity] tensor");
  if (slots.shape[0] != batch)
    return call.error("slots " + shapeString(slots.shape) +
                      " do not match a batch of " + std::to_string(batch));
  if (experts >= 0)
    if (auto err =
            expectShape(call, slots, {batch, experts, capacity}, "slots"))
      return std::move(err);
  return MoeSlots{batch, positions, slots.shape[1], slots.shape[2], hidden};
}

/// moe_combine's and moe_combine_grad's experts [b, E, C, h] (input 0),
/// slots (input 1) and gates [b, s, E] (input 2), of checked ranks.
llvm::Expected<MoeSlots> readCombineSlots(const KernelCall &call) {
  const TensorRef &experts = call.input(0), &gates = call.input(2);
  llvm::Expected<MoeSlots> s =
      readSlots(call, call.input(1), experts.shape[0], gates.shape[1],
                experts.shape[3], experts.shape[1], experts.shape[2]);
  if (!s)
    return s.takeError();
  if (auto err = expectShape(call, gates, {s->batch, s->positions, s->experts},
                             "gates"))
    return std::move(err);
  return s;
}

} // namespace

llvm::Expected<MoeRouting> readMoeRoute(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 3))
    return std::move(err);
  const TensorRef &logits = call.input(0), &slots = call.output(1);
  llvm::Expected<MoeRouting> r = readRouting(call, logits);
  if (!r)
    return r.takeError();
  if (auto err = expectShape(call, slots, {r->batch, r->experts, r->capacity},
                             "slots"))
    return std::move(err);
  if (slots.dtype != DType::I64)
    return call.error("slots must be i64");
  if (auto err = expectFloatShape(call, call.output(0), logits.shape, "gates"))
    return std::move(err);
  if (auto err = expectFloatShape(call, call.output(2), {r->batch}, "aux"))
    return std::move(err);
  return r;
}

llvm::Expected<MoeRouting> readMoeRouteGrad(const KernelCall &call) {
  if (auto err = expectArity(call, 3, 1))
    return std::move(err);
  const TensorRef &logits = call.input(0);
  llvm::Expected<MoeRouting> r = readRouting(call, logits);
  if (!r)
    return r.takeError();
  if (auto err =
          expectShape(call, call.input(1), logits.shape, "gates gradient"))
    return std::move(err);
  if (auto err = expectShape(call, call.input(2), {r->batch}, "aux gradient"))
    return std::move(err);
  if (auto err = expectFloatShape(call, call.output(0), logits.shape, "result"))
    return std::move(err);
  return r;
}

llvm::Expected<MoeSlots> readMoeDispatch(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &x = call.input(0);
  if (x.rank() != 3)
    return call.error("input must be [batch, seq, hidden]");
  llvm::Expected<MoeSlots> s =
      readSlots(call, call.input(1), x.shape[0], x.shape[1], x.shape[2]);
  if (!s)
    return s.takeError();
  if (auto err = expectFloatShape(
          call, call.output(0), {s->batch, s->experts, s->capacity, s->hidden},
          "result"))
    return std::move(err);
  return s;
}

llvm::Expected<MoeSlots> readMoeDispatchGrad(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &grad = call.input(0);
  if (grad.rank() != 4)
    return call.error("gradient must be [b, E, C, h]");
  llvm::Expected<int64_t> seqLen = call.requiredI64("seq_len");
  if (!seqLen)
    return seqLen.takeError();
  llvm::Expected<MoeSlots> s =
      readSlots(call, call.input(1), grad.shape[0], *seqLen, grad.shape[3],
                grad.shape[1], grad.shape[2]);
  if (!s)
    return s.takeError();
  if (auto err = expectFloatShape(
          call, call.output(0), {s->batch, s->positions, s->hidden}, "result"))
    return std::move(err);
  return s;
}

llvm::Expected<MoeSlots> readMoeCombine(const KernelCall &call) {
  if (auto err = expectArity(call, 3, 1))
    return std::move(err);
  const TensorRef &experts = call.input(0), &gates = call.input(2);
  if (experts.rank() != 4 || gates.rank() != 3)
    return call.error("experts must be [b, E, C, h] and gates [b, s, E]");
  llvm::Expected<MoeSlots> s = readCombineSlots(call);
  if (!s)
    return s.takeError();
  if (auto err = expectFloatShape(
          call, call.output(0), {s->batch, s->positions, s->hidden}, "result"))
    return std::move(err);
  return s;
}

llvm::Expected<MoeSlots> readMoeCombineGrad(const KernelCall &call) {
  if (auto err = expectArity(call, 4, 2))
    return std::move(err);
  const TensorRef &experts = call.input(0), &gates = call.input(2),
                  &grad = call.input(3);
  if (experts.rank() != 4 || gates.rank() != 3 || grad.rank() != 3)
    return call.error("experts must be [b, E, C, h], gates [b, s, E] and the "
                      "gradient [b, s, h]");
  llvm::Expected<MoeSlots> s = readCombineSlots(call);
  if (!s)
    return s.takeError();
  if (auto err = expectShape(call, grad, {s->batch, s->positions, s->hidden},
                             "gradient"))
    return std::move(err);
  if (auto err = expectFloatShape(call, call.output(0), experts.shape,
                                  "experts gradient"))
    return std::move(err);
  if (auto err =
          expectFloatShape(call, call.output(1), gates.shape, "gates gradient"))
    return std::move(err);
  return s;
}

} // namespace dtc::runtime
