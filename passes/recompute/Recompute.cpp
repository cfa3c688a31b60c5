//===- Recompute.cpp - Activation recompute on a gradient function --------===//
//
// The function body is forward ops, ending at the op that defines the loss,
// then backward ops. A forward value a backward op reads is *saved*: it
// stays alive from the forward to the backward. The rewrite picks which of
// those values are *kept* (read directly, as before) and rewires every other
// backward read to a clone of the forward ops computing it from kept values.
// Clones are emitted lazily, right before the first backward op that needs
// them (directly or through another clone), and each forward op is cloned at
// most once, so a recomputed segment exists once and lives only from its
// first to its last backward reader.
//
// Which values are kept:
//  - full: the checkpoints. Inputs of dtc.layer_norm / dtc.rms_norm (the
//    residual stream where each block and each sub-block starts), plus
//    function arguments, parameters, constants, the loss op's operands (the
//    logits, alive at the boundary anyway), values the function returns and
//    results of ops that cannot be cloned (not dtc, or with effects).
//  - selective: every saved value except those of cheap ops computable,
//    through cheap ops only, from values that are kept anyway; recomputing
//    them adds no saved value, so the saved bytes only go down.
//
// The clones run the same kernels on the same inputs as the originals, so
// the gradients are bit-for-bit those without recompute.
//
//===----------------------------------------------------------------------===//

#include "passes/recompute/Recompute.h"

#include "dialects/dtc/DtcOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/IR/TypeUtilities.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace d = mlir::dtc;
using mlir::Operation;
using mlir::Value;

namespace dtc {

namespace {

int64_t bytesOf(Value value) {
  auto type = mlir::dyn_cast<mlir::RankedTensorType>(value.getType());
  if (!type || !type.hasStaticShape())
    return 0;
  int64_t bits = type.getElementType().getIntOrFloatBitWidth();
  return type.getNumElements() * ((bits + 7) / 8);
}

/// Parameters, constants and arguments: no arena bytes, nothing to
/// recompute.
bool isFree(Value value) {
  Operation *op = value.getDefiningOp();
  return !op || mlir::isa<d::ParameterOp, d::ConstantOp>(op);
}

/// A forward op whose results may be computed again: a dtc op without
/// regions or memory effects (every forward op of the dialect).
bool isClonable(Operation *op) {
  return op->getDialect() && op->getDialect()->getNamespace() == "dtc" &&
         op->getNumRegions() == 0 && mlir::isMemoryEffectFree(op);
}

int64_t elementsOf(Value value) {
  return mlir::cast<mlir::RankedTensorType>(value.getType()).getNumElements();
}

/// The score matmul of unfused attention (Q K^T), recognized by what it
/// computes: a contraction of two float activations whose result is larger
/// than either ([s, d] x [d, t] -> [s, t] with s, t > d), so it is cheaper
/// to recompute than to keep. The probabilities-times-values product has a
/// smaller result and stays saved (it is the output projection's input), as
/// in Korthikanti et al.; GEMMs with a weight are never recomputed here.
bool isExpandingContraction(Operation &op,
                            const llvm::DenseSet<Value> &activation) {
  if (!op.hasTrait<d::traits::SumReductions>() || op.getNumOperands() != 2 ||
      op.getNumResults() != 1)
    return false;
  bool activations = llvm::all_of(op.getOperands(), [&](Value v) {
    return mlir::isa<mlir::FloatType>(mlir::getElementTypeOrSelf(v)) &&
           (mlir::isa<mlir::BlockArgument>(v) || activation.contains(v));
  });
  int64_t result = elementsOf(op.getResult(0));
  return activations && result > elementsOf(op.getOperand(0)) &&
         result > elementsOf(op.getOperand(1));
}

class Recomputation {
public:
  Recomputation(mlir::func::FuncOp func, Operation *lastForwardOp)
      : func(func), lastForwardOp(lastForwardOp) {
    mlir::Block &body = func.getBody().front();
    for (Operation &op : body) {
      forwardOps.insert(&op);
      if (&op == lastForwardOp)
        break;
    }
    for (Operation &op :
         llvm::make_range(std::next(lastForwardOp->getIterator()), body.end()))
      backwardOps.push_back(&op);
  }

  /// Chooses the kept values for `mode`.
  void choose(Recompute mode);
  /// Rewires the backward reads of values that are not kept to clones.
  void rewrite();
  /// The forward values (not free) read by backward ops, now; returned
  /// values only count when a backward op reads them too.
  llvm::SetVector<Value> savedValues() const;
  int64_t clonedOps() const { return numCloned; }

private:
  bool isForwardValue(Value value) const {
    Operation *op = value.getDefiningOp();
    return op && forwardOps.contains(op);
  }
  /// Read directly by the backward: free or chosen to be kept.
  bool isKept(Value value) const {
    return !isForwardValue(value) || isFree(value) || kept.contains(value);
  }
  Value materialize(Value value, Operation *before);

