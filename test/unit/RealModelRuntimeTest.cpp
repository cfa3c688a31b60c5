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
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>

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

/// The largest relative error an output may have against PyTorch.
constexpr double kTolerance = 1e-4;

struct ModelCase {
  std::string name; // for messages
  std::string path; // the .onnx file
  std::string data; // its test_data_set_0
  std::optional<int64_t> batch, seqLen;
};

/// Imports, lowers and runs `c` on the CPU runtime; returns the largest
/// relative error (as defined at the top) over its outputs, or why it could
/// not run.
llvm::Expected<double> runCase(const ModelCase &c, bool raise) {
  auto fail = [&](const std::string &why) -> llvm::Error {
    return llvm::createStringError(c.name + ": " + why);
  };
  dx::ImportOptions options;
  options.batch = c.batch;
  options.seqLen = c.seqLen;
  options.raiseIdioms = raise;
  mlir::MLIRContext ctx;
  auto module = dx::importOnnxFile(c.path, options, ctx);
  if (!module) {
    return fail("import failed: " + llvm::toString(module.takeError()));
  }
  auto main = (**module).lookupSymbol<mlir::func::FuncOp>("main");
  if (!main) {
    return fail("no main");
  }
  std::vector<rt::Tensor> args;
  for (unsigned i = 0; i < main.getNumArguments(); ++i) {
    std::string file = c.data + "/input_" + std::to_string(i) + ".pb";
    auto host = readTensorPb(file);
    if (!host) {
      return fail("cannot read " + file);
    }
    args.push_back(
        dtc::toRuntimeTensor(*host, dtypeOf(main.getArgumentTypes()[i])));
  }
  auto outputs = ::dtc::test::runOnCpu(**module, "main", args,
                                       readParameters(c.path, **module));
  if (!outputs) {
    return fail(llvm::toString(outputs.takeError()));
  }
  double worst = 0;
  for (size_t i = 0; i < outputs->size(); ++i) {
    std::string file = c.data + "/output_" + std::to_string(i) + ".pb";
    auto expected = readTensorPb(file);
    if (!expected) {
      return fail("cannot read " + file);
    }
    const rt::Tensor &got = (*outputs)[i];
    if (got.shape() != llvm::ArrayRef<int64_t>(expected->shape)) {
      return fail("output " + std::to_string(i) + " has shape " +
                  dx::shapeString(got.shape()) + ", expected " +
                  dx::shapeString(expected->shape));
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
    if (!(relative <= kTolerance))
      return fail("raise=" + std::to_string(raise) + " output " +
                  std::to_string(i) +
                  ": max |a - b| = " + std::to_string(maxDiff) +
                  ", max |b| = " + std::to_string(maxRef));
    worst = std::max(worst, relative);
  }
  return worst;
}

void PrintTo(const ModelCase &c, std::ostream *os) { *os << c.name; }

class RealModelCase : public testing::TestWithParam<ModelCase> {};

TEST_P(RealModelCase, MatchesReferenceOnCpuRuntime) {
  const ModelCase &c = GetParam();
  for (bool raise : {false, true}) {
    auto relative = runCase(c, raise);
    if (!relative) {
      ADD_FAILURE() << llvm::toString(relative.takeError());
      continue;
    }
    std::cout << "[ " << c.name << " ] raise=" << raise
              << " max |a - b| / max |b| = " << *relative << "\n";
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
                         "ms_gqa",
                         "ms_moe_swiglu"})
    cases.push_back({std::string("onnx-ops/") + op,
                     kModels + "/onnx-ops/" + op + ".onnx",
                     kModels + "/onnx-ops/" + op + "/test_data_set_0",
                     std::nullopt, std::nullopt});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, RealModelCase, testing::ValuesIn(allCases()),
                         caseName);

//===----------------------------------------------------------------------===//
// The compatibility matrix: test/models/compat, made by
// scripts/export_compat_models.sh from the newest torch and transformers
// (docs/compatibility.md). Every row imports and matches PyTorch, or is
// listed with its reason in test/models/compat/known-failures.txt.
//===----------------------------------------------------------------------===//

const std::string kCompat = kModels + "/compat";

/// Every <name>.onnx of the matrix that has a <name>/test_data_set_0, its
/// batch and sequence length read off the stored token ids.
std::vector<ModelCase> compatCases() {
  std::vector<ModelCase> cases;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(kCompat, ec), end; it != end && !ec;
       it.increment(ec)) {
    llvm::StringRef path = it->path();
    if (!path.ends_with(".onnx"))
      continue;
    std::string stem = path.drop_back(5).str();
    std::string data = stem + "/test_data_set_0";
    auto ids = readTensorPb(data + "/input_0.pb");
    if (!ids || ids->shape.size() != 2)
      continue;
    cases.push_back({llvm::sys::path::filename(stem).str(), path.str(), data,
                     ids->shape[0], ids->shape[1]});
  }
  llvm::sort(cases, [](const ModelCase &a, const ModelCase &b) {
    return a.name < b.name;
  });
  return cases;
}

