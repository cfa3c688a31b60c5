//===- HfConfig.cpp - Hugging Face config.json -> ModelConfig -------------===//

#include "frontends/hf/HfConfig.h"

#include "runtime/support/Error.h"
#include "runtime/support/Json.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

using namespace dtc;
using namespace dtc::modelgen;
using llvm::Error;
using llvm::Expected;
using llvm::StringRef;

llvm::ArrayRef<StringRef> dtc::hf::supportedModelTypes() {
  static const StringRef types[] = {"gpt2",    "llama",     "mistral",  "qwen2",
                                    "mixtral", "qwen2_moe", "qwen3_moe"};
  return types;
}

namespace {

/// Typed access to the keys of one config object; the first problem wins.
class Keys {
public:
  Keys(const llvm::json::Object &object, StringRef path, StringRef modelType)
      : object(object), path(path), modelType(modelType) {}

  int64_t integer(StringRef key) { return integer({key}, true, 0); }
  /// The first of `keys` present (aliases, e.g. n_positions / n_ctx).
  int64_t integer(std::initializer_list<StringRef> keys, bool required,
                  int64_t fallback) {
    for (StringRef key : keys) {
      const llvm::json::Value *v = object.get(key);
      if (!v || v->kind() == llvm::json::Value::Null)
        continue;
      if (std::optional<int64_t> i = v->getAsInteger())
        return *i;
      // 4096.0 is still an integer.
      if (std::optional<double> d = v->getAsNumber())
        if (*d == static_cast<double>(static_cast<int64_t>(*d)))
          return static_cast<int64_t>(*d);
      fail(key, "must be an integer");
      return fallback;
    }
    if (required)
      fail(*keys.begin(),
           "is missing; a " + modelType.str() + " config.json needs it");
    return fallback;
  }
  double number(StringRef key, double fallback) {
    const llvm::json::Value *v = object.get(key);
    if (!v || v->kind() == llvm::json::Value::Null)
      return fallback;
    if (std::optional<double> d = v->getAsNumber())
      return *d;
    fail(key, "must be a number");
    return fallback;
  }
  bool boolean(StringRef key, bool fallback) {
    const llvm::json::Value *v = object.get(key);
    if (!v || v->kind() == llvm::json::Value::Null)
      return fallback;
    if (std::optional<bool> b = v->getAsBoolean())
      return *b;
    fail(key, "must be true or false");
    return fallback;
  }
  Error takeError() {
    if (problem.empty())
      return Error::success();
    return badInput("{0}", problem);
  }

private:
  void fail(StringRef key, const std::string &what) {
    if (problem.empty())
      problem = (path + ": key '" + key + "' " + what).str();
  }

  const llvm::json::Object &object;
  StringRef path, modelType;
  std::string problem;
};

ModelConfig parseGpt2(Keys &k) {
  ModelConfig c;
  c.arch = Arch::GPT;
  c.hidden = k.integer("n_embd");
  c.layers = k.integer("n_layer");
  c.heads = k.integer("n_head");
  c.maxPositions = k.integer({"n_positions", "n_ctx"}, true, 0);
  c.vocab = k.integer("vocab_size");
  c.ffn = k.integer({"n_inner"}, false, 4 * c.hidden);
  c.normEps = k.number("layer_norm_epsilon", 1e-5);
  c.tiedEmbeddings = k.boolean("tie_word_embeddings", true);
  return c;
}

ModelConfig parseLlamaLike(Keys &k, StringRef modelType) {
  ModelConfig c;
  bool moe = modelType == "mixtral" || modelType == "qwen2_moe" ||
             modelType == "qwen3_moe";
  c.arch = moe ? Arch::MoE : Arch::Llama;
  c.hidden = k.integer("hidden_size");
  c.layers = k.integer("num_hidden_layers");
  c.heads = k.integer("num_attention_heads");
  c.kvHeads = k.integer({"num_key_value_heads"}, false, c.heads);
  c.headDim = k.integer({"head_dim"}, false, 0);
  if (c.heads > 0 && c.headDim * c.heads == c.hidden)
    c.headDim = 0; // the default: hidden / heads
  c.maxPositions = k.integer("max_position_embeddings");
  c.vocab = k.integer("vocab_size");
  c.normEps = k.number("rms_norm_eps", 1e-6);
  c.ropeTheta = k.number("rope_theta", 10000.0);
  c.tiedEmbeddings = k.boolean("tie_word_embeddings", false);
  if (moe)
    c.routerAuxLossCoef = k.number("router_aux_loss_coef", 0.001);
  if (modelType == "mixtral") {
    c.ffn = k.integer("intermediate_size");
    c.experts = k.integer("num_local_experts");
    c.topK = k.integer("num_experts_per_tok");
  } else if (moe) {
    c.qwenMoeNames = true;
    c.ffn = k.integer("moe_intermediate_size");
    c.experts = k.integer("num_experts");
    c.topK = k.integer("num_experts_per_tok");
    c.normTopKProb = k.boolean("norm_topk_prob", modelType != "qwen2_moe");
    if (modelType == "qwen2_moe") {
      c.qkvBias = true;
      c.sharedExpertFfn =
          k.integer({"shared_expert_intermediate_size"}, false, 0);
    } else {
      c.qkNorm = true;
      c.qkvBias = k.boolean("attention_bias", false);
    }
  } else {
    c.ffn = k.integer("intermediate_size");
    c.qkvBias = modelType == "qwen2" || k.boolean("attention_bias", false);
  }
  return c;
}

} // namespace

