//===- GradientTest.cpp - Gradient rules against finite differences -------===//
//
// Each test writes a small forward function around one op, makes the loss
// `sum(output * r)` for a random constant r (in the IR), builds the gradient
// function with buildGradientFunction and runs both on the CPU runtime. The
// analytic directional derivative <grad, v> in a random direction v of each
// differentiated input is compared with the central difference
// (f(x + h v) - f(x - h v)) / 2h of the forward function on the same runtime.
//
// Tolerance (per op): h = 1e-2 and |fd - analytic| <= 1e-3 + 5e-3 |fd|.
// The losses are O(1) sums of a few dozen fp32 terms: their rounding
// (~1e-7 relative, amplified by 1/2h = 50) and the central difference's
// truncation error O(h^2 |f'''|) ~ 1e-5 stay below 1e-3 + 5e-3 |fd| with a
// margin of 3x or more (worst measured: 3e-4 relative), while a wrong
// factor, sign or missing term is an O(1) error. Every checked derivative is
// at least 1e-2 in magnitude, so the check can fail. Inputs of ops with
// kinks (relu, abs, max, pools) stay at least 0.1 away from them, further
// than h |v| reaches. The whole-model check (tiny GPT) uses Richardson
// extrapolation, see there.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "dialects/dtc/DtcDialect.h"
#include "dialects/dtc/DtcGradient.h"
#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/OnnxImporter.h"
#include "passes/autodiff/Autodiff.h"

#include "onnx/onnx_pb.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <set>
#include <sstream>

namespace d = mlir::dtc;
namespace rt = ::dtc::runtime;

namespace {

constexpr double kStep = 1e-2;
constexpr double kAbsTolerance = 1e-3, kRelTolerance = 5e-3;
constexpr double kModelAbsTolerance = 2e-4, kModelRelTolerance = 5e-3;

/// How the values of one input are drawn.
enum class Dist {
  Normal,       // N(0, 1)
  Positive,     // uniform in [0.5, 2]: log, sqrt, rsqrt, reciprocal, pow base
  AwayFromZero, // magnitude uniform in [0.2, 1.2], random sign: relu, abs
  Distinct,     // a shuffled ramp with steps of 0.15: max, pools
};

std::vector<float> draw(Dist dist, int64_t n, std::mt19937 &rng) {
  std::normal_distribution<float> normal(0, 1);
  std::uniform_real_distribution<float> uniform(0, 1);
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (dist) {
    case Dist::Normal:
      values[i] = normal(rng);
      break;
    case Dist::Positive:
      values[i] = 0.5f + 1.5f * uniform(rng);
      break;
    case Dist::AwayFromZero:
      values[i] = (0.2f + uniform(rng)) * (uniform(rng) < 0.5f ? -1 : 1);
      break;
    case Dist::Distinct:
      values[i] = 0.15f * static_cast<float>(i - n / 2);
      break;
    }
  }
  if (dist == Dist::Distinct)
    std::shuffle(values.begin(), values.end(), rng);
  return values;
}

std::string formatFloats(const std::vector<float> &values) {
  std::ostringstream os;
  os.precision(9);
  os << "[";
  for (size_t i = 0; i < values.size(); ++i)
    os << (i ? ", " : "") << values[i];
  os << "]";
  return os.str();
}

/// The context every test parses into.
std::unique_ptr<mlir::MLIRContext> makeContext() {
  auto ctx = std::make_unique<mlir::MLIRContext>();
  ctx->loadDialect<d::DtcDialect, mlir::func::FuncDialect>();
  return ctx;
}

rt::Tensor makeTensor(mlir::RankedTensorType type,
                      const std::vector<float> &values) {
  EXPECT_TRUE(type.getElementType().isF32()) << "test inputs are f32";
  return ::dtc::test::makeF32(type.getShape(), values);
}

std::vector<float> valuesOf(const rt::Tensor &t) {
  return std::vector<float>(t.as<float>(), t.as<float>() + t.numElements());
}

/// One forward function around an op: `args` are its (f32) arguments,
/// `body` may read `dtc.parameter`s and must define `%out : outType`.
struct GradientCase {
  std::string args;
  std::string body;
  std::string outType;
  /// Input distributions by argument index ("arg0") or parameter name.
  std::map<std::string, Dist> dists = {};
  unsigned seed = 1;
};

/// A differentiated input: an argument or a parameter, and its value.
struct Input {
  std::string key; // "arg<i>" or the parameter name
  mlir::RankedTensorType type;
  std::vector<float> values;
};

class GradientChecker {
public:
  explicit GradientChecker(const GradientCase &c) : c(c), rng(c.seed) {}

  /// Builds, differentiates, runs and compares; reports through gtest.
  void run() {
    ctx = makeContext();
    std::string ir = buildModuleText();
    module = mlir::parseSourceString<mlir::ModuleOp>(ir, ctx.get());
    ASSERT_TRUE(module) << "cannot parse:\n" << ir;
    auto forward = module->lookupSymbol<mlir::func::FuncOp>("f");
    ASSERT_TRUE(forward);
    ::dtc::GradientOptions options;
    options.wrtArguments = true;
    auto grad = ::dtc::buildGradientFunction(forward, 0, "f_grad", options);
    ASSERT_TRUE(succeeded(grad));
    std::string text;
    llvm::raw_string_ostream os(text);
    grad->print(os);
    ASSERT_TRUE(succeeded(mlir::verify(*module))) << text;

    if (std::getenv("DTC_GRADIENT_TEST_DUMP"))
      llvm::errs() << *module << "\n";

    collectInputs(forward);
    double loss = evalLoss(argTensors(), paramTensors());
    auto results =
        ::dtc::test::runOnCpu(*module, "f_grad", argTensors(), paramTensors());
    ASSERT_TRUE(static_cast<bool>(results))
        << llvm::toString(results.takeError()) << "\n"
        << text;
    ASSERT_EQ(results->size(), 1 + inputs.size());

    // The gradient function returns the loss it differentiated, too.
    EXPECT_NEAR((*results)[0].as<float>()[0], loss,
                1e-5 * (1 + std::fabs(loss)));

    for (size_t i = 0; i < inputs.size(); ++i)
      checkInput(i, (*results)[1 + resultIndexOf(*grad, inputs[i].key)]);
  }

