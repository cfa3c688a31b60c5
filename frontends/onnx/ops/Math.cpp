//===- Math.cpp - Elementwise math, matmul, reductions --------------------===//
//
// Lowerings of arithmetic (Add ... Sum), unary math (Exp ... Gelu), MatMul,
// Gemm, reductions and CumSum.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/ImporterImpl.h"
#include "frontends/onnx/ops/Formula.h"

#include "llvm/ADT/StringExtras.h"

using namespace mlir;
using namespace ::dtc::onnx;
using namespace ::dtc::onnx::detail;
namespace d = mlir::dtc;

Error ModelImporter::lowerBinary(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  if (op != "Max" && op != "Min" && op != "Sum" && op != "Mean" &&
      ins.size() != 2)
    return nodeError("needs two inputs");
  // Pow's exponent may have another type: convert a constant one on the host.
  if (op == "Pow" && ins[1] && ins[0]->dataType != ins[1]->dataType) {
    if (!ins[1]->known)
      return nodeError("the exponent's type {0} differs from the base's {1}",
                       dataTypeName(ins[1]->dataType),
                       dataTypeName(ins[0]->dataType));
    HostTensor converted =
        HostTensor::zeros(ins[0]->dataType, ins[1]->known->shape);
    for (int64_t i = 0, e = converted.size(); i < e; ++i)
      converted.set(i, ins[1]->known->getDouble(i));
    auto exponent = constant(converted);
    if (!exponent)
      return exponent.takeError();
    auto base = valueOf(*ins[0]);
    if (!base)
      return base.takeError();
    auto result = finish(
        d::PowOp::create(builder, loc(), placeholder(), *base, *exponent));
    if (!result)
      return result.takeError();
    return defineValue(0, *result);
  }

  auto acc = valueOf(*ins[0]);
  if (!acc)
    return acc.takeError();
  Value result = *acc;
  for (Entry *e : ins.drop_front()) {
    if (!e)
      return nodeError("an input is missing");
    if (e->dataType != ins[0]->dataType)
      return nodeError("input types differ: {0} and {1}",
                       dataTypeName(ins[0]->dataType),
                       dataTypeName(e->dataType));
    auto rhs = valueOf(*e);
    if (!rhs)
      return rhs.takeError();
    Operation *created;
    if (op == "Add" || op == "Sum" || op == "Mean")
      created = d::AddOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Sub")
      created = d::SubOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Mul")
      created = d::MulOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Div")
      created = d::DivOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Pow")
      created = d::PowOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Max")
      created = d::MaxOp::create(builder, loc(), placeholder(), result, *rhs);
    else
      created = d::MinOp::create(builder, loc(), placeholder(), result, *rhs);
    auto value = finish(created);
    if (!value)
      return value.takeError();
    result = *value;
  }
  if (op == "Mean") {
    auto count = scalarConstant(ins[0]->dataType, ins.size());
    if (!count)
      return count.takeError();
    auto mean =
        finish(d::DivOp::create(builder, loc(), placeholder(), result, *count));
    if (!mean)
      return mean.takeError();
    result = *mean;
  }
  return defineValue(0, result);
}

