//===- ShardingPropagation.cpp - choose a sharding for every op ----------===//
//
// dtc-propagate-sharding: a beam-pruned dynamic program over the ops of a
// function body, in order. A state is the sharding of every live value (a
// value whose last use is still ahead); each op extends every state with each
// of its loop splittings, paying for compute, memory and the resharding of
// its operands in the forward and the backward pass. States with the same
// live shardings are merged (the cheaper survives) and the cheapest `beam`
// are kept. docs/sharding.md explains the model.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcAttrs.h"
#include "dialects/dtc/DtcCollectiveOps.h"
#include "dialects/dtc/DtcOps.h"
#include "passes/AffineMatch.h"
#include "passes/Layout.h"
#include "passes/LoopLayout.h"
#include "passes/MeshOption.h"
#include "passes/OpCost.h"
#include "passes/Passes.h"
#include "passes/ShardingRules.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/Interfaces/FunctionInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Debug.h"
#include "llvm/Support/FormatVariadic.h"

#define DEBUG_TYPE "dtc-propagate-sharding"

#include <algorithm>
#include <charconv>
#include <map>
#include <memory>
#include <numeric>
#include <unordered_map>

namespace mlir::dtc {
#define GEN_PASS_DEF_DTCPROPAGATESHARDING
#include "passes/Passes.h.inc"
} // namespace mlir::dtc

using namespace mlir;
using namespace mlir::dtc;
using utils::IteratorType;

namespace {

using MeshAxis = DeviceMesh::Axis;

/// One way to run an op: the required sharding of each operand and the
/// sharding of each result, with the cost that depends on nothing else.
struct Choice {
  SmallVector<Layout> operands;
  SmallVector<Layout> results;
  /// Axes the op splits a loop over (for the backward partial sums).
  uint32_t usedAxes = 0;
  double cost = 0;
};

/// The chosen shardings, shared between states (a persistent list).
struct Trail {
  std::shared_ptr<const Trail> parent;
  Operation *op;
  SmallVector<Layout> results;
  SmallVector<Layout> operands;
};

struct State {
  double cost = 0;
  /// Shardings of the live values, by value number.
  std::vector<std::pair<unsigned, Layout>> live;
  std::shared_ptr<const Trail> trail;
};

using LiveShardings = std::vector<std::pair<unsigned, Layout>>;

/// A live sharding folded into the hash of the list before it, so that a
/// list's hash does not depend on where it was split into parts.
size_t foldLiveHash(size_t hash, const std::pair<unsigned, Layout> &entry) {
  const Layout &sh = entry.second;
  return llvm::hash_combine(
      hash, entry.first, llvm::hash_combine_range(sh.dim.begin(), sh.dim.end()),
      llvm::hash_combine_range(sh.block.begin(), sh.block.end()), sh.partial);
}

/// Whether `a`'s text key precedes `b`'s, the key being "id=dim:block,...
/// p<partial>;" per live value: what orders states of equal cost. The
/// first differing value decides (';' ends each value's text and appears
/// nowhere else in it), so only those two are spelled out, on the stack:
/// ties are common (millions of comparisons for a 70B model).
bool liveKeyLess(const LiveShardings &a, const LiveShardings &b) {
  auto text = [](const std::pair<unsigned, Layout> &entry) {
    llvm::SmallString<96> key;
    Layout::appendDecimal(key, entry.first);
    key += '=';
    entry.second.appendKey(key);
    return key;
  };
  for (size_t i = 0, e = std::min(a.size(), b.size()); i < e; ++i)
    if (a[i] != b[i])
      return text(a[i]).str() < text(b[i]).str();
  return a.size() < b.size();
}

/// The MoE ops, which read and write tokens on one side and the expert
/// buffer on the other.
bool isExpertBoundary(Operation *op) {
  return isa<MoeRouteOp, MoeDispatchOp, MoeCombineOp, MoeRouteGradOp,
             MoeDispatchGradOp, MoeCombineGradOp>(op);
}

int64_t bytesOf(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  if (!tensor || !tensor.hasStaticShape() ||
      !tensor.getElementType().isIntOrFloat())
    return 0;
  int64_t bits = tensor.getElementType().getIntOrFloatBitWidth();
  return tensor.getNumElements() * std::max<int64_t>(bits / 8, 1);
}

class Propagation {
public:
  Propagation(ArrayRef<MeshAxis> axes, int64_t beam, double flopsPerByte,
              double memoryWeight, bool sequenceParallel)
      : axes(axes), beam(beam), flopsPerByte(flopsPerByte),
        memoryWeight(memoryWeight), sequenceParallel(sequenceParallel) {}

  LogicalResult run(FunctionOpInterface func, StringRef dpAxis,
                    StringRef epAxis, StringRef cpAxis);

private:
  ArrayRef<MeshAxis> axes;
  int64_t beam;
  double flopsPerByte, memoryWeight;
  bool sequenceParallel;
  /// The data-parallel axis and the expert-parallel axis inside it: both
  /// split the batch (dp outermost), and ep splits the experts instead in
  /// the expert computations between moe_dispatch and moe_combine.
  std::optional<size_t> dp, ep;
  bool isDataAxis(size_t a) const { return a == dp || a == ep; }
  /// The context-parallel axis: splits token loops only, the sequence
  /// where there is one; attention split over it reads its keys and values
  /// split too (ring attention).
  std::optional<size_t> cp;
  /// Axes that cut tokens: they may share a dim, cut in mesh order (the
  /// flattened [batch * sequence] rows of a weight gradient under dp x cp).
  bool isTokenAxis(size_t a) const { return isDataAxis(a) || a == cp; }
  /// The pieces a split over `a` cuts a dim into: the context axis cuts
  /// zigzag halves, two per rank (docs/partition.md).
  int64_t pieces(size_t a) const {
    return a == cp ? 2 * axes[a].size : axes[a].size;
  }
  /// Per value dim: 0 model, 1 tokens (sequence), 2 batch, 3 experts.
  DenseMap<Value, SmallVector<int>> tokenDims;
  /// Positions per sequence (the ids input's last dim; 0 if unknown): the
  /// context axis cuts flattened rows only within sequences of this length.
  int64_t sequenceLength = 0;

  DenseMap<Value, unsigned> number;
  DenseMap<Value, Layout> fixed; // graph inputs
  DenseSet<Value> free;          // parameters and constants
  DenseSet<Value> shared;        // free parameters that several ops read
  DenseMap<Value, unsigned> lastUse;
  /// Interleave blocks worth trying, per value dim.
  DenseMap<Value, SmallVector<SmallVector<int64_t, 2>>> hints;
  DenseMap<Operation *, SmallVector<Choice>> choiceCache;

