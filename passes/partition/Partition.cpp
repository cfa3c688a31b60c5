//===- Partition.cpp - sharded functions to per-rank SPMD functions ------===//
//
// dtc-partition: reads the `dtc.sharding` annotations that
// dtc-propagate-sharding wrote and rebuilds each annotated function as the
// program one rank runs. Ops are copied in order into a new body whose types
// are local shapes; before each op, every operand is brought from the layout
// its producer left it in to the layout the op reads it in, with
// collectives (`dtc.*_start` + `dtc.wait`) or a local `dtc.shard_slice`.
// The layouts an op reads follow from its sharding rule (loops + indexing
// maps) and the annotated shardings of its results, so the pass needs no
// per-op pattern. docs/partition.md explains the design.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcAttrs.h"
#include "dialects/dtc/DtcCollectiveOps.h"
#include "dialects/dtc/DtcOps.h"
#include "passes/AffineMatch.h"
#include "passes/Layout.h"
#include "passes/LoopLayout.h"
#include "passes/MeshOption.h"
#include "passes/Passes.h"
#include "passes/ShardingRules.h"
#include "passes/autodiff/Autodiff.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallBitVector.h"
#include "llvm/Support/Debug.h"

#define DEBUG_TYPE "dtc-partition"

#include <map>

namespace mlir::dtc {
#define GEN_PASS_DEF_DTCPARTITION
#include "passes/Passes.h.inc"
} // namespace mlir::dtc

using namespace mlir;
using namespace mlir::dtc;
using utils::IteratorType;

namespace {

constexpr StringLiteral kShardingAttr = "dtc.sharding";

class Partitioner {
public:
  Partitioner(MeshAttr meshAttr, StringRef contextAxis, bool zigzag,
              bool deferGradientSync)
      : meshAttr(meshAttr), mesh(DeviceMesh::get(meshAttr)),
        contextAxis(mesh.find(contextAxis)), zigzag(zigzag),
        deferGradientSync(deferGradientSync), builder(meshAttr.getContext()) {}
  LogicalResult run(func::FuncOp func);

private:
  /// The mesh, as partitioned functions carry it; `mesh`: its axes.
  MeshAttr meshAttr;
  DeviceMesh mesh;
  /// The context-parallel axis, if the mesh has it: attention whose query
  /// positions it splits runs as a ring over the key/value chunks.
  std::optional<size_t> contextAxis;
  /// A sequence split over the context axis holds zigzag chunks (halves k
  /// and 2n - 1 - k of 2n) rather than contiguous ones: causal attention
  /// then gives every rank of the ring the same work. Collectives move
  /// contiguous parts, so the pass reorders the halves around them.
  bool zigzag;
  bool isZigzag(size_t a) const {
    return zigzag && contextAxis && a == *contextAxis;
  }
  /// Gradient results stay partial sums (the training step reduces the
  /// accumulated gradients once per step).
  bool deferGradientSync;
  OpBuilder builder;
  /// The layout each parameter is stored in, by name: its gradient is
  /// returned in the same layout so the optimizer update is local.
  llvm::StringMap<Layout> parameterLayouts;
  /// Global types of the original values (the new body holds local ones).
  DenseMap<Value, RankedTensorType> globalType;
  /// Per original value: the local value and the layout it is in.
  DenseMap<Value, std::pair<Value, Layout>> current;
  /// Per original value and layout: a local value already resharded.
  DenseMap<Value, std::map<std::string, Value>> resharded;
  /// A ring attention forward: the local operands it read, its output and
  /// the log-sum-exp of its rows, which the gradient's ring reuses.
  struct RingForward {
    Value query, key, value, output, lse;
  };
  DenseMap<Operation *, RingForward> ringForwards;
  /// Per local (logits, labels) of a vocabulary-parallel loss: every shard's
  /// statistics, gathered, which the gradient reuses.
  DenseMap<std::pair<Value, Value>, Value> vocabStats;

  size_t numAxes() const { return mesh.axes.size(); }
  int64_t axisSize(size_t a) const { return mesh.axes[a].size; }
  StringAttr axisName(size_t a) {
    return builder.getStringAttr(mesh.axes[a].name);
  }