// Elementwise activations written with existing dtc ops (compare/select for
// the piecewise ones), so they need no kernels, sharding rules or gradients
// of their own.
Error ModelImporter::lowerActivation(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  int32_t type = ins[0]->dataType;
  if (op != "Sign" && !isFloatType(type))
    return nodeError("needs a floating-point input, got {0}",
                     dataTypeName(type));
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  Value x = *input;
  Formula f(*this, type);
  auto attr = [&](llvm::StringRef name, float fallback) {
    return static_cast<double>(getFloatAttr(*node, name, fallback));
  };
  auto hardSigmoid = [&](double alpha, double beta) {
    return f.max(f.c(0), f.min(f.c(1), f.add(f.mul(x, f.c(alpha)), f.c(beta))));
  };
  Value zero = f.c(0), y;
  if (op == "LeakyRelu") {
    y = f.sel(f.cmp(x, zero, "lt"), f.mul(x, f.c(attr("alpha", 0.01f))), x);
  } else if (op == "PRelu") {
    if (ins.size() != 2 || !ins[1] || ins[1]->dataType != type)
      return nodeError("needs a slope of the input's type");
    auto slope = valueOf(*ins[1]);
    if (!slope)
      return slope.takeError();
    y = f.sel(f.cmp(x, zero, "lt"), f.mul(x, *slope), x);
  } else if (op == "Elu") {
    Value negative =
        f.mul(f.c(attr("alpha", 1.0f)), f.sub(f.unary<d::ExpOp>(x), f.c(1)));
    y = f.sel(f.cmp(x, zero, "lt"), negative, x);
  } else if (op == "Selu") {
    double alpha = attr("alpha", 1.67326319217681884765625f);
    double gamma = attr("gamma", 1.05070102214813232421875f);
    Value negative = f.sub(f.mul(f.c(alpha), f.unary<d::ExpOp>(x)), f.c(alpha));
    y = f.mul(f.c(gamma), f.sel(f.cmp(x, zero, "gt"), x, negative));
  } else if (op == "Celu") {
    double alpha = attr("alpha", 1.0f);
    Value negative = f.mul(
        f.c(alpha), f.sub(f.unary<d::ExpOp>(f.div(x, f.c(alpha))), f.c(1)));
    y = f.add(f.max(x, zero), f.min(zero, negative));
  } else if (op == "HardSigmoid") {
    y = hardSigmoid(attr("alpha", 0.2f), attr("beta", 0.5f));
  } else if (op == "HardSwish") {
    y = f.mul(x, hardSigmoid(1.0 / 6, 0.5));
  } else if (op == "Softsign") {
    y = f.div(x, f.add(f.c(1), f.unary<d::AbsOp>(x)));
  } else if (op == "Mish") {
    y = f.mul(x, f.unary<d::TanhOp>(f.unary<d::SoftplusOp>(x)));
  } else if (op == "ThresholdedRelu") {
    y = f.sel(f.cmp(x, f.c(attr("alpha", 1.0f)), "gt"), x, zero);
  } else if (op == "Shrink") {
    double lambd = attr("lambd", 0.5f), bias = attr("bias", 0.0f);
    y = f.sel(f.cmp(x, f.c(-lambd), "lt"), f.add(x, f.c(bias)),
              f.sel(f.cmp(x, f.c(lambd), "gt"), f.sub(x, f.c(bias)), zero));
  } else { // Sign
    y = f.sel(f.cmp(x, zero, "gt"), f.c(1),
              f.sel(f.cmp(x, zero, "lt"), f.c(-1), zero));
  }
  return f.define(0, y);
}

// Mod of run-time integers from dtc.div, which truncates: the C remainder
// r = a - b * (a / b) has a's sign (fmod=1); Python's (fmod=0) adds b where
// r is nonzero and its sign differs from b's. Floating-point Mod is
// evaluated on the host only (no exact truncation op).
Error ModelImporter::lowerMod(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs two inputs");
  int32_t type = ins[0]->dataType;
  if (ins[1]->dataType != type)
    return nodeError("input types differ: {0} and {1}", dataTypeName(type),
                     dataTypeName(ins[1]->dataType));
  if (!isIntegerType(type) || type == kBool)
    return nodeError("Mod of {0} computed at run time is not supported; dtc "
                     "evaluates it on constants only",
                     dataTypeName(type));
  auto a = valueOf(*ins[0]);
  if (!a)
    return a.takeError();
  auto b = valueOf(*ins[1]);
  if (!b)
    return b.takeError();
  Formula f(*this, type);
  Value r = f.sub(*a, f.mul(*b, f.div(*a, *b)));
  if (getIntAttr(*node, "fmod", 0) != 0)
    return f.define(0, r);
  Value zero = f.c(0);
  Value signsDiffer = f.cmp(f.cmp(r, zero, "lt"), f.cmp(*b, zero, "lt"), "ne");
  Value adjust = f.sel(f.cmp(r, zero, "ne"), signsDiffer,
                       f.take(scalarConstant(kBool, 0)));
  return f.define(0, f.sel(adjust, f.add(r, *b), r));
}

