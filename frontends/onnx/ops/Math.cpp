//===- Math.cpp - Elementwise math, matmul, reductions --------------------===//
//
// Lowerings of arithmetic (Add ... Sum), unary math (Exp ... Gelu), MatMul,
// Gemm, reductions and CumSum.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/ImporterImpl.h"

using namespace mlir;
using namespace ::dtc::onnx;
using namespace ::dtc::onnx::detail;
namespace d = mlir::dtc;

Error ModelImporter::lowerBinary(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  if (op != "Max" && op != "Min" && op != "Sum" && ins.size() != 2)
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
    if (op == "Add" || op == "Sum")
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
  return defineValue(0, result);
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
  Operation *created;
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
  table["Relu"] = &ModelImporter::lowerUnary;
  table["Abs"] = &ModelImporter::lowerUnary;
  table["Gelu"] = &ModelImporter::lowerUnary;
  table["MatMul"] = &ModelImporter::lowerMatMul;
  table["Gemm"] = &ModelImporter::lowerGemm;
  table["ReduceMean"] = &ModelImporter::lowerReduce;
  table["ReduceSum"] = &ModelImporter::lowerReduce;
  table["ReduceMax"] = &ModelImporter::lowerReduce;
  table["CumSum"] = &ModelImporter::lowerCumSum;
}
