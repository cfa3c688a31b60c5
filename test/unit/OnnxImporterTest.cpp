//===- OnnxImporterTest.cpp - Tests of the ONNX importer ------------------===//
//
// Structure (signature, parameters, no leftover shape arithmetic), errors,
// and numerics: the imported IR, run by the test-only reference interpreter
// with the model's initializers as parameter values, must reproduce the
// reference outputs stored next to each model (PyTorch for tiny-gpt,
// onnxruntime for the op cases), before and after raising idioms.
//
//===----------------------------------------------------------------------===//

#include "DtcTestInterpreter.h"
#include "OnnxNodeTests.h"

#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/CanonicalizeGraph.h"
#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/OnnxImporter.h"
#include "passes/TransformerBlocks.h"
#include "runtime/support/Error.h"

#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <set>

using namespace mlir;
using ::dtc::test::RefTensor;
namespace d = mlir::dtc;
namespace dx = ::dtc::onnx;

namespace {

const std::string kModels = DTC_TEST_MODELS_DIR;
const std::string kTinyGpt = kModels + "/tiny-gpt.onnx";

dx::ImportOptions options(std::optional<int64_t> batch,
                          std::optional<int64_t> seqLen, bool raise = true) {
  dx::ImportOptions o;
  o.batch = batch;
  o.seqLen = seqLen;
  o.raiseIdioms = raise;
  return o;
}

/// Imports `path` or fails the test with the error.
OwningOpRef<ModuleOp> importOk(MLIRContext &ctx, const std::string &path,
                               const dx::ImportOptions &o) {
  auto module = dx::importOnnxFile(path, o, ctx);
  if (!module) {
    ADD_FAILURE() << "import of " << path
                  << " failed: " << llvm::toString(module.takeError());
    return nullptr;
  }
  return std::move(*module);
}

struct ImportFailure {
  std::optional<::dtc::ErrorKind> kind; // nullopt: not a DtcError
  std::string message;
};

/// Imports `path`, expecting an error.
ImportFailure importFails(const std::string &path,
                          const dx::ImportOptions &o = {}) {
  MLIRContext ctx;
  auto module = dx::importOnnxFile(path, o, ctx);
  ImportFailure failure;
  if (module) {
    failure.message = "<imported without error>";
    return failure;
  }
  llvm::handleAllErrors(
      module.takeError(),
      [&](const ::dtc::DtcError &e) {
        failure.kind = e.getKind();
        failure.message = e.getMessage();
      },
      [&](const llvm::ErrorInfoBase &e) { failure.message = e.message(); });
  return failure;
}

func::FuncOp mainOf(ModuleOp module) {
  return module.lookupSymbol<func::FuncOp>("main");
}

std::string typeString(Type type) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << type;
  return s;
}

/// Writes `model` to a fresh temporary file and returns its path.
std::string writeTemp(const ::onnx::ModelProto &model,
                      llvm::StringRef suffix = "onnx") {
  llvm::SmallString<128> path;
  EXPECT_FALSE(
      llvm::sys::fs::createTemporaryFile("dtc-onnx-test", suffix, path));
  std::ofstream out(path.c_str(), std::ios::binary);
  model.SerializeToOstream(&out);
  return path.str().str();
}

std::string writeTempBytes(llvm::StringRef bytes, llvm::StringRef suffix) {
  llvm::SmallString<128> path;
  EXPECT_FALSE(
      llvm::sys::fs::createTemporaryFile("dtc-onnx-test", suffix, path));
  std::ofstream out(path.c_str(), std::ios::binary);
  out << bytes.str();
  return path.str().str();
}

RefTensor toRef(const dx::HostTensor &t) {
  RefTensor r;
  r.shape.assign(t.shape.begin(), t.shape.end());
  for (int64_t i = 0, e = t.size(); i < e; ++i)
    r.data.push_back(t.getDouble(i));
  return r;
}

/// Reads a serialized TensorProto (ONNX test-data layout).
RefTensor readTensorPb(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  EXPECT_TRUE(static_cast<bool>(buffer)) << path;
  ::onnx::TensorProto proto;
  EXPECT_TRUE(proto.ParseFromArray((*buffer)->getBufferStart(),
                                   (*buffer)->getBufferSize()))
      << path;
  std::string error;
  auto tensor = dx::decodeTensor(proto, "", error);
  EXPECT_TRUE(tensor.has_value()) << error;
  return tensor ? toRef(*tensor) : RefTensor();
}

::onnx::ModelProto readModel(const std::string &path) {
  ::onnx::ModelProto model;
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(model.ParseFromIstream(&in)) << path;
  return model;
}

/// The model's floating-point initializers: the values of dtc.parameter.
::dtc::test::ParameterMap readParameters(const std::string &path) {
  ::dtc::test::ParameterMap params;
  ::onnx::ModelProto model = readModel(path);
  for (const auto &init : model.graph().initializer()) {
    std::string error;
    auto tensor = dx::decodeTensor(init, "", error);
    EXPECT_TRUE(tensor.has_value()) << init.name() << ": " << error;
    if (tensor && tensor->isFloat())
      params[init.name()] = toRef(*tensor);
  }
  return params;
}

/// Largest |a - b| over the elements; +inf on a shape mismatch.
double maxAbsDiff(const RefTensor &a, const RefTensor &b) {
  if (a.shape != b.shape || a.data.size() != b.data.size())
    return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.data.size(); ++i) {
    if (std::isinf(a.data[i]) && a.data[i] == b.data[i])
      continue;
    m = std::max(m, std::fabs(a.data[i] - b.data[i]));
    if (std::isnan(a.data[i]) != std::isnan(b.data[i]))
      return INFINITY;
  }
  return m;
}

/// Runs `module`'s main on the test-data inputs of `dataDir` and returns the
/// largest difference to the stored outputs over all outputs.
double runAgainstReference(ModuleOp module, const std::string &modelPath,
                           const std::string &dataDir) {
  func::FuncOp main = mainOf(module);
  std::vector<RefTensor> inputs;
  for (unsigned i = 0; i < main.getNumArguments(); ++i)
    inputs.push_back(
        readTensorPb(dataDir + "/input_" + std::to_string(i) + ".pb"));
  auto outputs =
      ::dtc::test::interpret(main, inputs, readParameters(modelPath));
  if (!outputs) {
    ADD_FAILURE() << llvm::toString(outputs.takeError());
    return INFINITY;
  }
  double worst = 0;
  for (size_t i = 0; i < outputs->size(); ++i) {
    RefTensor expected =
        readTensorPb(dataDir + "/output_" + std::to_string(i) + ".pb");
    double diff = maxAbsDiff((*outputs)[i], expected);
    EXPECT_LT(diff, 1e-4) << "output " << i;
    worst = std::max(worst, diff);
  }
  return worst;
}