  size_t numAxes() const { return axes.size(); }
  double reshardCost(const Layout &from, const Layout &to, int64_t bytes) const;
  double edgeCost(Value value, const Layout &from, const Layout &to,
                  uint32_t usedAxes) const;
  double memoryCost(Value value, const Layout &sh, double copies) const;
  int64_t localBytes(Value value, const Layout &sh) const;
  void collectHints(Block &body);
  void reshapeHints(Value from, Value to);
  void collectTokenDims(Block &body);
  int tokenKind(Value value, int64_t dim) const {
    auto it = tokenDims.find(value);
    return it == tokenDims.end() ? 0 : it->second[dim];
  }
  bool isToken(Value value, int64_t dim) const {
    return tokenKind(value, dim) != 0;
  }
  void addHint(Value value, int64_t dim, int64_t block);
  const SmallVector<Choice> &ruleChoices(ShardingRuleOpInterface op);
  std::optional<Choice> ruleChoice(ShardingRuleOpInterface op,
                                   ArrayRef<std::pair<int64_t, int64_t>> loops);
  Choice reshapeChoice(ReshapeOp op, const Layout &input);
  Choice concatChoice(ConcatOp op, const Layout &first);
  Choice fallbackChoice(Operation *op);
  LogicalResult checkSharding(Value value, const Layout &sh, Location loc);
  Attribute toAttr(MLIRContext *ctx, const Layout &sh, Type type) const;
  std::optional<Layout> fromAttr(ShardingAttr attr, Location loc) const;

  // run(), one concern each: check and index the body, then a beam search
  // over the ops in order, then write the cheapest state's choices.
  LogicalResult checkStaticTensors(Block &body);
  LogicalResult seedArguments(FunctionOpInterface func, Block &body);
  LogicalResult indexValues(Block &body);
  /// A live value's sharding in `state` (for a shared parameter: once its
  /// first reader chose it), and with the fixed and free ones.
  std::optional<Layout> storedSharding(const State &state, Value v) const;
  Layout currentSharding(const State &state, Value v) const;
  /// `op`'s candidate shardings given `state` (its own rule's, cached, or
  /// one into `local`).
  ArrayRef<Choice> choicesOf(Operation &op, const State &state,
                             SmallVectorImpl<Choice> &local);
  /// The beam after `op`: every state's choices, merged and pruned.
  std::vector<State> advance(Operation &op, const std::vector<State> &states);
  void settleAgreed(std::vector<State> &states);
  void writeShardings(FunctionOpInterface func, Block &body, const State &best);

