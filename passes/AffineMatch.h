//===- AffineMatch.h - Reading loop indices off indexing maps ---*- C++ -*-===//
//
// Sharding rules index operands by `d`, `d + c` or `d * s + c` of a loop `d`;
// propagation and partitioning both read them back with this one matcher.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_AFFINEMATCH_H
#define DTC_PASSES_AFFINEMATCH_H

#include "mlir/IR/AffineExpr.h"

namespace mlir::dtc {

/// `d`, `d + c`, `d * s + c` with `d` a loop: sets loop, stride, offset.
inline bool matchStrided(AffineExpr expr, int64_t &loop, int64_t &stride,
                         int64_t &offset) {
  stride = 1;
  offset = 0;
  if (auto bin = dyn_cast<AffineBinaryOpExpr>(expr);
      bin && bin.getKind() == AffineExprKind::Add) {
    auto c = dyn_cast<AffineConstantExpr>(bin.getRHS());
    if (!c)
      return false;
    offset = c.getValue();
    expr = bin.getLHS();
  }
  if (auto bin = dyn_cast<AffineBinaryOpExpr>(expr);
      bin && bin.getKind() == AffineExprKind::Mul) {
    auto c = dyn_cast<AffineConstantExpr>(bin.getRHS());
    if (!c)
      return false;
    stride = c.getValue();
    expr = bin.getLHS();
  }
  auto d = dyn_cast<AffineDimExpr>(expr);
  if (!d)
    return false;
  loop = d.getPosition();
  return true;
}

/// `d` or `d + c` with `d` a loop.
inline bool matchShifted(AffineExpr expr, int64_t &loop, int64_t &offset) {
  int64_t stride;
  return matchStrided(expr, loop, stride, offset) && stride == 1;
}

} // namespace mlir::dtc

#endif // DTC_PASSES_AFFINEMATCH_H
