//===- ModelGenTest.cpp - dtc modelgen and config.json import -------------===//
//
// Generated models of every architecture import and verify, hold the
// parameters a formula written here (independently of modelgen) predicts,
// and import to the raised form (attention, gelu, layer_norm; no shape
// arithmetic left). Hugging Face config.json files map to the same configs.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "frontends/hf/HfConfig.h"
#include "frontends/modelgen/ModelProto.h"
#include "frontends/onnx/OnnxImporter.h"
#include "runtime/support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FileUtilities.h"

#include <gtest/gtest.h>

using namespace dtc;
using namespace dtc::modelgen;

namespace {

/// Parameters by the architectures' definitions, written out per model type
/// (not modelgen's code): embeddings, per-block weights, final norm, head.
int64_t expectedParams(const ModelConfig &c) {
  int64_t h = c.hidden, V = c.vocab, L = c.layers;
  int64_t d = c.headDim ? c.headDim : h / c.heads;
  int64_t kv = (c.kvHeads ? c.kvHeads : c.heads) * d, q = c.heads * d;
  int64_t f = c.ffn ? c.ffn : 4 * h;
  int64_t head = c.tiedEmbeddings ? 0 : V * h;
  if (c.arch == Arch::GPT) {
    int64_t attn = (h * 3 * h + 3 * h) + (h * h + h);
    int64_t mlp = (h * f + f) + (f * h + h);
    int64_t norms = 2 * 2 * h;
    return V * h + c.maxPositions * h + L * (attn + mlp + norms) + 2 * h + head;
  }
  int64_t attn = h * q + 2 * h * kv + q * h;
  if (c.qkvBias)
    attn += q + 2 * kv;
  if (c.qkNorm)
    attn += 2 * d;
  int64_t mlp = 3 * h * f; // gate, up, down
  if (c.arch == Arch::MoE) {
    mlp = c.experts * 3 * h * f + h * c.experts; // experts + router
    if (c.sharedExpertFfn)
      mlp += 3 * h * c.sharedExpertFfn + h; // shared expert + its gate
  }
  return V * h + L * (attn + mlp + 2 * h) + h + head;
}

struct Imported {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  llvm::StringMap<int> histogram;
  int64_t params = 0;
};

/// Generates `config` into a temp file and imports it at `seq`.
Imported generateAndImport(mlir::MLIRContext &ctx, const ModelConfig &config,
                           bool shapeOnly, int64_t seq) {
  Imported out;
  llvm::SmallString<128> path;
  EXPECT_FALSE(llvm::sys::fs::createTemporaryFile("modelgen", "onnx", path));
  llvm::FileRemover remover(path);
  GenOptions options;
  options.shapeOnly = shapeOnly;
  options.seed = 7;
  llvm::Error err = generate(config, options, path);
  EXPECT_FALSE(bool(err)) << llvm::toString(std::move(err));
  dtc::onnx::ImportOptions importOptions;
  importOptions.batch = 1;
  importOptions.seqLen = seq;
  auto module = dtc::onnx::importOnnxFile(path, importOptions, ctx);
  if (!module) {
    ADD_FAILURE() << config.name << ": " << llvm::toString(module.takeError());
    return out;
  }
  out.module = std::move(*module);
  EXPECT_TRUE(mlir::succeeded(mlir::verify(*out.module)));
  out.module->walk([&](mlir::Operation *op) {
    if (op->getDialect() && op->getDialect()->getNamespace() == "dtc")
      ++out.histogram[op->getName().stripDialect()];
    if (auto p = llvm::dyn_cast<mlir::dtc::ParameterOp>(op))
      out.params +=
          llvm::cast<mlir::RankedTensorType>(p.getType()).getNumElements();
  });
  return out;
}

ModelConfig presetOrDie(llvm::StringRef name) {
  std::optional<ModelConfig> c = preset(name);
  EXPECT_TRUE(c.has_value()) << name.str();
  return c.value_or(ModelConfig());
}

TEST(ModelGenTest, PresetParameterCounts) {
  // Published sizes.
  EXPECT_EQ(parameterCount(presetOrDie("gpt2")), 124439808);
  EXPECT_EQ(parameterCount(presetOrDie("llama-7b")), 6738415616);
  EXPECT_EQ(parameterCount(presetOrDie("llama-70b")), 68976648192);
  EXPECT_EQ(parameterCount(presetOrDie("mixtral-8x7b")), 46702792704);
  // SC'21 Table 1: 1.008 T.
  EXPECT_EQ(parameterCount(presetOrDie("gpt-1t")), 1008038758400);
  for (const std::string &name : presetNames())
    EXPECT_EQ(parameterCount(presetOrDie(name)),
              expectedParams(presetOrDie(name)))
        << name;
}

TEST(ModelGenTest, TinyModelsImportWithTheirParameters) {
  mlir::MLIRContext ctx;
  for (const char *name : {"tiny-gpt", "tiny-llama", "tiny-mixtral"})
    for (bool shapeOnly : {false, true}) {
      ModelConfig c = presetOrDie(name);
      Imported m = generateAndImport(ctx, c, shapeOnly, 16);
      EXPECT_EQ(m.params, expectedParams(c)) << name;
      EXPECT_EQ(m.histogram["attention"], c.layers) << name;
    }
}

TEST(ModelGenTest, GptImportsToTheRaisedForm) {
  mlir::MLIRContext ctx;
  ModelConfig c = presetOrDie("tiny-gpt");
  c.layers = 3;
  Imported m = generateAndImport(ctx, c, false, 32);
  EXPECT_EQ(m.histogram["attention"], 3);
  EXPECT_EQ(m.histogram["gelu"], 3);
  EXPECT_EQ(m.histogram["layer_norm"], 2 * 3 + 1);
  EXPECT_EQ(m.histogram["embedding"], 1);
  // The Shape/Gather/Range/mask arithmetic folded away; what is left is
  // compute and layout.
  for (auto &entry : m.histogram)
    EXPECT_TRUE(llvm::is_contained({"parameter", "embedding", "add",
                                    "layer_norm", "matmul", "attention", "gelu",
                                    "reshape", "transpose", "slice"},
                                   entry.getKey()))
        << "unexpected dtc." << entry.getKey().str();
  m.module->walk(
      [&](mlir::dtc::AttentionOp op) { EXPECT_TRUE(op.getCausal()); });
}

TEST(ModelGenTest, LlamaGqaAndMoeImport) {
  mlir::MLIRContext ctx;
  ModelConfig llama = presetOrDie("tiny-llama");
  llama.kvHeads = 1; // MQA
  Imported m = generateAndImport(ctx, llama, true, 16);
  EXPECT_EQ(m.params, expectedParams(llama));
  EXPECT_EQ(m.histogram["attention"], llama.layers);
  EXPECT_EQ(m.histogram["softmax"], 0);
  // HF repeat_kv (Expand + Reshape) is raised back: the attention reads the
  // one key/value head.
  m.module->walk([&](mlir::dtc::AttentionOp op) {
    EXPECT_EQ(
        llvm::cast<mlir::RankedTensorType>(op.getKey().getType()).getDimSize(1),
        1);
  });
  // SwiGLU's SiLU, raised to dtc.silu where the importer does.
  EXPECT_EQ(m.histogram["sigmoid"] + m.histogram["silu"], llama.layers);

  ModelConfig moe = presetOrDie("tiny-mixtral");
  Imported e = generateAndImport(ctx, moe, true, 16);
  EXPECT_EQ(e.params, expectedParams(moe));
  // ONNX Runtime's MoE op: one route, dispatch and combine per layer, the
  // experts' SwiGLU batched over the experts.
  EXPECT_EQ(e.histogram["moe_route"], moe.layers);
  EXPECT_EQ(e.histogram["moe_dispatch"], moe.layers);
  EXPECT_EQ(e.histogram["moe_combine"], moe.layers);
  EXPECT_EQ(e.histogram["silu"], moe.layers);

  // Qwen-MoE: q/k/v biases, a gated shared expert; Qwen3: qk-norm, head_dim.
  ModelConfig qwen = moe;
  qwen.qwenMoeNames = true;
  qwen.qkvBias = true;
  qwen.sharedExpertFfn = 160;
  Imported q = generateAndImport(ctx, qwen, true, 16);
  EXPECT_EQ(q.params, expectedParams(qwen));
  ModelConfig qwen3 = moe;
  qwen3.qwenMoeNames = true;
  qwen3.qkNorm = true;
  qwen3.headDim = 32;
  Imported q3 = generateAndImport(ctx, qwen3, true, 16);
  EXPECT_EQ(q3.params, expectedParams(qwen3));
  EXPECT_EQ(q3.histogram["attention"], qwen3.layers);
}

TEST(ModelGenTest, LargeShapeOnlyModelsImport) {
  mlir::MLIRContext ctx;
  ModelConfig c = presetOrDie("llama-70b");
  Imported m = generateAndImport(ctx, c, true, 64);
  EXPECT_EQ(m.params, 68976648192);
  EXPECT_EQ(m.histogram["attention"], 80);
  ModelConfig gpt = presetOrDie("gpt2");
  Imported g = generateAndImport(ctx, gpt, true, 64);
  EXPECT_EQ(g.params, 124439808);
}

TEST(ModelGenTest, InlineWeightsAreSeededAndBounded) {
  ModelConfig c = presetOrDie("tiny-gpt");
  GenOptions options;
  options.seed = 3;
  ::onnx::ModelProto a, b;
  ASSERT_FALSE(bool(buildModel(c, options, a)));
  ASSERT_FALSE(bool(buildModel(c, options, b)));
  EXPECT_EQ(a.SerializeAsString(), b.SerializeAsString());
  EXPECT_EQ(a.opset_import(0).version(), 17);
  EXPECT_EQ(a.graph().input(0).name(), "input_ids");
  EXPECT_EQ(a.graph().output(0).name(), "logits");
  // Over 2 GB of inline weights: an error asking for --shape-only.
  llvm::Error err = buildModel(presetOrDie("llama-7b"), options, a);
  ASSERT_TRUE(bool(err));
  EXPECT_NE(llvm::toString(std::move(err)).find("--shape-only"),
            std::string::npos);
}

std::string errorOf(llvm::Error err) {
  return err ? llvm::toString(std::move(err)) : std::string("(success)");
}

TEST(ModelGenTest, ValidationErrors) {
  ModelConfig c = presetOrDie("tiny-llama");
  c.heads = 5;
  EXPECT_NE(errorOf(validate(c))
                .find("--heads: 5 heads do not divide "
                      "--hidden 64"),
            std::string::npos);
  c = presetOrDie("tiny-llama");
  c.kvHeads = 3;
  EXPECT_NE(errorOf(validate(c)).find("--kv-heads: 3"), std::string::npos);
  c = presetOrDie("tiny-mixtral");
  c.topK = 9;
  EXPECT_NE(errorOf(validate(c)).find("--top-k"), std::string::npos);
  c = presetOrDie("tiny-gpt");
  c.layers = 0;
  EXPECT_NE(errorOf(validate(c)).find("--layers: must be >= 1"),
            std::string::npos);
}

TEST(ModelGenTest, HfConfigs) {
  auto gpt2 = hf::parseConfig(R"({"model_type": "gpt2", "n_embd": 768,
      "n_layer": 12, "n_head": 12, "n_positions": 1024, "vocab_size": 50257,
      "n_inner": null, "layer_norm_epsilon": 1e-05})",
                              "gpt2/config.json");
  ASSERT_TRUE(bool(gpt2)) << llvm::toString(gpt2.takeError());
  EXPECT_EQ(parameterCount(*gpt2), 124439808);

  auto llama = hf::parseConfig(R"({"model_type": "llama",
      "hidden_size": 8192, "num_hidden_layers": 80,
      "num_attention_heads": 64, "num_key_value_heads": 8,
      "intermediate_size": 28672, "max_position_embeddings": 4096,
      "vocab_size": 32000, "rms_norm_eps": 1e-05, "rope_theta": 10000.0,
      "tie_word_embeddings": false})",
                               "config.json");
  ASSERT_TRUE(bool(llama)) << llvm::toString(llama.takeError());
  EXPECT_EQ(parameterCount(*llama), 68976648192);

  auto mixtral = hf::parseConfig(R"({"model_type": "mixtral",
      "hidden_size": 4096, "num_hidden_layers": 32,
      "num_attention_heads": 32, "num_key_value_heads": 8,
      "intermediate_size": 14336, "max_position_embeddings": 32768,
      "vocab_size": 32000, "num_local_experts": 8,
      "num_experts_per_tok": 2, "rope_theta": 1e6})",
                                 "config.json");
  ASSERT_TRUE(bool(mixtral)) << llvm::toString(mixtral.takeError());
  EXPECT_EQ(parameterCount(*mixtral), 46702792704);
  EXPECT_EQ(mixtral->topK, 2);

  // Qwen1.5-MoE-A2.7B: 14.3 B parameters.
  auto qwen = hf::parseConfig(R"({"model_type": "qwen2_moe",
      "hidden_size": 2048, "num_hidden_layers": 24,
      "num_attention_heads": 16, "num_key_value_heads": 16,
      "intermediate_size": 5632, "moe_intermediate_size": 1408,
      "shared_expert_intermediate_size": 5632, "num_experts": 60,
      "num_experts_per_tok": 4, "max_position_embeddings": 8192,
      "vocab_size": 151936, "tie_word_embeddings": false})",
                              "config.json");
  ASSERT_TRUE(bool(qwen)) << llvm::toString(qwen.takeError());
  EXPECT_EQ(parameterCount(*qwen), 14315784192);

  // Qwen3-30B-A3B: 30.5 B parameters.
  auto qwen3 = hf::parseConfig(R"({"model_type": "qwen3_moe",
      "hidden_size": 2048, "num_hidden_layers": 48,
      "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
      "moe_intermediate_size": 768, "num_experts": 128,
      "num_experts_per_tok": 8, "max_position_embeddings": 40960,
      "vocab_size": 151936, "tie_word_embeddings": false})",
                               "config.json");
  ASSERT_TRUE(bool(qwen3)) << llvm::toString(qwen3.takeError());
  EXPECT_EQ(parameterCount(*qwen3), 30532122624);
}

TEST(ModelGenTest, HfConfigErrors) {
  auto message = [](llvm::StringRef text) {
    auto c = hf::parseConfig(text, "m/config.json");
    return c ? std::string("(success)") : llvm::toString(c.takeError());
  };
  EXPECT_EQ(message(R"({"model_type": "bert"})"),
            "m/config.json: model_type 'bert' is not supported; dtc reads the "
            "config.json of gpt2, llama, mistral, qwen2, mixtral, qwen2_moe, "
            "qwen3_moe (or export the model to ONNX and pass the .onnx file)");
  EXPECT_EQ(message(R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 2,
      "n_head": 4, "vocab_size": 256})"),
            "m/config.json: key 'n_positions' is missing; a gpt2 config.json "
            "needs it");
  EXPECT_EQ(message(R"({"model_type": "llama", "hidden_size": "big"})"),
            "m/config.json: key 'hidden_size' must be an integer");
  std::string malformed = message("{\n  \"model_type\": \"llama\",,\n}");
  EXPECT_NE(malformed.find("m/config.json: malformed JSON at [2:"),
            std::string::npos)
      << malformed;
}

} // namespace