// ArgMax/ArgMin (the first or, with select_last_index, the last position of
// the extreme) and Hardmax (a one-hot of ArgMax's first position) along one
// axis: positions where x equals its reduce_max, picked by a reduce_max over
// a constant ramp of positions.
Error ModelImporter::lowerArgExtreme(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  int32_t type = ins[0]->dataType;
  if (!isFloatType(type))
    return nodeError("needs a floating-point input, got {0}",
                     dataTypeName(type));
  llvm::ArrayRef<int64_t> shape = ins[0]->shape;
  int64_t rank = shape.size();
  std::string error;
  auto axis = normalizeAxis(getIntAttr(*node, "axis", op == "Hardmax" ? -1 : 0),
                            rank, error);
  if (!axis)
    return nodeError("{0}", error);
  bool keepDims = getIntAttr(*node, "keepdims", 1) != 0;
  bool last = getIntAttr(*node, "select_last_index", 0) != 0;
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  Formula f(*this, type);
  Value x = op == "ArgMin" ? f.unary<d::NegOp>(*input) : *input;
  Value isMax = f.cmp(x, f.reduceMax(x, {*axis}, true), "eq");
  // Positions along the axis, [1, ..., n, ..., 1]; exact in any float type
  // for the sizes tests use (n <= 256 in bfloat16).
  int64_t n = shape[*axis];
  llvm::SmallVector<int64_t> rampShape(rank, 1);
  rampShape[*axis] = n;
  HostTensor ramp = HostTensor::zeros(type, rampShape);
  for (int64_t i = 0; i < n; ++i)
    ramp.set(i, last ? i : -i);
  Value picked = f.reduceMax(
      f.sel(isMax, f.constant(ramp), f.c(last ? -1 : -n)), {*axis}, true);
  Value position = last ? picked : f.unary<d::NegOp>(picked);
  if (op == "Hardmax") {
    for (int64_t i = 0; i < n; ++i)
      ramp.set(i, i);
    return f.define(
        0, f.sel(f.cmp(f.constant(ramp), position, "eq"), f.c(1), f.c(0)));
  }
  auto value = f.result(position);
  if (!value)
    return value.takeError();
  Value result = *value;
  if (!keepDims) {
    llvm::SmallVector<int64_t> dropped(shape);
    dropped.erase(dropped.begin() + *axis);
    auto r = reshape(result, dropped);
    if (!r)
      return r.takeError();
    result = *r;
  }
  auto ids = finish(d::CastOp::create(builder, loc(), placeholder(), result,
                                      builder.getI64Type()));
  if (!ids)
    return ids.takeError();
  return defineValue(0, *ids);
}