std::map<std::string, int> histogram(ModuleOp module) {
  std::map<std::string, int> ops;
  mainOf(module).walk([&](Operation *op) {
    if (!isa<func::FuncOp, func::ReturnOp>(op))
      ++ops[op->getName().getStringRef().str()];
  });
  return ops;
}

//===----------------------------------------------------------------------===//
// tiny-gpt
//===----------------------------------------------------------------------===//

TEST(OnnxImporterTinyGpt, SignatureAndParameters) {
  MLIRContext ctx;
  auto module = importOk(ctx, kTinyGpt, options(2, 16, /*raise=*/false));
  ASSERT_TRUE(module);
  EXPECT_TRUE(succeeded(verify(*module)));
  func::FuncOp main = mainOf(*module);
  ASSERT_TRUE(main);
  EXPECT_EQ(typeString(main.getFunctionType()),
            "(tensor<2x16xi64>) -> tensor<2x16x256xf32>");
  EXPECT_EQ(main.getArgAttrOfType<StringAttr>(0, "dtc.name").getValue(),
            "input_ids");
  EXPECT_EQ(main.getResultAttrOfType<StringAttr>(0, "dtc.name").getValue(),
            "logits");

  // One dtc.parameter per float initializer, named as in the model.
  llvm::StringMap<std::string> params;
  main.walk([&](d::ParameterOp p) {
    EXPECT_TRUE(params.try_emplace(p.getName(), typeString(p.getType())).second)
        << "duplicate parameter " << p.getName().str();
  });
  EXPECT_EQ(params.size(), 29u);
  ::onnx::ModelProto model = readModel(kTinyGpt);
  for (const auto &init : model.graph().initializer())
    EXPECT_TRUE(params.contains(init.name())) << init.name();
  EXPECT_EQ(params.lookup("wte.weight"), "tensor<256x64xf32>");
  EXPECT_EQ(params.lookup("wpe.weight"), "tensor<32x64xf32>");
  EXPECT_EQ(params.lookup("h.1.ln_2.bias"), "tensor<64xf32>");
  EXPECT_EQ(params.lookup("onnx::MatMul_278"), "tensor<64x192xf32>");
  EXPECT_EQ(params.lookup("onnx::MatMul_292"), "tensor<64x256xf32>");
}

TEST(OnnxImporterTinyGpt, NoShapeArithmeticLeftOver) {
  MLIRContext ctx;
  auto module = importOk(ctx, kTinyGpt, options(2, 16, /*raise=*/false));
  ASSERT_TRUE(module);
  // Every value is a float tensor except the token ids going into the
  // embedding: Shape/Gather/Concat/Range/Cast chains were evaluated.
  mainOf(*module).walk([&](Operation *op) {
    for (Value result : op->getResults())
      EXPECT_TRUE(isa<FloatType>(
          cast<RankedTensorType>(result.getType()).getElementType()))
          << "integer-typed op left: " << op->getName().getStringRef().str();
  });
  auto ops = histogram(*module);
  EXPECT_EQ(ops.count("dtc.cast"), 0u);
  EXPECT_EQ(ops["dtc.embedding"], 1); // wte[input_ids]
  EXPECT_EQ(ops["dtc.layer_norm"], 5);
  EXPECT_EQ(ops["dtc.matmul"], 13);
  EXPECT_EQ(ops["dtc.softmax"], 2);
  EXPECT_EQ(ops["dtc.erf"], 2);
  EXPECT_EQ(ops["dtc.parameter"], 29);
  // 3 Split slices per block + the positions wpe[0:16].
  EXPECT_EQ(ops["dtc.slice"], 7);
  // The causal mask and sqrt(scale) are computed once and shared by both
  // blocks (host results are memoized); GELU's 3 constants per block.
  EXPECT_EQ(ops["dtc.constant"], 8);
  int causalMasks = 0;
  mainOf(*module).walk([&](d::ConstantOp c) {
    if (typeString(c.getType()) != "tensor<16x16xf32>")
      return;
    ++causalMasks;
    EXPECT_EQ(std::distance(c->getUses().begin(), c->getUses().end()), 2);
  });
  EXPECT_EQ(causalMasks, 1);

  // Ops carry the node name, inside the file location.
  bool found = false;
  mainOf(*module).walk([&](d::EmbeddingOp op) {
    auto loc = dyn_cast<NameLoc>(op.getLoc());
    ASSERT_TRUE(loc);
    EXPECT_EQ(loc.getName().getValue(), "/wte/Gather");
    auto file = dyn_cast<FileLineColLoc>(loc.getChildLoc());
    ASSERT_TRUE(file);
    EXPECT_EQ(file.getFilename().getValue(), kTinyGpt);
    found = true;
  });
  EXPECT_TRUE(found);
}

TEST(OnnxImporterTinyGpt, RaisesGeluAndAttention) {
  MLIRContext ctx;
  auto module = importOk(ctx, kTinyGpt, options(2, 16));
  ASSERT_TRUE(module);
  auto ops = histogram(*module);
  EXPECT_EQ(ops["dtc.attention"], 2);
  EXPECT_EQ(ops["dtc.gelu"], 2);
  EXPECT_EQ(ops.count("dtc.softmax"), 0u);
  EXPECT_EQ(ops.count("dtc.erf"), 0u);
  EXPECT_EQ(ops.count("dtc.constant"), 0u);
  EXPECT_EQ(ops["dtc.matmul"], 9);
  mainOf(*module).walk([&](d::AttentionOp op) {
    EXPECT_TRUE(op.getCausal());
    EXPECT_DOUBLE_EQ(op.getEffectiveScale(), 0.25);
    EXPECT_EQ(typeString(op.getKey().getType()), "tensor<2x4x16x16xf32>");
  });
}

