//===- Matmul.h - Batched matrix product operand checks ---------*- C++ -*-===//
//
// The operands of the batched matrix product (numpy batch broadcasting,
// transpose flags), read and checked once for every backend; the kernels
// only choose how to run the products.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_MATMUL_H
#define DTC_RUNTIME_CORE_MATMUL_H

#include "runtime/core/Kernel.h"

#include "llvm/ADT/SmallVector.h"

#include <utility>

namespace dtc::runtime {

/// `batches` products of op(lhs) [m, k] x op(rhs) [k, n] -> [m, n], op the
/// transpose flags; lhs and rhs hold `lhsBatches` and `rhsBatches` of them.
struct MatmulShape {
  int64_t m = 0, n = 0, k = 0;
  bool transposeLhs = false, transposeRhs = false;
  /// The result's batch dims, and each operand's strides over them in
  /// products (0 along a broadcast dim).
  llvm::SmallVector<int64_t, 4> batchShape;
  llvm::SmallVector<int64_t, 6> lhsStrides, rhsStrides;
  int64_t batches = 1, lhsBatches = 1, rhsBatches = 1;

  /// Leading dimensions of the row-major operands.
  int64_t lda() const { return transposeLhs ? m : k; }
  int64_t ldb() const { return transposeRhs ? k : n; }
  /// [batch * m, k] x [k, n]: the batch folds into the rows of one product.
  bool foldsIntoRows() const {
    return rhsBatches == 1 && !transposeLhs && lhsBatches == batches;
  }
  /// The products of lhs and rhs that result product `batch` multiplies.
  std::pair<int64_t, int64_t> operandProducts(int64_t batch) const;
};

/// Float lhs [..., m, k], rhs [..., k, n] (rank >= 2, batch dims that
/// broadcast to the result's) -> [..., m, n] float; flags transpose_lhs and
/// transpose_rhs.
llvm::Expected<MatmulShape> readMatmul(const KernelCall &call);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_MATMUL_H
