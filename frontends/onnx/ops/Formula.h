//===- Formula.h - Build a formula of dtc ops at one node -------*- C++ -*-===//
//
// Lowerings that are a formula over existing dtc ops (activations, losses,
// normalizations) write it as one expression; the first error is kept.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_ONNX_OPS_FORMULA_H
#define DTC_FRONTENDS_ONNX_OPS_FORMULA_H

#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/ImporterImpl.h"

namespace dtc::onnx::detail {

/// Builds dtc ops at the current node, keeping the first error: every
/// builder returns a null Value once one failed, so a formula reads as one
/// expression and is checked once (`define`, `result`).
class Formula {
public:
  Formula(ModelImporter &importer, int32_t dataType)
      : im(importer), dataType(dataType) {}
  ~Formula() { llvm::consumeError(std::move(first)); }
  Value take(Expected<Value> v) {
    if (v)
      return *v;
    if (!failed) {
      failed = true;
      llvm::consumeError(std::move(first));
      first = v.takeError();
    } else {
      llvm::consumeError(v.takeError());
    }
    return Value();
  }
  Value c(double value) { return take(im.scalarConstant(dataType, value)); }
  template <typename OpT> Value unary(Value a) {
    if (!a)
      return a;
    return take(im.finish(OpT::create(im.builder, im.loc(), a.getType(), a)));
  }
  template <typename OpT> Value binary(Value a, Value b) {
    if (!a || !b)
      return Value();
    return take(
        im.finish(OpT::create(im.builder, im.loc(), im.placeholder(), a, b)));
  }
  Value add(Value a, Value b) { return binary<mlir::dtc::AddOp>(a, b); }
  Value sub(Value a, Value b) { return binary<mlir::dtc::SubOp>(a, b); }
  Value mul(Value a, Value b) { return binary<mlir::dtc::MulOp>(a, b); }
  Value div(Value a, Value b) { return binary<mlir::dtc::DivOp>(a, b); }
  Value max(Value a, Value b) { return binary<mlir::dtc::MaxOp>(a, b); }
  Value min(Value a, Value b) { return binary<mlir::dtc::MinOp>(a, b); }
  Value cmp(Value a, Value b, llvm::StringRef predicate) {
    if (!a || !b)
      return Value();
    return take(im.compare(a, b, predicate));
  }
  Value sel(Value cond, Value a, Value b) {
    if (!cond || !a || !b)
      return Value();
    return take(im.select(cond, a, b));
  }
  Value reduceMax(Value a, llvm::ArrayRef<int64_t> axes, bool keep) {
    if (!a)
      return a;
    return take(im.finish(mlir::dtc::ReduceMaxOp::create(
        im.builder, im.loc(), im.placeholder(), a, axes, keep)));
  }
  Value reduceSum(Value a, llvm::ArrayRef<int64_t> axes, bool keep) {
    if (!a)
      return a;
    return take(im.finish(mlir::dtc::ReduceSumOp::create(
        im.builder, im.loc(), im.placeholder(), a, axes, keep)));
  }
  Value reduceMean(Value a, llvm::ArrayRef<int64_t> axes, bool keep) {
    if (!a)
      return a;
    return take(im.finish(mlir::dtc::ReduceMeanOp::create(
        im.builder, im.loc(), im.placeholder(), a, axes, keep)));
  }
  Value constant(const HostTensor &t) { return take(im.constant(t)); }
  /// The result, or the first error.
  Error define(int index, Value v) {
    if (failed)
      return std::move(first);
    return im.defineValue(index, v);
  }
  Expected<Value> result(Value v) {
    if (failed)
      return std::move(first);
    return v;
  }

private:
  ModelImporter &im;
  int32_t dataType;
  bool failed = false;
  Error first = Error::success();
};

} // namespace dtc::onnx::detail

#endif // DTC_FRONTENDS_ONNX_OPS_FORMULA_H
