//===- Matmul.cpp - Batched matrix product operand checks -----------------===//

#include "runtime/core/Matmul.h"

#include "runtime/core/Tensor.h"

#include <algorithm>

namespace dtc::runtime {

std::pair<int64_t, int64_t> MatmulShape::operandProducts(int64_t batch) const {
  int64_t lhs = 0, rhs = 0, rest = batch;
  for (int64_t d = static_cast<int64_t>(batchShape.size()) - 1; d >= 0; --d) {
    int64_t index = rest % batchShape[d];
    rest /= batchShape[d];
    lhs += index * lhsStrides[d];
    rhs += index * rhsStrides[d];
  }
  return {lhs, rhs};
}

llvm::Expected<MatmulShape> readMatmul(const KernelCall &call) {
  if (auto err = expectArity(call, 2, 1))
    return std::move(err);
  const TensorRef &lhs = call.input(0), &rhs = call.input(1),
                  &out = call.output(0);
  for (auto [t, what] : {std::pair{&lhs, "lhs"}, std::pair{&rhs, "rhs"},
                         std::pair{&out, "result"}})
    if (auto err = expectFloat(call, *t, what))
      return std::move(err);
  if (lhs.rank() < 2 || rhs.rank() < 2 || out.rank() < 2)
    return call.error("operands must have rank >= 2");
  MatmulShape s;
  s.transposeLhs = call.flag("transpose_lhs");
  s.transposeRhs = call.flag("transpose_rhs");
  s.m = lhs.dim(-2);
  s.k = lhs.dim(-1);
  if (s.transposeLhs)
    std::swap(s.m, s.k);
  int64_t k = rhs.dim(-2);
  s.n = rhs.dim(-1);
  if (s.transposeRhs)
    std::swap(k, s.n);
  if (k != s.k || out.dim(-2) != s.m || out.dim(-1) != s.n)
    return call.error("shapes " + shapeString(lhs.shape) + " x " +
                      shapeString(rhs.shape) + " -> " + shapeString(out.shape) +
                      " are inconsistent");
  llvm::ArrayRef<int64_t> batchShape =
      llvm::ArrayRef<int64_t>(out.shape).drop_back(2);
  if (!broadcastStrides(llvm::ArrayRef<int64_t>(lhs.shape).drop_back(2),
                        batchShape, s.lhsStrides) ||
      !broadcastStrides(llvm::ArrayRef<int64_t>(rhs.shape).drop_back(2),
                        batchShape, s.rhsStrides))
    return call.error("batch dimensions of " + shapeString(lhs.shape) +
                      " and " + shapeString(rhs.shape) +
                      " do not broadcast to " + shapeString(out.shape));
  s.batchShape.assign(batchShape.begin(), batchShape.end());
  s.batches = numElements(batchShape);
  s.lhsBatches = lhs.numElements() / std::max<int64_t>(s.m * s.k, 1);
  s.rhsBatches = rhs.numElements() / std::max<int64_t>(s.k * s.n, 1);
  return s;
}

} // namespace dtc::runtime
