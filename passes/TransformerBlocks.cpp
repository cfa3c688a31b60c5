//===- TransformerBlocks.cpp - Layer boundaries of a model ----------------===//

#include "passes/TransformerBlocks.h"

#include "dialects/dtc/DtcOps.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/SetVector.h"

#include <map>

namespace d = mlir::dtc;

namespace dtc {

bool isFree(mlir::Operation *op) {
  return llvm::isa<d::ParameterOp, d::ConstantOp>(op);
}

namespace {

/// A structural hash of ops [begin, end): each op's name, attributes
/// (parameter names left out) and result types, and for each operand where
/// it comes from: an op of the span (by relative position and result
/// number), a parameter (by type), a constant (by value) or outside (by
/// type).
llvm::hash_code
signature(llvm::ArrayRef<mlir::Operation *> ops, unsigned begin, unsigned end,
          const llvm::DenseMap<mlir::Operation *, unsigned> &index) {
  llvm::hash_code h = llvm::hash_value(end - begin);
  for (unsigned i = begin; i < end; ++i) {
    mlir::Operation *op = ops[i];
    if (isFree(op))
      continue; // hashed where they are read
    h = llvm::hash_combine(h, op->getName().getStringRef());
    // Attributes but the layer number some ops carry (an MoE router's).
    for (mlir::NamedAttribute attr : op->getAttrs())
      if (attr.getName() != "layer")
        h = llvm::hash_combine(h, attr.getName().getAsOpaquePointer(),
                               attr.getValue().getAsOpaquePointer());
    for (mlir::Type t : op->getResultTypes())
      h = llvm::hash_combine(h, t.getAsOpaquePointer());
    for (mlir::Value operand : op->getOperands()) {
      mlir::Operation *def = operand.getDefiningOp();
      if (auto parameter = llvm::dyn_cast_or_null<d::ParameterOp>(def)) {
        h = llvm::hash_combine(h, 1, parameter.getType().getAsOpaquePointer());
      } else if (auto constant = llvm::dyn_cast_or_null<d::ConstantOp>(def)) {
        h = llvm::hash_combine(h, 2, constant.getValue().getAsOpaquePointer());
      } else if (def && index.count(def) && index.lookup(def) >= begin &&
                 index.lookup(def) < i) {
        h = llvm::hash_combine(
            h, 3, i - index.lookup(def),
            llvm::cast<mlir::OpResult>(operand).getResultNumber());
      } else {
        h = llvm::hash_combine(h, 4, operand.getType().getAsOpaquePointer());
      }
    }
  }
  return h;
}

} // namespace

llvm::SmallVector<SingleCrossing>
findSingleCrossings(llvm::ArrayRef<mlir::Operation *> ops) {
  const unsigned n = ops.size();
  llvm::DenseMap<mlir::Operation *, unsigned> index;
  for (auto [i, op] : llvm::enumerate(ops))
    index[op] = i;
  // Uses outside `ops` (the terminator) count as after the end.
  auto lastUse = [&](mlir::Value v) {
    unsigned last = 0;
    for (mlir::Operation *user : v.getUsers())
      last = std::max(last, index.count(user) ? index.lookup(user) : n);
    return last;
  };
  llvm::SmallVector<SingleCrossing> points;
  llvm::SetVector<mlir::Value> live;
  for (unsigned k = 0; k < n; ++k) {
    if (!isFree(ops[k]))
      for (mlir::Value r : ops[k]->getResults())
        if (lastUse(r) > k)
          live.insert(r);
    live.remove_if([&](mlir::Value v) { return lastUse(v) <= k; });
    if (live.size() == 1 && k + 1 < n) {
      auto t = llvm::dyn_cast<mlir::RankedTensorType>(live[0].getType());
      if (t && llvm::isa<mlir::FloatType>(t.getElementType()) &&
          t.getRank() >= 2)
        points.push_back({k + 1, live[0]});
    }
  }
  return points;
}

std::optional<AttentionShape> attentionShape(mlir::Operation *op) {
  auto attention = llvm::dyn_cast<d::AttentionOp>(op);
  if (!attention)
    return std::nullopt;
  auto query = attention.getQuery().getType();
  AttentionShape shape;
  shape.heads = query.getDimSize(1);
  shape.seqLen = query.getDimSize(2);
  shape.kvHeads = attention.getKey().getType().getDimSize(1);
  shape.causal = attention.getCausal();
  return shape;
}

std::vector<TransformerBlock> findTransformerBlocks(mlir::func::FuncOp func) {
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return {};
  llvm::SmallVector<mlir::Operation *> ops;
  for (mlir::Operation &op : func.getBody().front().without_terminator())
    ops.push_back(&op);
  llvm::DenseMap<mlir::Operation *, unsigned> index;
  llvm::SmallVector<unsigned> attentions;
  for (auto [i, op] : llvm::enumerate(ops)) {
    index[op] = i;
    if (attentionShape(op))
      attentions.push_back(i);
  }
  llvm::SmallVector<SingleCrossing> points = findSingleCrossings(ops);
  // Block i starts at the last point before attention i.
  llvm::SmallVector<unsigned> starts; // indices into `points`
  for (unsigned a : attentions) {
    int best = -1;
    for (auto [p, point] : llvm::enumerate(points))
      if (point.index <= a)
        best = static_cast<int>(p);
    if (best < 0 || (!starts.empty() && starts.back() == unsigned(best)))
      return {}; // two attentions in one span: not a stack of blocks
    starts.push_back(best);
  }
  if (starts.empty())
    return {};
  // The last block spans as many points as the one before it (one block
  // alone: up to the first point after its attention's sub-layer).
  unsigned span =
      starts.size() > 1 ? starts.back() - starts[starts.size() - 2] : 2;
  std::vector<TransformerBlock> blocks;
  for (auto [b, start] : llvm::enumerate(starts)) {
    unsigned endPoint = b + 1 < starts.size() ? starts[b + 1] : start + span;
    TransformerBlock block;
    block.begin = points[start].index;
    block.end = endPoint < points.size() ? points[endPoint].index : ops.size();
    blocks.push_back(block);
  }
  std::map<size_t, unsigned> firstWith; // signature -> first block
  for (auto [b, block] : llvm::enumerate(blocks)) {
    size_t hash = signature(ops, block.begin, block.end, index);
    block.sameAs = firstWith.try_emplace(hash, b).first->second;
  }
  return blocks;
}

} // namespace dtc