  FailureOr<Layout> fromAttr(Attribute attr, RankedTensorType type,
                             Location loc);
  Attribute toAttr(const Layout &layout, RankedTensorType type);
  RankedTensorType localType(RankedTensorType global, const Layout &layout);
  FailureOr<Value> reshard(Value original, const Layout &to, Location loc);
  /// A value on its way to a target layout in reshard(): the local value
  /// and the layout it is in so far.
  struct Resharding {
    Value value;
    Layout layout;
    const Layout &to;
    RankedTensorType global;
    Location loc;
  };
  /// The type of a collective's handle that leaves `r`'s value in `next`.
  AsyncType handleType(const Resharding &r, const Layout &next);
  /// Ends the partial sums the target does not keep: reduce-scatters where
  /// it splits the axis, else all-reduces.
  LogicalResult reducePartialSums(Resharding &r);
  /// Removes the splits the target does not keep: all-to-all where an axis
  /// moves to another dim, else all-gather.
  LogicalResult removeSplits(Resharding &r);
  /// Cuts the target's new splits out of replicated data (local slices).
  LogicalResult sliceNewSplits(Resharding &r);
  FailureOr<SmallVector<Value>> reshardOperands(Operation *op,
                                                ArrayRef<Layout> layouts);
  LogicalResult nestingError(Location loc, RankedTensorType global, int64_t dim,
                             size_t a, size_t b);
  Value startAndWait(Operation *start);
  FailureOr<Value> zigzagOrder(Value value, int64_t dim, int64_t block,
                               size_t axis, bool inverse, Location loc);
  FailureOr<SmallVector<Layout>> resultLayouts(Operation *op);
  LogicalResult partitionRuleOp(ShardingRuleOpInterface rule);
  /// An op with a sharding rule being partitioned: its loops, indexing maps
  /// and result layouts, and the loops the mesh axes split.
  struct RuleLoops {
    ShardingRuleOpInterface rule;
    Operation *op;
    SmallVector<Layout> results;
    SmallVector<IteratorType> iterators;
    SmallVector<AffineMap> maps;
    size_t numOperands = 0;
    int64_t numLoops = 0;
    SmallVector<int64_t> extent;
    /// Per axis: the loop it splits (-1: none) and the loop's block.
    SmallVector<int64_t> loopOf, blockOf;
  };
  /// The loop axis `a` splits by the results it splits, if any.
  LogicalResult loopFromResults(RuleLoops &loops, size_t a);
  /// The loop axis `a` splits for a result partial over it (or a
  /// vocabulary-parallel loss), where no result is split over it.
  LogicalResult loopFromPartialResult(RuleLoops &loops, size_t a);
  /// Checks that every result is split or partial as the split loops say.
  LogicalResult checkResultsMatchLoops(const RuleLoops &loops);
  /// The layout each operand is read in, from the split loops.
  FailureOr<SmallVector<Layout>> operandLayoutsFor(const RuleLoops &loops);
  /// Refuses causal attention with split query positions.
  LogicalResult checkCausalAttention(const RuleLoops &loops);
  /// Lowers the copy `copy` of a loss or lookup split over the vocabulary.
  LogicalResult lowerVocabParallel(const RuleLoops &loops, Operation *&copy);
  /// Makes the attributes of `copy` that hold global positions or shapes
  /// local.
  LogicalResult localizeCopy(const RuleLoops &loops, Operation *copy);
  /// Divides a mean over split loops by the axes' share of it.
  void divideMeans(const RuleLoops &loops, Operation *copy, Value localLabels);
  LogicalResult partitionRingAttention(Operation *op, ArrayRef<Layout> results,
                                       size_t axis);
  SmallVector<std::pair<Value, Value>>
  startRingShift(ValueRange values, size_t axis, Location loc);
  SmallVector<Value> finishRingShift(ArrayRef<std::pair<Value, Value>> handles,
                                     Location loc);
  RingForward emitRingForward(Value query, Value key, Value value, bool causal,
                              double scale, size_t axis, Location loc);
  Operation *lowerVocabParallelLoss(Operation *copy, ArrayAttr axes,
                                    int64_t shards);
  Operation *lowerVocabParallelLookup(Operation *copy, ArrayAttr axes);
  /// Replaces the local copy of an op by its lowering, which takes over the
  /// copy's attributes and its place in `current`.
  Operation *replaceCopy(Operation *copy, Operation *lowered);
  /// Records the global type of every value of `body`; static tensors only.
  LogicalResult recordGlobalTypes(Block &body);
  /// Adds `func`'s arguments to `newBody` in the layouts of their
  /// annotations (appended to `layouts`).
  LogicalResult addLocalArguments(func::FuncOp func, Block &newBody,
                                  SmallVectorImpl<Layout> &layouts);
  /// Copies `op` of `func` into the new body, by its kind; a return adds its
  /// results' shardings to `shardings`.
  LogicalResult partitionOp(Operation &op, func::FuncOp func,
                            SmallVectorImpl<Attribute> &shardings);
  /// A parameter, stored as its first user reads it.
  LogicalResult partitionParameter(ParameterOp param);
  /// A constant: a splat local, other constants whole.
  LogicalResult partitionConstant(ConstantOp constant);
  /// A concat, its inputs read like the first minus the concatenated dim.
  LogicalResult partitionConcat(ConcatOp concat);
  /// The return, its values in their result layouts.
  LogicalResult partitionReturn(func::ReturnOp ret, func::FuncOp func,
                                SmallVectorImpl<Attribute> &resultShardings);
  /// Replaces the body of `func` by `newBody`, and its type.
  void replaceBody(func::FuncOp func, Block *newBody);
  /// Annotates the new signature: argument and result shardings, the mesh.
  void annotateSignature(func::FuncOp func, ArrayRef<Layout> argLayouts,
                         ArrayRef<Attribute> resultShardings);
  LogicalResult partitionReshape(ReshapeOp op);
  LogicalResult partitionOther(Operation *op, const Layout *operandLayout);
  LogicalResult copyOp(Operation *op, ArrayRef<Layout> operandLayouts,
                       ArrayRef<Layout> results);
  void scaleResult(Operation *newOp, unsigned index, int64_t divisor);
  void weighByCountedLabels(Operation *newOp, Value labels, int64_t ignore,
                            ArrayRef<Attribute> axes);
  struct LabelShare {
    Value share, counted;
  };
  LabelShare countLabelShare(Value labels, int64_t ignore,
                             ArrayRef<Attribute> axes, Location loc);
  /// By local labels: the loss and its gradient share one count exchange.
  DenseMap<Value, LabelShare> labelShares;
  bool isAddOfPartialSums(Operation *op, const Layout &result);
  LogicalResult addPartialSums(Operation *op);
};

FailureOr<Layout> Partitioner::fromAttr(Attribute attr, RankedTensorType type,
                                        Location loc) {
  auto sharding = dyn_cast_or_null<ShardingAttr>(attr);
  if (!sharding)
    return emitError(loc) << "expected a #dtc.sharding, got " << attr;
  if (sharding.getDims().size() != static_cast<size_t>(type.getRank()))
    return emitError(loc) << "sharding has " << sharding.getDims().size()
                          << " dims for a value of rank " << type.getRank();
  Layout layout = Layout::replicated(numAxes());
  auto lookup = [&](StringRef name) -> FailureOr<size_t> {
    if (std::optional<size_t> a = mesh.find(name))
      return *a;
    return emitError(loc) << "sharding uses mesh axis \"" << name
                          << "\", which is not in the mesh (" << mesh.str()
                          << ")";
  };
  for (int64_t d = 0; d < type.getRank(); ++d) {
    // Several axes on one dim cut it in mesh order, outermost first (the
    // data axes dp and ep on the batch).
    int64_t product = 1, previous = -1;
    std::string names;
    for (StringRef name : sharding.getDimAxes(d)) {
      FailureOr<size_t> a = lookup(name);
      if (failed(a))
        return failure();
      if (static_cast<int64_t>(*a) <= previous)
        return emitError(loc) << "dimension " << d
                              << " lists its mesh axes out of mesh order ("
                              << mesh.str() << ")";
      previous = *a;
      product *= axisSize(*a);
      names += (names.empty() ? "\"" : ", \"") + name.str() + "\"";
      int64_t size = type.getDimSize(d), block = sharding.getBlocks()[d];
      int64_t run = block ? block : size;
      if (size % run || run % product)
        return emitError(loc)
               << "dimension " << d << " of size " << size
               << (block ? " (interleave block " + std::to_string(block) + ")"
                         : std::string())
               << " is not divisible by " << product << ", the size of mesh "
               << (names.find(',') == std::string::npos ? "axis " : "axes ")
               << names;
      layout.dim[*a] = d;
      layout.block[*a] = block;
    }
  }
  for (StringRef name : sharding.getPartialAxes()) {
    FailureOr<size_t> a = lookup(name);
    if (failed(a))
      return failure();
    layout.setPartial(*a, true);
  }
  return layout;
}

Attribute Partitioner::toAttr(const Layout &layout, RankedTensorType type) {
  SmallVector<SmallVector<Attribute>> dims(type.getRank());
  SmallVector<int64_t> blocks(type.getRank(), 0);
  SmallVector<Attribute> partial;
  for (size_t a = 0; a < numAxes(); ++a) {
    if (layout.splits(a)) {
      dims[layout.dim[a]].push_back(axisName(a));
      blocks[layout.dim[a]] = layout.block[a];
    }
    if (layout.isPartial(a))
      partial.push_back(axisName(a));
  }
  SmallVector<Attribute> dimAttrs;
  for (auto &d : dims)
    dimAttrs.push_back(builder.getArrayAttr(d));
  return ShardingAttr::get(builder.getContext(), builder.getArrayAttr(dimAttrs),
                           blocks, builder.getArrayAttr(partial));
}

RankedTensorType Partitioner::localType(RankedTensorType global,
                                        const Layout &layout) {
  SmallVector<int64_t> shape(global.getShape());
  for (size_t a = 0; a < numAxes(); ++a)
    if (layout.splits(a))
      shape[layout.dim[a]] /= axisSize(a);
  return RankedTensorType::get(shape, global.getElementType());
}

Value Partitioner::startAndWait(Operation *start) {
  return WaitOp::create(builder, start->getLoc(), start->getResult(0))
      .getOutput();
}

// The halves of `value`'s `dim` between the natural order and the zigzag
// order of a cut over `axis` (its n ranks' halves next to each other), for
// the collectives that split or gather that dim; other axes' cuts are
// contiguous, and `value` is returned as it is. An interleaved cut (the
// flattened rows of several sequences, block = one sequence) reorders within
// each block.
FailureOr<Value> Partitioner::zigzagOrder(Value value, int64_t dim,
                                          int64_t block, size_t axis,
                                          bool inverse, Location loc) {
  if (!isZigzag(axis))
    return value;
  int64_t n = axisSize(axis);
  auto type = cast<RankedTensorType>(value.getType());
  int64_t run = block ? block : type.getDimSize(dim);
  if (run % (2 * n))
    return emitError(loc) << "context parallelism over \""
                          << mesh.axes[axis].name << "\" (" << n
                          << " ranks) cuts dimension " << dim << " (runs of "
                          << run << ") into " << 2 * n
                          << " zigzag halves, which does not divide it; use "
                             "a sequence length divisible by "
                          << 2 * n;
  Value input = value;
  int64_t orderDim = dim;
  if (block) {
    SmallVector<int64_t> shape(type.getShape());
    shape[dim] /= block;
    shape.insert(shape.begin() + dim + 1, block);
    input = ReshapeOp::create(
        builder, loc, RankedTensorType::get(shape, type.getElementType()),
        value);
    orderDim = dim + 1;
  }
  Value ordered =
      ZigzagOrderOp::create(builder, loc, input.getType(), input,
                            builder.getI64IntegerAttr(orderDim),
                            builder.getI64IntegerAttr(n),
                            inverse ? builder.getUnitAttr() : UnitAttr())
          .getOutput();
  if (block)
    ordered = ReshapeOp::create(builder, loc, type, ordered);
  return ordered;
}

// A dim split over several mesh axes is cut in mesh order: axis `a` can be
// sliced, gathered or reduce-scattered on its own only where it is the
// innermost cut of that dim.
LogicalResult Partitioner::nestingError(Location loc, RankedTensorType global,
                                        int64_t dim, size_t a, size_t b) {
  return emitError(loc) << "cannot change the split of dimension " << dim
                        << " of " << global << " over \"" << mesh.axes[a].name
                        << "\" while it is also split over \""
                        << mesh.axes[b].name
                        << "\" inside it (or interleaved with it)";
}

// The axes whose cut `from` and `to` share: the same dim and block, and the
// same axes cut outside (or interleaved with) it on that dim, so that each
// rank already holds the chunk `to` asks of it.
static llvm::SmallBitVector keptCuts(const Layout &from, const Layout &to) {
  size_t n = from.numAxes();
  llvm::SmallBitVector keeps(n);
  auto outside = [](const Layout &l, size_t a, size_t b) {
    return l.dim[b] == l.dim[a] && (b < a || l.block[a] || l.block[b]);
  };
  for (size_t a = 0; a < n; ++a) {
    if (!from.splits(a) || from.dim[a] != to.dim[a] ||
        from.block[a] != to.block[a])
      continue;
    bool same = true;
    for (size_t b = 0; b < n && same; ++b)
      if (b != a && (outside(from, a, b) != outside(to, a, b) ||
                     (outside(from, a, b) && from.block[b] != to.block[b])))
        same = false;
    keeps[a] = same;
  }
  return keeps;
}

AsyncType Partitioner::handleType(const Resharding &r, const Layout &next) {
  return AsyncType::get(builder.getContext(), localType(r.global, next));
}

// From the layout the producer left `original` in to `to`: partial sums
// first (reduce-scatter where the target splits that axis, else all-reduce),
// then splits that go (all-gather) or move (all-to-all), then new splits
// of replicated data (local slices).
FailureOr<Value> Partitioner::reshard(Value original, const Layout &target,
                                      Location loc) {
  auto [value, held] = current.lookup(original);
  // An axis of one rank moves nothing: its splits and partial sums are
  // names only (the data axis of a plan without data parallelism, in the
  // inspection IR of `--emit partitioned`).
  auto onManyRanks = [&](Layout layout) {
    for (size_t a = 0; a < layout.numAxes(); ++a)
      if (axisSize(a) == 1) {
        layout.unsplit(a);
        layout.setPartial(a, false);
      }
    return layout;
  };
  Layout from = onManyRanks(held), to = onManyRanks(target);
  if (from == to)
    return value;
  auto &cache = resharded[original];
  if (auto it = cache.find(target.key()); it != cache.end())
    return it->second;
  Resharding r{value, from, to, globalType.lookup(original), loc};
  if (failed(reducePartialSums(r)) || failed(removeSplits(r)) ||
      failed(sliceNewSplits(r)))
    return failure();
  assert(r.layout == to && "resharding must reach the target layout");
  cache[target.key()] = r.value;
  return r.value;
}

LogicalResult Partitioner::reducePartialSums(Resharding &r) {
  const Layout &from = r.layout, &to = r.to;
  Location loc = r.loc;
  Layout layout = from;
  SmallVector<Attribute> reduceAxes;
  for (size_t a = 0; a < numAxes(); ++a) {
    // Each rank would hold a different part of its own summand: no
    // collective could finish that sum.
    if (to.isPartial(a) && to.splits(a))
      return emitError(loc)
             << "cannot split dimension " << to.dimOf(a) << " over \""
             << mesh.axes[a].name << "\" and keep a partial sum over it";
    if (to.isPartial(a) && !from.isPartial(a))
      return emitError(loc) << "cannot turn a value into a partial sum over \""
                            << mesh.axes[a].name << "\"";
    if (!from.isPartial(a) || to.isPartial(a))
      continue;
    if (to.splits(a) && !from.splits(a)) {
      Layout next = layout;
      next.setPartial(a, false);
      next.dim[a] = to.dim[a];
      next.block[a] = to.block[a];
      if (next.nestedInside(a) >= 0) {
        // Another axis's cut already sits inside on that dim: sum whole,
        // then cut in order below.
        reduceAxes.push_back(axisName(a));
        layout.setPartial(a, false);
        continue;
      }
      FailureOr<Value> ordered =
          zigzagOrder(r.value, to.dim[a], to.block[a], a, false, loc);
      if (failed(ordered))
        return failure();
      r.value = *ordered;
      auto start = ReduceScatterStartOp::create(
          builder, loc, handleType(r, next), r.value,
          builder.getArrayAttr({axisName(a)}), to.dim[a], to.block[a], "sum");
      r.value = startAndWait(start);
      layout = next;
    } else {
      reduceAxes.push_back(axisName(a));
      layout.setPartial(a, false);
    }
  }
  if (!reduceAxes.empty()) {
    auto start =
        AllReduceStartOp::create(builder, loc, handleType(r, layout), r.value,
                                 builder.getArrayAttr(reduceAxes), "sum");
    r.value = startAndWait(start);
  }
  r.layout = layout;
  return success();
}

LogicalResult Partitioner::removeSplits(Resharding &r) {
  const Layout &to = r.to;
  Layout &layout = r.layout;
  // Inner axes first: an axis leaves a dim only once no axis nests in it.
  // An axis whose own cut stays but whose chunk changes (an axis cut
  // outside it on its dim comes or goes) leaves too, and is cut again below.
  // An all-to-all moves an axis only where it lands with the chunk `to`
  // asks for; the first pass leaves the others for after the outer axes
  // have gone, the second gathers them.
  for (bool last : {false, true}) {
    for (size_t a : llvm::reverse(llvm::seq<size_t>(0, numAxes()))) {
      if (!layout.splits(a) || keptCuts(layout, to).test(a))
        continue;
      if (int b = layout.nestedInside(a); b >= 0) {
        if (!last)
          continue;
        return nestingError(r.loc, r.global, layout.dim[a], a, b);
      }
      // An all-to-all lands the axis innermost on its new dim (the data
      // axes' batch cut, dp then ep, after the MoE experts).
      Layout next = layout;
      next.dim[a] = to.dim[a];
      bool moves = to.splits(a) && to.dim[a] != layout.dim[a] &&
                   !layout.block[a] && !to.block[a] &&
                   next.nestedInside(a) < 0 && !isZigzag(a);
      if (moves && !keptCuts(next, to).test(a)) {
        if (!last)
          continue;
        moves = false;
      }
      if (moves) {
        auto start = AllToAllStartOp::create(
            builder, r.loc, handleType(r, next), r.value,
            builder.getArrayAttr({axisName(a)}), to.dim[a], layout.dim[a]);
        r.value = startAndWait(start);
      } else {
        next = layout;
        next.dim[a] = -1;
        next.block[a] = 0;
        auto start = AllGatherStartOp::create(
            builder, r.loc, handleType(r, next), r.value,
            builder.getArrayAttr({axisName(a)}), layout.dim[a],
            layout.block[a]);
        r.value = startAndWait(start);
        FailureOr<Value> natural = zigzagOrder(r.value, layout.dim[a],
                                               layout.block[a], a, true, r.loc);
        if (failed(natural))
          return failure();
        r.value = *natural;
      }
      layout = next;
    }
  }
  return success();
}

LogicalResult Partitioner::sliceNewSplits(Resharding &r) {
  const Layout &to = r.to;
  Layout &layout = r.layout;
  for (size_t a = 0; a < numAxes(); ++a) {
    if (!to.splits(a) || layout.splits(a))
      continue;
    Layout next = layout;
    next.dim[a] = to.dim[a];
    next.block[a] = to.block[a];
    if (int b = next.nestedInside(a); b >= 0)
      return nestingError(r.loc, r.global, to.dim[a], a, b);
    // Every axis on the dim together must divide it.
    int64_t parts = 1;
    for (size_t b = 0; b < numAxes(); ++b)
      if (next.dim[b] == to.dim[a])
        parts *= axisSize(b);
    if (r.global.getDimSize(to.dim[a]) % parts)
      return emitError(r.loc)
             << "cannot split dimension " << to.dimOf(a) << " of " << r.global
             << " over \"" << mesh.axes[a].name
             << "\" too: its size is not divisible by the " << parts
             << " parts of all the mesh axes splitting it";
    FailureOr<Value> ordered =
        zigzagOrder(r.value, to.dim[a], to.block[a], a, false, r.loc);
    if (failed(ordered))
      return failure();
    r.value = *ordered;
    r.value = ShardSliceOp::create(builder, r.loc, localType(r.global, next),
                                   r.value, builder.getArrayAttr({axisName(a)}),
                                   to.dim[a], to.block[a]);
    layout = next;
  }
  return success();
}

FailureOr<SmallVector<Layout>> Partitioner::resultLayouts(Operation *op) {
  auto attrs = op->getAttrOfType<ArrayAttr>(kShardingAttr);
  if (!attrs)
    return op->emitOpError("has no dtc.sharding annotation; run "
                           "dtc-propagate-sharding first");
  if (attrs.size() != op->getNumResults())
    return op->emitOpError("has ") << attrs.size() << " shardings for "
                                   << op->getNumResults() << " results";
  SmallVector<Layout> layouts;
  for (auto [attr, result] : llvm::zip(attrs, op->getResults())) {
    FailureOr<Layout> layout =
        fromAttr(attr, globalType.lookup(result), op->getLoc());
    if (failed(layout))
      return failure();
    layouts.push_back(*layout);
  }
  return layouts;
}

// `op`'s operands brought to the layouts it reads them in.
FailureOr<SmallVector<Value>>
Partitioner::reshardOperands(Operation *op, ArrayRef<Layout> operandLayouts) {
  SmallVector<Value> operands;
  for (auto [operand, layout] : llvm::zip(op->getOperands(), operandLayouts)) {
    FailureOr<Value> local = reshard(operand, layout, op->getLoc());
    if (failed(local))
      return failure();
    operands.push_back(*local);
  }
  return operands;
}

// Copies `op` into the new body reading each operand in its layout; its
// results take their local types and are recorded in `results`' layouts.
LogicalResult Partitioner::copyOp(Operation *op,
                                  ArrayRef<Layout> operandLayouts,
                                  ArrayRef<Layout> results) {
  FailureOr<SmallVector<Value>> operands = reshardOperands(op, operandLayouts);
  if (failed(operands))
    return failure();
  Operation *copy = builder.clone(*op);
  copy->setOperands(*operands);
  copy->removeAttr(kShardingAttr);
  for (auto [i, result] : llvm::enumerate(op->getResults())) {
    copy->getResult(i).setType(
        localType(globalType.lookup(result), results[i]));
    current[result] = {copy->getResult(i), results[i]};
  }
  return success();
}

// A sum of partial sums is a partial sum: an add or sub of two operands
// held alike, partial over some axes (the gradient contributions of a
// weight read twice, such as a tied embedding), runs on the partial sums,
// and its result stays partial until a reader needs it reduced: once, and
// for a gradient the training step accumulates, once per step.
bool Partitioner::isAddOfPartialSums(Operation *op, const Layout &result) {
  if (!isa<AddOp, SubOp>(op) ||
      op->getOperand(0).getType() != op->getOperand(1).getType() ||
      op->getOperand(0).getType() != op->getResult(0).getType())
    return false;
  const Layout &lhs = current.lookup(op->getOperand(0)).second;
  const Layout &rhs = current.lookup(op->getOperand(1)).second;
  return lhs == rhs && lhs.anyPartial() && result.dimsOnly() == lhs.dimsOnly();
}

LogicalResult Partitioner::addPartialSums(Operation *op) {
  auto [lhs, lhsLayout] = current.lookup(op->getOperand(0));
  Value rhs = current.lookup(op->getOperand(1)).first;
  Operation *local = builder.clone(*op);
  local->setOperands({lhs, rhs});
  local->removeAttr(kShardingAttr);
  local->getResult(0).setType(lhs.getType());
  current[op->getResult(0)] = {local->getResult(0), lhsLayout};
  return success();
}

// A partial result of a mean (reduce_mean, the loss and its gradient over
// split positions) holds the local mean; dividing by the group makes the
// sum over the group the global mean.
void Partitioner::scaleResult(Operation *newOp, unsigned index,
                              int64_t divisor) {
  Value result = newOp->getResult(index);
  auto type = cast<RankedTensorType>(result.getType());
  auto scalarType = RankedTensorType::get({}, type.getElementType());
  auto factor = DenseElementsAttr::get(
      scalarType, builder.getFloatAttr(type.getElementType(), 1.0 / divisor));
  Value constant = ConstantOp::create(builder, newOp->getLoc(), factor);
  Value scaled = MulOp::create(builder, newOp->getLoc(), result, constant);
  for (auto &[original, entry] : current)
    if (entry.first == result)
      entry.first = scaled;
}

// An op with a sharding rule: the loop split of each mesh axis follows from
// the annotated result shardings (a split result dim, or a partial result
// over a reduction loop); the operand layouts follow from the loops.
LogicalResult Partitioner::partitionRuleOp(ShardingRuleOpInterface rule) {
  Operation *op = rule.getOperation();
  FailureOr<SmallVector<Layout>> results = resultLayouts(op);
  if (failed(results))
    return failure();
  if (contextAxis && isa<AttentionOp, AttentionGradOp>(op) &&
      (*results)[0].dim[*contextAxis] == 2)
    return partitionRingAttention(op, *results, *contextAxis);
  if (isAddOfPartialSums(op, (*results)[0]))
    return addPartialSums(op);
  RuleLoops loops{rule, op, std::move(*results)};
  loops.iterators = rule.getLoopIteratorTypes();
  loops.maps = rule.getIndexingMaps();
  loops.numOperands = op->getNumOperands();
  loops.numLoops = loops.iterators.size();
  SmallVector<Value> values(op->getOperands());
  llvm::append_range(values, op->getResults());
  SmallVector<ArrayRef<int64_t>> shapes;
  for (Value value : values)
    shapes.push_back(globalType.lookup(value).getShape());
  loops.extent = loopExtents(loops.maps, shapes, loops.numLoops);

  loops.loopOf.assign(numAxes(), -1);
  loops.blockOf.assign(numAxes(), 0);
  for (size_t a = 0; a < numAxes(); ++a) {
    if (failed(loopFromResults(loops, a)))
      return failure();
    if (loops.loopOf[a] < 0 && failed(loopFromPartialResult(loops, a)))
      return failure();
  }
  if (failed(checkResultsMatchLoops(loops)))
    return failure();
  FailureOr<SmallVector<Layout>> operandLayouts = operandLayoutsFor(loops);
  if (failed(operandLayouts) || failed(checkCausalAttention(loops)))
    return failure();

  if (failed(copyOp(op, *operandLayouts, loops.results)))
    return failure();
  Operation *copy = current.lookup(op->getResult(0)).first.getDefiningOp();
  // The local labels, before a vocabulary-parallel loss replaces the copy.
  Value localLabels = isa<CrossEntropyOp, CrossEntropyGradOp>(copy)
                          ? copy->getOperand(1)
                          : Value();
  if (failed(lowerVocabParallel(loops, copy)))
    return failure();
  if (failed(localizeCopy(loops, copy)))
    return failure();
  divideMeans(loops, copy, localLabels);
  return success();
}

LogicalResult Partitioner::loopFromResults(RuleLoops &loops, size_t a) {
  Operation *op = loops.op;
  for (auto [r, layout] : llvm::enumerate(loops.results)) {
    if (!layout.splits(a))
      continue;
    int64_t loop, offset;
    if (!matchShifted(
            loops.maps[loops.numOperands + r].getResult(layout.dim[a]), loop,
            offset))
      return op->emitOpError("result ")
             << r << " is split on dimension " << layout.dimOf(a)
             << ", which is not a loop of its sharding rule";
    // The loop is split in runs of its whole extent, or of the block.
    int64_t size =
        globalType.lookup(op->getResult(r)).getDimSize(layout.dim[a]);
    int64_t run = layout.block[a] ? layout.block[a] : size;
    int64_t block = run == loops.extent[loop] ? 0 : run;
    if (loops.loopOf[a] >= 0 &&
        (loops.loopOf[a] != loop || loops.blockOf[a] != block))
      return op->emitOpError("results disagree on the loop mesh axis \"")
             << mesh.axes[a].name << "\" splits";
    loops.loopOf[a] = loop;
    loops.blockOf[a] = block;
  }
  return success();
}

LogicalResult Partitioner::loopFromPartialResult(RuleLoops &loops, size_t a) {
  Operation *op = loops.op;
  int64_t numLoops = loops.numLoops;
  auto partialResult = llvm::find_if(
      loops.results, [&](const Layout &layout) { return layout.isPartial(a); });
  if (partialResult == loops.results.end()) {
    // A whole loss of logits split on the vocabulary: the
    // vocabulary-parallel loss (a contiguous split only: a shard is a
    // range of ids).
    const Layout &logits = current.lookup(op->getOperand(0)).second;
    if (isa<CrossEntropyOp>(op) && logits.dim[a] == numLoops - 1 &&
        !logits.block[a])
      loops.loopOf[a] = numLoops - 1;
    return success();
  }
  // The reduction loop split: the one whose operand dims the producers
  // already split over this axis, else the first one that may be split
  // and that no earlier axis splits (the loss's positions: dp takes the
  // batch, tp the sequence).
  AffineMap resultMap =
      loops.maps[loops.numOperands + (partialResult - loops.results.begin())];
  SmallVector<int64_t> candidates;
  for (int64_t l = 0; l < numLoops; ++l)
    if (!resultMap.isFunctionOfDim(l) &&
        ((loops.iterators[l] == IteratorType::reduction &&
          isSumLikeReduction(op, l)) ||
         sumsOverParallelLoops(op)))
      candidates.push_back(l);
  if (candidates.empty())
    return op->emitOpError("result is partial over \"")
           << mesh.axes[a].name << "\" but no loop of the op can be split";
  loops.loopOf[a] = candidates.front();
  for (int64_t l : candidates)
    if (!llvm::is_contained(ArrayRef(loops.loopOf).take_front(a), l) &&
        loops.extent[l] % axisSize(a) == 0) {
      loops.loopOf[a] = l;
      break;
    }
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    const Layout &have = current.lookup(operand).second;
    if (!have.splits(a))
      continue;
    int64_t loop, offset;
    if (matchShifted(loops.maps[i].getResult(have.dim[a]), loop, offset) &&
        llvm::is_contained(candidates, loop)) {
      int64_t size = globalType.lookup(operand).getDimSize(have.dim[a]);
      int64_t run = have.block[a] ? have.block[a] : size;
      loops.loopOf[a] = loop;
      loops.blockOf[a] = run == loops.extent[loop] ? 0 : run;
      break;
    }
  }
  return success();
}