TEST(OnnxImporterTinyGpt, OtherSequenceLengths) {
  MLIRContext ctx;
  auto seq8 = importOk(ctx, kTinyGpt, options(2, 8));
  ASSERT_TRUE(seq8);
  EXPECT_EQ(typeString(mainOf(*seq8).getFunctionType()),
            "(tensor<2x8xi64>) -> tensor<2x8x256xf32>");
  // Unbound: batch defaults to 1, seq to the 32 rows of wpe.weight.
  auto defaults = importOk(ctx, kTinyGpt, options(std::nullopt, std::nullopt));
  ASSERT_TRUE(defaults);
  EXPECT_EQ(typeString(mainOf(*defaults).getFunctionType()),
            "(tensor<1x32xi64>) -> tensor<1x32x256xf32>");
  // Bound by dim_param name.
  dx::ImportOptions byName;
  byName.dimParams = {{"batch", 3}, {"seq", 5}};
  auto named = importOk(ctx, kTinyGpt, byName);
  ASSERT_TRUE(named);
  EXPECT_EQ(typeString(mainOf(*named).getFunctionType()),
            "(tensor<3x5xi64>) -> tensor<3x5x256xf32>");

  ImportFailure tooLong = importFails(kTinyGpt, options(1, 33));
  EXPECT_EQ(tooLong.kind, ::dtc::ErrorKind::BadInput);
  EXPECT_NE(tooLong.message.find("--seq-len 33 exceeds the model's maximum "
                                 "of 32 positions (rows of 'wpe.weight')"),
            std::string::npos)
      << tooLong.message;
}

TEST(OnnxImporterTinyGpt, MatchesPyTorchBeforeAndAfterRaising) {
  const std::string data = kModels + "/tiny-gpt/test_data_set_0";
  for (bool raise : {false, true}) {
    MLIRContext ctx;
    auto start = std::chrono::steady_clock::now();
    auto module = importOk(ctx, kTinyGpt, options(2, 16, raise));
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start)
                    .count();
    ASSERT_TRUE(module);
    // The check must be able to fail: the logits are far from zero.
    RefTensor expected = readTensorPb(data + "/output_0.pb");
    double largest = 0;
    for (double v : expected.data)
      largest = std::max(largest, std::fabs(v));
    EXPECT_GT(largest, 0.1);
    double diff = runAgainstReference(*module, kTinyGpt, data);
    EXPECT_LT(diff, 1e-4);
    std::cout << "[ tiny-gpt ] raise=" << raise << " import " << ms
              << " ms, max |logits - PyTorch| = " << diff
              << " (max |logit| = " << largest << ")\n";
  }
}

//===----------------------------------------------------------------------===//
// Hugging Face transformers exports (scripts/export_hf_models.py; references
// from PyTorch, batch 2, sequence 8)
//===----------------------------------------------------------------------===//

class HfModelCase : public testing::TestWithParam<const char *> {};

