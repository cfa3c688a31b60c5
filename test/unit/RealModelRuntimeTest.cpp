//===- RealModelRuntimeTest.cpp - Exported models on the CPU runtime ------===//
//
// The exported fixtures under test/models that carry reference data
// (tiny-gpt, hf/*, onnx-ops/*, cnn) are imported, lowered to a runtime
// program and executed by the CPU backend, with the model's initializers as
// parameter values. Every output must match the stored reference (PyTorch;
// onnxruntime for the op cases) within a relative error of 1e-4, measured
// per output as
//
//     max_i |got_i - expected_i| / max_i |expected_i|
//
// (the largest absolute error, relative to the output's largest finite
// magnitude; elements equal to the reference, such as the -inf of a mask,
// count as exact), both before and after raising idioms.
//
//===----------------------------------------------------------------------===//

#include "RuntimeTestUtil.h"

#include "compiler/run/Run.h"
#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/OnnxImporter.h"

#include "onnx/onnx_pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <optional>

namespace rt = ::dtc::runtime;
namespace dx = ::dtc::onnx;

namespace {

const std::string kModels = DTC_TEST_MODELS_DIR;

/// The runtime dtype of an ONNX element type; DTYPE_UNSPECIFIED if none.
rt::DType dtypeOfOnnx(int32_t dataType) {
  switch (dataType) {
  case dx::kFloat:
    return rt::DType::F32;
  case dx::kDouble:
    return rt::DType::F64;
  case dx::kFloat16:
    return rt::DType::F16;
  case dx::kBfloat16:
    return rt::DType::BF16;
  case dx::kInt64:
    return rt::DType::I64;
  case dx::kInt32:
    return rt::DType::I32;
  case dx::kInt8:
    return rt::DType::I8;
  case dx::kBool:
    return rt::DType::BOOL;
  default:
    return rt::DType::DTYPE_UNSPECIFIED;
  }
}

/// The runtime dtype of a tensor type's element type.
rt::DType dtypeOf(mlir::Type type) {
  std::string name;
  llvm::raw_string_ostream os(name);
  os << mlir::cast<mlir::RankedTensorType>(type).getElementType();
  return rt::parseDType(name);
}

std::optional<dx::HostTensor> readTensorPb(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return std::nullopt;
  ::onnx::TensorProto proto;
  if (!proto.ParseFromArray((*buffer)->getBufferStart(),
                            (*buffer)->getBufferSize()))
    return std::nullopt;
  std::string error;
  return dx::decodeTensor(proto, "", error);
}

/// The values of `module`'s dtc.parameter ops (the runtime's parameter
/// variables): the model's floating-point initializers by name, and the
/// stacks of per-expert initializers the importer made (FuseMoe.h).
std::map<std::string, rt::Tensor> readParameters(const std::string &path,
                                                 mlir::ModuleOp module) {
  std::map<std::string, rt::Tensor> params;
  ::onnx::ModelProto model;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(model.ParseFromIstream(&in)) << path;
  std::map<std::string, const ::onnx::TensorProto *> initializers;
  for (const auto &init : model.graph().initializer()) {
    initializers[init.name()] = &init;
    std::string error;
    auto tensor = dx::decodeTensor(init, "", error);
    EXPECT_TRUE(tensor.has_value()) << init.name() << ": " << error;
    if (tensor && tensor->isFloat())
      params[init.name()] =
          dtc::toRuntimeTensor(*tensor, dtypeOfOnnx(tensor->dataType));
  }
  module.walk([&](mlir::dtc::ParameterOp p) {
    std::optional<mlir::ArrayAttr> stack = p.getStack();
    if (!stack)
      return;
    std::vector<std::string> members;
    for (auto member : stack->getAsValueRange<mlir::StringAttr>())
      members.push_back(member.str());
    std::string error;
    auto tensor = dx::decodeStacked(
        members, p.getStackTransposed(),
        [&](llvm::StringRef name) -> const ::onnx::TensorProto * {
          auto it = initializers.find(name.str());
          return it == initializers.end() ? nullptr : it->second;
        },
        "", error);
    EXPECT_TRUE(tensor.has_value()) << p.getName().str() << ": " << error;
    if (tensor)
      params[p.getName().str()] =
          dtc::toRuntimeTensor(*tensor, dtypeOfOnnx(tensor->dataType));
  });
  return params;
}

struct ModelCase {
  std::string name; // for messages
  std::string path; // the .onnx file
  std::string data; // its test_data_set_0
  std::optional<int64_t> batch, seqLen;
};

/// Imports, lowers and runs `c` on the CPU runtime; returns the largest
/// relative error (as defined at the top) over its outputs, +inf on any
/// failure (reported through gtest).
double runCase(const ModelCase &c, bool raise) {
  dx::ImportOptions options;
  options.batch = c.batch;
  options.seqLen = c.seqLen;
  options.raiseIdioms = raise;
  mlir::MLIRContext ctx;
  auto module = dx::importOnnxFile(c.path, options, ctx);
  if (!module) {
    ADD_FAILURE() << c.name
                  << ": import failed: " << llvm::toString(module.takeError());
    return INFINITY;
  }
  auto main = (**module).lookupSymbol<mlir::func::FuncOp>("main");
  if (!main) {
    ADD_FAILURE() << c.name << ": no main";
    return INFINITY;
  }
  std::vector<rt::Tensor> args;
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    std::string file = c.data + "/input_" + std::to_string(i) + ".pb";
    auto host = readTensorPb(file);
    if (!host) {
      ADD_FAILURE() << c.name << ": cannot read " << file;
      return INFINITY;
    }
    args.push_back(
        dtc::toRuntimeTensor(*host, dtypeOf(main.getArgumentTypes()[i])));
  }
  auto outputs = ::dtc::test::runOnCpu(**module, "main", args,
                                       readParameters(c.path, **module));
  if (!outputs) {
    ADD_FAILURE() << c.name << ": " << llvm::toString(outputs.takeError());
    return INFINITY;
  }
  double worst = 0;
  for (size_t i = 0; i < outputs->size(); ++i) {
    std::string file = c.data + "/output_" + std::to_string(i) + ".pb";
    auto expected = readTensorPb(file);
    if (!expected) {
      ADD_FAILURE() << c.name << ": cannot read " << file;
      return INFINITY;
    }
    const rt::Tensor &got = (*outputs)[i];
    if (got.shape() != llvm::ArrayRef<int64_t>(expected->shape)) {
      ADD_FAILURE() << c.name << ": output " << i << " has shape "
                    << dx::shapeString(got.shape()) << ", expected "
                    << dx::shapeString(expected->shape);
      return INFINITY;
    }
    double maxDiff = 0, maxRef = 0;
    for (int64_t j = 0; j < expected->size(); ++j) {
      double a = got.dtype() == rt::DType::F64
                     ? got.as<double>()[j]
                     : (rt::isFloat(got.dtype())
                            ? rt::loadAsFloat(got.ref(), j)
                            : static_cast<double>(rt::loadAsInt(got.ref(), j)));
      double b = expected->getDouble(j);
      if (std::isfinite(b))
        maxRef = std::max(maxRef, std::fabs(b));
      if (a == b) // equal infinities (masks) included
        continue;
      double diff = std::fabs(a - b);
      maxDiff = std::isnan(diff) ? INFINITY : std::max(maxDiff, diff);
    }
    double relative = maxRef > 0 ? maxDiff / maxRef : maxDiff;
    EXPECT_LE(relative, 1e-4)
        << c.name << " raise=" << raise << " output " << i
        << ": max |a - b| = " << maxDiff << ", max |b| = " << maxRef;
    worst = std::max(worst, relative);
  }
  return worst;
}

