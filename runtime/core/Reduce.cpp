//===- Reduce.cpp - dtc.reduce_*, cumsum, selective_scan operand checks ---===//

#include "runtime/core/Reduce.h"

#include "llvm/ADT/STLExtras.h"

namespace dtc::runtime {

bool ReduceGroups::rowShaped() const { return llvm::count(reduced, true) <= 1; }

int64_t ReduceGroups::outer() const {
  int64_t outer = 1;
  for (size_t g = 0; g < sizes.size() && !reduced[g]; ++g)
    outer *= sizes[g];
  return outer;
}

int64_t ReduceGroups::inner() const {
  int64_t inner = 1;
  for (size_t g = sizes.size(); g > 0 && !reduced[g - 1]; --g)
    inner *= sizes[g - 1];
  return llvm::is_contained(reduced, true) ? inner : 1;
}

llvm::Expected<ReduceGroups> readReduce(const KernelCall &call) {
  if (llvm::Error err = expectArity(call, 1, 1))
    return std::move(err);
  const TensorRef &in = call.input(0), &out = call.output(0);
  llvm::SmallVector<bool, 6> reduced(in.rank(), false);
  ReduceGroups groups;
  for (int64_t dim : call.ints("dims")) {
    int64_t d = dim < 0 ? dim + in.rank() : dim;
    if (d < 0 || d >= in.rank())
      return call.error("dim " + llvm::Twine(dim) + " out of range for " +
                        shapeString(in.shape));
    if (!reduced[d])
      groups.count *= in.shape[d];
    reduced[d] = true;
  }
  // Reducing a zero-size dim gives the identity (0, -inf; NaN for a mean).
  if (in.dtype != out.dtype ||
      out.numElements() * groups.count != in.numElements())
    return call.error("result " + shapeString(out.shape) + " " +
                      dtypeName(out.dtype) + " does not match reducing " +
                      shapeString(in.shape) + " " + dtypeName(in.dtype));
  if (in.dtype == DType::BOOL || dtypeSize(in.dtype) == 0)
    return call.error("unsupported dtype " + dtypeName(in.dtype));
  for (int64_t d = 0; d < in.rank(); ++d) {
    if (in.shape[d] == 1)
      continue;
    if (!groups.reduced.empty() && groups.reduced.back() == reduced[d]) {
      groups.sizes.back() *= in.shape[d];
    } else {
      groups.sizes.push_back(in.shape[d]);
      groups.reduced.push_back(reduced[d]);
    }
  }
  return groups;
}

llvm::Expected<Scan> readCumSum(const KernelCall &call) {
  if (auto err = expectArity(call, 1, 1))
    return std::move(err);
  const TensorRef &in = call.input(0), &out = call.output(0);
  if (out.dtype != in.dtype)
    return call.error("result dtype " + dtypeName(out.dtype) +
                      " is not the input's " + dtypeName(in.dtype));
  if (auto err = expectShape(call, out, in.shape, "result"))
    return std::move(err);
  int64_t rank = in.rank(), axis = call.i64("axis", 0);
  if (axis < 0 || axis >= rank)
    return call.error("axis " + llvm::Twine(axis) +
                      " is out of range for rank " + llvm::Twine(rank));
  Scan s;
  for (int64_t d = 0; d < rank; ++d)
    (d < axis ? s.outer : d > axis ? s.inner : s.length) *= in.shape[d];
  s.exclusive = call.flag("exclusive");
  s.reverse = call.flag("reverse");
  return s;
}

llvm::Expected<SelectiveScan> readSelectiveScan(const KernelCall &call,
                                                bool gradient) {
  if (auto err = expectArity(call, gradient ? 4 : 3, gradient ? 3 : 1))
    return std::move(err);
  const TensorRef &a = call.input(0);
  if (auto err = expectFloat(call, a, "a"))
    return std::move(err);
  if (a.rank() != 4)
    return call.error("a must be [batch, channels, length, state], got rank " +
                      llvm::Twine(a.rank()));
  SelectiveScan s{a.shape[0], a.shape[1], a.shape[2], a.shape[3]};
  llvm::SmallVector<int64_t, 4> full = {s.batch, s.channels, s.length, s.state},
                                perPosition = {s.batch, s.length, s.state},
                                perChannel = {s.batch, s.channels, s.length};
  if (auto err = expectFloatShape(call, call.input(1), full, "x"))
    return std::move(err);
  if (auto err = expectFloatShape(call, call.input(2), perPosition, "c"))
    return std::move(err);
  if (!gradient) {
    if (auto err = expectFloatShape(call, call.output(0), perChannel, "result"))
      return std::move(err);
    return s;
  }
  if (auto err = expectFloatShape(call, call.input(3), perChannel, "grad"))
    return std::move(err);
  if (auto err = expectFloatShape(call, call.output(0), full, "a_grad"))
    return std::move(err);
  if (auto err = expectFloatShape(call, call.output(1), full, "x_grad"))
    return std::move(err);
  if (auto err = expectFloatShape(call, call.output(2), perPosition, "c_grad"))
    return std::move(err);
  return s;
}

} // namespace dtc::runtime