TEST_P(HfModelCase, MatchesPyTorchBeforeAndAfterRaising) {
  std::string name = GetParam();
  std::string path = kModels + "/hf/" + name + ".onnx";
  std::string data = kModels + "/hf/" + name + "/test_data_set_0";
  for (bool raise : {false, true}) {
    MLIRContext ctx;
    auto module = importOk(ctx, path, options(2, 8, raise));
    ASSERT_TRUE(module);
    double diff = runAgainstReference(*module, path, data);
    std::cout << "[ hf/" << name << " ] raise=" << raise
              << " max abs diff = " << diff << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(HfModels, HfModelCase,
                         testing::Values("gpt2", "llama", "mistral", "bert",
                                         "bert-opset14", "gpt2-ort",
                                         "llama-ort"));

//===----------------------------------------------------------------------===//
// A tiny CNN (scripts/export_cnn.py; reference from PyTorch, batch 2)
//===----------------------------------------------------------------------===//

TEST(OnnxImporterCnn, MatchesPyTorch) {
  const std::string path = kModels + "/cnn/cnn.onnx";
  const std::string data = kModels + "/cnn/test_data_set_0";
  MLIRContext ctx;
  auto module = importOk(ctx, path, options(2, std::nullopt, true));
  ASSERT_TRUE(module);
  EXPECT_EQ(typeString(mainOf(*module).getFunctionType()),
            "(tensor<2x3x16x16xf32>) -> tensor<2x10xf32>");
  auto ops = histogram(*module);
  EXPECT_EQ(ops["dtc.conv"], 2);
  EXPECT_EQ(ops["dtc.reduce_mean"], 1);
  // The check must be able to fail: the logits are not all near zero.
  RefTensor expected = readTensorPb(data + "/output_0.pb");
  double largest = 0;
  for (double v : expected.data)
    largest = std::max(largest, std::fabs(v));
  EXPECT_GT(largest, 0.05);
  double diff = runAgainstReference(*module, path, data);
  EXPECT_LT(diff, 1e-5);
  std::cout << "[ cnn ] max |logits - PyTorch| = " << diff
            << " (max |logit| = " << largest << ")\n";
}

//===----------------------------------------------------------------------===//
// Op cases (scripts/export_onnx_op_tests.py; references from onnxruntime)
//===----------------------------------------------------------------------===//

class OnnxOpCase : public testing::TestWithParam<const char *> {};

TEST_P(OnnxOpCase, MatchesOnnxRuntime) {
  std::string name = GetParam();
  std::string path = kModels + "/onnx-ops/" + name + ".onnx";
  std::string data = kModels + "/onnx-ops/" + name + "/test_data_set_0";
  for (bool raise : {false, true}) {
    MLIRContext ctx;
    auto module =
        importOk(ctx, path, options(std::nullopt, std::nullopt, raise));
    ASSERT_TRUE(module);
    double diff = runAgainstReference(*module, path, data);
    std::cout << "[ " << name << " ] raise=" << raise
              << " max abs diff = " << diff << "\n";
  }
}

INSTANTIATE_TEST_SUITE_P(
    OnnxOps, OnnxOpCase,
    testing::Values("gemm", "gemm_transa", "matmul", "elementwise",
                    "softmax_layernorm", "reshapes", "slice_split", "opset18",
                    "gather", "where", "expand_reduce_cast", "gelu_tanh",
                    "gelu_op", "attention", "host_eval", "ce_softmax_loss",
                    "ce_softmax_loss_3d", "ce_logsoftmax_nll", "ms_attention",
                    "ms_skip_ln_gelu", "ms_simplified_ln", "ms_mha",
                    "ms_rotary", "ms_gqa", "attention23",
                    "einsum_pad_softplus"));

TEST(OnnxImporterOps, RaisedForms) {
  MLIRContext ctx;
  auto tanh = importOk(ctx, kModels + "/onnx-ops/gelu_tanh.onnx", {});
  ASSERT_TRUE(tanh);
  auto ops = histogram(*tanh);
  EXPECT_EQ(ops["dtc.gelu"], 1);
  EXPECT_EQ(ops.size(), 1u);
  mainOf(*tanh).walk([](d::GeluOp g) { EXPECT_TRUE(g.getApproximateTanh()); });

  auto attention = importOk(ctx, kModels + "/onnx-ops/attention.onnx", {});
  ASSERT_TRUE(attention);
  ops = histogram(*attention);
  EXPECT_EQ(ops["dtc.attention"], 1);
  EXPECT_EQ(ops.size(), 1u);
  mainOf(*attention).walk([](d::AttentionOp a) {
    EXPECT_FALSE(a.getCausal());
    EXPECT_NEAR(a.getEffectiveScale(), 0.3, 1e-6);
  });

  // Consecutive constant indices are a slice; others an embedding.
  auto gather = importOk(ctx, kModels + "/onnx-ops/gather.onnx", {});
  ASSERT_TRUE(gather);
  ops = histogram(*gather);
  EXPECT_EQ(ops["dtc.embedding"], 2);
  EXPECT_EQ(ops["dtc.slice"], 1);
}

//===----------------------------------------------------------------------===//
// Errors
//===----------------------------------------------------------------------===//

/// input_ids [batch, seq] -> Gather(table) -> `op` -> y: a tiny model whose
/// seq cannot be deduced.
::onnx::ModelProto tinyModel(const std::string &op,
                             const std::string &domain = "",
                             int64_t opset = 17) {
  ::onnx::ModelProto model;
  model.set_ir_version(8);
  auto *import = model.add_opset_import();
  import->set_version(opset);
  if (!domain.empty()) {
    auto *extra = model.add_opset_import();
    extra->set_domain(domain);
    extra->set_version(1);
  }
  auto *graph = model.mutable_graph();
  graph->set_name("tiny");
  auto *input = graph->add_input();
  input->set_name("input_ids");
  auto *tensor = input->mutable_type()->mutable_tensor_type();
  tensor->set_elem_type(::onnx::TensorProto::INT64);
  tensor->mutable_shape()->add_dim()->set_dim_param("batch");
  tensor->mutable_shape()->add_dim()->set_dim_param("seq");
  auto *table = graph->add_initializer();
  table->set_name("table");
  table->set_data_type(::onnx::TensorProto::FLOAT);
  table->add_dims(8);
  table->add_dims(4);
  for (int i = 0; i < 32; ++i)
    table->add_float_data(i);
  auto *gather = graph->add_node();
  gather->set_name("/embed/Gather");
  gather->set_op_type("Gather");
  gather->add_input("table");
  gather->add_input("input_ids");
  gather->add_output("h");
  auto *node = graph->add_node();
  node->set_name("/head/Weird");
  node->set_op_type(op);
  node->set_domain(domain);
  node->add_input("h");
  node->add_output("y");
  auto *output = graph->add_output();
  output->set_name("y");
  auto *outType = output->mutable_type()->mutable_tensor_type();
  outType->set_elem_type(::onnx::TensorProto::FLOAT);
  outType->mutable_shape()->add_dim()->set_dim_param("batch");
  outType->mutable_shape()->add_dim()->set_dim_param("seq");
  outType->mutable_shape()->add_dim()->set_dim_value(4);
  return model;
}

void expectBadInput(const ImportFailure &failure,
                    std::initializer_list<const char *> fragments) {
  EXPECT_EQ(failure.kind, ::dtc::ErrorKind::BadInput) << failure.message;
  for (const char *fragment : fragments)
    EXPECT_NE(failure.message.find(fragment), std::string::npos)
        << "'" << fragment << "' not in: " << failure.message;
  EXPECT_EQ(failure.message.find('\n'), std::string::npos)
      << "not one line: " << failure.message;
}

TEST(OnnxImporterErrors, MissingFile) {
  expectBadInput(importFails(kModels + "/no-such-model.onnx"),
                 {"no-such-model.onnx", "no such file"});
}

TEST(OnnxImporterErrors, GarbageBytes) {
  std::string path =
      writeTempBytes("\xff\xfe this is not a protobuf \x01\x02", "onnx");
  expectBadInput(importFails(path), {path.c_str(), "not an ONNX model"});
  // A valid protobuf that is not a model (a TensorProto test-data file).
  expectBadInput(importFails(kModels + "/tiny-gpt/test_data_set_0/input_0.pb"),
                 {"input_0.pb", "not an ONNX model"});
}

TEST(OnnxImporterErrors, UnsupportedOp) {
  std::string path = writeTemp(tinyModel("Acos"));
  expectBadInput(importFails(path, options(1, 4)),
                 {path.c_str(), "node '/head/Weird'", "(Acos)",
                  "unsupported ONNX op Acos of domain 'ai.onnx' (opset",
                  "docs/onnx-ops.md"});
}

TEST(OnnxImporterErrors, UnsupportedDomain) {
  std::string path = writeTemp(tinyModel("FusedMatMul", "com.microsoft"));
  expectBadInput(importFails(path, options(1, 4)),
                 {"node '/head/Weird'", "com.microsoft::FusedMatMul",
                  "unsupported ONNX op FusedMatMul of domain "
                  "'com.microsoft' (opset 1)"});
}

TEST(OnnxImporterErrors, UnboundDynamicDim) {
  std::string path = writeTemp(tinyModel("Relu"));
  expectBadInput(importFails(path, options(2, std::nullopt)),
                 {path.c_str(), "dynamic dim 'seq' of input 'input_ids' is "
                                "unbound; pass --seq-len"});
  // With the dim bound, the same model imports.
  MLIRContext ctx;
  EXPECT_TRUE(importOk(ctx, path, options(2, 4)));
}

TEST(OnnxImporterErrors, OpsetOutOfRange) {
  std::string path = writeTemp(tinyModel("Relu", "", 11));
  expectBadInput(importFails(path, options(1, 4)),
                 {"ONNX opset 11 is not supported", "13 to 23"});
}

TEST(OnnxImporterErrors, RunTimeValueWhereAConstantIsNeeded) {
  // Reshape to a shape read from the token ids at run time.
  ::onnx::ModelProto model = tinyModel("Relu");
  auto *graph = model.mutable_graph();
  auto *zero = graph->add_node();
  zero->set_op_type("Constant");
  zero->add_output("zero");
  auto *value = zero->add_attribute();
  value->set_name("value");
  value->set_type(::onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(::onnx::TensorProto::INT64);
  value->mutable_t()->add_int64_data(0);
  auto *row = graph->add_node();
  row->set_name("/ids/Gather");
  row->set_op_type("Gather");
  row->add_input("input_ids");
  row->add_input("zero");
  row->add_output("ids_shape");
  auto *reshape = graph->add_node();
  reshape->set_name("/data/Reshape");
  reshape->set_op_type("Reshape");
  reshape->add_input("y");
  reshape->add_input("ids_shape");
  reshape->add_output("z");
  graph->mutable_output(0)->set_name("z");
  for (auto &dim : *graph->mutable_output(0)
                        ->mutable_type()
                        ->mutable_tensor_type()
                        ->mutable_shape()
                        ->mutable_dim())
    dim.Clear();
  std::string path = writeTemp(model);
  expectBadInput(importFails(path, options(1, 3)),
                 {"node '/data/Reshape' (Reshape)", "target shape 'ids_shape'",
                  "computed at run time"});
}

TEST(OnnxImporterErrors, ContribOpsOutsideTheirTrainingForm) {
  // GroupQueryAttention over padded sequences (seqlens_k below s - 1).
  ::onnx::ModelProto gqa = readModel(kModels + "/onnx-ops/ms_gqa.onnx");
  for (auto &init : *gqa.mutable_graph()->mutable_initializer())
    if (init.name() == "seqlens") {
      init.clear_raw_data();
      init.clear_int32_data();
      init.add_int32_data(2);
      init.add_int32_data(4);
    }
  std::string path = writeTemp(gqa);
  expectBadInput(importFails(path),
                 {"node 'gqa' (com.microsoft::GroupQueryAttention)",
                  "padded or cached sequences", "seqlens_k = 4"});
  // RotaryEmbedding whose positions are a graph input (run-time values).
  ::onnx::ModelProto rope = readModel(kModels + "/onnx-ops/ms_rotary.onnx");
  auto *graph = rope.mutable_graph();
  for (int i = 0; i < graph->initializer_size(); ++i)
    if (graph->initializer(i).name() == "pos") {
      graph->mutable_initializer()->DeleteSubrange(i, 1);
      break;
    }
  auto *pos = graph->add_input();
  pos->set_name("pos");
  auto *type = pos->mutable_type()->mutable_tensor_type();
  type->set_elem_type(::onnx::TensorProto::INT64);
  type->mutable_shape()->add_dim()->set_dim_value(2);
  type->mutable_shape()->add_dim()->set_dim_value(5);
  path = writeTemp(rope);
  expectBadInput(importFails(path),
                 {"node 'rope' (com.microsoft::RotaryEmbedding)",
                  "position_ids ('pos') is computed at run time"});
}

TEST(OnnxImporterErrors, TextFormat) {
  // The ONNX text format is accepted with the .onnxtxt extension.
  std::string good = writeTempBytes(R"(
    <ir_version: 8, opset_import: ["" : 17]>
    g (float[2, 3] x) => (float[2, 3] y) { y = Relu(x) }
  )",
                                    "onnxtxt");
  MLIRContext ctx;
  auto module = importOk(ctx, good, {});
  ASSERT_TRUE(module);
  EXPECT_EQ(histogram(*module)["dtc.relu"], 1);
  std::string bad = writeTempBytes("g (float x => (", "onnxtxt");
  expectBadInput(importFails(bad), {"not a valid ONNX text model"});
}

//===----------------------------------------------------------------------===//
// Hugging Face sparse MoE blocks (FuseMoe.cpp)
//===----------------------------------------------------------------------===//

const std::string kMixtral = kModels + "/hf/mixtral.onnx";

TEST(OnnxImporterMoe, FusesPyTorchMixtralBlocks) {
  MLIRContext ctx;
  auto module = importOk(ctx, kMixtral, options(2, 8, /*raise=*/false));
  ASSERT_TRUE(module);
  auto ops = histogram(*module);
  EXPECT_EQ(ops["dtc.moe_route"], 2);
  EXPECT_EQ(ops["dtc.moe_dispatch"], 2);
  EXPECT_EQ(ops["dtc.moe_combine"], 2);
  // One stacked [E, out, in] weight per projection and layer, made of the
  // experts' initializers in expert order; those are not parameters.
  llvm::StringMap<std::string> stacked;
  std::vector<std::string> plain;
  mainOf(*module).walk([&](d::ParameterOp p) {
    if (!p.getStack()) {
      plain.push_back(p.getName().str());
      return;
    }
    std::string members;
    for (auto m : p.getStack()->getAsValueRange<StringAttr>())
      members += m.str() + " ";
    stacked[p.getName()] = typeString(p.getType()) + " " + members;
    EXPECT_FALSE(p.getStackTransposed()) << p.getName().str();
  });
  EXPECT_EQ(stacked.size(), 6u);
  const std::string l1 = "model.model.layers.1.block_sparse_moe.experts.";
  EXPECT_EQ(stacked.lookup(l1 + "*.w2.weight"),
            "tensor<4x64x32xf32> " + l1 + "0.w2.weight " + l1 + "1.w2.weight " +
                l1 + "2.w2.weight " + l1 + "3.w2.weight ");
  for (const std::string &name : plain)
    EXPECT_EQ(name.find(".experts."), std::string::npos) << name;
}

TEST(OnnxImporterMoe, UnmatchedExpertIsNamed) {
  // Expert 1 of layer 0 with tanh where SiLU's sigmoid was: the block
  // routes like an MoE but its expert is not the SwiGLU dtc fuses.
  ::onnx::ModelProto model = readModel(kMixtral);
  bool changed = false;
  for (auto &n : *model.mutable_graph()->mutable_node())
    if (!changed && n.op_type() == "Sigmoid" &&
        n.name().find("layers.0/block_sparse_moe/experts.1/") !=
            std::string::npos) {
      n.set_op_type("Tanh");
      changed = true;
    }
  ASSERT_TRUE(changed);
  std::string path = writeTemp(model);
  expectBadInput(importFails(path, options(2, 8)),
                 {path.c_str(),
                  "MoE block routed by node "
                  "'/model/model/layers.0/block_sparse_moe/TopK' (TopK)",
                  "expert 1: its MLP is not SwiGLU", "com.microsoft MoE"});
}

// transformers 5's batched experts, as the dynamo exporter records them.
const std::string kCompat = kModels + "/compat";

TEST(OnnxImporterMoe, FusesTransformers5BatchedExperts) {
  // Exported with optimize=False: the blocks are found through the no-ops
  // the ONNX optimizer would have folded (CanonicalizeGraph.cpp).
  for (const char *row : {"mixtral-batched_mm-experts-dynamo",
                          "qwen2_moe-batched_mm-experts-dynamo",
                          "qwen3_moe-batched_mm-experts-dynamo",
                          "olmoe-batched_mm-experts-dynamo",
                          "granitemoe-batched_mm-experts-dynamo",
                          "gpt_oss-batched_mm-experts-dynamo"}) {
    SCOPED_TRACE(row);
    MLIRContext ctx;
    auto module = importOk(ctx, kCompat + "/" + row + ".onnx",
                           options(2, 8, /*raise=*/false));
    ASSERT_TRUE(module);
    auto ops = histogram(*module);
    EXPECT_EQ(ops["dtc.moe_route"], 2);
    EXPECT_EQ(ops["dtc.moe_dispatch"], 2);
    EXPECT_EQ(ops["dtc.moe_combine"], 2);
    // The stacked weights stay the parameters they were (nothing to
    // stack): per layer [E, 2f, h] gate-up (or [E, h, 2f]) and the down
    // projection, each read by one batched matmul over the dispatch buffer.
    int stackedExperts = 0;
    mainOf(*module).walk([&](d::ParameterOp p) {
      EXPECT_FALSE(p.getStack()) << p.getName().str();
      stackedExperts += p.getType().getRank() == 3;
    });
    EXPECT_EQ(stackedExperts, 4);
  }
  // GPT-OSS: the gate clamped from above, the value on both sides.
  MLIRContext ctx;
  auto module =
      importOk(ctx, kCompat + "/gpt_oss-batched_mm-experts-dynamo.onnx",
               options(2, 8, /*raise=*/false));
  ASSERT_TRUE(module);
  auto ops = histogram(*module);
  EXPECT_GE(ops["dtc.min"], 4);
  EXPECT_GE(ops["dtc.max"], 2);
}

TEST(OnnxImporterMoe, UnmatchedBatchedExpertIsNamed) {
  // tanh where the gate's sigmoid was: the choices gather stacked expert
  // weights, so this is an MoE block, but not a gated unit dtc knows.
  ::onnx::ModelProto model =
      readModel(kCompat + "/mixtral-batched_mm-experts-dynamo.onnx");
  // The gate half: the first part of the gate-up projection's Split, or of
  // its SplitToSequence (exported without the ONNX optimizer).
  const ::onnx::NodeProto *split = nullptr;
  for (const auto &n : model.graph().node())
    if (!split && (n.op_type() == "Split" || n.op_type() == "SequenceAt"))
      split = &n;
  ASSERT_TRUE(split);
  std::string gate = split->output(0);
  bool changed = false;
  for (auto &n : *model.mutable_graph()->mutable_node())
    if (!changed && n.op_type() == "Sigmoid" && n.input(0) == gate) {
      n.set_op_type("Tanh");
      changed = true;
    }
  ASSERT_TRUE(changed);
  std::string path = writeTemp(model);
  expectBadInput(importFails(path, options(2, 8)),
                 {path.c_str(),
                  "MoE block routed by node 'node_topk__1' (TopK)",
                  "the expert MLP is not a gated linear unit",
                  "no gate * sigmoid(alpha * gate)"});
}

TEST(OnnxImporterMoe, FusesBatchedExpertsWithoutRecordedShapes) {
  // Without value_info the gate-up projection's width is not known before
  // import, so its SplitToSequence becomes a Slice per half, which the
  // matcher reads as the same split.
  ::onnx::ModelProto model =
      readModel(kCompat + "/mixtral-batched_mm-experts-dynamo.onnx");
  model.mutable_graph()->clear_value_info();
  std::string path = writeTemp(model);
  MLIRContext ctx;
  auto module = importOk(ctx, path, options(2, 8, /*raise=*/false));
  ASSERT_TRUE(module);
  EXPECT_EQ(histogram(*module)["dtc.moe_route"], 2);
}

/// The ONNX text `text` as a model.
::onnx::ModelProto parseModel(const char *text) {
  ::onnx::ModelProto model;
  ::onnx::OnnxParser parser(text);
  auto status = parser.Parse(model);
  EXPECT_TRUE(status.IsOK()) << status.ErrorMessage();
  return model;
}

std::multiset<std::string> opTypes(const ::onnx::ModelProto &model) {
  std::multiset<std::string> ops;
  for (const auto &n : model.graph().node())
    ops.insert(n.op_type());
  return ops;
}

const ::onnx::NodeProto *producerOf(const ::onnx::ModelProto &model,
                                    const std::string &name) {
  for (const auto &n : model.graph().node())
    if (llvm::is_contained(n.output(), name))
      return &n;
  return nullptr;
}

TEST(OnnxImporterMoe, CanonicalizesUnoptimizedExportSpellings) {
  // What torch.onnx.export(dynamo=True, optimize=False) leaves in a graph,
  // each spelled beside what must stay: identity Transpose, Max of one
  // input, Expand onto its own Shape, Concat of one input (a graph output:
  // its node stays), a Squeeze recorded twice, an Expand that broadcasting
  // leaves unchanged, and chunk() as SplitToSequence + SequenceAt.
  const char *text = R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[2, 3, 8] x) => (float[2, 3, 8] c, float[2, 3, 4] lo,
                             float[2, 3, 4] hi, float[3, 2, 8] t,
                             float[2, 3, 8] twice, float[2, 3, 1] wide)
      <float[2, 3, 8] q1> {
      id = Transpose<perm = [0, 1, 2]>(x)
      m = Max(id)
      s = Shape<start = 0>(m)
      e = Expand(id, s)
      c = Concat<axis = -1>(e)
      ax = Constant<value = int64[1] {0}>()
      u = Unsqueeze(c, ax)
      q1 = Squeeze(u, ax)
      q2 = Squeeze(u, ax)
      four = Constant<value = int64 {4}>()
      seq = SplitToSequence<axis = -1>(q1, four)
      zero = Constant<value = int64 {0}>()
      last = Constant<value = int64 {-1}>()
      lo = SequenceAt(seq, zero)
      hi = SequenceAt(seq, last)
      t = Transpose<perm = [1, 0, 2]>(q2)
      ones = Constant<value = int64[2] {1, 8}>()
      b = Expand(q2, ones)
      twice = Add(b, q1)
      big = Constant<value = int64[3] {2, 3, 1}>()
      one = Constant<value = float[1] {1}>()
      wide = Expand(one, big)
    }
  )";
  ::onnx::ModelProto before = parseModel(text);
  ::onnx::ModelProto after = before;
  EXPECT_GT(dx::detail::canonicalizeGraph(after), 0);
  EXPECT_EQ(opTypes(after),
            (std::multiset<std::string>{
                "Add", "Concat", "Constant", "Constant", "Constant", "Constant",
                "Expand", "Split", "Squeeze", "Transpose", "Unsqueeze"}));
  // Readers read the value itself; the graph output 'c' keeps its node.
  const ::onnx::NodeProto *concat = producerOf(after, "c");
  ASSERT_TRUE(concat);
  EXPECT_EQ(concat->input(0), "x");
  EXPECT_EQ(producerOf(after, "u")->input(0), "x");
  const ::onnx::NodeProto *add = producerOf(after, "twice");
  EXPECT_EQ(add->input(0), "q1");
  EXPECT_EQ(add->input(1), "q1");
  EXPECT_EQ(producerOf(after, "t")->input(0), "q1");
  // The chunks: one Split into [4, 4] whose parts keep their names.
  const ::onnx::NodeProto *split = producerOf(after, "lo");
  ASSERT_TRUE(split);
  EXPECT_EQ(split->op_type(), "Split");
  EXPECT_EQ(split, producerOf(after, "hi"));
  ASSERT_EQ(split->output_size(), 2);
  EXPECT_EQ(split->output(1), "hi");
  const ::onnx::NodeProto *sizes = producerOf(after, split->input(1));
  ASSERT_TRUE(sizes);
  EXPECT_EQ(sizes->op_type(), "Constant");
  const auto &sizesTensor = sizes->attribute(0).t();
  EXPECT_EQ(std::vector<int64_t>(sizesTensor.int64_data().begin(),
                                 sizesTensor.int64_data().end()),
            (std::vector<int64_t>{4, 4}));
  // A second run finds nothing left to rewrite.
  ::onnx::ModelProto again = after;
  EXPECT_EQ(dx::detail::canonicalizeGraph(again), 0);

  // The same results, bit for bit (no TopK: the importer itself does not
  // canonicalize these).
  std::vector<RefTensor> inputs(1);
  inputs[0].shape = {2, 3, 8};
  for (int i = 0; i < 48; ++i)
    inputs[0].data.push_back(std::sin(0.37 * i) * 3);
  std::vector<std::vector<RefTensor>> results;
  for (const ::onnx::ModelProto *model : {&before, &after}) {
    MLIRContext ctx;
    auto module = importOk(ctx, writeTemp(*model), {});
    ASSERT_TRUE(module);
    auto outputs = ::dtc::test::interpret(mainOf(*module), inputs, {});
    ASSERT_TRUE(static_cast<bool>(outputs))
        << llvm::toString(outputs.takeError());
    results.push_back(std::move(*outputs));
  }
  ASSERT_EQ(results[0].size(), 6u);
  for (size_t i = 0; i < results[0].size(); ++i) {
    EXPECT_EQ(results[0][i].shape, results[1][i].shape) << "output " << i;
    EXPECT_EQ(results[0][i].data, results[1][i].data) << "output " << i;
  }
}