  mlir::ModuleOp getModule() { return *module; }

private:
  std::string buildModuleText() {
    // The loss weights: a random constant of the output's type.
    auto outType = mlir::cast<mlir::RankedTensorType>(
        mlir::parseType(c.outType, ctx.get()));
    EXPECT_TRUE(outType) << c.outType;
    std::vector<float> r = draw(Dist::Normal, outType.getNumElements(), rng);
    std::string dims;
    for (int64_t i = 0; i < outType.getRank(); ++i)
      dims += (i ? ", " : "") + std::to_string(i);
    // Written flat and reshaped: a dense literal must nest like its shape.
    std::string flatType =
        "tensor<" + std::to_string(outType.getNumElements()) + "xf32>";
    std::ostringstream os;
    os << "func.func @f(" << c.args << ") -> tensor<f32> {\n"
       << c.body << "\n"
       << "  %r_flat = dtc.constant dense<" << formatFloats(r)
       << "> : " << flatType << "\n"
       << "  %r = dtc.reshape %r_flat : (" << flatType << ") -> " << c.outType
       << "\n"
       << "  %weighted = dtc.mul %out, %r : (" << c.outType << ", " << c.outType
       << ") -> " << c.outType << "\n";
    if (outType.getRank() == 0)
      os << "  %loss = dtc.reshape %weighted : (tensor<f32>) -> tensor<f32>\n";
    else
      os << "  %loss = dtc.reduce_sum %weighted {dims = array<i64: " << dims
         << ">} : (" << c.outType << ") -> tensor<f32>\n";
    os << "  return %loss : tensor<f32>\n}\n";
    return os.str();
  }

  Dist distOf(const std::string &key) {
    auto it = c.dists.find(key);
    return it == c.dists.end() ? Dist::Normal : it->second;
  }

  void collectInputs(mlir::func::FuncOp forward) {
    for (auto [i, type] : llvm::enumerate(forward.getArgumentTypes())) {
      auto tensorType = mlir::cast<mlir::RankedTensorType>(type);
      std::string key = "arg" + std::to_string(i);
      inputs.push_back({key, tensorType,
                        draw(distOf(key), tensorType.getNumElements(), rng)});
    }
    forward.walk([&](d::ParameterOp p) {
      std::string name = p.getName().str();
      for (const Input &input : inputs)
        if (input.key == name)
          return;
      inputs.push_back({name, p.getType(),
                        draw(distOf(name), p.getType().getNumElements(), rng)});
    });
  }

  std::vector<rt::Tensor>
  argTensors(int perturbed = -1, const std::vector<float> *values = nullptr) {
    std::vector<rt::Tensor> args;
    for (auto [i, input] : llvm::enumerate(inputs))
      if (llvm::StringRef(input.key).starts_with("arg"))
        args.push_back(makeTensor(input.type, static_cast<int>(i) == perturbed
                                                  ? *values
                                                  : input.values));
    return args;
  }

  std::map<std::string, rt::Tensor>
  paramTensors(int perturbed = -1, const std::vector<float> *values = nullptr) {
    std::map<std::string, rt::Tensor> params;
    for (auto [i, input] : llvm::enumerate(inputs))
      if (!llvm::StringRef(input.key).starts_with("arg"))
        params[input.key] = makeTensor(
            input.type,
            static_cast<int>(i) == perturbed ? *values : input.values);
    return params;
  }

  double evalLoss(const std::vector<rt::Tensor> &args,
                  const std::map<std::string, rt::Tensor> &params) {
    auto results = ::dtc::test::runOnCpu(*module, "f", args, params);
    if (!results) {
      ADD_FAILURE() << llvm::toString(results.takeError());
      return NAN;
    }
    return (*results)[0].as<float>()[0];
  }

  /// The index (among the gradient results) of the gradient of `key`.
  static size_t resultIndexOf(mlir::func::FuncOp grad, const std::string &key) {
    for (unsigned i = 0; i < grad.getNumResults(); ++i) {
      if (auto name =
              grad.getResultAttrOfType<mlir::StringAttr>(i, "dtc.grad_of"))
        if (name.getValue() == key)
          return i - 1;
      if (auto index =
              grad.getResultAttrOfType<mlir::IntegerAttr>(i, "dtc.grad_of_arg"))
        if ("arg" + std::to_string(index.getInt()) == key)
          return i - 1;
    }
    ADD_FAILURE() << "no gradient result for " << key;
    return 0;
  }

  void checkInput(size_t i, const rt::Tensor &grad) {
    const Input &input = inputs[i];
    ASSERT_EQ(grad.numElements(), input.type.getNumElements()) << input.key;
    std::vector<float> direction = draw(Dist::Normal, input.values.size(), rng);
    double analytic = 0, gradNorm = 0;
    std::vector<float> g = valuesOf(grad);
    for (size_t k = 0; k < g.size(); ++k) {
      analytic += static_cast<double>(g[k]) * direction[k];
      gradNorm = std::max(gradNorm, std::fabs(static_cast<double>(g[k])));
    }
    std::vector<float> plus = input.values, minus = input.values;
    for (size_t k = 0; k < plus.size(); ++k) {
      plus[k] += kStep * direction[k];
      minus[k] -= kStep * direction[k];
    }
    bool isArg = llvm::StringRef(input.key).starts_with("arg");
    int index = static_cast<int>(i);
    double fPlus = isArg ? evalLoss(argTensors(index, &plus), paramTensors())
                         : evalLoss(argTensors(), paramTensors(index, &plus));
    double fMinus = isArg ? evalLoss(argTensors(index, &minus), paramTensors())
                          : evalLoss(argTensors(), paramTensors(index, &minus));
    double fd = (fPlus - fMinus) / (2 * kStep);
    double error = std::fabs(fd - analytic);
    // A vanishing gradient or derivative would make the comparison vacuous.
    EXPECT_GT(gradNorm, 1e-3) << input.key << ": the gradient is all zeros";
    EXPECT_GT(std::fabs(fd), 1e-2) << input.key;
    EXPECT_LE(error, kAbsTolerance + kRelTolerance * std::fabs(fd))
        << input.key << ": finite difference " << fd << " vs analytic "
        << analytic;
    std::cout << "[ gradient ] " << input.key << ": fd " << fd << " analytic "
              << analytic << " |diff| " << error << "\n";
  }

  const GradientCase &c;
  std::mt19937 rng;
  std::unique_ptr<mlir::MLIRContext> ctx;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<Input> inputs;
};

void checkGradients(const GradientCase &c) { GradientChecker(c).run(); }

/// `%out = <op> %arg0 : tensor<2x3xf32>` for a unary op.
GradientCase unary(const std::string &op, Dist dist = Dist::Normal,
                   const std::string &attrs = "") {
  return {"%arg0: tensor<2x3xf32>",
          "  %out = dtc." + op + " %arg0 " + attrs + " : tensor<2x3xf32>",
          "tensor<2x3xf32>",
          {{"arg0", dist}}};
}

//===----------------------------------------------------------------------===//
// Elementwise unary ops
//===----------------------------------------------------------------------===//

TEST(Gradient, Neg) { checkGradients(unary("neg")); }
TEST(Gradient, Abs) { checkGradients(unary("abs", Dist::AwayFromZero)); }
TEST(Gradient, Exp) { checkGradients(unary("exp")); }
TEST(Gradient, Log) { checkGradients(unary("log", Dist::Positive)); }
TEST(Gradient, Sqrt) { checkGradients(unary("sqrt", Dist::Positive)); }
TEST(Gradient, Rsqrt) { checkGradients(unary("rsqrt", Dist::Positive)); }
TEST(Gradient, Reciprocal) {
  checkGradients(unary("reciprocal", Dist::Positive));
}
TEST(Gradient, Tanh) { checkGradients(unary("tanh")); }
TEST(Gradient, Softplus) { checkGradients(unary("softplus")); }
TEST(Gradient, Erf) { checkGradients(unary("erf")); }
TEST(Gradient, Sigmoid) { checkGradients(unary("sigmoid")); }
TEST(Gradient, Relu) { checkGradients(unary("relu", Dist::AwayFromZero)); }
TEST(Gradient, Silu) { checkGradients(unary("silu")); }
TEST(Gradient, Gelu) { checkGradients(unary("gelu")); }
TEST(Gradient, GeluTanh) {
  checkGradients(unary("gelu", Dist::Normal, "{approximate_tanh}"));
}