Error ModelImporter::lowerUnary(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  if (!isFloatType(ins[0]->dataType))
    return nodeError("needs a floating-point input, got {0}",
                     dataTypeName(ins[0]->dataType));
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  Type type = input->getType();
  Location l = loc();
  Operation *created;
  if (op == "Neg")
    created = d::NegOp::create(builder, l, type, *input);
  else if (op == "Exp")
    created = d::ExpOp::create(builder, l, type, *input);
  else if (op == "Log")
    created = d::LogOp::create(builder, l, type, *input);
  else if (op == "Sqrt")
    created = d::SqrtOp::create(builder, l, type, *input);
  else if (op == "Reciprocal")
    created = d::ReciprocalOp::create(builder, l, type, *input);
  else if (op == "Tanh")
    created = d::TanhOp::create(builder, l, type, *input);
  else if (op == "Erf")
    created = d::ErfOp::create(builder, l, type, *input);
  else if (op == "Sigmoid")
    created = d::SigmoidOp::create(builder, l, type, *input);
  else if (op == "Softplus")
    created = d::SoftplusOp::create(builder, l, type, *input);
  else if (op == "Relu")
    created = d::ReluOp::create(builder, l, type, *input);
  else if (op == "Abs")
    created = d::AbsOp::create(builder, l, type, *input);
  else {
    std::string approximate = getStringAttr(*node, "approximate", "none");
    if (approximate != "none" && approximate != "tanh")
      return nodeError("unknown approximate='{0}'", approximate);
    created =
        d::GeluOp::create(builder, l, type, *input, approximate == "tanh");
  }
  auto result = finish(created);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerMatMul(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs two inputs");
  if (!isFloatType(ins[0]->dataType) || ins[0]->dataType != ins[1]->dataType)
    return nodeError("needs floating-point inputs of one type, got {0} and "
                     "{1}",
                     dataTypeName(ins[0]->dataType),
                     dataTypeName(ins[1]->dataType));
  auto lhs = valueOf(*ins[0]);
  if (!lhs)
    return lhs.takeError();
  auto rhs = valueOf(*ins[1]);
  if (!rhs)
    return rhs.takeError();
  // numpy matmul: a 1-D lhs is a row [1, k], a 1-D rhs a column [k, 1];
  // the added dim is dropped from the result.
  int64_t lhsRank = ins[0]->shape.size(), rhsRank = ins[1]->shape.size();
  if (lhsRank == 0 || rhsRank == 0)
    return nodeError("inputs must have rank >= 1");
  Value a = *lhs, b = *rhs;
  if (lhsRank == 1) {
    auto r = reshape(a, {1, ins[0]->shape[0]});
    if (!r)
      return r.takeError();
    a = *r;
  }
  if (rhsRank == 1) {
    auto r = reshape(b, {ins[1]->shape[0], 1});
    if (!r)
      return r.takeError();
    b = *r;
  }
  auto product = finish(
      d::MatmulOp::create(builder, loc(), placeholder(), a, b, false, false));
  if (!product)
    return product.takeError();
  Value result = *product;
  if (lhsRank == 1 || rhsRank == 1) {
    llvm::SmallVector<int64_t> shape(
        cast<RankedTensorType>(result.getType()).getShape());
    if (rhsRank == 1)
      shape.pop_back();
    if (lhsRank == 1)
      shape.erase(shape.end() - (rhsRank == 1 ? 1 : 2));
    auto r = reshape(result, shape);
    if (!r)
      return r.takeError();
    result = *r;
  }
  return defineValue(0, result);
}

Error ModelImporter::lowerGemm(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs inputs A and B");
  if (!isFloatType(ins[0]->dataType))
    return nodeError("needs floating-point inputs, got {0}",
                     dataTypeName(ins[0]->dataType));
  if (ins[0]->shape.size() != 2 || ins[1]->shape.size() != 2)
    return nodeError("A and B must be matrices, got {0} and {1}",
                     shapeString(ins[0]->shape), shapeString(ins[1]->shape));
  auto a = valueOf(*ins[0]);
  if (!a)
    return a.takeError();
  auto b = valueOf(*ins[1]);
  if (!b)
    return b.takeError();
  auto product =
      finish(d::MatmulOp::create(builder, loc(), placeholder(), *a, *b,
                                 getIntAttr(*node, "transA", 0) != 0,
                                 getIntAttr(*node, "transB", 0) != 0));
  if (!product)
    return product.takeError();
  Value result = *product;
  int32_t type = ins[0]->dataType;
  auto scalar = [&](double v) {
    HostTensor t = HostTensor::zeros(type, {});
    t.set(0, v);
    return constant(t);
  };
  double alpha = getFloatAttr(*node, "alpha", 1.0f);
  double beta = getFloatAttr(*node, "beta", 1.0f);
  if (alpha != 1.0) {
    auto c = scalar(alpha);
    if (!c)
      return c.takeError();
    auto scaled =
        finish(d::MulOp::create(builder, loc(), placeholder(), result, *c));
    if (!scaled)
      return scaled.takeError();
    result = *scaled;
  }
  if (ins.size() > 2 && ins[2] && beta != 0.0) {
    Value c;
    if (ins[2]->known && beta != 1.0) {
      HostTensor scaled = *ins[2]->known;
      for (int64_t i = 0, e = scaled.size(); i < e; ++i)
        scaled.set(i, scaled.getDouble(i) * beta);
      auto v = constant(scaled);
      if (!v)
        return v.takeError();
      c = *v;
    } else {
      auto v = valueOf(*ins[2]);
      if (!v)
        return v.takeError();
      c = *v;
      if (beta != 1.0) {
        auto b = scalar(beta);
        if (!b)
          return b.takeError();
        auto scaledC =
            finish(d::MulOp::create(builder, loc(), placeholder(), c, *b));
        if (!scaledC)
          return scaledC.takeError();
        c = *scaledC;
      }
    }
    auto sum =
        finish(d::AddOp::create(builder, loc(), placeholder(), result, c));
    if (!sum)
      return sum.takeError();
    result = *sum;
  }
  return defineValue(0, result);
}

Error ModelImporter::lowerReduce(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  std::vector<int64_t> axesList;
  if (ins.size() > 1 && ins[1]) {
    auto known = knownInts(1, "axes");
    if (!known)
      return known.takeError();
    axesList = *known;
  } else if (auto attr = getIntsAttr(*node, "axes")) {
    axesList.assign(attr->begin(), attr->end());
  }
  bool noop = getIntAttr(*node, "noop_with_empty_axes", 0) != 0;
  bool keepDims = getIntAttr(*node, "keepdims", 1) != 0;
  std::string error;
  auto axes = resolveReduceAxes(axesList, ins[0]->shape.size(), noop, error);
  if (!axes)
    return nodeError("{0}", error);
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  if (axes->empty())
    return defineValue(0, *input);
  Formula f(*this, ins[0]->dataType);
  Value x = *input, y;
  if (op == "ReduceMin") {
    y = f.unary<d::NegOp>(f.reduceMax(f.unary<d::NegOp>(x), *axes, keepDims));
  } else if (op == "ReduceL1") {
    y = f.reduceSum(f.unary<d::AbsOp>(x), *axes, keepDims);
  } else if (op == "ReduceLogSum") {
    y = f.unary<d::LogOp>(f.reduceSum(x, *axes, keepDims));
  } else if (op == "ReduceLogSumExp") {
    // max + log(sum(exp(x - max))): no overflow for large x.
    Value max = f.reduceMax(x, *axes, true);
    Value sum = f.reduceSum(f.unary<d::ExpOp>(f.sub(x, max)), *axes, keepDims);
    Value shift = keepDims ? max : f.reduceMax(x, *axes, false);
    y = f.add(f.unary<d::LogOp>(sum), shift);
  }
  if (y || op == "ReduceMin" || op == "ReduceL1" || op == "ReduceLogSum" ||
      op == "ReduceLogSumExp")
    return f.define(0, y);
  Operation *created;
  if (op == "ReduceL2" || op == "ReduceSumSquare") {
    // sqrt(sum(x^2)): the norm of weight normalization (wav2vec2's
    // positional convolution), from ops that have gradients.
    auto squares =
        finish(d::MulOp::create(builder, loc(), placeholder(), *input, *input));
    if (!squares)
      return squares.takeError();
    auto sum = finish(d::ReduceSumOp::create(builder, loc(), placeholder(),
                                             *squares, *axes, keepDims));
    if (!sum || op == "ReduceSumSquare")
      return sum ? defineValue(0, *sum) : sum.takeError();
    auto root = finish(d::SqrtOp::create(builder, loc(), placeholder(), *sum));
    if (!root)
      return root.takeError();
    return defineValue(0, *root);
  }
  if (op == "ReduceMean")
    created = d::ReduceMeanOp::create(builder, loc(), placeholder(), *input,
                                      *axes, keepDims);
  else if (op == "ReduceSum")
    created = d::ReduceSumOp::create(builder, loc(), placeholder(), *input,
                                     *axes, keepDims);
  else
    created = d::ReduceMaxOp::create(builder, loc(), placeholder(), *input,
                                     *axes, keepDims);
  auto result = finish(created);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

/// CumSum of a run-time tensor along a constant axis (constant inputs fold
/// on the host): RoBERTa's position ids, the running count of non-pad ids.
Error ModelImporter::lowerCumSum(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs x and axis inputs");
  if (!ins[1]->known || ins[1]->known->size() != 1)
    return nodeError("the axis '{0}' must be a constant scalar",
                     node->input(1));
  if (ins[0]->dataType == kBool || ins[0]->dataType == kInt8)
    return nodeError("CumSum of {0} is not supported",
                     dataTypeName(ins[0]->dataType));
  std::string error;
  auto axis =
      normalizeAxis(ins[1]->known->getInt(0), ins[0]->shape.size(), error);
  if (!axis)
    return nodeError("{0}", error);
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  UnitAttr exclusive = getIntAttr(*node, "exclusive", 0) != 0
                           ? builder.getUnitAttr()
                           : UnitAttr();
  UnitAttr reverse =
      getIntAttr(*node, "reverse", 0) != 0 ? builder.getUnitAttr() : UnitAttr();
  auto result = finish(d::CumSumOp::create(
      builder, loc(), input->getType(), *input,
      builder.getI64IntegerAttr(*axis), exclusive, reverse));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

namespace {
/// A two-operand einsum's labels, classified: batch labels are in both
/// operands and the output, contracted ones in both operands only, free
/// ones in one operand and the output, summed ones in one operand only.
struct EinsumPlan {
  std::string lhs, rhs, out;
  std::string batch, contracted, lhsFree, rhsFree, lhsSummed, rhsSummed;
};

/// Parses "ab,bc->ac" (explicit output, letters only, no label repeated
/// within an operand); the error says what is not supported.
std::optional<EinsumPlan> planEinsum(llvm::StringRef equation,
                                     std::string &error) {
  std::string text;
  for (char c : equation)
    if (c != ' ')
      text += c;
  // Implicit output: the labels seen once, in alphabetical order.
  if (text.find("->") == std::string::npos) {
    std::string once;
    for (char c : text)
      if (llvm::isAlpha(c) && llvm::count(text, c) == 1)
        once += c;
    llvm::sort(once);
    text += "->" + once;
  }
  size_t arrow = text.find("->"), comma = text.find(',');
  if (comma == std::string::npos || comma > arrow ||
      text.find(',', comma + 1) < arrow) {
    error = "needs two operands ('ab,bc->ac')";
    return std::nullopt;
  }
  EinsumPlan plan;
  plan.lhs = text.substr(0, comma);
  plan.rhs = text.substr(comma + 1, arrow - comma - 1);
  plan.out = text.substr(arrow + 2);
  for (const std::string *labels : {&plan.lhs, &plan.rhs, &plan.out})
    for (auto [i, c] : llvm::enumerate(*labels))
      if (!llvm::isAlpha(c) || labels->find(c, i + 1) != std::string::npos) {
        error = "supports letters, each once per operand (no ellipsis, no "
                "diagonal)";
        return std::nullopt;
      }
  auto has = [](const std::string &s, char c) {
    return s.find(c) != std::string::npos;
  };
  for (char c : plan.out)
    if (!has(plan.lhs, c) && !has(plan.rhs, c)) {
      error = std::string("output label '") + c + "' is in no operand";
      return std::nullopt;
    }
  for (char c : plan.lhs) {
    bool inRhs = has(plan.rhs, c), inOut = has(plan.out, c);
    (inRhs ? (inOut ? plan.batch : plan.contracted)
           : (inOut ? plan.lhsFree : plan.lhsSummed)) += c;
  }
  for (char c : plan.rhs)
    if (!has(plan.lhs, c))
      (has(plan.out, c) ? plan.rhsFree : plan.rhsSummed) += c;
  return plan;
}
} // namespace

/// `input` with labels `from` summed over `summed` and transposed to
/// `order`, then reshaped to `shape`.
Expected<Value> ModelImporter::einsumOperand(Value input, std::string from,
                                             llvm::StringRef summed,
                                             llvm::StringRef order,
                                             llvm::ArrayRef<int64_t> shape) {
  llvm::ArrayRef<int64_t> dims =
      cast<RankedTensorType>(input.getType()).getShape();
  if (!summed.empty()) {
    llvm::SmallVector<int64_t> axes;
    std::string kept;
    for (auto [i, c] : llvm::enumerate(from)) {
      if (summed.contains(c))
        axes.push_back(static_cast<int64_t>(i));
      else
        kept += c;
    }
    auto reduced = finish(d::ReduceSumOp::create(builder, loc(), placeholder(),
                                                 input, axes, false));
    if (!reduced)
      return reduced.takeError();
    input = *reduced;
    from = kept;
    dims = cast<RankedTensorType>(input.getType()).getShape();
  }
  llvm::SmallVector<int64_t> perm;
  for (char c : order)
    perm.push_back(static_cast<int64_t>(from.find(c)));
  if (!llvm::equal(perm, llvm::seq<int64_t>(0, perm.size()))) {
    auto moved = finish(
        d::TransposeOp::create(builder, loc(), placeholder(), input, perm));
    if (!moved)
      return moved.takeError();
    input = *moved;
  }
  if (cast<RankedTensorType>(input.getType()).getShape() == shape)
    return input;
  return reshape(input, shape);
}

/// Einsum of two operands as one batched matmul: each operand's summed
/// labels reduced, then [batch..., lhsFree, contracted] x [batch...,
/// contracted, rhsFree] (free and contracted labels flattened), reshaped
/// and transposed to the output's labels. Mamba2's chunked scan writes
/// such equations ("bclhn,bcshn->bclsh").
/// One operand, each label once ("ij->ji", "ij->i"): the labels missing
/// from the output summed, the rest transposed to the output's order.
Error ModelImporter::lowerEinsumUnary(Entry &x) {
  std::string text;
  for (char c : getStringAttr(*node, "equation", ""))
    if (c != ' ')
      text += c;
  size_t arrow = text.find("->");
  if (arrow == std::string::npos)
    return nodeError("one-operand equation '{0}' needs an explicit output",
                     text);
  std::string from = text.substr(0, arrow), out = text.substr(arrow + 2);
  for (const std::string *labels : {&from, &out})
    for (auto [i, c] : llvm::enumerate(*labels))
      if (!llvm::isAlpha(c) || labels->find(c, i + 1) != std::string::npos ||
          from.find(c) == std::string::npos)
        return nodeError("equation '{0}': supports letters of the operand, "
                         "each once (no ellipsis, no diagonal)",
                         text);
  if (from.size() != x.shape.size())
    return nodeError("equation '{0}' does not match the operand's rank {1}",
                     text, x.shape.size());
  std::string summed;
  for (char c : from)
    if (out.find(c) == std::string::npos)
      summed += c;
  llvm::SmallVector<int64_t> shape;
  for (char c : out)
    shape.push_back(x.shape[from.find(c)]);
  auto input = valueOf(x);
  if (!input)
    return input.takeError();
  auto result = einsumOperand(*input, from, summed, out, shape);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerEinsum(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() == 1 && ins[0] && isFloatType(ins[0]->dataType))
    return lowerEinsumUnary(*ins[0]);
  if (ins.size() != 2 || !ins[0] || !ins[1])
    return nodeError("supports two operands, got {0}", ins.size());
  if (!isFloatType(ins[0]->dataType) || ins[0]->dataType != ins[1]->dataType)
    return nodeError("needs floating-point operands of one type, got {0} and "
                     "{1}",
                     dataTypeName(ins[0]->dataType),
                     dataTypeName(ins[1]->dataType));
  std::string error;
  std::string equation = getStringAttr(*node, "equation", "");
  auto plan = planEinsum(equation, error);
  if (!plan)
    return nodeError("equation '{0}': {1}", equation, error);
  if (plan->lhs.size() != ins[0]->shape.size() ||
      plan->rhs.size() != ins[1]->shape.size())
    return nodeError("equation '{0}' does not match the operands' ranks {1} "
                     "and {2}",
                     equation, ins[0]->shape.size(), ins[1]->shape.size());
  llvm::DenseMap<char, int64_t> size;
  for (auto [labels, entry] :
       {std::pair{&plan->lhs, ins[0]}, {&plan->rhs, ins[1]}})
    for (auto [i, c] : llvm::enumerate(*labels)) {
      auto [it, inserted] = size.try_emplace(c, entry->shape[i]);
      if (!inserted && it->second != entry->shape[i])
        return nodeError("label '{0}' is {1} in one operand and {2} in the "
                         "other (no broadcasting)",
                         std::string(1, c), it->second, entry->shape[i]);
    }
  auto product = [&](llvm::StringRef labels) {
    int64_t n = 1;
    for (char c : labels)
      n *= size[c];
    return n;
  };
  llvm::SmallVector<int64_t> batchDims;
  for (char c : plan->batch)
    batchDims.push_back(size[c]);
  auto with = [&](std::initializer_list<int64_t> tail) {
    llvm::SmallVector<int64_t> shape(batchDims);
    shape.append(tail);
    return shape;
  };
  int64_t m = product(plan->lhsFree), k = product(plan->contracted),
          n = product(plan->rhsFree);
  auto lhs = valueOf(*ins[0]);
  if (!lhs)
    return lhs.takeError();
  auto rhs = valueOf(*ins[1]);
  if (!rhs)
    return rhs.takeError();
  auto a = einsumOperand(*lhs, plan->lhs, plan->lhsSummed,
                         plan->batch + plan->lhsFree + plan->contracted,
                         with({m, k}));
  if (!a)
    return a.takeError();
  auto b = einsumOperand(*rhs, plan->rhs, plan->rhsSummed,
                         plan->batch + plan->contracted + plan->rhsFree,
                         with({k, n}));
  if (!b)
    return b.takeError();
  auto mm = finish(
      d::MatmulOp::create(builder, loc(), placeholder(), *a, *b, false, false));
  if (!mm)
    return mm.takeError();
  // [batch..., m, n] -> the labels batch + lhsFree + rhsFree -> the output.
  std::string labels = plan->batch + plan->lhsFree + plan->rhsFree;
  llvm::SmallVector<int64_t> unflat;
  for (char c : labels)
    unflat.push_back(size[c]);
  llvm::SmallVector<int64_t> outShape;
  for (char c : plan->out)
    outShape.push_back(size[c]);
  Value result = *mm;
  if (cast<RankedTensorType>(result.getType()).getShape() !=
      llvm::ArrayRef<int64_t>(unflat)) {
    auto r = reshape(result, unflat);
    if (!r)
      return r.takeError();
    result = *r;
  }
  auto out = einsumOperand(result, labels, "", plan->out, outShape);
  if (!out)
    return out.takeError();
  return defineValue(0, *out);
}

void ::dtc::onnx::detail::registerMathOps(LoweringTable &table) {
  table["Add"] = &ModelImporter::lowerBinary;
  table["Sub"] = &ModelImporter::lowerBinary;
  table["Mul"] = &ModelImporter::lowerBinary;
  table["Div"] = &ModelImporter::lowerBinary;
  table["Pow"] = &ModelImporter::lowerBinary;
  table["Max"] = &ModelImporter::lowerBinary;
  table["Min"] = &ModelImporter::lowerBinary;
  table["Sum"] = &ModelImporter::lowerBinary;
  table["Neg"] = &ModelImporter::lowerUnary;
  table["Exp"] = &ModelImporter::lowerUnary;
  table["Log"] = &ModelImporter::lowerUnary;
  table["Sqrt"] = &ModelImporter::lowerUnary;
  table["Reciprocal"] = &ModelImporter::lowerUnary;
  table["Tanh"] = &ModelImporter::lowerUnary;
  table["Erf"] = &ModelImporter::lowerUnary;
  table["Sigmoid"] = &ModelImporter::lowerUnary;
  table["Softplus"] = &ModelImporter::lowerUnary;
  table["Einsum"] = &ModelImporter::lowerEinsum;
  table["Relu"] = &ModelImporter::lowerUnary;
  table["Abs"] = &ModelImporter::lowerUnary;
  table["Gelu"] = &ModelImporter::lowerUnary;
  table["MatMul"] = &ModelImporter::lowerMatMul;
  table["Gemm"] = &ModelImporter::lowerGemm;
  table["ReduceMean"] = &ModelImporter::lowerReduce;
  table["ReduceSum"] = &ModelImporter::lowerReduce;
  table["ReduceMax"] = &ModelImporter::lowerReduce;
  table["ReduceL2"] = &ModelImporter::lowerReduce;
  table["ReduceSumSquare"] = &ModelImporter::lowerReduce;
  table["CumSum"] = &ModelImporter::lowerCumSum;
  table["Mean"] = &ModelImporter::lowerBinary;
  table["Mod"] = &ModelImporter::lowerMod;
  table["ReduceMin"] = &ModelImporter::lowerReduce;
  table["ReduceL1"] = &ModelImporter::lowerReduce;
  table["ReduceLogSum"] = &ModelImporter::lowerReduce;
  table["ReduceLogSumExp"] = &ModelImporter::lowerReduce;
  for (const char *op :
       {"LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "HardSigmoid", "HardSwish",
        "Softsign", "Mish", "ThresholdedRelu", "Shrink", "Sign"})
    table[op] = &ModelImporter::lowerActivation;
  for (const char *op : {"ArgMax", "ArgMin", "Hardmax"})
    table[op] = &ModelImporter::lowerArgExtreme;
}