TEST(OnnxImporterMoe, CanonicalizationKeepsWhatItCannotProve) {
  // Without the split dim's size the chunks are Slices; a sequence that
  // another op reads, a position out of range, a real permutation and an
  // Expand that broadcasts stay as written.
  const char *text = R"(
    <ir_version: 8, opset_import: ["" : 18]>
    g (float[2, N] x, float[2, 6] y) => (float[2, 4] lo, float[2, 4] far,
                                         float[2, 4] first, int64 n,
                                         float[2, 6] yt, float[2, 2, 6] yb,
                                         float[2, 6] mid) {
      four = Constant<value = int64 {4}>()
      seq = SplitToSequence<axis = 1>(x, four)
      zero = Constant<value = int64 {0}>()
      lo = SequenceAt(seq, zero)
      three = Constant<value = int64 {3}>()
      seq2 = SplitToSequence<axis = 1>(y, four)
      far = SequenceAt(seq2, three)
      seq3 = SplitToSequence<axis = -1>(y, four)
      first = SequenceAt(seq3, zero)
      n = SequenceLength(seq3)
      yt = Transpose<perm = [0, 1]>(y)
      shape = Constant<value = int64[3] {2, 1, 1}>()
      yb = Expand(yt, shape)
      mid = Identity(y)
    }
  )";
  ::onnx::ModelProto model = parseModel(text);
  EXPECT_GT(dx::detail::canonicalizeGraph(model), 0);
  const ::onnx::NodeProto *slice = producerOf(model, "lo");
  ASSERT_TRUE(slice);
  EXPECT_EQ(slice->op_type(), "Slice");
  EXPECT_EQ(slice->input(0), "x");
  EXPECT_EQ(producerOf(model, "far")->op_type(), "SequenceAt");
  EXPECT_EQ(producerOf(model, "seq2")->op_type(), "SplitToSequence");
  EXPECT_EQ(producerOf(model, "first")->op_type(), "SequenceAt");
  EXPECT_EQ(producerOf(model, "seq3")->op_type(), "SplitToSequence");
  // 'yt' is a graph output: its node stays, its reader reads 'y'.
  EXPECT_EQ(producerOf(model, "yt")->op_type(), "Transpose");
  EXPECT_EQ(producerOf(model, "yb")->op_type(), "Expand");
  EXPECT_EQ(producerOf(model, "yb")->input(0), "y");
  EXPECT_EQ(producerOf(model, "mid")->op_type(), "Identity");
}