TEST(Gradient, Cast) {
  // Through f64 and back: the cotangent is cast back at each step.
  checkGradients({"%arg0: tensor<2x3xf32>",
                  R"(  %0 = dtc.cast %arg0 : tensor<2x3xf32> to f64
  %1 = dtc.mul %0, %0 : (tensor<2x3xf64>, tensor<2x3xf64>) -> tensor<2x3xf64>
  %out = dtc.cast %1 : tensor<2x3xf64> to f32)",
                  "tensor<2x3xf32>"});
}

//===----------------------------------------------------------------------===//
// Binary ops with broadcasting
//===----------------------------------------------------------------------===//

/// `%out = <op> %arg0, %arg1` with `lhs` and `rhs` shapes broadcasting to
/// `out`.
GradientCase binary(const std::string &op, const std::string &lhs,
                    const std::string &rhs, const std::string &out,
                    Dist lhsDist = Dist::Normal, Dist rhsDist = Dist::Normal) {
  return {"%arg0: " + lhs + ", %arg1: " + rhs,
          "  %out = dtc." + op + " %arg0, %arg1 : (" + lhs + ", " + rhs +
              ") -> " + out,
          out,
          {{"arg0", lhsDist}, {"arg1", rhsDist}}};
}

TEST(Gradient, AddBroadcast) {
  checkGradients(
      binary("add", "tensor<2x3x4xf32>", "tensor<4xf32>", "tensor<2x3x4xf32>"));
}
TEST(Gradient, SubBroadcast) {
  checkGradients(binary("sub", "tensor<3x1xf32>", "tensor<2x1x4xf32>",
                        "tensor<2x3x4xf32>"));
}
TEST(Gradient, MulBroadcast) {
  checkGradients(binary("mul", "tensor<2x1x4xf32>", "tensor<3x1xf32>",
                        "tensor<2x3x4xf32>"));
}
TEST(Gradient, DivBroadcast) {
  checkGradients(binary("div", "tensor<2x3xf32>", "tensor<3xf32>",
                        "tensor<2x3xf32>", Dist::Normal, Dist::Positive));
}
TEST(Gradient, Pow) {
  checkGradients(binary("pow", "tensor<2x3xf32>", "tensor<2x3xf32>",
                        "tensor<2x3xf32>", Dist::Positive, Dist::Normal));
}
TEST(Gradient, PowScalarExponent) {
  checkGradients(binary("pow", "tensor<2x3xf32>", "tensor<f32>",
                        "tensor<2x3xf32>", Dist::Positive, Dist::Normal));
}

// max/min: the operands differ by at least 0.15 everywhere (the ramp).
TEST(Gradient, Max) {
  checkGradients({"%arg0: tensor<2x3xf32>",
                  R"(  %b = dtc.parameter "b" : tensor<2x3xf32>
  %out = dtc.max %arg0, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>)",
                  "tensor<2x3xf32>",
                  {{"arg0", Dist::Distinct}, {"b", Dist::Distinct}},
                  /*seed=*/3});
}
TEST(Gradient, Min) {
  checkGradients({"%arg0: tensor<2x3xf32>",
                  R"(  %b = dtc.parameter "b" : tensor<2x3xf32>
  %out = dtc.min %arg0, %b : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>)",
                  "tensor<2x3xf32>",
                  {{"arg0", Dist::Distinct}, {"b", Dist::Distinct}},
                  /*seed=*/4});
}

TEST(Gradient, CompareSelect) {
  // The mask comes from a constant: only the selected sides get gradients.
  checkGradients(
      {"%arg0: tensor<2x3xf32>, %arg1: tensor<3xf32>",
       R"(  %m = dtc.constant dense<[[1.0, -1.0, 2.0], [-3.0, 1.0, -1.0]]> : tensor<2x3xf32>
  %zero = dtc.constant dense<0.0> : tensor<f32>
  %c = dtc.compare %m, %zero {predicate = "gt"} : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xi1>
  %out = dtc.select %c, %arg0, %arg1 : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>)",
       "tensor<2x3xf32>"});
}

//===----------------------------------------------------------------------===//
// Matmul
//===----------------------------------------------------------------------===//

GradientCase matmul(const std::string &lhs, const std::string &rhs,
                    const std::string &out, const std::string &attrs = "") {
  return {"%arg0: " + lhs + ", %arg1: " + rhs,
          "  %out = dtc.matmul %arg0, %arg1 " + attrs + " : (" + lhs + ", " +
              rhs + ") -> " + out,
          out};
}

TEST(Gradient, Matmul) {
  checkGradients(
      matmul("tensor<2x3xf32>", "tensor<3x4xf32>", "tensor<2x4xf32>"));
}
TEST(Gradient, MatmulTransposeLhs) {
  checkGradients(matmul("tensor<3x2xf32>", "tensor<3x4xf32>", "tensor<2x4xf32>",
                        "{transpose_lhs}"));
}
TEST(Gradient, MatmulTransposeRhs) {
  checkGradients(matmul("tensor<2x3xf32>", "tensor<4x3xf32>", "tensor<2x4xf32>",
                        "{transpose_rhs}"));
}
TEST(Gradient, MatmulTransposeBoth) {
  checkGradients(matmul("tensor<3x2xf32>", "tensor<4x3xf32>", "tensor<2x4xf32>",
                        "{transpose_lhs, transpose_rhs}"));
}
TEST(Gradient, MatmulBatchBroadcast) {
  checkGradients(matmul("tensor<2x1x2x3xf32>", "tensor<3x3x4xf32>",
                        "tensor<2x3x2x4xf32>"));
}
TEST(Gradient, MatmulLinearLayer) {
  // x @ W^T with W a parameter: the weight gradient is one flattened GEMM.
  checkGradients({"%arg0: tensor<2x3x4xf32>",
                  R"(  %w = dtc.parameter "w" : tensor<5x4xf32>
  %out = dtc.matmul %arg0, %w {transpose_rhs} : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>)",
                  "tensor<2x3x5xf32>"});
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