void PrintTo(const ModelCase &c, std::ostream *os) { *os << c.name; }

class RealModelCase : public testing::TestWithParam<ModelCase> {};

TEST_P(RealModelCase, MatchesReferenceOnCpuRuntime) {
  const ModelCase &c = GetParam();
  for (bool raise : {false, true}) {
    double relative = runCase(c, raise);
    std::cout << "[ " << c.name << " ] raise=" << raise
              << " max |a - b| / max |b| = " << relative << "\n";
  }
}

std::string caseName(const testing::TestParamInfo<ModelCase> &info) {
  std::string name;
  for (char ch : info.param.name)
    name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
}

std::vector<ModelCase> allCases() {
  std::vector<ModelCase> cases;
  cases.push_back({"tiny-gpt", kModels + "/tiny-gpt.onnx",
                   kModels + "/tiny-gpt/test_data_set_0", 2, 16});
  for (const char *hf : {"gpt2", "llama", "mistral", "mixtral", "qwen2_moe",
                         "bert", "bert-opset14", "gpt2-ort", "llama-ort",
                         "gpt2-dynamo", "llama-dynamo", "mixtral-dynamo"})
    cases.push_back({std::string("hf/") + hf, kModels + "/hf/" + hf + ".onnx",
                     kModels + "/hf/" + hf + "/test_data_set_0", 2, 8});
  cases.push_back({"cnn", kModels + "/cnn/cnn.onnx",
                   kModels + "/cnn/test_data_set_0", 2, std::nullopt});
  for (const char *op : {"gemm",
                         "gemm_transa",
                         "matmul",
                         "elementwise",
                         "softmax_layernorm",
                         "reshapes",
                         "slice_split",
                         "opset18",
                         "gather",
                         "where",
                         "expand_reduce_cast",
                         "gelu_tanh",
                         "gelu_op",
                         "attention",
                         "host_eval",
                         "ce_softmax_loss",
                         "ce_softmax_loss_3d",
                         "ce_logsoftmax_nll",
                         "ms_attention",
                         "ms_skip_ln_gelu",
                         "ms_simplified_ln",
                         "ms_mha",
                         "ms_rotary",
                         "ms_gqa"})
    cases.push_back({std::string("onnx-ops/") + op,
                     kModels + "/onnx-ops/" + op + ".onnx",
                     kModels + "/onnx-ops/" + op + "/test_data_set_0",
                     std::nullopt, std::nullopt});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RealModelCase, testing::ValuesIn(allCases()),
                         caseName);

} // namespace