class CompatRow : public testing::TestWithParam<ModelCase> {};

TEST_P(CompatRow, ImportsAndMatchesPyTorch) {
  const ModelCase &c = GetParam();
  std::map<std::string, std::string> known =
      ::dtc::test::readKnownFailures(kCompat + "/known-failures.txt");
  auto listed = known.find(c.name);
  auto relative = runCase(c, /*raise=*/true);
  if (!relative) {
    std::string why = llvm::toString(relative.takeError());
    if (listed == known.end())
      ADD_FAILURE() << why;
    else
      std::cout << "[ " << c.name << " ] known failure (" << listed->second
                << "): " << why << "\n";
    return;
  }
  std::cout << "[ " << c.name << " ] max |a - b| / max |b| = " << *relative
            << "\n";
  EXPECT_EQ(listed, known.end()) << c.name << " passes now: remove it from "
                                 << kCompat << "/known-failures.txt";
}

TEST(CompatMatrix, HasTheFamilies) {
  // The matrix is generated; make sure a regeneration that lost rows is
  // noticed (issue 29 names these families).
  std::set<std::string> names;
  for (const ModelCase &c : compatCases())
    names.insert(c.name);
  for (const char *row :
       {"gpt2-dynamo", "llama-dynamo", "mistral-dynamo", "qwen2-dynamo",
        "qwen3-dynamo", "phi3-dynamo", "gemma-dynamo", "nanogpt-manual-ts",
        "nanogpt-sdpa-dynamo"})
    EXPECT_TRUE(names.count(row)) << row << " missing from " << kCompat;
}

INSTANTIATE_TEST_SUITE_P(Matrix, CompatRow, testing::ValuesIn(compatCases()),
                         caseName);

} // namespace

// Mamba's selective scan, which the exporter unrolls over the positions,
// raised to one dtc.selective_scan per layer (RaiseScan.cpp) against the
// unrolled ops it replaces, imported with raising off: the same logits on
// the CPU runtime for the same token ids, and the scan no longer grows
// with the sequence (the unrolled import has one multiply-add step and one
// readout matmul per position and layer).
TEST(SelectiveScanRaise, MambaMatchesTheUnrolledScan) {
  const std::string path = kModels + "/oracle/mamba-clm.onnx";
  constexpr int64_t kBatch = 2, kSeq = 8, kVocab = 64, kLayers = 2;
  rt::Tensor ids(rt::DType::I64, {kBatch, kSeq});
  for (int64_t i = 0; i < kBatch * kSeq; ++i)
    ids.as<int64_t>()[i] = (i * 37 + 11) % kVocab;
  std::vector<rt::Tensor> logits;
  for (bool raise : {false, true}) {
    dx::ImportOptions options;
    options.batch = kBatch;
    options.seqLen = kSeq;
    options.raiseIdioms = raise;
    mlir::MLIRContext ctx;
    auto module = dx::importOnnxFile(path, options, ctx);
    ASSERT_TRUE(static_cast<bool>(module))
        << llvm::toString(module.takeError());
    int64_t ops = 0, scans = 0, matmuls = 0;
    (**module).walk([&](mlir::Operation *op) {
      if (op->getDialect() && op->getDialect()->getNamespace() == "dtc") {
        ++ops;
        scans += mlir::isa<mlir::dtc::SelectiveScanOp>(op);
        matmuls += mlir::isa<mlir::dtc::MatmulOp>(op);
      }
    });
    std::cout << "[ scan ] mamba-clm seq " << kSeq
              << (raise ? " raised: " : " unrolled: ") << ops << " dtc ops, "
              << matmuls << " matmuls, " << scans << " selective_scan\n";
    EXPECT_EQ(scans, raise ? kLayers : 0);
    if (raise) // The readout matmuls are gone, one per position and layer.
      EXPECT_LE(matmuls, 5 * kLayers + 1);
    else
      EXPECT_GE(matmuls, kSeq * kLayers);
    auto outputs = ::dtc::test::runOnCpu(**module, "main", {ids},
                                         readParameters(path, **module));
    ASSERT_TRUE(static_cast<bool>(outputs))
        << llvm::toString(outputs.takeError());
    logits.push_back(std::move((*outputs)[0]));
  }
  ASSERT_EQ(logits[0].numElements(), logits[1].numElements());
  double worst = 0, scale = 0;
  for (int64_t i = 0; i < logits[0].numElements(); ++i) {
    double unrolled = logits[0].as<float>()[i],
           raised = logits[1].as<float>()[i];
    worst = std::max(worst, std::fabs(raised - unrolled));
    scale = std::max(scale, std::fabs(unrolled));
  }
  std::cout << "[ scan ] raised vs unrolled logits: " << worst / scale
            << " relative\n";
  EXPECT_LE(worst, 1e-5 * scale);
}