LogicalResult Partitioner::checkResultsMatchLoops(const RuleLoops &loops) {
  // Every result must agree with the split loops: split where it indexes a
  // split loop, partial where it does not (else the local op would compute
  // something else than the annotation says).
  for (size_t a = 0; a < numAxes(); ++a)
    for (auto [r, layout] : llvm::enumerate(loops.results)) {
      AffineMap map = loops.maps[loops.numOperands + r];
      int64_t loop = loops.loopOf[a];
      bool indexed = loop >= 0 && map.isFunctionOfDim(loop);
      bool whole =
          loop < 0 || (!indexed && isVocabParallelLoop(loops.op, loop));
      bool consistent =
          whole ? !layout.splits(a) && !layout.isPartial(a)
                : (indexed ? layout.splits(a) && !layout.isPartial(a)
                           : layout.isPartial(a));
      if (!consistent)
        return loops.op->emitOpError("sharding of result ")
               << r << " does not match the loops its other results split "
               << "over mesh axis \"" << mesh.axes[a].name << "\"";
    }
  return success();
}

FailureOr<SmallVector<Layout>>
Partitioner::operandLayoutsFor(const RuleLoops &loops) {
  Operation *op = loops.op;
  // The layout each operand is read in.
  SmallVector<LoopSplit> splits(numAxes());
  for (size_t a = 0; a < numAxes(); ++a)
    splits[a] = {loops.loopOf[a], loops.blockOf[a], axisSize(a)};
  SmallVector<Layout> operandLayouts;
  for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
    Layout layout;
    std::optional<LoopLayoutError> error =
        layoutForLoops(loops.maps[i], globalType.lookup(operand).getShape(),
                       splits, loops.extent, /*groupedHeads=*/true, layout);
    if (error) {
      StringRef axis = mesh.axes[error->axis].name;
      switch (error->kind) {
      case LoopLayoutError::Misaligned:
        return op->emitOpError("operand ")
               << i << " dimension " << error->dim
               << " cannot be split like loop " << loops.loopOf[error->axis]
               << " over \"" << axis << "\"";
      case LoopLayoutError::UnevenGroups:
        return op->emitOpError("grouped-query attention with query heads "
                               "split over \"")
               << axis
               << "\" and key/value heads that do not divide it is not "
                  "supported yet";
      case LoopLayoutError::NotPlainLoop:
        return op->emitOpError("operand ")
               << i << " dimension " << error->dim
               << " is not a plain loop and cannot be split over \"" << axis
               << "\"";
      }
    }
    operandLayouts.push_back(layout);
  }
  return operandLayouts;
}