TEST(Gradient, ReduceSum) {
  checkGradients({"%arg0: tensor<2x3x4xf32>",
                  "  %out = dtc.reduce_sum %arg0 {dims = array<i64: 0, 2>} : "
                  "(tensor<2x3x4xf32>) -> tensor<3xf32>",
                  "tensor<3xf32>"});
}
TEST(Gradient, ReduceMeanKeepDims) {
  checkGradients({"%arg0: tensor<2x3x4xf32>",
                  "  %out = dtc.reduce_mean %arg0 {dims = array<i64: 1>, "
                  "keep_dims} : (tensor<2x3x4xf32>) -> tensor<2x1x4xf32>",
                  "tensor<2x1x4xf32>"});
}
TEST(Gradient, ReduceMax) {
  checkGradients({"%arg0: tensor<2x3x4xf32>",
                  "  %out = dtc.reduce_max %arg0 {dims = array<i64: 2>} : "
                  "(tensor<2x3x4xf32>) -> tensor<2x3xf32>",
                  "tensor<2x3xf32>",
                  {{"arg0", Dist::Distinct}}});
}

//===----------------------------------------------------------------------===//
// Softmax and normalizations
//===----------------------------------------------------------------------===//

TEST(Gradient, Softmax) {
  checkGradients({"%arg0: tensor<2x3x4xf32>",
                  "  %out = dtc.softmax %arg0 {axis = 1 : i64} : "
                  "tensor<2x3x4xf32>",
                  "tensor<2x3x4xf32>"});
}

TEST(Gradient, LayerNorm) {
  checkGradients({"%arg0: tensor<2x3x4xf32>",
                  R"(  %w = dtc.parameter "ln.weight" : tensor<4xf32>
  %b = dtc.parameter "ln.bias" : tensor<4xf32>
  %out = dtc.layer_norm %arg0, %w, %b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>)",
                  "tensor<2x3x4xf32>"});
}

TEST(Gradient, LayerNormNoBiasTwoDims) {
  checkGradients({"%arg0: tensor<2x3x4xf32>, %arg1: tensor<3x4xf32>",
                  "  %out = dtc.layer_norm %arg0, %arg1 {axis = 1 : i64, "
                  "epsilon = 1.0e-5 : f64} : (tensor<2x3x4xf32>, "
                  "tensor<3x4xf32>) -> tensor<2x3x4xf32>",
                  "tensor<2x3x4xf32>"});
}

TEST(Gradient, RmsNorm) {
  checkGradients({"%arg0: tensor<2x3x4xf32>",
                  R"(  %w = dtc.parameter "norm.weight" : tensor<4xf32>
  %out = dtc.rms_norm %arg0, %w {axis = 2 : i64, epsilon = 1.0e-6 : f64} : (tensor<2x3x4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>)",
                  "tensor<2x3x4xf32>"});
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

TEST(Gradient, Reshape) {
  checkGradients(
      {"%arg0: tensor<2x6xf32>",
       R"(  %0 = dtc.reshape %arg0 : (tensor<2x6xf32>) -> tensor<3x4xf32>
  %out = dtc.mul %0, %0 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>)",
       "tensor<3x4xf32>"});
}
TEST(Gradient, Transpose) {
  checkGradients(
      {"%arg0: tensor<2x3x4xf32>",
       R"(  %0 = dtc.transpose %arg0 {permutation = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
  %out = dtc.tanh %0 : tensor<4x2x3xf32>)",
       "tensor<4x2x3xf32>"});
}
TEST(Gradient, Concat) {
  checkGradients(
      {"%arg0: tensor<2x3xf32>, %arg1: tensor<2x1xf32>",
       R"(  %0 = dtc.concat %arg0, %arg1, %arg0 {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x1xf32>, tensor<2x3xf32>) -> tensor<2x7xf32>
  %out = dtc.tanh %0 : tensor<2x7xf32>)",
       "tensor<2x7xf32>"});
}
TEST(Gradient, SliceStrided) {
  checkGradients({"%arg0: tensor<4x6xf32>",
                  "  %out = dtc.slice %arg0 {starts = array<i64: 1, 0>, "
                  "limits = array<i64: 4, 5>, strides = array<i64: 1, 2>} : "
                  "(tensor<4x6xf32>) -> tensor<3x3xf32>",
                  "tensor<3x3xf32>"});
}

TEST(Gradient, GatherElementsRepeatedAndNegative) {
  // Along axis 1 of [2, 4]: element (0, 1) is read twice (index 1 and -3),
  // (1, 3) through -1, and (0, 2), (1, 1) not at all (zero gradient).
  checkGradients(
      {"%arg0: tensor<2x4xf32>",
       R"(  %ids = dtc.constant dense<[[1, -3, 0], [-1, 0, 2]]> : tensor<2x3xi64>
  %out = dtc.gather_elements %arg0, %ids {axis = 1 : i64} : (tensor<2x4xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>)",
       "tensor<2x3xf32>"});
}
TEST(Gradient, GatherElementsAxis0) {
  checkGradients(
      {"%arg0: tensor<3x2x2xf32>",
       R"(  %ids = dtc.constant dense<[[[2, 0], [1, 1]], [[0, 0], [2, -1]]]> : tensor<2x2x2xi32>
  %0 = dtc.gather_elements %arg0, %ids {axis = 0 : i64} : (tensor<3x2x2xf32>, tensor<2x2x2xi32>) -> tensor<2x2x2xf32>
  %out = dtc.tanh %0 : tensor<2x2x2xf32>)",
       "tensor<2x2x2xf32>"});
}
TEST(Gradient, CumSum) {
  checkGradients({"%arg0: tensor<2x5xf32>",
                  R"(  %0 = dtc.cumsum %arg0 {axis = 1 : i64} : tensor<2x5xf32>
  %out = dtc.tanh %0 : tensor<2x5xf32>)",
                  "tensor<2x5xf32>"});
}
// Mamba's scan over 5 positions with decays in (0, 1) (a sigmoid, as
// exp(delta * A) with A < 0): a, x and c each get their gradient from
// dtc.selective_scan_grad's reverse-time recurrence, checked against the
// forward kernel's finite differences.
TEST(Gradient, SelectiveScan) {
  checkGradients({"%arg0: tensor<2x3x5x4xf32>, %arg1: tensor<2x3x5x4xf32>, "
                  "%arg2: tensor<2x5x4xf32>",
                  R"(  %a = dtc.sigmoid %arg0 : tensor<2x3x5x4xf32>
  %out = dtc.selective_scan %a, %arg1, %arg2 : (tensor<2x3x5x4xf32>, tensor<2x3x5x4xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>)",
                  "tensor<2x3x5xf32>"});
}
TEST(Gradient, CumSumExclusiveReverse) {
  checkGradients({"%arg0: tensor<4x3xf32>",
                  "  %out = dtc.cumsum %arg0 {axis = 0 : i64, exclusive, "
                  "reverse} : tensor<4x3xf32>",
                  "tensor<4x3xf32>"});
}

//===----------------------------------------------------------------------===//
// Transformer ops and losses
//===----------------------------------------------------------------------===//

TEST(Gradient, Embedding) {
  // Row 1 is read three times: its gradient sums the three cotangents.
  checkGradients({"",
                  R"(  %table = dtc.parameter "wte" : tensor<5x3xf32>
  %ids = dtc.constant dense<[[1, 4, 1], [0, 1, 2]]> : tensor<2x3xi64>
  %out = dtc.embedding %table, %ids : (tensor<5x3xf32>, tensor<2x3xi64>) -> tensor<2x3x3xf32>)",
                  "tensor<2x3x3xf32>"});
}