//===----------------------------------------------------------------------===//
// Transformer blocks (passes/TransformerBlocks.h)
//===----------------------------------------------------------------------===//

TEST(TransformerBlocks, ExportedBlocksAreFoundAndAlike) {
  MLIRContext ctx;
  auto module = importOk(ctx, kModels + "/tiny-gpt-8l.onnx", options(2, 16));
  ASSERT_TRUE(module);
  func::FuncOp main = mainOf(*module);
  std::vector<::dtc::TransformerBlock> blocks =
      ::dtc::findTransformerBlocks(main);
  ASSERT_EQ(blocks.size(), 8u);
  llvm::SmallVector<Operation *> ops;
  for (Operation &op : main.getBody().front().without_terminator())
    ops.push_back(&op);
  for (auto [i, block] : llvm::enumerate(blocks)) {
    EXPECT_EQ(block.sameAs, 0u) << "block " << i;
    // Each block holds exactly one attention and starts where the previous
    // one ends, with the same number of ops.
    int attentions = 0;
    for (unsigned k = block.begin; k < block.end; ++k)
      attentions += isa<d::AttentionOp>(ops[k]);
    EXPECT_EQ(attentions, 1) << "block " << i;
    if (i > 0) {
      EXPECT_EQ(block.begin, blocks[i - 1].end);
      EXPECT_EQ(block.end - block.begin, blocks[0].end - blocks[0].begin);
    }
  }
  // The embedding comes before the first block, the head after the last.
  EXPECT_TRUE(
      llvm::any_of(llvm::ArrayRef(ops).take_front(blocks[0].begin),
                   [](Operation *op) { return isa<d::EmbeddingOp>(op); }));
  EXPECT_LT(blocks.back().end, ops.size());
}