LogicalResult Partitioner::checkCausalAttention(const RuleLoops &loops) {
  // Ops whose local computation needs more than local shapes.
  for (size_t a = 0; a < numAxes(); ++a) {
    if (loops.loopOf[a] < 0)
      continue;
    auto attention = dyn_cast<AttentionOp>(loops.op);
    auto attentionGrad = dyn_cast<AttentionGradOp>(loops.op);
    if (((attention && attention.getCausal()) ||
         (attentionGrad && attentionGrad.getCausal())) &&
        loops.results[0].dim[a] == 2)
      return loops.op->emitOpError("causal attention with query positions "
                                   "split over \"")
             << mesh.axes[a].name
             << "\" needs a position offset, which is not supported yet";
  }
  return success();
}

LogicalResult Partitioner::lowerVocabParallel(const RuleLoops &loops,
                                              Operation *&copy) {
  Operation *op = loops.op;
  // The loss over vocabulary shards (one exchange of row statistics), and
  // lookups into table rows split over the vocabulary (the table is the
  // lookup's last loop).
  bool lookup = op->hasTrait<traits::RowLookup>();
  SmallVector<Attribute> vocabAxes;
  int64_t shards = 1;
  for (size_t a = 0; a < numAxes(); ++a)
    if (loops.loopOf[a] >= 0 &&
        (isVocabParallelLoop(op, loops.loopOf[a]) ||
         (lookup && loops.loopOf[a] == loops.numLoops - 1))) {
      if (loops.blockOf[a])
        return op->emitOpError("an interleaved split of the vocabulary over \"")
               << mesh.axes[a].name << "\" is not supported";
      vocabAxes.push_back(axisName(a));
      shards *= axisSize(a);
    }
  if (!vocabAxes.empty() && lookup)
    copy = lowerVocabParallelLookup(copy, builder.getArrayAttr(vocabAxes));
  else if (!vocabAxes.empty())
    copy =
        lowerVocabParallelLoss(copy, builder.getArrayAttr(vocabAxes), shards);
  return success();
}

