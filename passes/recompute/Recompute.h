//===- Recompute.h - Activation recompute on a gradient function -*- C++
//-*-===//
//
// Activation recompute (checkpointing) as a rewrite of a function whose body
// is forward ops followed by their backward ops (what buildGradientFunction
// emits, and so `micro_step`): the backward stops reading some forward
// values and reads clones of the forward ops that produce them instead,
// emitted right before their first backward use. The originals then die in
// the forward part and the lowering's liveness reuses their bytes. See
// docs/recompute.md.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_RECOMPUTE_RECOMPUTE_H
#define DTC_PASSES_RECOMPUTE_RECOMPUTE_H

#include "runtime/support/ParallelPlan.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Support/LLVM.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>

namespace dtc {

/// What a rewrite did, over the forward values the backward reads.
struct RecomputeStats {
  int64_t savedValues = 0;      ///< still read from the forward
  int64_t savedBytes = 0;       ///< their bytes (static shapes)
  int64_t recomputedValues = 0; ///< now read from clones instead
  int64_t recomputedBytes = 0;  ///< the bytes no longer kept alive
  int64_t clonedOps = 0;        ///< forward ops emitted again
};

/// Attribute on every cloned op (a discardable annotation the lowering
/// ignores), so tests and readers can tell recomputation from the forward.
inline constexpr llvm::StringLiteral kRecomputedAttrName = "dtc.recomputed";

/// Rewrites `func` for `mode`. The forward part ends at the op defining
/// result `lossIndex` (a gradient function emits every backward op after
/// the last forward op, and every forward value a backward op reads is on
/// the path to the loss); the ops after it are the backward part. A loss
/// that is not the result of an op leaves `func` unchanged. Fails (with an
/// error at `func`) only for a bad function: no single block, loss index out
/// of range.
mlir::FailureOr<RecomputeStats>
applyRecompute(mlir::func::FuncOp func, unsigned lossIndex, Recompute mode);

} // namespace dtc

#endif // DTC_PASSES_RECOMPUTE_RECOMPUTE_H