TEST(TransformerBlocks, ADifferentBlockIsTold) {
  // Layer 1's first LayerNorm with another epsilon: block 1 is not a copy
  // of block 0 any more.
  ::onnx::ModelProto model = readModel(kTinyGpt);
  bool changed = false;
  for (auto &n : *model.mutable_graph()->mutable_node())
    if (!changed && n.op_type() == "LayerNormalization" &&
        n.name().find("h.1") != std::string::npos) {
      for (auto &attr : *n.mutable_attribute())
        if (attr.name() == "epsilon")
          attr.set_f(1e-3f);
      changed = true;
    }
  ASSERT_TRUE(changed);
  std::string path = writeTemp(model);
  MLIRContext ctx;
  auto module = importOk(ctx, path, options(2, 16));
  ASSERT_TRUE(module);
  std::vector<::dtc::TransformerBlock> blocks =
      ::dtc::findTransformerBlocks(mainOf(*module));
  ASSERT_EQ(blocks.size(), 2u);
  EXPECT_EQ(blocks[0].sameAs, 0u);
  EXPECT_EQ(blocks[1].sameAs, 1u);
}

} // namespace

//===----------------------------------------------------------------------===//
// ONNX backend node tests (Debian's libonnx-testdata): every single-node
// test of an op that docs/onnx-ops.md lists as lowered is imported; where
// the import succeeds, the test interpreter's outputs are compared with the
// shipped test_data_set_0. Import refusals must be clean bad-input errors;
// wrong numbers are bugs.
//===----------------------------------------------------------------------===//