LogicalResult Partitioner::localizeCopy(const RuleLoops &loops,
                                        Operation *copy) {
  // Attributes that hold global positions or shapes.
  auto local = dyn_cast<LocalFormOpInterface>(copy);
  if (!local)
    return success();
  SmallVector<RankedTensorType> operandTypes;
  for (Value operand : loops.op->getOperands())
    operandTypes.push_back(globalType.lookup(operand));
  LocalForm form{loops.op, operandTypes, {}};
  for (size_t a = 0; a < numAxes(); ++a)
    if (loops.results[0].dim[a] >= 0)
      form.resultSplits.push_back({mesh.axes[a].name, loops.results[0].dim[a],
                                   axisSize(a), isZigzag(a)});
  return local.localize(form);
}

void Partitioner::divideMeans(const RuleLoops &loops, Operation *copy,
                              Value localLabels) {
  ShardingRuleOpInterface rule = loops.rule;
  // Means over split loops: the copy divided by its local extent; a loss
  // over labels, by its share of the labels counted (ignored labels make
  // the ranks' counts differ).
  int64_t divisor = 1;
  SmallVector<Attribute> meanAxes;
  for (size_t a = 0; a < numAxes(); ++a)
    if (loops.loopOf[a] >= 0 && rule.isMeanLoop(loops.loopOf[a])) {
      divisor *= axisSize(a);
      meanAxes.push_back(axisName(a));
    }
  if (divisor > 1 && localLabels)
    weighByCountedLabels(copy, localLabels,
                         copy->getAttrOfType<IntegerAttr>("ignore_index")
                             .getValue()
                             .getSExtValue(),
                         meanAxes);
  else if (divisor > 1)
    scaleResult(copy, 0, divisor);
}

// The cross-entropy over positions split across `axes` (data or context
// parallel) is the mean over the labels that count (not `ignore`): each
// rank's local mean times its share of the group's count sums to the
// global mean, where dividing by the group size would weigh a rank with
// fewer counted labels as much as one with more. A rank counting none
// holds NaN (0/0) locally and contributes 0.
void Partitioner::weighByCountedLabels(Operation *newOp, Value labels,
                                       int64_t ignore,
                                       ArrayRef<Attribute> axes) {
  Location loc = newOp->getLoc();
  auto labelsType = cast<RankedTensorType>(labels.getType());
  Type f32 = builder.getF32Type();
  auto scalar = RankedTensorType::get({}, f32);
  auto constant = [&](float v) -> Value {
    return ConstantOp::create(builder, loc, DenseElementsAttr::get(scalar, v));
  };
  // The loss and its gradient read the same labels: one count exchange.
  LabelShare &cached = labelShares[labels];
  if (!cached.share)
    cached = countLabelShare(labels, ignore, axes, loc);
  Value result = newOp->getResult(0);
  Value weighed = MulOp::create(builder, loc, result, cached.share);
  weighed =
      SelectOp::create(builder, loc, cached.counted, weighed, constant(0));
  for (auto &[original, entry] : current)
    if (entry.first == result)
      entry.first = weighed;
}