Expected<ModelConfig> dtc::hf::parseConfig(StringRef text, StringRef path) {
  Expected<llvm::json::Value> json = runtime::parseJson(text);
  if (!json) {
    // llvm::json reports "[line:col, byte=N]: message".
    return badInput("{0}: malformed JSON at {1}; fix the file (a Hugging Face "
                    "config.json is one JSON object)",
                    path, llvm::toString(json.takeError()));
  }
  const llvm::json::Object *object = json->getAsObject();
  if (!object)
    return badInput("{0}: not a Hugging Face config: the file is not a JSON "
                    "object",
                    path);
  std::optional<StringRef> modelType = object->getString("model_type");
  if (!modelType)
    return badInput("{0}: key 'model_type' is missing or not a string; dtc "
                    "reads the config.json of {1}",
                    path, llvm::join(supportedModelTypes(), ", "));
  if (!llvm::is_contained(supportedModelTypes(), *modelType))
    return badInput("{0}: model_type '{1}' is not supported; dtc reads the "
                    "config.json of {2} (or export the model to ONNX and pass "
                    "the .onnx file)",
                    path, *modelType, llvm::join(supportedModelTypes(), ", "));
  Keys keys(*object, path, *modelType);
  ModelConfig config =
      *modelType == "gpt2" ? parseGpt2(keys) : parseLlamaLike(keys, *modelType);
  if (Error err = keys.takeError())
    return std::move(err);
  // The model's name: its _name_or_path, else the directory a config.json
  // sits in (a Hugging Face checkout is named after the model), else the
  // file's stem.
  std::string name = llvm::sys::path::stem(path).str();
  if (StringRef dir =
          llvm::sys::path::filename(llvm::sys::path::parent_path(path));
      name == "config" && !dir.empty() && dir != "." && dir != "..")
    name = dir.str();
  if (std::optional<StringRef> n = object->getString("_name_or_path");
      n && !n->empty())
    name = llvm::sys::path::filename(*n).str();
  config.name = name;
  // The common mistakes, named by the config's own keys; validate() checks
  // the rest (named as dtc modelgen's flags).
  bool gpt = *modelType == "gpt2";
  StringRef hiddenKey = gpt ? "n_embd" : "hidden_size";
  StringRef headsKey = gpt ? "n_head" : "num_attention_heads";
  if (config.heads > 0 && !config.headDim && config.hidden % config.heads)
    return badInput("{0}: key '{1}' ({2}) does not divide '{3}' ({4}); set "
                    "'head_dim' or fix the head count",
                    path, headsKey, config.heads, hiddenKey, config.hidden);
  if (object->get("num_key_value_heads") && config.kvHeads < 1)
    return badInput("{0}: key 'num_key_value_heads' must be >= 1, got {1}",
                    path, config.kvHeads);
  if (config.kvHeads > 0 && config.heads % config.kvHeads)
    return badInput("{0}: key 'num_key_value_heads' ({1}) does not divide "
                    "'{2}' ({3})",
                    path, config.kvHeads, headsKey, config.heads);
  if (Error err = validate(config, path))
    return std::move(err);
  return config;
}

Expected<ModelConfig> dtc::hf::readConfigFile(StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/true);
  if (!buffer)
    return badInput("{0}: cannot read the file: {1}", path,
                    buffer.getError().message());
  return parseConfig((*buffer)->getBuffer(), path);
}