namespace {

struct NodeTestTally {
  int tests = 0, imported = 0, numericPass = 0, skipped = 0;
  std::vector<std::string> refused, wrong;
};

RefTensor readNodeRef(const std::pair<std::string, int32_t> &file) {
  auto tensor = ::dtc::test::readNodeTensor(file.first, file.second);
  return tensor ? toRef(*tensor) : RefTensor();
}

} // namespace

TEST(OnnxBackendNodeTests, ClaimedOpsImportAndMatch) {
  std::map<std::string, NodeTestTally> tally;
  bool found =
      ::dtc::test::forEachNodeTest([&](const ::dtc::test::NodeTest &test) {
        NodeTestTally &t = tally[test.opType];
        const std::string &name = test.name;
        if (!test.skipReason.empty()) {
          ++t.skipped;
          return;
        }
        ++t.tests;
        MLIRContext ctx;
        auto module = dx::importOnnxFile(test.modelPath, {}, ctx);
        if (!module) {
          std::string message;
          bool clean = false;
          llvm::handleAllErrors(
              module.takeError(),
              [&](const ::dtc::DtcError &e) {
                clean = e.getKind() == ::dtc::ErrorKind::BadInput;
                message = e.getMessage();
              },
              [&](const llvm::ErrorInfoBase &e) { message = e.message(); });
          EXPECT_TRUE(clean) << name << ": " << message;
          t.refused.push_back(name + ": " + message);
          return;
        }
        ++t.imported;
        func::FuncOp main = mainOf(**module);
        std::vector<RefTensor> inputs;
        for (const auto &file : test.argumentFiles())
          inputs.push_back(readNodeRef(file));
        auto outputs = ::dtc::test::interpret(main, inputs, {});
        bool ok = static_cast<bool>(outputs);
        std::string why = ok ? "" : llvm::toString(outputs.takeError());
        auto outputFiles = test.outputFiles();
        for (size_t i = 0; ok && i < outputs->size(); ++i) {
          RefTensor expected = readNodeRef(outputFiles[i]);
          const RefTensor &got = (*outputs)[i];
          if (got.shape != expected.shape) {
            ok = false;
            why = "output " + std::to_string(i) + " shape differs";
            break;
          }
          for (size_t j = 0; j < got.data.size(); ++j) {
            double a = got.data[j], b = expected.data[j];
            if ((std::isnan(a) && std::isnan(b)) || a == b)
              continue;
            if (!(std::fabs(a - b) <= 1e-4 + 1e-3 * std::fabs(b))) {
              ok = false;
              why = "output " + std::to_string(i) + "[" + std::to_string(j) +
                    "] = " + std::to_string(a) + ", expected " +
                    std::to_string(b);
              break;
            }
          }
        }
        if (ok)
          ++t.numericPass;
        else
          t.wrong.push_back(name + ": " + why);
      });
  if (!found)
    GTEST_SKIP() << ::dtc::test::kNodeTestDir
                 << " missing (apt install libonnx-testdata)";
  int tests = 0, imported = 0, passed = 0;
  for (const auto &[op, t] : tally) {
    std::cout << "[ node ] " << op << ": " << t.tests << " tests, "
              << t.imported << " imported, " << t.numericPass
              << " match the reference"
              << (t.skipped ? " (" + std::to_string(t.skipped) + " skipped)"
                            : std::string())
              << "\n";
    for (const std::string &r : t.refused)
      std::cout << "           refused  " << r << "\n";
    for (const std::string &w : t.wrong)
      std::cout << "           MISMATCH " << w << "\n";
    tests += t.tests;
    imported += t.imported;
    passed += t.numericPass;
    // Wrong numbers are bugs.
    EXPECT_TRUE(t.wrong.empty()) << op;
  }
  std::cout << "[ node ] total: " << tests << " tests, " << imported
            << " imported, " << passed << " match the reference\n";
}