// This rank's share of the labels that count (not `ignore`) over the group
// of `axes`, and whether it counts any.
Partitioner::LabelShare Partitioner::countLabelShare(Value labels,
                                                     int64_t ignore,
                                                     ArrayRef<Attribute> axes,
                                                     Location loc) {
  auto labelsType = cast<RankedTensorType>(labels.getType());
  Type f32 = builder.getF32Type();
  auto scalar = RankedTensorType::get({}, f32);
  auto constant = [&](float v) -> Value {
    return ConstantOp::create(builder, loc, DenseElementsAttr::get(scalar, v));
  };
  Value ignored = ConstantOp::create(
      builder, loc,
      DenseElementsAttr::get(
          RankedTensorType::get({}, labelsType.getElementType()),
          builder.getIntegerAttr(labelsType.getElementType(), ignore)));
  Value counts =
      CompareOp::create(builder, loc, labelsType.clone(builder.getI1Type()),
                        labels, ignored, "ne");
  Value ones = CastOp::create(builder, loc, counts, TypeAttr::get(f32));
  auto all = llvm::to_vector(llvm::seq<int64_t>(0, labelsType.getRank()));
  Value local = ReduceSumOp::create(builder, loc, ones, all, false);
  Value total = startAndWait(AllReduceStartOp::create(
      builder, loc, AsyncType::get(builder.getContext(), scalar), local,
      builder.getArrayAttr(axes), "sum"));
  Value share = DivOp::create(builder, loc, local,
                              MaxOp::create(builder, loc, total, constant(1)));
  Value counted = CompareOp::create(
      builder, loc, RankedTensorType::get({}, builder.getI1Type()), local,
      constant(0), "gt");
  return {share, counted};
}

// The vocabulary-parallel loss (Megatron's vocab_parallel_cross_entropy):
// each rank reduces its logits shard to three numbers per row (max, sum of
// exponentials, label logit), one all-gather of those [rows, 3] gives every
// rank all shards', and the loss and this shard's gradient follow without
// moving the logits. The gradient reuses the forward's gathered statistics
// when it reads the same local logits and labels. `copy` (the local
// cross_entropy or cross_entropy_grad, its logits split over `axes`) is
// replaced; returns what replaces it.
Operation *Partitioner::lowerVocabParallelLoss(Operation *copy, ArrayAttr axes,
                                               int64_t shards) {
  Location loc = copy->getLoc();
  Value logits = copy->getOperand(0), labels = copy->getOperand(1);
  IntegerAttr ignore = copy->getAttrOfType<IntegerAttr>("ignore_index");
  Value &stats = vocabStats[{logits, labels}];
  if (!stats) {
    SmallVector<int64_t> shape(
        cast<RankedTensorType>(labels.getType()).getShape());
    shape.push_back(3);
    Type f32 = builder.getF32Type();
    Value local = CrossEntropyStatsOp::create(builder, loc,
                                              RankedTensorType::get(shape, f32),
                                              logits, labels, axes, ignore);
    shape.back() = 3 * shards;
    auto start = AllGatherStartOp::create(
        builder, loc,
        AsyncType::get(builder.getContext(), RankedTensorType::get(shape, f32)),
        local, axes, static_cast<int64_t>(shape.size() - 1), 0);
    stats = startAndWait(start);
  }
  Operation *lowered;
  if (isa<CrossEntropyOp>(copy))
    lowered = CrossEntropyFromStatsOp::create(
        builder, loc, copy->getResult(0).getType(), stats, labels, ignore);
  else
    lowered = CrossEntropyShardGradOp::create(
        builder, loc, copy->getResult(0).getType(), logits, labels, stats,
        copy->getOperand(2), axes, ignore);
  return replaceCopy(copy, lowered);
}

Operation *Partitioner::replaceCopy(Operation *copy, Operation *lowered) {
  lowered->setDiscardableAttrs(copy->getDiscardableAttrDictionary());
  for (auto &[original, entry] : current)
    if (entry.first == copy->getResult(0))
      entry.first = lowered->getResult(0);
  copy->erase();
  return lowered;
}

// The vocabulary-parallel embedding (Megatron's VocabParallelEmbedding): a
// rank holding a block of the table's rows looks every id up in its block,
// zeros where the id is not there, so the lookups are a partial sum over
// the group (the propagation's one-hot contraction over a split row loop);
// the table gradient's rows are each rank's ids' sums, with no exchange.
// `copy` (the local embedding or embedding_grad) is replaced; returns what
// replaces it.
Operation *Partitioner::lowerVocabParallelLookup(Operation *copy,
                                                 ArrayAttr axes) {
  Location loc = copy->getLoc();
  Type type = copy->getResult(0).getType();
  Operation *lowered;
  if (isa<EmbeddingOp>(copy))
    lowered = EmbeddingShardOp::create(builder, loc, type, copy->getOperand(0),
                                       copy->getOperand(1), axes);
  else
    lowered = EmbeddingShardGradOp::create(
        builder, loc, type, copy->getOperand(0), copy->getOperand(1),
        cast<RankedTensorType>(type).getDimSize(0), axes);
  return replaceCopy(copy, lowered);
}

// Ring attention (context parallelism). The context axis cuts the sequence
// into n chunks; a rank holds its chunk of the queries, keys and values.
// Step i attends the local queries to the key/value chunk that i hops of
// the ring brought (cyclic send to +1, receive from -1), started before the
// step's block computes so the transfer overlaps it; the blocks merge by
// their log-sum-exp. n - 1 exchanges of K and V per forward pass.

SmallVector<std::pair<Value, Value>>
Partitioner::startRingShift(ValueRange values, size_t axis, Location loc) {
  ArrayAttr axes = builder.getArrayAttr({axisName(axis)});
  SmallVector<std::pair<Value, Value>> handles;
  for (Value value : values) {
    Value send = SendStartOp::create(
        builder, loc,
        AsyncType::get(builder.getContext(), builder.getNoneType()), value,
        axes, builder.getI64IntegerAttr(1), builder.getUnitAttr());
    Value recv = RecvStartOp::create(
        builder, loc, AsyncType::get(builder.getContext(), value.getType()),
        axes, builder.getI64IntegerAttr(-1), builder.getUnitAttr());
    handles.push_back({send, recv});
  }
  return handles;
}

SmallVector<Value>
Partitioner::finishRingShift(ArrayRef<std::pair<Value, Value>> handles,
                             Location loc) {
  SmallVector<Value> received;
  for (auto [send, recv] : handles) {
    WaitOp::create(builder, loc, send);
    received.push_back(WaitOp::create(builder, loc, recv).getOutput());
  }
  return received;
}

Partitioner::RingForward Partitioner::emitRingForward(Value query, Value key,
                                                      Value value, bool causal,
                                                      double scale, size_t axis,
                                                      Location loc) {
  int64_t n = axisSize(axis);
  ArrayAttr axes = builder.getArrayAttr({axisName(axis)});
  auto q = cast<RankedTensorType>(query.getType());
  auto v = cast<RankedTensorType>(value.getType());
  auto outputType = RankedTensorType::get(
      {q.getDimSize(0), q.getDimSize(1), q.getDimSize(2), v.getDimSize(3)},
      q.getElementType());
  auto lseType =
      RankedTensorType::get(q.getShape().drop_back(), builder.getF32Type());
  RingForward ring{query, key, value, Value(), Value()};
  Value chunkKey = key, chunkValue = value;
  for (int64_t i = 0; i < n; ++i) {
    SmallVector<std::pair<Value, Value>> shift;
    if (i + 1 < n)
      shift = startRingShift({chunkKey, chunkValue}, axis, loc);
    auto block = AttentionBlockOp::create(
        builder, loc, outputType, lseType, query, chunkKey, chunkValue, axes,
        builder.getI64IntegerAttr(i),
        causal ? builder.getUnitAttr() : UnitAttr(),
        builder.getF64FloatAttr(scale),
        zigzag ? builder.getUnitAttr() : UnitAttr());
    if (i == 0) {
      ring.output = block.getOutput();
      ring.lse = block.getLse();
    } else {
      auto merged = AttentionMergeOp::create(builder, loc, outputType, lseType,
                                             ring.output, ring.lse,
                                             block.getOutput(), block.getLse());
      ring.output = merged.getOutput();
      ring.lse = merged.getLse();
    }
    if (!shift.empty()) {
      SmallVector<Value> next = finishRingShift(shift, loc);
      chunkKey = next[0];
      chunkValue = next[1];
    }
  }
  return ring;
}