TEST(Gradient, AttentionCausalGroupedQuery) {
  checkGradients(
      {"%arg0: tensor<1x4x3x2xf32>, %arg1: tensor<1x2x3x2xf32>, "
       "%arg2: tensor<1x2x3x2xf32>",
       "  %out = dtc.attention %arg0, %arg1, %arg2 {causal} : "
       "(tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>) -> "
       "tensor<1x4x3x2xf32>",
       "tensor<1x4x3x2xf32>"});
}

TEST(Gradient, AttentionScaled) {
  checkGradients(
      {"%arg0: tensor<2x2x3x4xf32>, %arg1: tensor<2x2x5x4xf32>, "
       "%arg2: tensor<2x2x5x3xf32>",
       "  %out = dtc.attention %arg0, %arg1, %arg2 {scale = 0.3 : f64} : "
       "(tensor<2x2x3x4xf32>, tensor<2x2x5x4xf32>, tensor<2x2x5x3xf32>) -> "
       "tensor<2x2x3x3xf32>",
       "tensor<2x2x3x3xf32>"});
}

/// A whole MoE layer: route (top-2 of 4 experts, 2 slots per expert, so
/// some of the 12 choices per sequence are dropped), dispatch, SwiGLU
/// experts as batched matmuls, combine, plus each sequence's auxiliary
/// loss. The router logits are a shuffled ramp (steps of 0.15), so no
/// perturbation changes a choice.
GradientCase moeLayer(const std::string &routeAttrs) {
  return {
      "%arg0: tensor<2x6x4xf32>, %arg1: tensor<2x6x4xf32>",
      R"(  %gates, %slots, %aux = dtc.moe_route %arg1 {top_k = 2 : i64, capacity = 2 : i64, )" +
          routeAttrs +
          R"(} : (tensor<2x6x4xf32>) -> (tensor<2x6x4xf32>, tensor<2x4x2xi64>, tensor<2xf32>)
  %buf = dtc.moe_dispatch %arg0, %slots : (tensor<2x6x4xf32>, tensor<2x4x2xi64>) -> tensor<2x4x2x4xf32>
  %w1 = dtc.parameter "w1" : tensor<4x4x5xf32>
  %w3 = dtc.parameter "w3" : tensor<4x4x5xf32>
  %w2 = dtc.parameter "w2" : tensor<4x5x4xf32>
  %h1 = dtc.matmul %buf, %w1 : (tensor<2x4x2x4xf32>, tensor<4x4x5xf32>) -> tensor<2x4x2x5xf32>
  %a = dtc.silu %h1 : tensor<2x4x2x5xf32>
  %h3 = dtc.matmul %buf, %w3 : (tensor<2x4x2x4xf32>, tensor<4x4x5xf32>) -> tensor<2x4x2x5xf32>
  %g = dtc.mul %a, %h3 : (tensor<2x4x2x5xf32>, tensor<2x4x2x5xf32>) -> tensor<2x4x2x5xf32>
  %o = dtc.matmul %g, %w2 : (tensor<2x4x2x5xf32>, tensor<4x5x4xf32>) -> tensor<2x4x2x4xf32>
  %y = dtc.moe_combine %o, %slots, %gates : (tensor<2x4x2x4xf32>, tensor<2x4x2xi64>, tensor<2x6x4xf32>) -> tensor<2x6x4xf32>
  %auxr = dtc.reshape %aux : (tensor<2xf32>) -> tensor<2x1x1xf32>
  %out = dtc.add %y, %auxr : (tensor<2x6x4xf32>, tensor<2x1x1xf32>) -> tensor<2x6x4xf32>)",
      "tensor<2x6x4xf32>",
      {{"arg1", Dist::Distinct}}};
}

TEST(Gradient, MoeSoftmaxNormalized) { checkGradients(moeLayer("normalize")); }

TEST(Gradient, MoeSigmoid) { checkGradients(moeLayer("score = \"sigmoid\"")); }

TEST(Gradient, CrossEntropyIgnoreIndex) {
  checkGradients(
      {"%arg0: tensor<2x3x5xf32>",
       R"(  %labels = dtc.constant dense<[[1, -100, 4], [0, 2, 2]]> : tensor<2x3xi64>
  %out = dtc.cross_entropy %arg0, %labels : (tensor<2x3x5xf32>, tensor<2x3xi64>) -> tensor<f32>)",
       "tensor<f32>"});
}

//===----------------------------------------------------------------------===//
// Convolution and pooling
//===----------------------------------------------------------------------===//

TEST(Gradient, ConvGroupedStridedPaddedWithBias) {
  checkGradients({"%arg0: tensor<1x2x5x5xf32>",
                  R"(  %w = dtc.parameter "conv.weight" : tensor<4x1x3x3xf32>
  %b = dtc.parameter "conv.bias" : tensor<4xf32>
  %out = dtc.conv %arg0, %w, %b {strides = array<i64: 2, 2>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, groups = 2 : i64} : (tensor<1x2x5x5xf32>, tensor<4x1x3x3xf32>, tensor<4xf32>) -> tensor<1x4x3x3xf32>)",
                  "tensor<1x4x3x3xf32>"});
}

TEST(Gradient, ConvDilated) {
  checkGradients({"%arg0: tensor<2x3x6x5xf32>, %arg1: tensor<2x3x2x2xf32>",
                  "  %out = dtc.conv %arg0, %arg1 {strides = array<i64: 1, 1>, "
                  "dilations = array<i64: 2, 1>, pads = array<i64: 0, 1, 0, "
                  "0>} : (tensor<2x3x6x5xf32>, tensor<2x3x2x2xf32>) -> "
                  "tensor<2x2x4x5xf32>",
                  "tensor<2x2x4x5xf32>"});
}

TEST(Gradient, MaxPool) {
  checkGradients({"%arg0: tensor<1x2x5x5xf32>",
                  "  %out = dtc.max_pool %arg0 {kernel_shape = array<i64: 3, "
                  "3>, strides = array<i64: 2, 2>, dilations = array<i64: 1, "
                  "1>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x5xf32>) "
                  "-> tensor<1x2x3x3xf32>",
                  "tensor<1x2x3x3xf32>",
                  {{"arg0", Dist::Distinct}}});
}

TEST(Gradient, AvgPool) {
  checkGradients({"%arg0: tensor<1x2x5x5xf32>",
                  "  %out = dtc.avg_pool %arg0 {kernel_shape = array<i64: 3, "
                  "3>, strides = array<i64: 2, 2>, dilations = array<i64: 1, "
                  "1>, pads = array<i64: 1, 1, 1, 1>} : (tensor<1x2x5x5xf32>) "
                  "-> tensor<1x2x3x3xf32>",
                  "tensor<1x2x3x3xf32>"});
}