  mlir::func::FuncOp func;
  Operation *lastForwardOp;
  llvm::DenseSet<Operation *> forwardOps;
  llvm::SmallVector<Operation *> backwardOps;
  /// Forward values (not free) the backward reads directly after rewrite().
  llvm::DenseSet<Value> kept;
  /// Forward value -> its clone after the forward.
  llvm::DenseMap<Value, Value> clones;
  int64_t numCloned = 0;
};

llvm::SetVector<Value> Recomputation::savedValues() const {
  llvm::SetVector<Value> saved;
  for (Operation *op : backwardOps)
    if (!op->hasTrait<mlir::OpTrait::IsTerminator>())
      for (Value operand : op->getOperands())
        if (isForwardValue(operand) && !isFree(operand))
          saved.insert(operand);
  return saved;
}

void Recomputation::choose(Recompute mode) {
  mlir::Block &body = func.getBody().front();
  llvm::SetVector<Value> saved = savedValues();
  // Returned forward values (the loss, forward results) live to the end
  // anyway.
  for (Value v : body.getTerminator()->getOperands())
    if (isForwardValue(v))
      kept.insert(v);

  if (mode == Recompute::None) {
    kept.insert(saved.begin(), saved.end());
    return;
  }

  if (mode == Recompute::Full) {
    // The loss op's operands (the logits) are alive at the boundary anyway
    // and the backward reads them first: recomputing them would repeat the
    // LM-head GEMM for no saving.
    kept.insert(lastForwardOp->operand_begin(), lastForwardOp->operand_end());
    for (Operation *op : forwardOps) {
      if (mlir::isa<d::LayerNormOp, d::RmsNormOp>(op))
        kept.insert(op->getOperand(0));
      if (!isClonable(op))
        kept.insert(op->result_begin(), op->result_end());
    }
    return;
  }

  // Selective, in program order: a value is recomputable if its op is
  // cheap and every operand is free, saved (kept or itself recomputed), or
  // recomputable. Saved values that are not recomputable are kept.
  llvm::DenseSet<Value> recomputable, activation;
  for (Operation &op : body) {
    if (!forwardOps.contains(&op))
      break;
    bool readsActivation = llvm::any_of(op.getOperands(), [&](Value v) {
      return mlir::isa<mlir::BlockArgument>(v) || activation.contains(v);
    });
    if (readsActivation)
      activation.insert(op.result_begin(), op.result_end());
    // Memory-bound ops whose cost is a pass over their operands
    // (Dtc_Recomputable), and unfused attention's score product. Other
    // GEMMs, norms, fused attention, embeddings and losses are kept.
    bool cheap = isClonable(&op) && (op.hasTrait<d::traits::Recomputable>() ||
                                     isExpandingContraction(op, activation));
    bool available = llvm::all_of(op.getOperands(), [&](Value v) {
      return isFree(v) || saved.contains(v) || recomputable.contains(v);
    });
    if (cheap && available)
      recomputable.insert(op.result_begin(), op.result_end());
  }
  for (Value v : saved)
    if (!recomputable.contains(v))
      kept.insert(v);
}

/// The value the backward reads for forward value `value`: itself when
/// kept, else its clone, cloning the ops it needs right before `before`.
Value Recomputation::materialize(Value root, Operation *before) {
  if (isKept(root))
    return root;
  if (Value clone = clones.lookup(root))
    return clone;
  // Post-order over the ops to clone, without recursion (a full recompute
  // of a deep model without norms clones a long chain).
  mlir::OpBuilder b(before);
  llvm::SmallVector<std::pair<Operation *, bool>> stack{
      {root.getDefiningOp(), false}};
  while (!stack.empty()) {
    auto [op, operandsDone] = stack.pop_back_val();
    if (clones.contains(op->getResult(0)))
      continue;
    if (!operandsDone) {
      stack.push_back({op, true});
      // Reversed, so the first operand's ops are cloned first.
      for (Value operand : llvm::reverse(op->getOperands()))
        if (!isKept(operand) && !clones.contains(operand))
          stack.push_back({operand.getDefiningOp(), false});
      continue;
    }
    mlir::IRMapping mapping;
    for (Value operand : op->getOperands())
      if (!isKept(operand))
        mapping.map(operand, clones.lookup(operand));
    Operation *clone = b.clone(*op, mapping);
    clone->setAttr(kRecomputedAttrName, b.getUnitAttr());
    ++numCloned;
    for (auto [original, copy] :
         llvm::zip(op->getResults(), clone->getResults()))
      clones[original] = copy;
  }
  return clones.lookup(root);
}

void Recomputation::rewrite() {
  for (Operation *op : backwardOps)
    for (mlir::OpOperand &operand : op->getOpOperands())
      if (!isKept(operand.get()))
        operand.set(materialize(operand.get(), op));
}

} // namespace

mlir::FailureOr<RecomputeStats>
applyRecompute(mlir::func::FuncOp func, unsigned lossIndex, Recompute mode) {
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return func.emitError("recompute needs a function with one block");
  if (lossIndex >= func.getNumResults())
    return func.emitError("recompute: loss index ")
           << lossIndex << " is out of range: the function has "
           << func.getNumResults() << " results";
  mlir::Block &body = func.getBody().front();
  Value loss = body.getTerminator()->getOperand(lossIndex);
  Operation *lastForwardOp = loss.getDefiningOp();
  RecomputeStats stats;
  if (!lastForwardOp || lastForwardOp->getBlock() != &body)
    return stats;

  Recomputation recompute(func, lastForwardOp);
  llvm::SetVector<Value> before = recompute.savedValues();
  recompute.choose(mode);
  recompute.rewrite();
  llvm::SetVector<Value> after = recompute.savedValues();
  for (Value v : after) {
    ++stats.savedValues;
    stats.savedBytes += bytesOf(v);
  }
  for (Value v : before)
    if (!after.contains(v)) {
      ++stats.recomputedValues;
      stats.recomputedBytes += bytesOf(v);
    }
  stats.clonedOps = recompute.clonedOps();
  return stats;
}

} // namespace dtc