// The forward ring as above. The gradient's ring reuses the forward's
// output and log-sum-exp (recomputing them by a forward ring when this
// function does not hold that forward) and sends each key/value chunk's
// gradient accumulator along with the chunk: after n steps it is back at
// the rank that holds the chunk, summed over every rank's queries. n - 1
// exchanges of K and V and n of their gradients.
LogicalResult Partitioner::partitionRingAttention(Operation *op,
                                                  ArrayRef<Layout> results,
                                                  size_t axis) {
  Layout queryLayout = results[0];
  for (size_t a = 0; a < numAxes(); ++a)
    if (queryLayout.isPartial(a) ||
        (queryLayout.splits(a) &&
         (queryLayout.dim[a] == 3 || queryLayout.block[a])))
      return op->emitOpError("ring attention over \"")
             << mesh.axes[axis].name << "\" reads its batch, heads and "
             << "positions split, not its head dims or interleaved, over \""
             << mesh.axes[a].name << "\"";
  // Keys and values [b, g, t, *] split like the queries [b, h, s, *]:
  // batch, kv heads (which must divide like the query heads) and chunks.
  Layout kvLayout = queryLayout;
  RankedTensorType keyType = globalType.lookup(op->getOperand(1));
  for (size_t a = 0; a < numAxes(); ++a)
    if (kvLayout.dim[a] == 1 && keyType.getDimSize(1) % axisSize(a))
      return op->emitOpError("grouped-query attention with query heads "
                             "split over \"")
             << mesh.axes[a].name
             << "\" and key/value heads that do not divide it is not "
                "supported yet";
  SmallVector<Layout> operandLayouts = {queryLayout, kvLayout, kvLayout};
  if (isa<AttentionGradOp>(op))
    operandLayouts.push_back(queryLayout);
  FailureOr<SmallVector<Value>> resharded = reshardOperands(op, operandLayouts);
  if (failed(resharded))
    return failure();
  ArrayRef<Value> operands = *resharded;
  Location loc = op->getLoc();

  if (auto attention = dyn_cast<AttentionOp>(op)) {
    RingForward ring = emitRingForward(
        operands[0], operands[1], operands[2], attention.getCausal(),
        attention.getEffectiveScale(), axis, loc);
    ringForwards[op] = ring;
    current[attention.getOutput()] = {ring.output, queryLayout};
    return success();
  }

  auto grad = cast<AttentionGradOp>(op);
  bool causal = grad.getCausal();
  double scale = grad.getEffectiveScale();
  // The forward of these operands, if this function partitioned it.
  std::optional<RingForward> forward;
  for (Operation *user : grad.getQuery().getUsers()) {
    auto attention = dyn_cast<AttentionOp>(user);
    auto it = ringForwards.find(user);
    if (attention && it != ringForwards.end() &&
        attention.getKey() == grad.getKey() &&
        attention.getValue() == grad.getValue() &&
        attention.getCausal() == causal &&
        attention.getEffectiveScale() == scale &&
        it->second.query == operands[0] && it->second.key == operands[1] &&
        it->second.value == operands[2])
      forward = it->second;
  }
  if (!forward)
    forward = emitRingForward(operands[0], operands[1], operands[2], causal,
                              scale, axis, loc);

  int64_t n = axisSize(axis);
  ArrayAttr axes = builder.getArrayAttr({axisName(axis)});
  Value chunkKey = operands[1], chunkValue = operands[2];
  Value queryGrad, keyGrad, valueGrad; // this chunk's accumulators
  // The previous rank's accumulators in flight: waited only where they are
  // added, so each transfer overlaps the next block's computation.
  SmallVector<std::pair<Value, Value>> gradShift;
  for (int64_t i = 0; i < n; ++i) {
    SmallVector<std::pair<Value, Value>> shift;
    if (i + 1 < n)
      shift = startRingShift({chunkKey, chunkValue}, axis, loc);
    auto block = AttentionBlockGradOp::create(
        builder, loc, operands[0].getType(), chunkKey.getType(),
        chunkValue.getType(), operands[0], chunkKey, chunkValue,
        forward->output, forward->lse, operands[3], axes,
        builder.getI64IntegerAttr(i),
        causal ? builder.getUnitAttr() : UnitAttr(),
        builder.getF64FloatAttr(scale),
        zigzag ? builder.getUnitAttr() : UnitAttr());
    keyGrad = block.getKeyGrad();
    valueGrad = block.getValueGrad();
    if (i == 0) {
      queryGrad = block.getQueryGrad();
    } else {
      queryGrad = AddOp::create(builder, loc, queryGrad, block.getQueryGrad());
      SmallVector<Value> received = finishRingShift(gradShift, loc);
      keyGrad = AddOp::create(builder, loc, received[0], keyGrad);
      valueGrad = AddOp::create(builder, loc, received[1], valueGrad);
    }
    gradShift = startRingShift({keyGrad, valueGrad}, axis, loc);
    if (!shift.empty()) {
      SmallVector<Value> next = finishRingShift(shift, loc);
      chunkKey = next[0];
      chunkValue = next[1];
    }
  }
  SmallVector<Value> received = finishRingShift(gradShift, loc);
  current[grad.getQueryGrad()] = {queryGrad, queryLayout};
  current[grad.getKeyGrad()] = {received[0], kvLayout};
  current[grad.getValueGrad()] = {received[1], kvLayout};
  return success();
}

// A reshape keeps the row-major order: a split is a digit of the flat index
// (stride U, n values); the result keeps it where one of its dims holds that
// digit whole, else the input is gathered along that axis first. The local
// reshape of the remaining digits is then the same reshape of local shapes.
LogicalResult Partitioner::partitionReshape(ReshapeOp op) {
  const Layout &input = current.lookup(op.getInput()).second;
  SmallVector<int64_t> sizes;
  for (size_t a = 0; a < numAxes(); ++a)
    sizes.push_back(axisSize(a));
  ReshapeLayouts layouts = reshapeLayouts(
      globalType.lookup(op.getInput()).getShape(),
      globalType.lookup(op.getOutput()).getShape(), input, sizes);
  return copyOp(op, {layouts.operand}, {layouts.result});
}

// Ops without a rule read their operands in `operandLayout` (replicated
// when null) and produce what their annotation says.
LogicalResult Partitioner::partitionOther(Operation *op,
                                          const Layout *operandLayout) {
  FailureOr<SmallVector<Layout>> results = resultLayouts(op);
  if (failed(results))
    return failure();
  Layout replicated = Layout::replicated(numAxes());
  SmallVector<Layout> operands(op->getNumOperands(),
                               operandLayout ? *operandLayout : replicated);
  for (const Layout &layout : *results)
    if (!operandLayout && !(layout == replicated))
      return op->emitOpError("has no sharding rule, so its results must be "
                             "replicated");
  if (operandLayout)
    results->assign(op->getNumResults(), *operandLayout);
  return copyOp(op, operands, *results);
}

LogicalResult Partitioner::recordGlobalTypes(Block &body) {
  for (BlockArgument arg : body.getArguments())
    if (auto type = dyn_cast<RankedTensorType>(arg.getType());
        type && type.hasStaticShape())
      globalType[arg] = type;
    else
      return emitError(arg.getLoc())
             << "dtc-partition handles static tensors only, got "
             << arg.getType();
  for (Operation &op : body)
    for (Value result : op.getResults())
      if (auto type = dyn_cast<RankedTensorType>(result.getType());
          type && type.hasStaticShape())
        globalType[result] = type;
      else
        return op.emitOpError("dtc-partition handles static tensors only, "
                              "got ")
               << result.getType();
  return success();
}

LogicalResult Partitioner::addLocalArguments(func::FuncOp func, Block &newBody,
                                             SmallVectorImpl<Layout> &layouts) {
  for (BlockArgument arg : func.getBody().front().getArguments()) {
    Layout layout = Layout::replicated(numAxes());
    if (Attribute attr = func.getArgAttr(arg.getArgNumber(), kShardingAttr)) {
      FailureOr<Layout> parsed =
          fromAttr(attr, globalType.lookup(arg), arg.getLoc());
      if (failed(parsed))
        return failure();
      layout = *parsed;
    }
    Value local = newBody.addArgument(localType(globalType.lookup(arg), layout),
                                      arg.getLoc());
    current[arg] = {local, layout};
    layouts.push_back(layout);
  }
  return success();
}

LogicalResult Partitioner::partitionParameter(ParameterOp param) {
  // Stored as its first user reads it: the local shard, named globally.
  FailureOr<SmallVector<Layout>> layouts = resultLayouts(param);
  if (failed(layouts))
    return failure();
  RankedTensorType global = globalType.lookup(param.getOutput());
  Layout layout = (*layouts)[0].dimsOnly();
  // Split over the context axis (position embeddings, read by sequence
  // position), a rank would need its two zigzag halves, far apart: it
  // is stored whole over that axis and sliced where read, like a
  // constant (its gradient is summed over the axis like any weight's).
  if (contextAxis && isZigzag(*contextAxis) && layout.splits(*contextAxis)) {
    layout.dim[*contextAxis] = -1;
    layout.block[*contextAxis] = 0;
  }
  auto copy = cast<ParameterOp>(builder.clone(*param.getOperation()));
  copy->removeAttr(kShardingAttr);
  copy.getOutput().setType(localType(global, layout));
  copy->setAttr("dtc.shard", toAttr(layout, global));
  copy->setAttr("dtc.global_type", TypeAttr::get(global));
  current[param.getOutput()] = {copy.getOutput(), layout};
  parameterLayouts[param.getName()] = layout;
  return success();
}