TEST(Gradient, AvgPoolCountIncludePad) {
  checkGradients({"%arg0: tensor<1x1x4x4xf32>",
                  "  %out = dtc.avg_pool %arg0 {kernel_shape = array<i64: 2, "
                  "2>, strides = array<i64: 1, 1>, dilations = array<i64: 1, "
                  "1>, pads = array<i64: 1, 1, 0, 0>, count_include_pad} : "
                  "(tensor<1x1x4x4xf32>) -> tensor<1x1x4x4xf32>",
                  "tensor<1x1x4x4xf32>"});
}

//===----------------------------------------------------------------------===//
// Accumulation, structure, errors
//===----------------------------------------------------------------------===//

TEST(Gradient, ParameterReadTwiceAndUsedTwice) {
  // "w" is read by two dtc.parameter ops and the first read is used twice:
  // the three contributions are summed into one gradient.
  checkGradients({"%arg0: tensor<3xf32>",
                  R"(  %w1 = dtc.parameter "w" : tensor<3xf32>
  %w2 = dtc.parameter "w" : tensor<3xf32>
  %0 = dtc.mul %arg0, %w1 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %1 = dtc.mul %0, %w1 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %2 = dtc.tanh %w2 : tensor<3xf32>
  %out = dtc.add %1, %2 : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>)",
                  "tensor<3xf32>"});
}

/// Parses `ir` into a fresh module of `ctx`.
mlir::OwningOpRef<mlir::ModuleOp> parse(mlir::MLIRContext &ctx,
                                        llvm::StringRef ir) {
  auto module = mlir::parseSourceString<mlir::ModuleOp>(ir, &ctx);
  EXPECT_TRUE(module) << ir.str();
  return module;
}

