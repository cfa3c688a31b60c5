//===- LossShards.cpp - Vocabulary-parallel loss operand checks -----------===//

#include "runtime/core/LossShards.h"
#include "runtime/core/CollectiveKernels.h"

#include "llvm/ADT/Twine.h"

using namespace llvm;

namespace dtc::runtime {

namespace {

Error expectLabels(const KernelCall &call, const TensorRef &labels,
                   ArrayRef<int64_t> rows, StringRef against) {
  if (labels.dtype != DType::I64 && labels.dtype != DType::I32)
    return call.error("labels must be i64 or i32, got " +
                      dtypeName(labels.dtype));
  if (ArrayRef<int64_t>(labels.shape) != rows)
    return call.error("labels " + shapeString(labels.shape) + " must be " +
                      against + " without its last dim");
  return Error::success();
}

/// Stats [rows..., 3 * shards] f32.
Error expectStats(const KernelCall &call, const TensorRef &stats,
                  ArrayRef<int64_t> rows, int64_t shards, StringRef what) {
  SmallVector<int64_t, 4> shape(rows);
  shape.push_back(3 * shards);
  if (stats.dtype != DType::F32 ||
      ArrayRef<int64_t>(stats.shape) != ArrayRef<int64_t>(shape))
    return call.error(what + " must be f32 " + shapeString(shape) +
                      " (3 per row and shard), got " + dtypeName(stats.dtype) +
                      " " + shapeString(stats.shape));
  return Error::success();
}

/// Rows and width of logits [..., v] with labels [...], and ignore_index.
Expected<LossShards> readLogits(const KernelCall &call, const TensorRef &logits,
                                const TensorRef &labels) {
  if (auto err = expectFloat(call, logits, "logits"))
    return std::move(err);
  if (logits.rank() < 1)
    return call.error("logits must have a vocabulary dim");
  ArrayRef<int64_t> rows = ArrayRef<int64_t>(logits.shape).drop_back();
  if (auto err = expectLabels(call, labels, rows,
                              "logits " + shapeString(logits.shape)))
    return std::move(err);
  LossShards s;
  s.rows = labels.numElements();
  s.vocab = logits.dim(-1);
  Expected<int64_t> ignore = call.requiredI64("ignore_index");
  if (!ignore)
    return ignore.takeError();
  s.ignoreIndex = *ignore;
  return s;
}

/// readLogits, and this rank's shard of the vocabulary.
Expected<LossShards> readShard(const KernelCall &call, const TensorRef &logits,
                               const TensorRef &labels) {
  Expected<LossShards> s = readLogits(call, logits, labels);
  if (!s)
    return s.takeError();
  Expected<GroupPlace> place = groupPlaceOf(call);
  if (!place)
    return place.takeError();
  s->shards = place->size;
  s->position = place->position;
  return s;
}

Error expectFloatScalar(const KernelCall &call, const TensorRef &t,
                        StringRef what) {
  if (!isFloat(t.dtype) || t.numElements() != 1)
    return call.error(what + " must be a float scalar, got " +
                      dtypeName(t.dtype) + " " + shapeString(t.shape));
  return Error::success();
}

} // namespace

Expected<LossShards> readCrossEntropy(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  Expected<LossShards> s = readLogits(call, call.input(0), call.input(1));
  if (!s)
    return s.takeError();
  if (auto err = expectFloatScalar(call, call.output(0), "the result"))
    return std::move(err);
  return s;
}

Expected<LossShards> readCrossEntropyGrad(const KernelCall &call) {
  if (auto err = expectArity(call, 3, 1))
    return std::move(err);
  const TensorRef &logits = call.input(0);
  Expected<LossShards> s = readLogits(call, logits, call.input(1));
  if (!s)
    return s.takeError();
  if (auto err = expectFloatScalar(call, call.input(2), "grad_loss"))
    return std::move(err);
  if (auto err = expectFloatShape(call, call.output(0), logits.shape, "result"))
    return std::move(err);
  return s;
}

Expected<LossShards> readCrossEntropyStats(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  Expected<LossShards> s = readShard(call, call.input(0), call.input(1));
  if (!s)
    return s.takeError();
  if (auto err = expectStats(call, call.output(0), call.input(1).shape, 1,
                             "the result"))
    return std::move(err);
  return s;
}

Expected<LossShards> readCrossEntropyFromStats(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &stats = call.input(0), &labels = call.input(1);
  const TensorRef &out = call.output(0);
  if (stats.rank() < 1)
    return call.error("stats must have a last dim of 3 per shard");
  int64_t last = stats.dim(-1);
  if (auto err =
          expectLabels(call, labels, ArrayRef<int64_t>(stats.shape).drop_back(),
                       "stats " + shapeString(stats.shape)))
    return std::move(err);
  if (last < 3 || last % 3)
    return call.error("stats " + shapeString(stats.shape) +
                      " must have a last dim of 3 per shard");
  if (auto err = expectStats(call, stats, labels.shape, last / 3, "stats"))
    return std::move(err);
  if (auto err = expectFloatScalar(call, out, "the result"))
    return std::move(err);
  LossShards s;
  s.rows = labels.numElements();
  s.shards = last / 3;
  Expected<int64_t> ignore = call.requiredI64("ignore_index");
  if (!ignore)
    return ignore.takeError();
  s.ignoreIndex = *ignore;
  return s;
}

Expected<LossShards> readCrossEntropyShardGrad(const KernelCall &call) {
  if (auto err = expectArity(call, 4, 1))
    return std::move(err);
  const TensorRef &logits = call.input(0), &labels = call.input(1);
  const TensorRef &gradLoss = call.input(3);
  Expected<LossShards> s = readShard(call, logits, labels);
  if (!s)
    return s.takeError();
  if (auto err =
          expectStats(call, call.input(2), labels.shape, s->shards, "stats"))
    return std::move(err);
  if (auto err = expectFloatScalar(call, gradLoss, "grad_loss"))
    return std::move(err);
  if (auto err = expectFloatShape(call, call.output(0), logits.shape, "result"))
    return std::move(err);
  return s;
}

} // namespace dtc::runtime