LogicalResult Partitioner::partitionConstant(ConstantOp constant) {
  // A splat is the same on every rank; other constants stay whole and
  // are sliced where they are read split.
  FailureOr<SmallVector<Layout>> layouts = resultLayouts(constant);
  if (failed(layouts))
    return failure();
  RankedTensorType global = globalType.lookup(constant.getOutput());
  auto dense = dyn_cast<DenseElementsAttr>(constant.getValue());
  Layout layout = (*layouts)[0].dimsOnly();
  if (!dense || !dense.isSplat())
    layout = Layout::replicated(numAxes());
  RankedTensorType local = localType(global, layout);
  Value value = local == global ? ConstantOp::create(builder, constant.getLoc(),
                                                     constant.getValue())
                                      .getOutput()
                                : ConstantOp::create(builder, constant.getLoc(),
                                                     dense.resizeSplat(local))
                                      .getOutput();
  current[constant.getOutput()] = {value, layout};
  return success();
}

LogicalResult Partitioner::partitionConcat(ConcatOp concat) {
  // Every input read like the first, minus the concatenated dim.
  Layout layout = current.lookup(concat.getOperand(0)).second.dimsOnly();
  for (size_t a = 0; a < numAxes(); ++a)
    if (layout.dim[a] == static_cast<int64_t>(concat.getAxis())) {
      layout.dim[a] = -1;
      layout.block[a] = 0;
    }
  return partitionOther(concat, &layout);
}

LogicalResult
Partitioner::partitionReturn(func::ReturnOp ret, func::FuncOp func,
                             SmallVectorImpl<Attribute> &resultShardings) {
  // Results are whole values: partial sums are reduced, splits kept. A
  // parameter's gradient takes the parameter's layout, and stays a
  // partial sum when the training step reduces it later, but only over
  // axes that do not split it: ranks holding different parts of a value
  // cannot sum them, so a sum over a splitting axis is reduce-scattered
  // here (a sequence-parallel weight gradient under tensor parallelism).
  SmallVector<Value> operands;
  for (auto [index, operand] : llvm::enumerate(ret.getOperands())) {
    const Layout &produced = current.lookup(operand).second;
    Layout layout = produced.dimsOnly();
    if (auto of =
            func.getResultAttrOfType<StringAttr>(index, ::dtc::kGradOfAttrName))
      if (auto it = parameterLayouts.find(of.getValue());
          it != parameterLayouts.end()) {
        layout = it->second;
        if (deferGradientSync)
          for (size_t a = 0; a < numAxes(); ++a)
            layout.setPartial(a, produced.isPartial(a) && !layout.splits(a));
      }
    // A result annotated before partitioning is returned in that layout
    // (a pipeline stage's activation, read by the next stage's
    // argument of the same layout).
    if (Attribute wanted = func.getResultAttr(index, kShardingAttr)) {
      FailureOr<Layout> parsed =
          fromAttr(wanted, globalType.lookup(operand), ret.getLoc());
      if (failed(parsed))
        return failure();
      layout = *parsed;
    }
    FailureOr<Value> local = reshard(operand, layout, ret.getLoc());
    if (failed(local))
      return failure();
    operands.push_back(*local);
    resultShardings.push_back(toAttr(layout, globalType.lookup(operand)));
  }
  func::ReturnOp::create(builder, ret.getLoc(), operands);
  return success();
}

LogicalResult Partitioner::partitionOp(Operation &op, func::FuncOp func,
                                       SmallVectorImpl<Attribute> &shardings) {
  if (auto param = dyn_cast<ParameterOp>(&op))
    return partitionParameter(param);
  if (auto constant = dyn_cast<ConstantOp>(&op))
    return partitionConstant(constant);
  if (auto rule = dyn_cast<ShardingRuleOpInterface>(&op))
    return partitionRuleOp(rule);
  if (auto reshape = dyn_cast<ReshapeOp>(&op))
    return partitionReshape(reshape);
  if (auto concat = dyn_cast<ConcatOp>(&op))
    return partitionConcat(concat);
  if (auto ret = dyn_cast<func::ReturnOp>(&op))
    return partitionReturn(ret, func, shardings);
  return partitionOther(&op, nullptr);
}

void Partitioner::replaceBody(func::FuncOp func, Block *newBody) {
  Block &body = func.getBody().front();
  for (Operation &op : llvm::reverse(body))
    op.dropAllReferences();
  body.dropAllDefinedValueUses();
  body.erase();
  func.getBody().push_back(newBody);
  func.setFunctionType(
      FunctionType::get(func.getContext(), newBody->getArgumentTypes(),
                        newBody->getTerminator()->getOperandTypes()));
}

void Partitioner::annotateSignature(func::FuncOp func,
                                    ArrayRef<Layout> argLayouts,
                                    ArrayRef<Attribute> resultShardings) {
  for (auto [i, layout] : llvm::enumerate(argLayouts)) {
    func.setArgAttr(
        i, kShardingAttr,
        toAttr(layout, cast<RankedTensorType>(func.getArgumentTypes()[i])));
    // The data loader gives such an argument its zigzag chunks.
    if (contextAxis && isZigzag(*contextAxis) && layout.splits(*contextAxis))
      func.setArgAttr(i, "dtc.zigzag", builder.getUnitAttr());
  }
  for (auto [i, attr] : llvm::enumerate(resultShardings))
    func.setResultAttr(i, kShardingAttr, attr);
  func->setAttr(kMeshAttrName, meshAttr);
  func->removeAttr("dtc.sharding_cost");
}

LogicalResult Partitioner::run(func::FuncOp func) {
  if (numAxes() > kMaxMeshAxes)
    return func.emitError() << "dtc-partition handles at most " << kMaxMeshAxes
                            << " mesh axes, got " << numAxes();
  Block &body = func.getBody().front();
  if (failed(recordGlobalTypes(body)))
    return failure();

  // The new body: local arguments in the layouts of their annotations.
  auto *newBody = new Block();
  SmallVector<Layout> argLayouts;
  if (failed(addLocalArguments(func, *newBody, argLayouts))) {
    delete newBody;
    return failure();
  }
  builder.setInsertionPointToEnd(newBody);

  SmallVector<Attribute> resultShardings;
  for (Operation &op : body)
    if (failed(partitionOp(op, func, resultShardings))) {
      newBody->dropAllDefinedValueUses();
      for (Operation &copied : llvm::reverse(*newBody))
        copied.dropAllReferences();
      delete newBody;
      return failure();
    }

  replaceBody(func, newBody);
  annotateSignature(func, argLayouts, resultShardings);
  // Each copy checks its local shapes (the collectives need the mesh
  // above), so a partitioning mistake points at its op.
  for (Operation &op : *newBody)
    if (failed(verify(&op, /*verifyRecursively=*/false)))
      return failure();
  return success();
}

bool isAnnotated(func::FuncOp func) {
  if (func.isExternal())
    return false;
  for (unsigned i = 0; i < func.getNumArguments(); ++i)
    if (func.getArgAttr(i, kShardingAttr))
      return true;
  bool any = false;
  func.walk([&](Operation *op) {
    if (op->hasAttr(kShardingAttr))
      any = true;
  });
  return any;
}

struct DtcPartitionPass : mlir::dtc::impl::DtcPartitionBase<DtcPartitionPass> {
  using DtcPartitionBase::DtcPartitionBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    FailureOr<MeshAttr> meshAttr = ::dtc::meshOption(module, mesh);
    if (failed(meshAttr))
      return signalPassFailure();
    if (meshAttr->empty()) {
      module.emitError("dtc-partition needs a mesh, such as mesh=dp:2,tp:4");
      return signalPassFailure();
    }
    SmallVector<func::FuncOp> funcs;
    for (auto func : module.getOps<func::FuncOp>())
      if (isAnnotated(func))
        funcs.push_back(func);
    for (func::FuncOp func : funcs) {
      if (!func.getBody().hasOneBlock()) {
        func.emitError("dtc-partition needs a single-block body");
        return signalPassFailure();
      }
      Partitioner partitioner(*meshAttr, contextParallelAxis, contextZigzag,
                              deferGradientSync);
      if (failed(partitioner.run(func)))
        return signalPassFailure();
      LLVM_DEBUG({
        unsigned collectives = 0;
        func.walk([&](Operation *op) {
          if (isa<AllReduceStartOp, AllGatherStartOp, ReduceScatterStartOp,
                  AllToAllStartOp>(op))
            ++collectives;
        });
        llvm::dbgs() << "dtc-partition: @" << func.getSymName() << " over "
                     << mesh << ": " << collectives << " collectives\n";
      });
    }
  }
};

} // namespace