  DenseMap<Operation *, unsigned> position;
  /// Live values (by number) every state agrees on, out of the states.
  DenseMap<unsigned, Layout> settled;
};

int64_t Propagation::localBytes(Value value, const Layout &sh) const {
  int64_t bytes = bytesOf(value.getType());
  for (size_t a = 0; a < numAxes(); ++a)
    if (sh.splits(a))
      bytes /= axes[a].size;
  return bytes;
}

// Bytes each device receives to turn `from` into `to` (ring collectives).
double Propagation::reshardCost(const Layout &from, const Layout &to,
                                int64_t bytes) const {
  double local = bytes;
  for (size_t a = 0; a < numAxes(); ++a)
    if (from.splits(a))
      local /= axes[a].size;
  double cost = 0;
  for (size_t a = 0; a < numAxes(); ++a) {
    double n = axes[a].size, frac = (n - 1) / n;
    if (from.isPartial(a) && !to.isPartial(a))
      cost += (to.splits(a) && !from.splits(a)) ? frac * local // reduce-scatter
                                                : 2 * frac * local;
    if (!from.splits(a))
      continue;
    if (!to.splits(a))
      cost += (n - 1) * local; // all-gather
    else if (from.dim[a] != to.dim[a] || from.block[a] != to.block[a])
      cost += frac * local; // all-to-all
  }
  return cost;
}

// Forward: the producer's sharding to the one the consumer reads. Backward:
// the operand's gradient, partial over the axes the consumer splits that the
// operand is not split over, back to the producer's layout.
double Propagation::edgeCost(Value value, const Layout &from, const Layout &to,
                             uint32_t usedAxes) const {
  int64_t bytes = bytesOf(value.getType());
  double cost = free.contains(value) ? 0 : reshardCost(from, to, bytes);
  // Integer values and graph inputs need no gradient.
  auto tensor = dyn_cast<RankedTensorType>(value.getType());
  if (!tensor || !isa<FloatType>(tensor.getElementType()) ||
      isa<BlockArgument>(value))
    return cost;
  Layout grad = to.dimsOnly();
  for (size_t a = 0; a < numAxes(); ++a)
    if ((usedAxes & (1u << a)) && !to.splits(a) && !to.isPartial(a))
      grad.partial |= 1u << a;
  Layout target = free.contains(value) ? to.dimsOnly() : from.dimsOnly();
  return cost + reshardCost(grad, target, bytes);
}

double Propagation::memoryCost(Value value, const Layout &sh,
                               double copies) const {
  return memoryWeight * copies * localBytes(value, sh);
}

void Propagation::addHint(Value value, int64_t dim, int64_t block) {
  auto type = cast<RankedTensorType>(value.getType());
  int64_t size = type.getDimSize(dim);
  if (block <= 1 || block >= size || size % block)
    return;
  auto &perDim = hints[value];
  perDim.resize(type.getRank());
  if (!llvm::is_contained(perDim[dim], block))
    perDim[dim].push_back(block);
}

/// Row-major strides of `shape`: how far the flat index moves per step of
/// each dim.
static SmallVector<int64_t> flatStrides(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

// The run [T_i, T_i * B) of the flat index that block B of dim i of `from`
// covers, found in a dim of `to` (the other side of a reshape).
void Propagation::reshapeHints(Value from, Value to) {
  auto hint = hints.find(from);
  if (hint == hints.end())
    return;
  SmallVector<SmallVector<int64_t, 2>> fromHints = hint->second;
  auto toShape = cast<RankedTensorType>(to.getType()).getShape();
  SmallVector<int64_t> fromT =
      flatStrides(cast<RankedTensorType>(from.getType()).getShape());
  SmallVector<int64_t> toT = flatStrides(toShape);
  for (auto [i, blocks] : llvm::enumerate(fromHints))
    for (int64_t block : blocks)
      for (size_t j = 0; j < toShape.size(); ++j)
        if (fromT[i] % toT[j] == 0 && fromT[i] * block <= toT[j] * toShape[j])
          addHint(to, j, fromT[i] * block / toT[j]);
}

// Interleave blocks come from slices that cut a dim into aligned runs (the
// Q, K and V thirds of a fused projection); they flow back to the producers
// through the dims that share a loop.
void Propagation::collectHints(Block &body) {
  // Forward first: a slice's gradient writes its run of a zero tensor, so
  // the block starts at the gradient and flows on to what reads it (the sum
  // of the Q, K and V gradients, the weight gradient computed from it).
  for (Operation &op : body) {
    if (auto reshape = dyn_cast<ReshapeOp>(&op)) {
      reshapeHints(reshape.getInput(), reshape.getOutput());
      continue;
    }
    auto rule = dyn_cast<ShardingRuleOpInterface>(&op);
    if (!rule || op.getNumResults() == 0)
      continue;
    SmallVector<AffineMap> maps = rule.getIndexingMaps();
    size_t numLoops = rule.getLoopIteratorTypes().size();
    SmallVector<SmallVector<int64_t, 2>> loopHints(numLoops);
    SmallVector<int64_t> extent(numLoops, 0);
    SmallVector<Value> values(op.getOperands());
    llvm::append_range(values, op.getResults());
    for (auto [i, value] : llvm::enumerate(values)) {
      auto shape = cast<RankedTensorType>(value.getType()).getShape();
      auto it = hints.find(value);
      for (auto [d, expr] : llvm::enumerate(maps[i].getResults())) {
        int64_t loop, stride, offset;
        if (!matchStrided(expr, loop, stride, offset) || stride != 1)
          continue;
        extent[loop] =
            extent[loop] ? std::min(extent[loop], shape[d]) : shape[d];
        if (i < op.getNumOperands() && offset == 0 && it != hints.end() &&
            d < it->second.size())
          llvm::append_range(loopHints[loop], it->second[d]);
      }
    }
    for (auto [i, result] : llvm::enumerate(op.getResults())) {
      AffineMap map = maps[op.getNumOperands() + i];
      auto shape = cast<RankedTensorType>(result.getType()).getShape();
      for (auto [d, expr] : llvm::enumerate(map.getResults())) {
        int64_t loop, stride, offset;
        if (!matchStrided(expr, loop, stride, offset) || stride != 1)
          continue;
        SmallVector<int64_t, 2> blocks = loopHints[loop];
        if (extent[loop] != shape[d])
          blocks.push_back(extent[loop]); // a run of this dim
        for (int64_t block : blocks)
          if (offset % block == 0)
            addHint(result, d, block);
      }
    }
  }
  for (Operation &op : llvm::reverse(body)) {
    if (auto reshape = dyn_cast<ReshapeOp>(&op)) {
      reshapeHints(reshape.getOutput(), reshape.getInput());
      continue;
    }
    auto rule = dyn_cast<ShardingRuleOpInterface>(&op);
    if (!rule)
      continue;
    SmallVector<AffineMap> maps = rule.getIndexingMaps();
    size_t numLoops = rule.getLoopIteratorTypes().size();
    SmallVector<SmallVector<int64_t, 2>> loopHints(numLoops);
    SmallVector<int64_t> extent(numLoops, 0);
    for (auto [i, result] : llvm::enumerate(op.getResults())) {
      AffineMap map = maps[op.getNumOperands() + i];
      auto shape = cast<RankedTensorType>(result.getType()).getShape();
      for (auto [d, expr] : llvm::enumerate(map.getResults()))
        if (auto dimExpr = dyn_cast<AffineDimExpr>(expr)) {
          extent[dimExpr.getPosition()] = shape[d];
          auto it = hints.find(result);
          if (it != hints.end() && d < it->second.size())
            llvm::append_range(loopHints[dimExpr.getPosition()], it->second[d]);
        }
    }
    for (auto [i, operand] : llvm::enumerate(op.getOperands())) {
      auto shape = cast<RankedTensorType>(operand.getType()).getShape();
      for (auto [d, expr] : llvm::enumerate(maps[i].getResults())) {
        int64_t loop, stride, offset;
        if (!matchStrided(expr, loop, stride, offset) || stride != 1)
          continue;
        SmallVector<int64_t, 2> blocks = loopHints[loop];
        if (extent[loop] && extent[loop] != shape[d])
          blocks.push_back(extent[loop]); // a slice of this dim
        for (int64_t block : blocks)
          if (offset % block == 0)
            addHint(operand, d, block);
      }
    }
  }
}

// Token dims start at the graph inputs (every dim of integer ids, every dim
// but the features of float inputs) and follow the loops; a reshape maps
// them by the flat-index ranges they cover.
void Propagation::collectTokenDims(Block &body) {
  for (BlockArgument arg : body.getArguments()) {
    auto type = dyn_cast<RankedTensorType>(arg.getType());
    if (!type)
      continue;
    SmallVector<int> dims(type.getRank(), 1);
    if (isa<FloatType>(type.getElementType()) && !dims.empty())
      dims.back() = 0;
    else if (isa<IntegerType>(type.getElementType()) && dims.size() >= 2)
      sequenceLength = type.getDimSize(type.getRank() - 1);
    // A later pipeline stage reads hidden states [batch, sequence, hidden]
    // instead of the ids.
    if (isa<FloatType>(type.getElementType()) && dims.size() == 3 &&
        !sequenceLength)
      sequenceLength = type.getDimSize(1);
    if (!dims.empty())
      dims.front() = 2;
    tokenDims[arg] = dims;
  }
  for (Operation &op : body) {
    if (auto rule = dyn_cast<ShardingRuleOpInterface>(&op)) {
      SmallVector<AffineMap> maps = rule.getIndexingMaps();
      SmallVector<int> loops(rule.getLoopIteratorTypes().size(), 0);
      for (auto [i, operand] : llvm::enumerate(op.getOperands()))
        for (auto [d, expr] : llvm::enumerate(maps[i].getResults())) {
          int64_t loop, stride, offset;
          if (matchStrided(expr, loop, stride, offset))
            loops[loop] = std::max(loops[loop], tokenKind(operand, d));
        }
      for (auto [i, result] : llvm::enumerate(op.getResults())) {
        AffineMap map = maps[op.getNumOperands() + i];
        SmallVector<int> dims(map.getNumResults(), 0);
        for (auto [d, expr] : llvm::enumerate(map.getResults()))
          if (auto dimExpr = dyn_cast<AffineDimExpr>(expr))
            dims[d] = loops[dimExpr.getPosition()];
        // The experts dim of an expert buffer [b, E, C, h] (dispatch's
        // result and its gradient) marks the expert computations; the
        // tokens' values around them (gates, router logits) are not.
        if (isExpertBoundary(&op)) {
          std::replace(dims.begin(), dims.end(), 3, 0);
          if (dims.size() == 4)
            dims[1] = 3;
        }
        tokenDims[result] = dims;
      }
    } else if (auto reshape = dyn_cast<ReshapeOp>(&op)) {
      auto in = reshape.getInput().getType().getShape();
      auto out = reshape.getOutput().getType().getShape();
      auto ranges = [](ArrayRef<int64_t> shape) {
        SmallVector<std::pair<int64_t, int64_t>> r(shape.size());
        int64_t t = 1;
        for (int64_t i = shape.size() - 1; i >= 0; --i) {
          r[i] = {t, t * shape[i]};
          t *= shape[i];
        }
        return r;
      };
      auto inR = ranges(in), outR = ranges(out);
      SmallVector<int> dims(out.size(), 0);
      for (size_t j = 0; j < out.size(); ++j)
        for (size_t i = 0; i < in.size(); ++i)
          if (in[i] > 1 && out[j] > 1 && inR[i].first < outR[j].second &&
              outR[j].first < inR[i].second)
            dims[j] = std::max(dims[j], tokenKind(reshape.getInput(), i));
      tokenDims[reshape.getOutput()] = dims;
    } else {
      for (Value result : op.getResults()) {
        auto type = dyn_cast<RankedTensorType>(result.getType());
        if (!type)
          continue;
        SmallVector<int> dims(type.getRank(), 0);
        for (Value operand : op.getOperands())
          if (auto operandType = dyn_cast<RankedTensorType>(operand.getType());
              operandType && operandType.getRank() == type.getRank())
            for (int64_t d = 0; d < type.getRank(); ++d)
              dims[d] = std::max(dims[d], tokenKind(operand, d));
        tokenDims[result] = dims;
      }
    }
  }
}

// The op's loops split as `loops` (per axis: loop or -1, block), or none
// when that split is not allowed.
std::optional<Choice>
Propagation::ruleChoice(ShardingRuleOpInterface rule,
                        ArrayRef<std::pair<int64_t, int64_t>> loops) {
  Operation *op = rule.getOperation();
  SmallVector<IteratorType> iterators = rule.getLoopIteratorTypes();
  SmallVector<AffineMap> maps = rule.getIndexingMaps();
  Choice choice;
  double splitFactor = 1;
  for (size_t a = 0; a < numAxes(); ++a)
    if (loops[a].first >= 0) {
      choice.usedAxes |= 1u << a;
      splitFactor *= axes[a].size;
    }
  SmallVector<Value> values(op->getOperands());
  llvm::append_range(values, op->getResults());
  size_t numOperands = op->getNumOperands();
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value value : values)
    shapes.push_back(cast<RankedTensorType>(value.getType()).getShape());
  SmallVector<int64_t> extent = loopExtents(maps, shapes, iterators.size());
  SmallVector<LoopSplit> splits(numAxes());
  for (size_t a = 0; a < numAxes(); ++a)
    splits[a] = {loops[a].first, loops[a].second, pieces(a)};
  for (auto [i, value] : llvm::enumerate(values)) {
    bool isResult = i >= numOperands;
    auto shape = cast<RankedTensorType>(value.getType()).getShape();
    Layout sh;
    // Grouped-query attention: kv head `h floordiv group`. The query heads
    // split only where the kv heads split alike: with fewer kv heads than
    // ranks, a rank's queries would read one kv head that several ranks
    // share, which the partitioner does not lower.
    if (layoutForLoops(maps[i], shape, splits, extent,
                       /*groupedHeads=*/!isResult, sh))
      return std::nullopt;
    for (size_t a = 0; a < numAxes(); ++a) {
      int64_t loop = loops[a].first;
      if (loop < 0)
        continue;
      bool found = maps[i].isFunctionOfDim(loop);
      // The vocabulary-parallel loss is whole over the axis.
      if (!found && isResult && !isVocabParallelLoop(op, loop)) {
        if (iterators[loop] != IteratorType::reduction &&
            !sumsOverParallelLoops(op))
          return std::nullopt;
        sh.partial |= 1u << a;
      }
    }
    // The context axis cuts positions into zigzag halves of a sequence. A
    // batch dim beside a sequence dim has none; flattened [batch * sequence]
    // rows are cut in runs (its block, or what the token axes before it on
    // that dim leave each rank) of exactly one sequence. Where that run is
    // the whole part, the cut is the plain nested one [dp, cp] in mesh order.
    if (cp && sh.dim[*cp] >= 0 && sequenceLength &&
        tokenKind(value, sh.dim[*cp]) == 2) {
      if (llvm::any_of(llvm::seq<int64_t>(0, shape.size()),
                       [&](int64_t d) { return tokenKind(value, d) == 1; }))
        return std::nullopt;
      int64_t d = sh.dim[*cp], outer = 1;
      for (size_t a = 0; a < numAxes(); ++a)
        if (a != *cp && sh.dim[a] == d && !sh.block[a])
          outer *= axes[a].size;
      int64_t run = sh.block[*cp] ? sh.block[*cp] : shape[d] / outer;
      if (run != sequenceLength)
        return std::nullopt;
      if (shape[d] == outer * run)
        sh.block[*cp] = 0;
    }
    // Two axes on one dim: only the token axes, on the batch or the
    // flattened tokens (cut in mesh order), where the dim divides by both.
    for (size_t a = 0; a < numAxes(); ++a)
      for (size_t b = a + 1; b < numAxes(); ++b)
        if (sh.dim[a] >= 0 && sh.dim[a] == sh.dim[b] &&
            (!isTokenAxis(a) || !isTokenAxis(b) || sh.block[a] || sh.block[b] ||
             shape[sh.dim[a]] % (axes[a].size * axes[b].size)))
          return std::nullopt;
    (isResult ? choice.results : choice.operands).push_back(sh);
  }
  // A causal op that mixes positions (attention) masks by query position,
  // which a rank holding a block of the queries does not know: only the
  // context axis (the ring lowering passes the offsets) may split them, in
  // the forward and the backward.
  auto mixing = dyn_cast<SequenceMixingOpInterface>(op);
  if (mixing && mixing.isCausal())
    for (size_t a = 0; a < numAxes(); ++a)
      if (loops[a].first == mixing.getQueryPositionLoop() && (!cp || a != *cp))
        return std::nullopt;
  // Over query positions split by the context axis it runs as a ring (the
  // partitioner's lowering): its ring operands (keys and values) stay split,
  // and its ring results (their gradients) come back to the ranks that hold
  // them.
  double ringBytes = 0;
  if (mixing && cp && loops[*cp].first == mixing.getQueryPositionLoop()) {
    // The ring reads the other axes' splits of batch, heads and positions
    // only: no split of the first result's last dim (a position's
    // features), no interleave, no partial sum.
    const auto &first = choice.results[0];
    int64_t features = shapes[numOperands].size() - 1;
    for (size_t a = 0; a < numAxes(); ++a)
      if ((first.partial & (1u << a)) || first.dim[a] == features ||
          first.block[a])
        return std::nullopt;
    AffineExpr keys =
        getAffineDimExpr(mixing.getKeyPositionLoop(), op->getContext());
    auto ringDim = [&](size_t value) {
      return static_cast<int8_t>(*maps[value].getResultPosition(keys));
    };
    for (unsigned i : mixing.getRingOperands()) {
      choice.operands[i].dim[*cp] = ringDim(i);
      ringBytes += localBytes(op->getOperand(i), choice.operands[i]);
    }
    for (unsigned i : mixing.getRingResults()) {
      choice.results[i].dim[*cp] = ringDim(numOperands + i);
      choice.results[i].partial &= ~(1u << *cp);
      ringBytes += localBytes(op->getResult(i), choice.results[i]);
    }
    ringBytes *= static_cast<double>(axes[*cp].size - 1);
  }
  // Node cost: compute, activations and parameter state per device. The
  // compute of GEMMs and attention is the op's own price (OpCost.h: a
  // GEMM's 2mnk; attention's 2bhst(d + dv), not the product of its six
  // loops, which is d * dv / (d + dv) times more); other ops touch each
  // point of their loops once, twice with a multiply-add (DtcInterfaces.td).
  // A lookup (and its gradient) moves one row per id: the table rows (its
  // last loop) add no work, and splitting them (a vocabulary-parallel
  // embedding, each rank looking up every id) saves none.
  int64_t numLoops = iterators.size();
  bool lookup = op->hasTrait<traits::RowLookup>();
  double flops = shardingComputeFlops(rule);
  if (lookup)
    for (size_t a = 0; a < numAxes(); ++a)
      if (loops[a].first == numLoops - 1)
        splitFactor /= axes[a].size;
  choice.cost = 3 * flops / splitFactor / flopsPerByte + ringBytes;
  for (auto [result, sh] : llvm::zip(op->getResults(), choice.results))
    choice.cost += memoryCost(result, sh, 1);
  for (auto [operand, sh] : llvm::zip(op->getOperands(), choice.operands))
    if (free.contains(operand) && operand.getDefiningOp<ParameterOp>()) {
      // Parameter, gradient and two optimizer moments, shared by its uses.
      double uses = std::distance(operand.use_begin(), operand.use_end());
      choice.cost += memoryCost(operand, sh, 4 / uses);
      choice.cost += edgeCost(operand, sh, sh, choice.usedAxes);
    }
  return choice;
}

const SmallVector<Choice> &
Propagation::ruleChoices(ShardingRuleOpInterface rule) {
  Operation *op = rule.getOperation();
  auto it = choiceCache.find(op);
  if (it != choiceCache.end())
    return it->second;
  SmallVector<IteratorType> iterators = rule.getLoopIteratorTypes();
  SmallVector<AffineMap> maps = rule.getIndexingMaps();
  int64_t numLoops = iterators.size();
  // Extent and candidate blocks of each loop, from the values it indexes.
  SmallVector<int64_t> extent(numLoops, 0);
  SmallVector<SmallVector<int64_t, 2>> blocks(numLoops, {0});
  SmallVector<bool> indexedByResult(numLoops, false);
  SmallVector<int> token(numLoops, 0);
  SmallVector<Value> values(op->getOperands());
  llvm::append_range(values, op->getResults());
  for (auto [i, map] : llvm::enumerate(maps)) {
    auto hint = hints.find(values[i]);
    for (auto [d, expr] : llvm::enumerate(map.getResults())) {
      auto dimExpr = dyn_cast<AffineDimExpr>(expr);
      if (!dimExpr)
        continue;
      int64_t l = dimExpr.getPosition();
      int64_t size = cast<RankedTensorType>(values[i].getType()).getDimSize(d);
      extent[l] = std::max(extent[l], size);
      token[l] = std::max(token[l], tokenKind(values[i], d));
      if (i >= op->getNumOperands())
        indexedByResult[l] = true;
      if (hint != hints.end() && d < hint->second.size())
        for (int64_t b : hint->second[d])
          if (!llvm::is_contained(blocks[l], b))
            blocks[l].push_back(b);
    }
  }
  // Per axis: unsplit, or one loop with one block. The data axes always
  // split the batch where the op has one; the expert axis splits the experts
  // instead where the op computes per expert (the MoE ops themselves read
  // and write tokens, so they stay on the batch: the buffer's reshard
  // between the two is the token all-to-all).
  bool boundary = isExpertBoundary(op);
  SmallVector<SmallVector<std::pair<int64_t, int64_t>>> options(numAxes());
  for (size_t a = 0; a < numAxes(); ++a) {
    int64_t n = pieces(a);
    auto hasLoopOf = [&](int kind) {
      return llvm::any_of(llvm::seq<int64_t>(0, numLoops), [&](int64_t l) {
        return token[l] == kind && extent[l] % n == 0;
      });
    };
    bool splitsExperts = a == ep && !boundary && hasLoopOf(3);
    bool hasBatch = isDataAxis(a) && !splitsExperts && hasLoopOf(2);
    // The context axis splits the sequence where the op has one, as the
    // data axes the batch (else a tiny model would rather gather the
    // tokens than pay for the ring); where no such split is legal (the
    // router's expert slots do not index positions), the op reads whole
    // sequences.
    bool hasSequence = a == cp && hasLoopOf(1);
    if (!hasBatch && !splitsExperts && !hasSequence)
      options[a].push_back({-1, 0});
    for (int64_t l = 0; l < numLoops; ++l) {
      if (extent[l] < n || extent[l] % n)
        continue;
      // The data axes split tokens only; without sequence parallelism the
      // other axes split the model only. Only the expert axis splits the
      // experts. The context axis splits the sequence or flattened
      // [batch * sequence] rows (ruleChoice keeps its cuts within
      // sequences).
      if (splitsExperts   ? token[l] != 3
          : token[l] == 3 ? true
          : a == cp       ? token[l] != 1 && token[l] != 2
          : isDataAxis(a) ? (hasBatch ? token[l] != 2 : !token[l])
                          : token[l] && !sequenceParallel)
        continue;
      if (iterators[l] == IteratorType::reduction &&
          (indexedByResult[l] || !isSumLikeReduction(op, l)) &&
          !isVocabParallelLoop(op, l))
        continue;
      for (int64_t b : blocks[l])
        if (b == 0 || (b % n == 0 && extent[l] % b == 0 && b < extent[l]))
          options[a].push_back({l, b});
    }
  }
  SmallVector<Choice> &choices = choiceCache[op];
  SmallVector<std::pair<int64_t, int64_t>> pick(numAxes());
  std::function<void(size_t)> enumerate = [&](size_t a) {
    if (a == numAxes()) {
      if (auto choice = ruleChoice(rule, pick))
        choices.push_back(std::move(*choice));
      return;
    }
    for (auto option : options[a]) {
      // One loop per axis, but the token axes may share the batch.
      if (option.first >= 0 &&
          llvm::any_of(llvm::seq<size_t>(0, a), [&](size_t b) {
            return pick[b].first == option.first &&
                   !(isTokenAxis(a) && isTokenAxis(b));
          }))
        continue;
      pick[a] = option;
      enumerate(a + 1);
    }
  };
  enumerate(0);
  // Where no split of the batch or sequence is legal (a slice's gradient
  // whose run does not fall on the blocks, the tokens marked through a
  // broadcast), the op reads whole values; the reshard is priced.
  // The context axis first, then the data axes.
  const std::pair<int64_t, int64_t> unsplit{-1, 0};
  SmallVector<size_t, 3> relaxed;
  if (cp)
    relaxed.push_back(*cp);
  for (size_t a = 0; a < numAxes(); ++a)
    if (isDataAxis(a))
      relaxed.push_back(a);
  for (size_t a : relaxed)
    if (choices.empty() && !llvm::is_contained(options[a], unsplit)) {
      options[a].push_back(unsplit);
      enumerate(0);
    }
  return choices;
}

// A reshape keeps the row-major order: a split is a digit of the flat index
// (stride U, n values), found again in whichever result dim holds it.
Choice Propagation::reshapeChoice(ReshapeOp op, const Layout &input) {
  SmallVector<int64_t> sizes;
  for (const MeshAxis &axis : axes)
    sizes.push_back(axis.size);
  ReshapeLayouts layouts =
      reshapeLayouts(op.getInput().getType().getShape(),
                     op.getOutput().getType().getShape(), input, sizes);
  Choice choice;
  choice.usedAxes = layouts.splitAxes;
  choice.operands.push_back(layouts.operand);
  choice.results.push_back(layouts.result);
  choice.cost = memoryCost(op.getOutput(), layouts.result, 1);
  return choice;
}

// Concatenation: every input read with the first one's splits, minus the
// concatenated dim.
Choice Propagation::concatChoice(ConcatOp op, const Layout &first) {
  Layout sh = first.dimsOnly();
  for (size_t a = 0; a < numAxes(); ++a)
    if (sh.dim[a] >= 0 && static_cast<uint64_t>(sh.dim[a]) == op.getAxis()) {
      sh.dim[a] = -1;
      sh.block[a] = 0;
    }
  Choice choice;
  choice.operands.assign(op->getNumOperands(), sh);
  choice.results.push_back(sh);
  for (size_t a = 0; a < numAxes(); ++a)
    if (sh.splits(a))
      choice.usedAxes |= 1u << a;
  choice.cost = memoryCost(op.getOutput(), sh, 1);
  return choice;
}

Choice Propagation::fallbackChoice(Operation *op) {
  Choice choice;
  choice.operands.assign(op->getNumOperands(), Layout::replicated(numAxes()));
  choice.results.assign(op->getNumResults(), Layout::replicated(numAxes()));
  return choice;
}

Attribute Propagation::toAttr(MLIRContext *ctx, const Layout &sh,
                              Type type) const {
  Builder b(ctx);
  auto shape = cast<RankedTensorType>(type).getShape();
  SmallVector<SmallVector<Attribute>> dims(shape.size());
  SmallVector<int64_t> blocks(shape.size(), 0);
  SmallVector<Attribute> partial;
  for (size_t a = 0; a < numAxes(); ++a) {
    if (sh.splits(a)) {
      dims[sh.dim[a]].push_back(b.getStringAttr(axes[a].name));
      blocks[sh.dim[a]] = sh.block[a];
    }
    if (sh.isPartial(a))
      partial.push_back(b.getStringAttr(axes[a].name));
  }
  SmallVector<Attribute> dimAttrs;
  for (auto &d : dims)
    dimAttrs.push_back(b.getArrayAttr(d));
  return ShardingAttr::get(ctx, b.getArrayAttr(dimAttrs), blocks,
                           b.getArrayAttr(partial));
}

std::optional<Layout> Propagation::fromAttr(ShardingAttr attr,
                                            Location loc) const {
  Layout sh = Layout::replicated(numAxes());
  auto lookup = [&](StringRef name) -> std::optional<size_t> {
    for (auto [a, axis] : llvm::enumerate(axes))
      if (axis.name == name)
        return a;
    std::string known;
    for (auto [a, axis] : llvm::enumerate(axes))
      known += (a ? "," : "") + axis.name + ":" + std::to_string(axis.size);
    emitError(loc) << "sharding uses mesh axis \"" << name
                   << "\", which is not in the mesh (" << known << ")";
    return std::nullopt;
  };
  for (size_t d = 0; d < attr.getDims().size(); ++d)
    for (StringRef name : attr.getDimAxes(d)) {
      auto a = lookup(name);
      if (!a)
        return std::nullopt;
      sh.dim[*a] = d;
      sh.block[*a] = attr.getBlocks()[d];
    }
  for (StringRef name : attr.getPartialAxes()) {
    auto a = lookup(name);
    if (!a)
      return std::nullopt;
    sh.partial |= 1u << *a;
  }
  return sh;
}

LogicalResult Propagation::checkSharding(Value value, const Layout &sh,
                                         Location loc) {
  auto shape = cast<RankedTensorType>(value.getType()).getShape();
  for (size_t d = 0; d < shape.size(); ++d) {
    int64_t product = 1, block = 0;
    std::string names;
    for (size_t a = 0; a < numAxes(); ++a)
      if (sh.dim[a] == static_cast<int8_t>(d)) {
        product *= axes[a].size;
        block = sh.block[a];
        names += (names.empty() ? "\"" : ", \"") + axes[a].name + "\"";
      }
    if (product == 1)
      continue;
    int64_t run = block ? block : shape[d];
    if (shape[d] % run || run % product)
      return emitError(loc)
             << "dimension " << d << " of size " << shape[d]
             << (block ? " (interleave block " + std::to_string(block) + ")"
                       : std::string())
             << " is not divisible by " << product << ", the size of mesh axes "
             << names;
  }
  return success();
}

LogicalResult Propagation::run(FunctionOpInterface func, StringRef dpAxis,
                               StringRef epAxis, StringRef cpAxis) {
  Region &region = func.getFunctionBody();
  if (region.empty())
    return success();
  if (!region.hasOneBlock())
    return func.emitError("dtc-propagate-sharding needs a single-block body");
  Block &body = region.front();
  if (failed(checkStaticTensors(body)))
    return failure();
  for (auto [a, axis] : llvm::enumerate(axes)) {
    if (axis.name == dpAxis)
      dp = a;
    if (axis.name == epAxis)
      ep = a;
    if (axis.name == cpAxis)
      cp = a;
  }
  if (failed(seedArguments(func, body)) || failed(indexValues(body)))
    return failure();
  collectHints(body);
  collectTokenDims(body);

  std::vector<State> states(1);
  for (Operation &op : body) {
    Value first = op.getNumResults() ? op.getResult(0) : Value();
    if (free.contains(first) || (isa<ParameterOp>(&op) && fixed.count(first)))
      continue;
    states = advance(op, states);
    if (states.empty())
      return op.emitError("no sharding found for this op");
    settleAgreed(states);
  }
  writeShardings(func, body, states.front());
  return success();
}

/// Shardings are of static tensors; other ops are opaque (replicated).
LogicalResult Propagation::checkStaticTensors(Block &body) {
  auto isStaticTensor = [](Value v) {
    auto type = dyn_cast<RankedTensorType>(v.getType());
    return type && type.hasStaticShape() &&
           type.getElementType().isIntOrFloat();
  };
  for (BlockArgument arg : body.getArguments())
    if (!isStaticTensor(arg))
      return emitError(arg.getLoc())
             << "dtc-propagate-sharding handles static tensors only, got "
             << arg.getType();
  for (Operation &op : body)
    for (Value v : llvm::concat<Value>(op.getOperands(), op.getResults()))
      if (!isStaticTensor(v))
        return op.emitError("dtc-propagate-sharding handles static tensors "
                            "only, got ")
               << v.getType();
  return success();
}

/// Graph inputs: an explicit sharding, else the batch dim over the data
/// axes (dp, ep), the sequence dim over cp.
LogicalResult Propagation::seedArguments(FunctionOpInterface func,
                                         Block &body) {
  for (BlockArgument arg : body.getArguments()) {
    Layout sh = Layout::replicated(numAxes());
    if (auto attr = func.getArgAttrOfType<ShardingAttr>(arg.getArgNumber(),
                                                        "dtc.sharding")) {
      auto parsed = fromAttr(attr, arg.getLoc());
      if (!parsed)
        return failure();
      if (attr.getDims().size() !=
          static_cast<size_t>(cast<RankedTensorType>(arg.getType()).getRank()))
        return emitError(arg.getLoc())
               << "sharding has " << attr.getDims().size()
               << " dims for a value of rank "
               << cast<RankedTensorType>(arg.getType()).getRank();
      sh = *parsed;
    } else if (cast<RankedTensorType>(arg.getType()).getRank() > 0) {
      for (std::optional<size_t> a : {dp, ep})
        if (a)
          sh.dim[*a] = 0;
      if (cp && cast<RankedTensorType>(arg.getType()).getRank() > 1)
        sh.dim[*cp] = 1;
    }
    if (failed(checkSharding(arg, sh, arg.getLoc())))
      return failure();
    fixed[arg] = sh;
  }
  return success();
}

/// Numbers every value, pins the parameters already annotated (the training
/// step pins the layout chosen on the forward pass when it shards the
/// gradient function), marks the other parameters and constants free (they
/// take their first user's sharding), and records each value's last reader
/// and which free parameters several ops read.
LogicalResult Propagation::indexValues(Block &body) {
  unsigned next = 0;
  for (Operation &op : body) {
    for (Value result : op.getResults()) {
      number[result] = next++;
      auto pinned = isa<ParameterOp>(&op)
                        ? op.getAttrOfType<ArrayAttr>("dtc.sharding")
                        : ArrayAttr();
      if (pinned && pinned.size() == 1 && isa<ShardingAttr>(pinned[0])) {
        auto parsed = fromAttr(cast<ShardingAttr>(pinned[0]), op.getLoc());
        if (!parsed || failed(checkSharding(result, *parsed, op.getLoc())))
          return failure();
        fixed[result] = *parsed;
      } else if (isa<ParameterOp, ConstantOp>(&op)) {
        free.insert(result);
      }
    }
  }
  unsigned index = 0;
  for (Operation &op : body)
    position[&op] = index++;
  for (Operation &op : body)
    for (Value result : op.getResults()) {
      unsigned last = position[&op];
      SmallPtrSet<Operation *, 2> readers;
      for (Operation *user : result.getUsers()) {
        Operation *reader = body.findAncestorOpInBlock(*user);
        last = std::max(last, position[reader]);
        readers.insert(reader);
      }
      lastUse[result] = last;
      if (isa<ParameterOp>(&op) && free.contains(result) && readers.size() > 1)
        shared.insert(result);
    }
  return success();
}

std::optional<Layout> Propagation::storedSharding(const State &state,
                                                  Value v) const {
  unsigned id = number.lookup(v);
  if (auto it = settled.find(id); it != settled.end())
    return it->second;
  for (auto &[liveId, sh] : state.live)
    if (liveId == id)
      return sh;
  return std::nullopt;
}

Layout Propagation::currentSharding(const State &state, Value v) const {
  if (auto it = fixed.find(v); it != fixed.end())
    return it->second;
  if (free.contains(v))
    return Layout::replicated(numAxes());
  return storedSharding(state, v).value_or(Layout::replicated(numAxes()));
}

ArrayRef<Choice> Propagation::choicesOf(Operation &op, const State &state,
                                        SmallVectorImpl<Choice> &local) {
  auto current = [&](Value v) { return currentSharding(state, v); };
  if (auto rule = dyn_cast<ShardingRuleOpInterface>(&op))
    return ruleChoices(rule);
  if (auto reshape = dyn_cast<ReshapeOp>(&op)) {
    local.push_back(reshapeChoice(reshape, current(reshape.getInput())));
  } else if (auto concat = dyn_cast<ConcatOp>(&op)) {
    local.push_back(concatChoice(concat, current(concat.getOperand(0))));
  } else if (op.hasTrait<OpTrait::IsTerminator>()) {
    Choice keep;
    // The program's results are whole values: partial sums are reduced.
    for (Value v : op.getOperands())
      keep.operands.push_back(current(v).dimsOnly());
    local.push_back(keep);
  } else {
    local.push_back(fallbackChoice(&op));
  }
  return local;
}

std::vector<State> Propagation::advance(Operation &op,
                                        const std::vector<State> &states) {
  unsigned pos = position[&op];
  // Live values whose last use is this op (the same in every state).
  SmallVector<unsigned, 4> dyingHere;
  for (Value operand : op.getOperands())
    if (!fixed.count(operand) && lastUse.lookup(operand) <= pos)
      dyingHere.push_back(number.lookup(operand));
  // The states after this op, one per distinct set of live shardings
  // (the cheapest; of equal ones the first), found by hash.
  std::vector<State> merged;
  std::unordered_map<size_t, SmallVector<unsigned, 1>> mergedByHash;
  for (const State &state : states) {
    SmallVector<Choice, 8> local;
    ArrayRef<Choice> choices = choicesOf(op, state, local);
    // The state's live values that outlive this op, the same for every
    // choice: copied and hashed once per state, and per candidate only
    // when it survives the merge.
    LiveShardings survivors;
    survivors.reserve(state.live.size());
    size_t survivorsHash = 0;
    for (auto &entry : state.live)
      if (!llvm::is_contained(dyingHere, entry.first)) {
        survivors.push_back(entry);
        survivorsHash = foldLiveHash(survivorsHash, entry);
      }
    for (const Choice &choice : choices) {
      double cost = state.cost + choice.cost;
      LiveShardings firstRead;
      for (auto [operand, required] :
           llvm::zip(op.getOperands(), choice.operands)) {
        if (!free.contains(operand)) {
          cost += edgeCost(operand, currentSharding(state, operand), required,
                           choice.usedAxes);
          continue;
        }
        // A parameter read by several ops (a tied embedding) is stored as
        // its first reader reads it: later readers move the weight and
        // its summed gradient back (both ways; the reduction of the
        // gradient's partial sums is the choice's own cost).
        if (!shared.contains(operand))
          continue;
        if (std::optional<Layout> stored = storedSharding(state, operand)) {
          int64_t bytes = bytesOf(operand.getType());
          cost += reshardCost(*stored, required.dimsOnly(), bytes) +
                  reshardCost(required.dimsOnly(), *stored, bytes);
        } else if (lastUse.lookup(operand) > pos &&
                   llvm::none_of(firstRead, [&](auto &entry) {
                     return entry.first == number.lookup(operand);
                   })) {
          firstRead.push_back({number.lookup(operand), required.dimsOnly()});
        }
      }
      // The candidate's live values: survivors, then firstRead, then the
      // results read later.
      LiveShardings &tail = firstRead;
      for (auto [result, sh] : llvm::zip(op.getResults(), choice.results))
        if (lastUse.lookup(result) > pos)
          tail.push_back({number.lookup(result), sh});
      size_t hash = survivorsHash;
      for (auto &entry : tail)
        hash = foldLiveHash(hash, entry);
      size_t liveSize = survivors.size() + tail.size();
      hash = llvm::hash_combine(hash, liveSize);
      SmallVector<unsigned, 1> &sameHash = mergedByHash[hash];
      State *same = nullptr;
      for (unsigned i : sameHash) {
        const LiveShardings &live = merged[i].live;
        if (live.size() == liveSize &&
            std::equal(survivors.begin(), survivors.end(), live.begin()) &&
            std::equal(tail.begin(), tail.end(),
                       live.begin() + survivors.size()))
          same = &merged[i];
      }
      if (same && same->cost <= cost)
        continue;
      State next;
      next.cost = cost;
      next.live.reserve(liveSize);
      llvm::append_range(next.live, survivors);
      std::move(tail.begin(), tail.end(), std::back_inserter(next.live));
      auto trail = std::make_shared<Trail>();
      trail->parent = state.trail;
      trail->op = &op;
      trail->results = choice.results;
      trail->operands = choice.operands;
      next.trail = std::move(trail);
      if (same) {
        *same = std::move(next);
      } else {
        sameHash.push_back(merged.size());
        merged.push_back(std::move(next));
      }
    }
  }
  // Cheapest first; states of equal cost by their text key, the order
  // the beam has always kept.
  std::vector<unsigned> order(merged.size());
  std::iota(order.begin(), order.end(), 0u);
  size_t kept = std::min<size_t>(order.size(), std::max<int64_t>(beam, 0));
  std::partial_sort(order.begin(), order.begin() + kept, order.end(),
                    [&](unsigned a, unsigned b) {
                      if (merged[a].cost != merged[b].cost)
                        return merged[a].cost < merged[b].cost;
                      return liveKeyLess(merged[a].live, merged[b].live);
                    });
  order.resize(kept);
  std::vector<State> next;
  for (unsigned i : order)
    next.push_back(std::move(merged[i]));
  return next;
}

/// Live values every state of the beam gives the same sharding are taken
/// out of the states into `settled`: no later choice can change them and no
/// two states differ in them. Without this a training step's activations,
/// live from the forward pass to the backward one, were copied and keyed
/// for every choice of every op (time quadratic in the depth). Every state
/// lists the same live values in the same order (they went through the
/// same ops).
void Propagation::settleAgreed(std::vector<State> &states) {
  std::vector<bool> agreed(states.front().live.size(), true);
  for (const State &state : states) {
    if (state.live.size() != agreed.size()) {
      agreed.assign(agreed.size(), false);
      break;
    }
    for (size_t i = 0; i < agreed.size(); ++i)
      agreed[i] = agreed[i] &&
                  state.live[i].first == states.front().live[i].first &&
                  state.live[i].second == states.front().live[i].second;
  }
  if (!llvm::is_contained(agreed, true))
    return;
  for (size_t i = 0; i < agreed.size(); ++i)
    if (agreed[i])
      settled[states.front().live[i].first] = states.front().live[i].second;
  for (State &state : states) {
    size_t kept = 0;
    for (size_t i = 0; i < state.live.size(); ++i)
      if (!agreed[i])
        state.live[kept++] = std::move(state.live[i]);
    state.live.resize(kept);
  }
}

/// Writes the cheapest state's choices; a parameter or constant takes the
/// sharding its first user reads.
void Propagation::writeShardings(FunctionOpInterface func, Block &body,
                                 const State &best) {
  MLIRContext *ctx = func.getContext();
  Builder b(ctx);
  DenseMap<Value, Layout> chosen;
  for (const Trail *t = best.trail.get(); t; t = t->parent.get()) {
    for (auto [result, sh] : llvm::zip(t->op->getResults(), t->results))
      chosen[result] = sh;
    for (auto [operand, sh] : llvm::zip(t->op->getOperands(), t->operands))
      if (free.contains(operand))
        chosen[operand] = sh.dimsOnly(); // walking back: first user wins
  }
  for (BlockArgument arg : body.getArguments())
    func.setArgAttr(arg.getArgNumber(), "dtc.sharding",
                    toAttr(ctx, fixed[arg], arg.getType()));
  for (Operation &op : body) {
    if (!op.getNumResults())
      continue;
    SmallVector<Attribute> attrs;
    for (Value result : op.getResults()) {
      auto it = chosen.find(result);
      auto pinned = fixed.find(result);
      Layout sh = it != chosen.end()      ? it->second
                  : pinned != fixed.end() ? pinned->second
                                          : Layout::replicated(numAxes());
      attrs.push_back(toAttr(ctx, sh, result.getType()));
    }
    op.setAttr("dtc.sharding", b.getArrayAttr(attrs));
  }
  func->setAttr("dtc.sharding_cost", b.getF64FloatAttr(best.cost));
}

struct DtcPropagateShardingPass
    : mlir::dtc::impl::DtcPropagateShardingBase<DtcPropagateShardingPass> {
  using DtcPropagateShardingBase::DtcPropagateShardingBase;

  void runOnOperation() override {
    Operation *root = getOperation();
    FailureOr<MeshAttr> meshAttr = ::dtc::meshOption(root, mesh);
    if (failed(meshAttr))
      return signalPassFailure();
    SmallVector<MeshAxis> axes = meshAttr->getAxes();
    if (axes.size() > kMaxMeshAxes) {
      root->emitError(
          llvm::formatv("at most {0} mesh axes are supported", kMaxMeshAxes)
              .str());
      return signalPassFailure();
    }
    SmallVector<FunctionOpInterface> funcs;
    root->walk([&](FunctionOpInterface func) { funcs.push_back(func); });
    for (FunctionOpInterface func : funcs) {
      Propagation propagation(axes, std::max<int64_t>(beamWidth, 1),
                              flopsPerByte, memoryWeight, sequenceParallel);
      if (failed(propagation.run(func, dataParallelAxis, expertParallelAxis,
                                 contextParallelAxis)))
        return signalPassFailure();
      LLVM_DEBUG({
        auto cost = func->getAttrOfType<FloatAttr>("dtc.sharding_cost");
        llvm::dbgs() << "dtc-propagate-sharding: @" << func.getName()
                     << " over " << mesh << ": cost "
                     << (cost ? cost.getValueAsDouble() : 0.0) << " bytes\n";
      });
    }
  }
};

} // namespace

double mlir::dtc::shardingComputeFlops(ShardingRuleOpInterface rule) {
  Operation *op = rule.getOperation();
  ::dtc::KernelWork work = ::dtc::opWork(op);
  if (work.kind == ::dtc::KernelWork::Kind::Gemm ||
      work.kind == ::dtc::KernelWork::Kind::Attention)
    return work.flops;
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value value : op->getOperands())
    shapes.push_back(cast<RankedTensorType>(value.getType()).getShape());
  for (Value value : op->getResults())
    shapes.push_back(cast<RankedTensorType>(value.getType()).getShape());
  size_t numLoops = rule.getLoopIteratorTypes().size();
  SmallVector<int64_t> extent =
      loopExtents(rule.getIndexingMaps(), shapes, numLoops);
  bool lookup = op->hasTrait<traits::RowLookup>();
  double flops = 1;
  for (size_t l = 0; l < numLoops; ++l)
    if (!lookup || l + 1 != numLoops)
      flops *= static_cast<double>(extent[l]);
  return op->hasTrait<traits::MultiplyAdd>() ? 2 * flops : flops;
}
