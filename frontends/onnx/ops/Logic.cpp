//===- Logic.cpp - Comparisons, boolean logic, NaN/Inf tests, Clip --------===//
//
// Run-time forms of the ops exporters emit around masks: PyTorch's dynamo
// exporter guards attention's fully masked rows with Where(IsNaN(p), 0, p),
// and models build masks from Equal/Less/Not on values computed at run time.
// (With every input known, HostEval computes them on the host instead.)
//
// Each is written with the two existing mask ops, so that no new kernel,
// sharding rule or gradient is needed: dtc.compare (six IEEE predicates, i1
// result) and dtc.select (`cond ? a : b`, bits copied), with broadcasting.
//
//   Not(x)    = compare(x, false, eq)      IsNaN(x) = compare(x, x, ne)
//   And(a, b) = select(a, b, false)        IsInf(x) = compare(|x|, inf, eq)
//   Or(a, b)  = select(a, true, b)         Xor(a, b) = compare(a, b, ne)
//   Clip(x, lo, hi) = min(max(x, lo), hi)
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/ImporterImpl.h"

#include "llvm/ADT/StringSwitch.h"

#include <limits>

using namespace mlir;
using namespace ::dtc::onnx;
using namespace ::dtc::onnx::detail;
namespace d = mlir::dtc;

namespace {

/// A scalar constant of `dataType` holding `value`.
HostTensor scalar(int32_t dataType, double value) {
  HostTensor t = HostTensor::zeros(dataType, {});
  t.set(0, value);
  return t;
}

} // namespace

Expected<Value> ModelImporter::compare(Value lhs, Value rhs,
                                       llvm::StringRef predicate) {
  return finish(d::CompareOp::create(builder, loc(), placeholder(), lhs, rhs,
                                     builder.getStringAttr(predicate)));
}

Expected<Value> ModelImporter::select(Value cond, Value onTrue, Value onFalse) {
  return finish(d::SelectOp::create(builder, loc(), placeholder(), cond, onTrue,
                                    onFalse));
}

Error ModelImporter::lowerCompare(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  if (ins.size() != 2 || !ins[0] || !ins[1])
    return nodeError("needs two inputs");
  if (ins[0]->dataType != ins[1]->dataType)
    return nodeError("input types differ: {0} and {1}",
                     dataTypeName(ins[0]->dataType),
                     dataTypeName(ins[1]->dataType));
  llvm::StringRef predicate = llvm::StringSwitch<llvm::StringRef>(op)
                                  .Case("Equal", "eq")
                                  .Case("Less", "lt")
                                  .Case("LessOrEqual", "le")
                                  .Case("Greater", "gt")
                                  .Case("GreaterOrEqual", "ge")
                                  .Case("Xor", "ne");
  if (op == "Xor" && ins[0]->dataType != kBool)
    return nodeError("needs bool inputs, got {0}",
                     dataTypeName(ins[0]->dataType));
  auto lhs = valueOf(*ins[0]);
  if (!lhs)
    return lhs.takeError();
  auto rhs = valueOf(*ins[1]);
  if (!rhs)
    return rhs.takeError();
  auto result = compare(*lhs, *rhs, predicate);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerLogic(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  size_t arity = op == "Not" ? 1 : 2;
  if (ins.size() != arity || llvm::is_contained(ins, nullptr))
    return nodeError("needs {0} input(s)", arity);
  for (Entry *in : ins)
    if (in->dataType != kBool)
      return nodeError("needs bool inputs, got {0}",
                       dataTypeName(in->dataType));
  auto a = valueOf(*ins[0]);
  if (!a)
    return a.takeError();
  Expected<Value> result = Value();
  if (op == "Not") {
    auto no = constant(scalar(kBool, 0));
    if (!no)
      return no.takeError();
    result = compare(*a, *no, "eq");
  } else {
    auto b = valueOf(*ins[1]);
    if (!b)
      return b.takeError();
    auto fixed = constant(scalar(kBool, op == "Or"));
    if (!fixed)
      return fixed.takeError();
    result = op == "And" ? select(*a, *b, *fixed) : select(*a, *fixed, *b);
  }
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerIsNaNOrInf(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 1 || !ins[0])
    return nodeError("needs one input");
  int32_t type = ins[0]->dataType;
  if (!isFloatType(type))
    return nodeError("needs a floating-point input, got {0}",
                     dataTypeName(type));
  auto x = valueOf(*ins[0]);
  if (!x)
    return x.takeError();
  Expected<Value> result = Value();
  if (node->op_type() == "IsNaN") {
    result = compare(*x, *x, "ne");
  } else {
    bool positive = getIntAttr(*node, "detect_positive", 1) != 0;
    bool negative = getIntAttr(*node, "detect_negative", 1) != 0;
    // x == target; neither sign detected: always false (nothing == NaN).
    double inf = std::numeric_limits<double>::infinity();
    double target = positive   ? inf
                    : negative ? -inf
                               : std::numeric_limits<double>::quiet_NaN();
    Value probe = *x;
    if (positive && negative) {
      auto abs = finish(d::AbsOp::create(builder, loc(), x->getType(), *x));
      if (!abs)
        return abs.takeError();
      probe = *abs;
    }
    auto bound = constant(scalar(type, target));
    if (!bound)
      return bound.takeError();
    result = compare(probe, *bound, "eq");
  }
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerClip(llvm::ArrayRef<Entry *> ins) {
  if (ins.empty() || !ins[0] || ins.size() > 3)
    return nodeError("needs an input and optional min and max");
  auto x = valueOf(*ins[0]);
  if (!x)
    return x.takeError();
  Value result = *x;
  // Opset 11 on: the bounds are optional inputs (an empty name skips one).
  for (int i : {1, 2}) {
    if (static_cast<int>(ins.size()) <= i || !ins[i])
      continue;
    if (ins[i]->dataType != ins[0]->dataType)
      return nodeError("bound type {0} differs from the input's {1}",
                       dataTypeName(ins[i]->dataType),
                       dataTypeName(ins[0]->dataType));
    auto bound = valueOf(*ins[i]);
    if (!bound)
      return bound.takeError();
    Operation *op =
        i == 1 ? d::MaxOp::create(builder, loc(), placeholder(), result, *bound)
                     .getOperation()
               : d::MinOp::create(builder, loc(), placeholder(), result, *bound)
                     .getOperation();
    auto clipped = finish(op);
    if (!clipped)
      return clipped.takeError();
    result = *clipped;
  }
  return defineValue(0, result);
}

void ::dtc::onnx::detail::registerLogicOps(LoweringTable &table) {
  for (const char *op :
       {"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Xor"})
    table[op] = &ModelImporter::lowerCompare;
  for (const char *op : {"Not", "And", "Or"})
    table[op] = &ModelImporter::lowerLogic;
  table["IsNaN"] = &ModelImporter::lowerIsNaNOrInf;
  table["IsInf"] = &ModelImporter::lowerIsNaNOrInf;
  table["Clip"] = &ModelImporter::lowerClip;
}