TEST(GradientFunction, ResultsOrderAttributesAndZeros) {
  auto ctx = makeContext();
  auto module = parse(*ctx, R"(
func.func @f(%x: tensor<3xf32>, %ids: tensor<3xi64>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) {
  %b = dtc.parameter "b" : tensor<3xf32>
  %unused = dtc.parameter "unused" : tensor<2xf32>
  %a = dtc.parameter "a" : tensor<3xf32>
  %0 = dtc.mul %x, %a : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %1 = dtc.mul %0, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %loss = dtc.reduce_sum %1 {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %0, %loss : tensor<3xf32>, tensor<f32>
})");
  ASSERT_TRUE(module);
  auto f = module->lookupSymbol<mlir::func::FuncOp>("f");
  ::dtc::GradientOptions options;
  options.wrtArguments = true;
  auto grad = ::dtc::buildGradientFunction(f, 1, "f_grad", options);
  ASSERT_TRUE(succeeded(grad));
  ASSERT_TRUE(succeeded(mlir::verify(*module)));
  // Placed right after the forward function, which is unchanged.
  EXPECT_EQ(f->getNextNode(), grad->getOperation());
  EXPECT_EQ(f.getNumResults(), 2u);
  std::string type;
  llvm::raw_string_ostream os(type);
  os << grad->getFunctionType();
  // Forward results; parameters in order of first appearance; the float
  // arguments (not the ids).
  EXPECT_EQ(type, "(tensor<3xf32>, tensor<3xi64>, tensor<3xf32>) -> "
                  "(tensor<3xf32>, tensor<f32>, tensor<3xf32>, tensor<2xf32>, "
                  "tensor<3xf32>, tensor<3xf32>, tensor<3xf32>)");
  auto gradOf = [&](unsigned i) {
    auto attr = grad->getResultAttrOfType<mlir::StringAttr>(i, "dtc.grad_of");
    return attr ? attr.getValue().str() : std::string("-");
  };
  auto gradOfArg = [&](unsigned i) {
    auto attr =
        grad->getResultAttrOfType<mlir::IntegerAttr>(i, "dtc.grad_of_arg");
    return attr ? attr.getInt() : -1;
  };
  EXPECT_EQ(gradOf(2), "b");
  EXPECT_EQ(gradOf(3), "unused");
  EXPECT_EQ(gradOf(4), "a");
  EXPECT_EQ(gradOfArg(5), 0);
  EXPECT_EQ(gradOfArg(6), 2);

  // Values: loss = sum(x * a * b), so d/da = x * b, d/db = x * a,
  // d/dx = a * b; "unused" and y get zeros.
  std::map<std::string, rt::Tensor> params = {
      {"a", ::dtc::test::makeF32({3}, {1, 2, 3})},
      {"b", ::dtc::test::makeF32({3}, {-1, 0.5, 2})},
      {"unused", ::dtc::test::makeF32({2}, {7, 7})}};
  rt::Tensor ids(rt::DType::I64, {3});
  std::fill(ids.as<int64_t>(), ids.as<int64_t>() + 3, 0);
  std::vector<rt::Tensor> args = {::dtc::test::makeF32({3}, {4, 5, 6}), ids,
                                  ::dtc::test::makeF32({3}, {1, 1, 1})};
  auto results = ::dtc::test::runOnCpu(*module, "f_grad", args, params);
  ASSERT_TRUE(static_cast<bool>(results))
      << llvm::toString(results.takeError());
  ASSERT_EQ(results->size(), 7u);
  EXPECT_EQ(valuesOf((*results)[1]), std::vector<float>({-4 + 5 + 36}));
  EXPECT_EQ(valuesOf((*results)[2]), std::vector<float>({4, 10, 18}));
  EXPECT_EQ(valuesOf((*results)[3]), std::vector<float>({0, 0}));
  EXPECT_EQ(valuesOf((*results)[4]), std::vector<float>({-4, 2.5, 12}));
  EXPECT_EQ(valuesOf((*results)[5]), std::vector<float>({-1, 1, 6}));
  EXPECT_EQ(valuesOf((*results)[6]), std::vector<float>({0, 0, 0}));
}

TEST(GradientFunction, SkipsWhatNoGradientDependsOn) {
  // The softmax_grad (which has no rule) only reads constants: it is not on
  // a path from a parameter, so it is not differentiated and no error
  // arises. Without wrtArguments the argument's branch is skipped too.
  auto ctx = makeContext();
  auto module = parse(*ctx, R"(
func.func @f(%x: tensor<3xf32>) -> tensor<f32> {
  %c = dtc.constant dense<[0.2, 0.3, 0.5]> : tensor<3xf32>
  %s = dtc.softmax_grad %c, %c {axis = 0 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %t = dtc.softmax_grad %x, %x {axis = 0 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %w = dtc.parameter "w" : tensor<3xf32>
  %0 = dtc.mul %s, %w : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %1 = dtc.mul %0, %t : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %loss = dtc.reduce_sum %1 {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %loss : tensor<f32>
})");
  ASSERT_TRUE(module);
  auto f = module->lookupSymbol<mlir::func::FuncOp>("f");
  auto grad = ::dtc::buildGradientFunction(f, 0, "f_grad");
  ASSERT_TRUE(succeeded(grad));
  EXPECT_TRUE(succeeded(mlir::verify(*module)));
  EXPECT_EQ(grad->getNumResults(), 2u);
}

/// Runs buildGradientFunction on `ir`'s @f expecting failure; returns the
/// diagnostics.
std::string gradientError(llvm::StringRef ir, unsigned lossIndex,
                          llvm::StringRef name = "f_grad") {
  auto ctx = makeContext();
  auto module = parse(*ctx, ir);
  if (!module)
    return "";
  std::string messages;
  mlir::ScopedDiagnosticHandler handler(ctx.get(), [&](mlir::Diagnostic &diag) {
    messages += diag.str() + "\n";
    return mlir::success();
  });
  auto f = module->lookupSymbol<mlir::func::FuncOp>("f");
  ::dtc::GradientOptions options;
  options.wrtArguments = true;
  auto countFuncs = [&] {
    return std::distance(module->getOps<mlir::func::FuncOp>().begin(),
                         module->getOps<mlir::func::FuncOp>().end());
  };
  auto before = countFuncs();
  EXPECT_TRUE(
      failed(::dtc::buildGradientFunction(f, lossIndex, name, options)));
  // Nothing is left behind.
  EXPECT_EQ(countFuncs(), before);
  EXPECT_TRUE(succeeded(mlir::verify(*module)));
  return messages;
}

TEST(GradientFunction, OpWithoutRuleIsALocatedError) {
  std::string error = gradientError(R"(
func.func @f(%x: tensor<3xf32>) -> tensor<f32> {
  %s = dtc.softmax_grad %x, %x {axis = 0 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32> loc("the_op")
  %loss = dtc.reduce_sum %s {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %loss : tensor<f32>
})",
                                    0);
  EXPECT_NE(error.find("dtc.softmax_grad has no gradient rule"),
            std::string::npos)
      << error;
}

TEST(GradientFunction, EveryForwardOpHasARule) {
  // A new forward op must come with its rule. Not differentiable by design:
  // leaves, the i1-valued compare, the gradient ops and the optimizer, and
  // the collectives, shard slices and ring-attention steps that
  // partitioning inserts after autodiff (docs/partition.md).
  auto ctx = makeContext();
  const std::set<std::string> exempt = {"dtc.constant",
                                        "dtc.parameter",
                                        "dtc.compare",
                                        "dtc.adamw",
                                        "dtc.all_reduce_start",
                                        "dtc.all_gather_start",
                                        "dtc.reduce_scatter_start",
                                        "dtc.all_to_all_start",
                                        "dtc.send_start",
                                        "dtc.recv_start",
                                        "dtc.wait",
                                        "dtc.shard_slice",
                                        "dtc.attention_block",
                                        "dtc.attention_merge",
                                        "dtc.zigzag_order",
                                        "dtc.cross_entropy_stats",
                                        "dtc.cross_entropy_from_stats",
                                        "dtc.embedding_shard"};
  int forwardOps = 0;
  for (mlir::RegisteredOperationName op :
       ctx->getRegisteredOperationsByDialect("dtc")) {
    std::string name = op.getStringRef().str();
    if (exempt.count(name) || llvm::StringRef(name).contains("_grad"))
      continue;
    ++forwardOps;
    EXPECT_TRUE(op.hasInterface<mlir::dtc::DifferentiableOpInterface>())
        << name << " has no gradient rule";
  }
  EXPECT_GE(forwardOps, 39);
}

TEST(GradientFunction, BadLoss) {
  const char *ir = R"(
func.func @f(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) {
  %loss = dtc.reduce_sum %x {dims = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %x, %loss : tensor<3xf32>, tensor<f32>
}
func.func @taken() {
  return
})";
  EXPECT_NE(gradientError(ir, 2).find("loss index 2 is out of range"),
            std::string::npos);
  EXPECT_NE(gradientError(ir, 0).find("must be a 0-d float tensor"),
            std::string::npos);
  EXPECT_NE(gradientError(ir, 1, "taken").find("the name is taken"),
            std::string::npos);
}

//===----------------------------------------------------------------------===//
// Reduced precision: the same rules on bf16 values
//===----------------------------------------------------------------------===//

TEST(GradientPrecision, Bf16MatchesF32) {
  // One MLP-like block computed in `ELT`, with f32 inputs and loss: the
  // cotangents flow through the casts. The f32 instance's rules are checked
  // against finite differences above; bf16 (8-bit mantissa) must agree with
  // it to within bf16 rounding through a few ops.
  const std::string templ = R"(
func.func @f(%arg0: tensor<4x8xf32>) -> tensor<f32> {
  %w = dtc.parameter "w" : tensor<8x6xf32>
  %g = dtc.parameter "g" : tensor<6xf32>
  %x = dtc.cast %arg0 : tensor<4x8xf32> to ELT
  %we = dtc.cast %w : tensor<8x6xf32> to ELT
  %ge = dtc.cast %g : tensor<6xf32> to ELT
  %h = dtc.matmul %x, %we : (tensor<4x8xELT>, tensor<8x6xELT>) -> tensor<4x6xELT>
  %n = dtc.rms_norm %h, %ge {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<4x6xELT>, tensor<6xELT>) -> tensor<4x6xELT>
  %a = dtc.silu %n : tensor<4x6xELT>
  %s = dtc.softmax %a {axis = 1 : i64} : tensor<4x6xELT>
  %l = dtc.log %s : tensor<4x6xELT>
  %m = dtc.reduce_mean %l {dims = array<i64: 0, 1>} : (tensor<4x6xELT>) -> tensor<ELT>
  %loss = dtc.cast %m : tensor<ELT> to f32
  return %loss : tensor<f32>
})";
  std::mt19937 rng(11);
  std::vector<float> x = draw(Dist::Normal, 32, rng);
  std::vector<float> w = draw(Dist::Normal, 48, rng);
  std::vector<float> g = draw(Dist::Positive, 6, rng);
  auto gradients = [&](const std::string &elt) {
    std::string ir = templ;
    for (size_t pos; (pos = ir.find("ELT")) != std::string::npos;)
      ir.replace(pos, 3, elt);
    auto ctx = makeContext();
    auto module = parse(*ctx, ir);
    std::vector<std::vector<float>> out;
    if (!module)
      return out;
    auto f = module->lookupSymbol<mlir::func::FuncOp>("f");
    ::dtc::GradientOptions options;
    options.wrtArguments = true;
    auto grad = ::dtc::buildGradientFunction(f, 0, "f_grad", options);
    EXPECT_TRUE(succeeded(grad));
    EXPECT_TRUE(succeeded(mlir::verify(*module)));
    std::map<std::string, rt::Tensor> params = {
        {"w", ::dtc::test::makeF32({8, 6}, w)},
        {"g", ::dtc::test::makeF32({6}, g)}};
    auto results = ::dtc::test::runOnCpu(
        *module, "f_grad", {::dtc::test::makeF32({4, 8}, x)}, params);
    if (!results) {
      ADD_FAILURE() << elt << ": " << llvm::toString(results.takeError());
      return out;
    }
    for (const rt::Tensor &t : *results)
      out.push_back(valuesOf(t));
    return out;
  };
  auto f32 = gradients("f32"), bf16 = gradients("bf16");
  ASSERT_EQ(f32.size(), 4u); // loss, d w, d g, d x
  ASSERT_EQ(bf16.size(), 4u);
  for (size_t r = 1; r < f32.size(); ++r) {
    ASSERT_EQ(f32[r].size(), bf16[r].size());
    double scale = 0, worst = 0;
    for (float v : f32[r])
      scale = std::max(scale, std::fabs(double(v)));
    ASSERT_GT(scale, 1e-3) << "result " << r;
    for (size_t k = 0; k < f32[r].size(); ++k)
      worst = std::max(worst, std::fabs(double(f32[r][k]) - bf16[r][k]));
    EXPECT_LE(worst, 5e-2 * scale) << "result " << r;
    std::cout << "[ bf16 ] result " << r << ": max |bf16 - f32| " << worst
              << " (max |f32| " << scale << ")\n";
  }
}

//===----------------------------------------------------------------------===//
// Whole model: tiny GPT with a cross-entropy loss
//===----------------------------------------------------------------------===//

TEST(GradientModel, TinyGptMatchesFiniteDifferences) {
  namespace dx = ::dtc::onnx;
  const std::string path = std::string(DTC_TEST_MODELS_DIR) + "/tiny-gpt.onnx";
  constexpr int64_t kBatch = 2, kSeq = 8, kVocab = 256;
  auto ctx = makeContext();
  dx::ImportOptions importOptions;
  importOptions.batch = kBatch;
  importOptions.seqLen = kSeq;
  auto imported = dx::importOnnxFile(path, importOptions, *ctx);
  ASSERT_TRUE(static_cast<bool>(imported))
      << llvm::toString(imported.takeError());
  mlir::OwningOpRef<mlir::ModuleOp> module = std::move(*imported);
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  ASSERT_TRUE(main);
  // The model outputs logits: append the loss against random labels.
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> token(0, kVocab - 1);
  std::vector<int64_t> labels(kBatch * kSeq), ids(kBatch * kSeq);
  for (auto &l : labels)
    l = token(rng);
  for (auto &i : ids)
    i = token(rng);
  {
    auto ret = mlir::cast<mlir::func::ReturnOp>(
        main.getBody().front().getTerminator());
    mlir::OpBuilder b(ret);
    auto labelType =
        mlir::RankedTensorType::get({kBatch, kSeq}, b.getI64Type());
    mlir::Value labelValues = d::ConstantOp::create(
        b, ret.getLoc(),
        mlir::cast<mlir::ElementsAttr>(
            mlir::DenseElementsAttr::get(labelType, llvm::ArrayRef(labels))));
    mlir::Value loss = d::CrossEntropyOp::create(
        b, ret.getLoc(), ret.getOperand(0), labelValues);
    mlir::func::ReturnOp::create(b, ret.getLoc(), loss);
    ret.erase();
    main.setFunctionType(mlir::FunctionType::get(
        ctx.get(), main.getArgumentTypes(), {loss.getType()}));
    main.setAllResultAttrs(llvm::ArrayRef<mlir::DictionaryAttr>{});
  }
  auto grad = ::dtc::buildGradientFunction(main, 0, "main_grad");
  ASSERT_TRUE(succeeded(grad));
  ASSERT_TRUE(succeeded(mlir::verify(*module)));
  if (std::getenv("DTC_GRADIENT_TEST_DUMP"))
    llvm::errs() << *grad << "\n";

  // The model's initializers are the parameter values.
  std::map<std::string, rt::Tensor> params;
  {
    ::onnx::ModelProto model;
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(model.ParseFromIstream(&in));
    for (const auto &init : model.graph().initializer()) {
      std::string error;
      auto tensor = dx::decodeTensor(init, "", error);
      ASSERT_TRUE(tensor.has_value()) << error;
      if (!tensor->isFloat())
        continue;
      std::vector<float> values(tensor->floats.begin(), tensor->floats.end());
      params[init.name()] = ::dtc::test::makeF32(tensor->shape, values);
    }
  }
  rt::Tensor idTensor(rt::DType::I64, {kBatch, kSeq});
  std::copy(ids.begin(), ids.end(), idTensor.as<int64_t>());

  auto results =
      ::dtc::test::runOnCpu(*module, "main_grad", {idTensor}, params);
  ASSERT_TRUE(static_cast<bool>(results))
      << llvm::toString(results.takeError());
  ASSERT_EQ(results->size(), grad->getNumResults());
  double loss = (*results)[0].as<float>()[0];
  // An untrained model over 256 tokens: close to log(256) = 5.55.
  EXPECT_GT(loss, 4.5);
  EXPECT_LT(loss, 6.5);

  auto lossAt = [&](const std::map<std::string, rt::Tensor> &values) {
    auto out = ::dtc::test::runOnCpu(*module, "main", {idTensor}, values);
    if (!out) {
      ADD_FAILURE() << llvm::toString(out.takeError());
      return double(NAN);
    }
    return double((*out)[0].as<float>()[0]);
  };
  // Every parameter, one random direction each.
  int checked = 0;
  for (unsigned i = 1; i < grad->getNumResults(); ++i) {
    std::string name =
        grad->getResultAttrOfType<mlir::StringAttr>(i, "dtc.grad_of")
            .getValue()
            .str();
    const rt::Tensor &value = params.at(name);
    std::vector<float> base = valuesOf(value), g = valuesOf((*results)[i]);
    ASSERT_EQ(g.size(), base.size()) << name;
    std::vector<float> direction = draw(Dist::Normal, base.size(), rng);
    double analytic = 0;
    for (size_t k = 0; k < g.size(); ++k)
      analytic += static_cast<double>(g[k]) * direction[k];
    auto lossAlong = [&](double step) {
      std::vector<float> v = base;
      for (size_t k = 0; k < v.size(); ++k)
        v[k] += step * direction[k];
      auto values = params;
      values[name] = ::dtc::test::makeF32(value.shape(), v);
      return lossAt(values);
    };
    auto centralDifference = [&](double h) {
      return (lossAlong(h) - lossAlong(-h)) / (2 * h);
    };
    // Richardson extrapolation of the central differences at h and h/2
    // cancels their h^2 term, which dominates here (0.5% off for the
    // largest weights): a direction over thousands of weights moves the
    // loss far along a curved path. What remains is the fp32 rounding of a
    // loss of ~5.5 (ulp 5e-7) over 2h: ~5e-5; the tolerance is
    // 2e-4 + 5e-3 |fd| (worst measured: 6e-5).
    double coarse = centralDifference(kStep);
    double fine = centralDifference(kStep / 2);
    double fd = (4 * fine - coarse) / 3;
    double error = std::fabs(fd - analytic);
    EXPECT_GT(std::fabs(fd), 1e-3) << name;
    EXPECT_LE(error, kModelAbsTolerance + kModelRelTolerance * std::fabs(fd))
        << name << ": finite difference " << fd << " vs analytic " << analytic;
    std::cout << "[ tiny-gpt ] " << name << ": fd(h) " << coarse << " fd(h/2) "
              << fine << " extrapolated " << fd << " analytic " << analytic
              << " |diff| " << error << "\n";
    ++checked;
  }
  EXPECT_EQ(checked, 29);
}

} // namespace
