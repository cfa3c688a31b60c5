//===- Predicate.h - dtc.compare's predicates -------------------*- C++ -*-===//
//
// What each dtc.compare predicate computes, for the CPU kernels and the
// CUDA device code alike. Plain C++ without LLVM: nvcc compiles it too.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_PREDICATE_H
#define DTC_RUNTIME_CORE_PREDICATE_H

#if defined(__CUDACC__)
#define DTC_HOST_DEVICE __host__ __device__
#else
#define DTC_HOST_DEVICE
#endif

namespace dtc::runtime {

enum class Predicate { Eq, Ne, Lt, Le, Gt, Ge };

template <typename T>
DTC_HOST_DEVICE inline bool applyPredicate(Predicate p, T a, T b) {
  switch (p) {
  case Predicate::Eq:
    return a == b;
  case Predicate::Ne:
    return a != b;
  case Predicate::Lt:
    return a < b;
  case Predicate::Le:
    return a <= b;
  case Predicate::Gt:
    return a > b;
  case Predicate::Ge:
    return a >= b;
  }
  return false;
}

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_PREDICATE_H
