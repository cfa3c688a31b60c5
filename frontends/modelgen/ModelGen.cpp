//===- ModelGen.cpp - Decoder-only transformers as ONNX -------------------===//
//
// The graphs follow what torch.onnx.export (TorchScript, opset 17) makes of
// the Hugging Face / nanoGPT modules, minus the shape arithmetic: reshapes
// use ONNX's 0 (copy) and -1 (infer) so that only the sequence length, read
// once from input_ids, is dynamic. See docs/modelgen.md for the forms.
//
//===----------------------------------------------------------------------===//

#include "frontends/modelgen/ModelProto.h"

#include "runtime/support/Error.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "onnx/onnx_pb.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <tuple>

using namespace dtc;
using namespace dtc::modelgen;
using llvm::Error;

llvm::StringRef dtc::modelgen::archName(Arch arch) {
  switch (arch) {
  case Arch::GPT:
    return "gpt";
  case Arch::Llama:
    return "llama";
  case Arch::MoE:
    return "mixtral";
  }
  return "?";
}

std::optional<Arch> dtc::modelgen::parseArch(llvm::StringRef name) {
  if (name == "gpt" || name == "gpt2")
    return Arch::GPT;
  if (name == "llama" || name == "mistral")
    return Arch::Llama;
  if (name == "mixtral" || name == "moe")
    return Arch::MoE;
  return std::nullopt;
}

//===----------------------------------------------------------------------===//
// Presets and checks
//===----------------------------------------------------------------------===//

namespace {

ModelConfig gpt(llvm::StringRef name, int64_t layers, int64_t hidden,
                int64_t heads, int64_t vocab, int64_t positions) {
  ModelConfig c;
  c.name = name.str();
  c.arch = Arch::GPT;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.ffn = 4 * hidden;
  c.vocab = vocab;
  c.maxPositions = positions;
  c.tiedEmbeddings = true;
  return c;
}

ModelConfig llama(llvm::StringRef name, int64_t layers, int64_t hidden,
                  int64_t heads, int64_t kvHeads, int64_t ffn, int64_t vocab,
                  int64_t positions) {
  ModelConfig c;
  c.name = name.str();
  c.arch = Arch::Llama;
  c.layers = layers;
  c.hidden = hidden;
  c.heads = heads;
  c.kvHeads = kvHeads;
  c.ffn = ffn;
  c.vocab = vocab;
  c.maxPositions = positions;
  c.normEps = 1e-5;
  return c;
}

struct Preset {
  const char *name;
  ModelConfig (*make)();
};

const Preset kPresets[] = {
    {"gpt2", [] { return gpt("gpt2", 12, 768, 12, 50257, 1024); }},
    {"gpt2-medium",
     [] { return gpt("gpt2-medium", 24, 1024, 16, 50257, 1024); }},
    {"gpt2-large", [] { return gpt("gpt2-large", 36, 1280, 20, 50257, 1024); }},
    {"gpt2-xl", [] { return gpt("gpt2-xl", 48, 1600, 25, 50257, 1024); }},
    // Narayanan et al., SC'21, Table 1: the 1T-parameter GPT.
    {"gpt-1t", [] { return gpt("gpt-1t", 128, 25600, 160, 51200, 2048); }},
    {"llama-7b",
     [] { return llama("llama-7b", 32, 4096, 32, 32, 11008, 32000, 4096); }},
    {"llama-13b",
     [] { return llama("llama-13b", 40, 5120, 40, 40, 13824, 32000, 4096); }},
    {"llama-70b",
     [] { return llama("llama-70b", 80, 8192, 64, 8, 28672, 32000, 4096); }},
    {"mistral-7b",
     [] {
       ModelConfig c =
           llama("mistral-7b", 32, 4096, 32, 8, 14336, 32000, 32768);
       c.ropeTheta = 10000.0;
       return c;
     }},
    {"mixtral-8x7b",
     [] {
       ModelConfig c =
           llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 32768);
       c.arch = Arch::MoE;
       c.ropeTheta = 1e6;
       c.experts = 8;
       c.topK = 2;
       return c;
     }},
    // Small models for tests and examples.
    {"tiny-gpt", [] { return gpt("tiny-gpt", 2, 64, 4, 256, 32); }},
    {"tiny-llama",
     [] { return llama("tiny-llama", 2, 64, 4, 2, 128, 256, 32); }},
    {"tiny-mixtral",
     [] {
       ModelConfig c = llama("tiny-mixtral", 2, 64, 4, 2, 96, 256, 32);
       c.arch = Arch::MoE;
       c.experts = 4;
       c.topK = 2;
       return c;
     }},
};

} // namespace

std::optional<ModelConfig> dtc::modelgen::preset(llvm::StringRef name) {
  for (const Preset &p : kPresets)
    if (name == p.name)
      return p.make();
  return std::nullopt;
}

std::vector<std::string> dtc::modelgen::presetNames() {
  std::vector<std::string> names;
  for (const Preset &p : kPresets)
    names.push_back(p.name);
  return names;
}

Error dtc::modelgen::validate(const ModelConfig &c, llvm::StringRef what) {
  std::string prefix = what.empty() ? std::string() : what.str() + ": ";
  auto bad = [&](const llvm::Twine &message) {
    return badInput("{0}{1}", prefix, message.str());
  };
  for (auto [flag, value] :
       {std::pair{"vocab", c.vocab}, std::pair{"hidden", c.hidden},
        std::pair{"layers", c.layers}, std::pair{"heads", c.heads},
        std::pair{"seq-len", c.maxPositions}})
    if (value < 1)
      return bad(llvm::Twine("--") + flag + ": must be >= 1, got " +
                 llvm::Twine(value));
  for (auto [flag, value] :
       {std::pair{"kv-heads", c.kvHeads}, std::pair{"ffn", c.ffn},
        std::pair{"head-dim", c.headDim}})
    if (value < 0)
      return bad(llvm::Twine("--") + flag + ": must be >= 1, got " +
                 llvm::Twine(value));
  // Far above any model trained, small enough that products of a few
  // sizes fit in int64 and a model's IR fits in memory (a config with 10^6
  // layers or a head size of 2^40 was killed for memory).
  for (auto [flag, value, most] :
       {std::tuple{"vocab", c.vocab, int64_t(1) << 24},
        std::tuple{"hidden", c.hidden, int64_t(1) << 20},
        std::tuple{"layers", c.layers, int64_t(1024)},
        std::tuple{"heads", c.heads, int64_t(1) << 16},
        std::tuple{"kv-heads", c.kvHeads, int64_t(1) << 16},
        std::tuple{"head-dim", c.headDim, int64_t(1) << 16},
        std::tuple{"ffn", c.ffn, int64_t(1) << 22},
        std::tuple{"seq-len", c.maxPositions, int64_t(1) << 24}})
    if (value > most)
      return bad(llvm::Twine("--") + flag + ": must be <= " +
                 llvm::Twine(most) + ", got " + llvm::Twine(value));
  if (!std::isfinite(c.normEps) || !std::isfinite(c.ropeTheta))
    return bad("the norm epsilon and the rope theta must be finite numbers");
  if (!c.headDim && c.hidden % c.heads != 0)
    return bad("--heads: " + llvm::Twine(c.heads) +
               " heads do not divide --hidden " + llvm::Twine(c.hidden) +
               "; pick a divisor of the hidden size");
  if (c.heads % c.kvHeadCount() != 0)
    return bad("--kv-heads: " + llvm::Twine(c.kvHeadCount()) +
               " key/value heads do not divide --heads " +
               llvm::Twine(c.heads) + "; pick a divisor of the head count");
  if (c.arch == Arch::GPT && (c.kvHeadCount() != c.heads || c.headDim))
    return bad("--kv-heads: GPT has multi-head attention; drop --kv-heads or "
               "use --arch llama");
  if (c.arch != Arch::GPT && c.headSize() % 2 != 0)
    return bad("--heads: the head size " + llvm::Twine(c.headSize()) +
               " is odd; rotary embeddings need an even head size");
  if (c.normEps <= 0)
    return bad("the norm epsilon must be > 0");
  if (c.arch != Arch::GPT && c.ropeTheta <= 0)
    return bad("the rope theta must be > 0");
  if (c.arch == Arch::MoE) {
    if (c.experts < 1)
      return bad("--experts: a mixture of experts needs >= 1 expert, got " +
                 llvm::Twine(c.experts));
    if (c.topK < 1 || c.topK > c.experts)
      return bad("--top-k: must be between 1 and --experts " +
                 llvm::Twine(c.experts) + ", got " + llvm::Twine(c.topK));
    if (c.sharedExpertFfn < 0)
      return bad("the shared expert size must be >= 0");
  } else if (c.experts > 1) {
    return bad("--experts: only --arch mixtral has experts");
  }
  return Error::success();
}

int64_t dtc::modelgen::parameterCount(const ModelConfig &c) {
  int64_t h = c.hidden, f = c.ffnSize(), d = c.headSize();
  int64_t q = c.heads * d, kv = c.kvHeadCount() * d;
  int64_t n = c.vocab * h + (c.tiedEmbeddings ? 0 : h * c.vocab);
  int64_t block = 0;
  if (c.arch == Arch::GPT) {
    n += c.maxPositions * h + 2 * h;
    block = 4 * h + h * 3 * h + 3 * h + h * h + h + h * f + f + f * h + h;
  } else {
    n += h;
    block = 2 * h + h * (q + 2 * kv) + q * h;
    if (c.qkvBias)
      block += q + 2 * kv;
    if (c.qkNorm)
      block += 2 * d;
    if (c.arch == Arch::Llama) {
      block += 3 * h * f;
    } else {
      block += h * c.experts + c.experts * 3 * h * f;
      if (c.sharedExpertFfn)
        block += 3 * h * c.sharedExpertFfn + h;
    }
  }
  return n + c.layers * block;
}

//===----------------------------------------------------------------------===//
// Graph building
//===----------------------------------------------------------------------===//

namespace {

/// The default-domain opsets of the generated graphs: TorchScript's, and
/// the first with ONNX's Attention op.
constexpr int64_t kOpset = 17, kAttentionOpset = 23;

using Name = std::string;

enum class Init { Normal, Ones, Bias };

class Builder {
public:
  Builder(const ModelConfig &config, const GenOptions &options,
          onnx::GraphProto &graph)
      : c(config), options(options), graph(graph), rng(options.seed) {}

  void build();

private:
  // Nodes and values.
  onnx::NodeProto *node(llvm::StringRef op, llvm::ArrayRef<Name> inputs,
                        llvm::StringRef name, int outputs = 1);
  Name op(llvm::StringRef op, llvm::ArrayRef<Name> inputs,
          llvm::StringRef name) {
    return node(op, inputs, name)->output(0);
  }
  static void attr(onnx::NodeProto *n, const char *name, int64_t value);
  static void attr(onnx::NodeProto *n, const char *name, float value);
  static void attr(onnx::NodeProto *n, const char *name,
                   llvm::ArrayRef<int64_t> values);
  Name ints(llvm::ArrayRef<int64_t> values, bool scalar = false);
  Name floats(llvm::ArrayRef<float> values, llvm::ArrayRef<int64_t> dims);
  Name scalar(float value) { return floats({value}, {}); }
  Name weight(const std::string &name, llvm::ArrayRef<int64_t> dims,
              Init init = Init::Normal);

  // Layers.
  Name linear(const Name &x, const std::string &prefix, int64_t in, int64_t out,
              bool bias);
  Name layerNorm(const Name &x, const std::string &prefix);
  Name rmsNorm(const Name &x, const std::string &weightName, int64_t dim,
               const std::string &scope);
  Name heads(const Name &x, int64_t count, const std::string &scope,
             llvm::ArrayRef<int64_t> perm);
  Name mergeHeads(const Name &y, const std::string &scope);
  Name attention(const Name &q, const Name &kT, const Name &v,
                 const std::string &scope);
  void buildMask();
  Name gelu(const Name &x, const std::string &scope);
  Name rope(const Name &x, const std::string &scope);
  Name repeatKv(const Name &x, const std::string &scope);
  Name swiglu(const Name &x, const std::string &gate, const std::string &up,
              const std::string &down, int64_t ffn, const std::string &scope);
  Name gptBlock(const Name &x, int64_t layer);
  Name llamaBlock(const Name &x, int64_t layer);
  Name moe(const Name &x, int64_t layer);

  const ModelConfig &c;
  const GenOptions &options;
  onnx::GraphProto &graph;
  std::mt19937_64 rng;
  std::normal_distribution<float> normal{0.0f, 1.0f};
  int64_t externalOffset = 0;
  llvm::StringMap<Name> constants;
  Name seq, seq1d, mask, cos, sin;
  /// The graph states causality with ONNX's Attention (opset 23) instead
  /// of a mask (usesCausalAttentionOp).
  bool attentionOp = usesCausalAttentionOp(c);
};

onnx::NodeProto *Builder::node(llvm::StringRef opType,
                               llvm::ArrayRef<Name> inputs,
                               llvm::StringRef name, int outputs) {
  onnx::NodeProto *n = graph.add_node();
  n->set_op_type(opType.str());
  n->set_name(name.str());
  for (const Name &in : inputs)
    n->add_input(in);
  for (int i = 0; i < outputs; ++i)
    n->add_output((name + "_output_" + llvm::Twine(i)).str());
  return n;
}

void Builder::attr(onnx::NodeProto *n, const char *name, int64_t value) {
  onnx::AttributeProto *a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(value);
}

void Builder::attr(onnx::NodeProto *n, const char *name, float value) {
  onnx::AttributeProto *a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(value);
}

void Builder::attr(onnx::NodeProto *n, const char *name,
                   llvm::ArrayRef<int64_t> values) {
  onnx::AttributeProto *a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (int64_t v : values)
    a->add_ints(v);
}

Name Builder::ints(llvm::ArrayRef<int64_t> values, bool isScalar) {
  std::string key = isScalar ? "i:" : "I:";
  for (int64_t v : values)
    key += std::to_string(v) + ",";
  auto it = constants.find(key);
  if (it != constants.end())
    return it->second;
  onnx::NodeProto *n =
      node("Constant", {}, "/Constant_" + std::to_string(constants.size()));
  onnx::AttributeProto *a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto *t = a->mutable_t();
  t->set_data_type(onnx::TensorProto::INT64);
  if (!isScalar)
    t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values)
    t->add_int64_data(v);
  return constants[key] = n->output(0);
}

Name Builder::floats(llvm::ArrayRef<float> values,
                     llvm::ArrayRef<int64_t> dims) {
  std::string key = "f";
  for (int64_t d : dims)
    key += std::to_string(d) + "x";
  key += ":";
  if (values.size() <= 4)
    for (float v : values)
      key += llvm::formatv("{0:e9},", v).str();
  else
    key += "#" + std::to_string(constants.size());
  auto it = constants.find(key);
  if (it != constants.end())
    return it->second;
  onnx::NodeProto *n =
      node("Constant", {}, "/Constant_" + std::to_string(constants.size()));
  onnx::AttributeProto *a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  onnx::TensorProto *t = a->mutable_t();
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims)
    t->add_dims(d);
  for (float v : values)
    t->add_float_data(v);
  return constants[key] = n->output(0);
}

Name Builder::weight(const std::string &name, llvm::ArrayRef<int64_t> dims,
                     Init init) {
  onnx::TensorProto *t = graph.add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  int64_t count = 1;
  for (int64_t d : dims) {
    t->add_dims(d);
    count *= d;
  }
  if (options.shapeOnly) {
    // Declared, never written: external data in a file nobody reads.
    t->set_data_location(onnx::TensorProto::EXTERNAL);
    auto entry = [&](const char *key, const std::string &value) {
      onnx::StringStringEntryProto *e = t->add_external_data();
      e->set_key(key);
      e->set_value(value);
    };
    entry("location", options.externalDataFile);
    entry("offset", std::to_string(externalOffset));
    entry("length", std::to_string(count * 4));
    externalOffset += count * 4;
    return name;
  }
  std::string raw(static_cast<size_t>(count) * 4, '\0');
  char *out = raw.data();
  for (int64_t i = 0; i < count; ++i) {
    float v = 0;
    switch (init) {
    case Init::Normal:
      v = 0.02f * normal(rng);
      break;
    case Init::Ones:
      // Perturbed like a trained model's, so the affine params matter.
      v = 1.0f + 0.1f * normal(rng);
      break;
    case Init::Bias:
      v = 0.02f * normal(rng);
      break;
    }
    std::memcpy(out + 4 * i, &v, 4); // little-endian hosts only
  }
  t->set_raw_data(std::move(raw));
  return name;
}

Name Builder::linear(const Name &x, const std::string &prefix, int64_t in,
                     int64_t out, bool bias) {
  std::string scope = "/" + prefix;
  Name y = op("MatMul", {x, weight(prefix + ".weight", {in, out})},
              scope + "/MatMul");
  if (bias)
    y = op("Add", {y, weight(prefix + ".bias", {out}, Init::Bias)},
           scope + "/Add");
  return y;
}

Name Builder::layerNorm(const Name &x, const std::string &prefix) {
  onnx::NodeProto *n =
      node("LayerNormalization",
           {x, weight(prefix + ".weight", {c.hidden}, Init::Ones),
            weight(prefix + ".bias", {c.hidden}, Init::Bias)},
           "/" + prefix + "/LayerNormalization");
  attr(n, "axis", int64_t(-1));
  attr(n, "epsilon", static_cast<float>(c.normEps));
  return n->output(0);
}

Name Builder::rmsNorm(const Name &x, const std::string &weightName, int64_t dim,
                      const std::string &scope) {
  // HF LlamaRMSNorm: x * rsqrt(mean(x^2, -1) + eps) * weight.
  Name sq = op("Pow", {x, scalar(2.0f)}, scope + "/Pow");
  // Opset 18 moved ReduceMean's axes from an attribute to an input.
  onnx::NodeProto *mean =
      attentionOp ? node("ReduceMean", {sq, ints({-1})}, scope + "/ReduceMean")
                  : node("ReduceMean", {sq}, scope + "/ReduceMean");
  if (!attentionOp)
    attr(mean, "axes", llvm::ArrayRef<int64_t>{-1});
  attr(mean, "keepdims", int64_t(1));
  Name var = op("Add", {mean->output(0), scalar(c.normEps)}, scope + "/Add");
  Name rms = op("Sqrt", {var}, scope + "/Sqrt");
  Name normed = op("Div", {x, rms}, scope + "/Div");
  return op("Mul", {weight(weightName, {dim}, Init::Ones), normed},
            scope + "/Mul");
}

Name Builder::heads(const Name &x, int64_t count, const std::string &scope,
                    llvm::ArrayRef<int64_t> perm) {
  // [b, s, count * d] -> [b, s, count, d] -> perm.
  Name r =
      op("Reshape", {x, ints({0, 0, count, c.headSize()})}, scope + "/Reshape");
  onnx::NodeProto *t = node("Transpose", {r}, scope + "/Transpose");
  attr(t, "perm", perm);
  return t->output(0);
}

Name Builder::mergeHeads(const Name &y, const std::string &scope) {
  onnx::NodeProto *t = node("Transpose", {y}, scope + "/Transpose_out");
  attr(t, "perm", llvm::ArrayRef<int64_t>{0, 2, 1, 3});
  return op("Reshape", {t->output(0), ints({0, 0, c.heads * c.headSize()})},
            scope + "/Reshape_out");
}

Name Builder::attention(const Name &q, const Name &kT, const Name &v,
                        const std::string &scope) {
  if (attentionOp) {
    // ONNX's Attention reads k as [b, h, t, d].
    onnx::NodeProto *k = node("Transpose", {kT}, scope + "/Transpose_kT");
    attr(k, "perm", llvm::ArrayRef<int64_t>{0, 1, 3, 2});
    onnx::NodeProto *a =
        node("Attention", {q, k->output(0), v}, scope + "/Attention");
    attr(a, "is_causal", int64_t(1));
    return a->output(0);
  }
  // nanoGPT: softmax((q @ kT) * 1/sqrt(d) + causal mask) @ v.
  Name scores = op("MatMul", {q, kT}, scope + "/MatMul_qk");
  scores = op("Mul", {scores, scalar(1.0f / std::sqrt(float(c.headSize())))},
              scope + "/Mul_scale");
  scores = op("Add", {scores, mask}, scope + "/Add_mask");
  onnx::NodeProto *sm = node("Softmax", {scores}, scope + "/Softmax");
  attr(sm, "axis", int64_t(3));
  return op("MatMul", {sm->output(0), v}, scope + "/MatMul_pv");
}

Name Builder::gelu(const Name &x, const std::string &scope) {
  // Exact GELU as PyTorch exports it: x * 0.5 * (1 + erf(x / sqrt 2)).
  Name a = op("Div", {x, scalar(std::sqrt(2.0f))}, scope + "/Div");
  Name e = op("Erf", {a}, scope + "/Erf");
  Name p = op("Add", {e, scalar(1.0f)}, scope + "/Add");
  Name m = op("Mul", {x, p}, scope + "/Mul");
  return op("Mul", {m, scalar(0.5f)}, scope + "/Mul_1");
}

Name Builder::rope(const Name &x, const std::string &scope) {
  // HF apply_rotary_pos_emb: x * cos + rotate_half(x) * sin, with
  // rotate_half(x) = cat(-x[..., d/2:], x[..., :d/2]).
  int64_t half = c.headSize() / 2;
  Name x1 =
      op("Slice", {x, ints({0}), ints({half}), ints({3})}, scope + "/Slice");
  Name x2 = op("Slice", {x, ints({half}), ints({2 * half}), ints({3})},
               scope + "/Slice_1");
  Name neg = op("Neg", {x2}, scope + "/Neg");
  onnx::NodeProto *cat = node("Concat", {neg, x1}, scope + "/Concat");
  attr(cat, "axis", int64_t(3));
  Name a = op("Mul", {x, cos}, scope + "/Mul");
  Name b = op("Mul", {cat->output(0), sin}, scope + "/Mul_1");
  return op("Add", {a, b}, scope + "/Add");
}

Name Builder::repeatKv(const Name &x, const std::string &scope) {
  // HF repeat_kv: [b, g, s, d] -> [b, g, 1, s, d] -> expand to
  // [b, g, h/g, s, d] -> [b, h, s, d]. The importer raises this back to
  // attention over g key/value heads. GenOptions::repeatKvWithConcat writes
  // the expand as a Concat of h/g copies (the same values), which imports
  // without materializing Expand's broadcast on the host.
  int64_t rep = c.heads / c.kvHeadCount();
  if (rep == 1)
    return x;
  Name u = op("Unsqueeze", {x, ints({2})}, scope + "/Unsqueeze");
  Name e;
  if (options.repeatKvWithConcat) {
    std::vector<Name> copies(rep, u);
    onnx::NodeProto *cat = node("Concat", copies, scope + "/Concat");
    attr(cat, "axis", int64_t(2));
    e = cat->output(0);
  } else {
    e = op("Expand", {u, ints({1, 1, rep, 1, 1})}, scope + "/Expand");
  }
  return op("Reshape", {e, ints({0, c.heads, -1, c.headSize()})},
            scope + "/Reshape");
}

Name Builder::swiglu(const Name &x, const std::string &gate,
                     const std::string &up, const std::string &down,
                     int64_t ffn, const std::string &scope) {
  Name g = linear(x, gate, c.hidden, ffn, false);
  Name s = op("Sigmoid", {g}, scope + "/act_fn/Sigmoid");
  Name act = op("Mul", {g, s}, scope + "/act_fn/Mul");
  Name u = linear(x, up, c.hidden, ffn, false);
  Name prod = op("Mul", {act, u}, scope + "/Mul");
  return linear(prod, down, ffn, c.hidden, false);
}

Name Builder::gptBlock(const Name &x, int64_t layer) {
  std::string p = "transformer.h." + std::to_string(layer);
  std::string scope = "/" + p;
  int64_t h = c.hidden;
  Name ln1 = layerNorm(x, p + ".ln_1");
  Name qkv = linear(ln1, p + ".attn.c_attn", h, 3 * h, true);
  onnx::NodeProto *split =
      node("Split", {qkv, ints({h, h, h})}, scope + "/attn/Split", 3);
  attr(split, "axis", int64_t(2));
  std::string a = scope + "/attn";
  Name q = heads(split->output(0), c.heads, a + "/q", {0, 2, 1, 3});
  Name kT = heads(split->output(1), c.heads, a + "/k", {0, 2, 3, 1});
  Name v = heads(split->output(2), c.heads, a + "/v", {0, 2, 1, 3});
  Name y = mergeHeads(attention(q, kT, v, a), a);
  y = linear(y, p + ".attn.c_proj", h, h, true);
  Name x1 = op("Add", {x, y}, scope + "/Add");
  Name ln2 = layerNorm(x1, p + ".ln_2");
  Name fc = linear(ln2, p + ".mlp.c_fc", h, c.ffnSize(), true);
  Name act = gelu(fc, scope + "/mlp/act");
  Name out = linear(act, p + ".mlp.c_proj", c.ffnSize(), h, true);
  return op("Add", {x1, out}, scope + "/Add_1");
}

Name Builder::llamaBlock(const Name &x, int64_t layer) {
  std::string p = "model.layers." + std::to_string(layer);
  std::string scope = "/" + p;
  std::string a = scope + "/self_attn";
  int64_t h = c.hidden, d = c.headSize();
  int64_t g = c.kvHeadCount();
  Name n1 =
      rmsNorm(x, p + ".input_layernorm.weight", h, scope + "/input_layernorm");
  Name q = linear(n1, p + ".self_attn.q_proj", h, c.heads * d, c.qkvBias);
  Name k = linear(n1, p + ".self_attn.k_proj", h, g * d, c.qkvBias);
  Name v = linear(n1, p + ".self_attn.v_proj", h, g * d, c.qkvBias);
  q = heads(q, c.heads, a + "/q", {0, 2, 1, 3});
  k = heads(k, g, a + "/k", {0, 2, 1, 3});
  v = heads(v, g, a + "/v", {0, 2, 1, 3});
  if (c.qkNorm) {
    q = rmsNorm(q, p + ".self_attn.q_norm.weight", d, a + "/q_norm");
    k = rmsNorm(k, p + ".self_attn.k_norm.weight", d, a + "/k_norm");
  }
  q = rope(q, a + "/rotary_q");
  k = rope(k, a + "/rotary_k");
  k = repeatKv(k, a + "/repeat_k");
  v = repeatKv(v, a + "/repeat_v");
  onnx::NodeProto *kT = node("Transpose", {k}, a + "/Transpose_k");
  attr(kT, "perm", llvm::ArrayRef<int64_t>{0, 1, 3, 2});
  Name y = mergeHeads(attention(q, kT->output(0), v, a), a);
  y = linear(y, p + ".self_attn.o_proj", c.heads * d, h, false);
  Name x1 = op("Add", {x, y}, scope + "/Add");
  Name n2 = rmsNorm(x1, p + ".post_attention_layernorm.weight", h,
                    scope + "/post_attention_layernorm");
  Name out = c.arch == Arch::MoE
                 ? moe(n2, layer)
                 : swiglu(n2, p + ".mlp.gate_proj", p + ".mlp.up_proj",
                          p + ".mlp.down_proj", c.ffnSize(), scope + "/mlp");
  return op("Add", {x1, out}, scope + "/Add_1");
}

Name Builder::moe(const Name &x, int64_t layer) {
  // ONNX Runtime's com.microsoft.MoE: softmax over the router logits, the
  // top-k experts, SwiGLU experts silu(x W1^T) * (x W3^T) W2^T with the
  // experts' weights stacked [E, out, in] (torch Linear's layout per expert).
  std::string p = "model.layers." + std::to_string(layer) +
                  (c.qwenMoeNames ? ".mlp" : ".block_sparse_moe");
  std::string scope = "/" + p;
  Name logits = linear(x, p + ".gate", c.hidden, c.experts, false);
  Name rows =
      op("Reshape", {logits, ints({-1, c.experts})}, scope + "/Reshape_router");
  int64_t h = c.hidden, f = c.ffnSize(), e = c.experts;
  std::string ep = p + ".experts.";
  Name w1 = weight(ep + (c.qwenMoeNames ? "gate_proj" : "w1"), {e, f, h});
  Name w2 = weight(ep + (c.qwenMoeNames ? "down_proj" : "w2"), {e, h, f});
  Name w3 = weight(ep + (c.qwenMoeNames ? "up_proj" : "w3"), {e, f, h});
  onnx::NodeProto *n =
      node("MoE", {x, rows, w1, "", w2, "", w3}, scope + "/MoE");
  n->set_domain("com.microsoft");
  attr(n, "k", c.topK);
  attr(n, "normalize_routing_weights", int64_t(c.normTopKProb ? 1 : 0));
  onnx::AttributeProto *act = n->add_attribute();
  act->set_name("activation_type");
  act->set_type(onnx::AttributeProto::STRING);
  act->set_s("silu");
  Name sum = n->output(0);
  if (c.sharedExpertFfn) {
    std::string sp = p + ".shared_expert";
    Name y = swiglu(x, sp + ".gate_proj", sp + ".up_proj", sp + ".down_proj",
                    c.sharedExpertFfn, scope + "/shared_expert");
    Name gate = linear(x, p + ".shared_expert_gate", c.hidden, 1, false);
    Name s = op("Sigmoid", {gate}, scope + "/shared_expert_gate/Sigmoid");
    Name gated = op("Mul", {y, s}, scope + "/shared_expert/Mul_gate");
    sum = op("Add", {sum, gated}, scope + "/Add_shared");
  }
  return sum;
}

void Builder::buildMask() {
  onnx::NodeProto *square = node("Concat", {seq1d, seq1d}, "/Concat_mask");
  attr(square, "axis", int64_t(0));
  onnx::NodeProto *fill =
      node("ConstantOfShape", {square->output(0)}, "/ConstantOfShape_mask");
  onnx::AttributeProto *value = fill->add_attribute();
  value->set_name("value");
  value->set_type(onnx::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_float_data(-std::numeric_limits<float>::infinity());
  onnx::NodeProto *triu =
      node("Trilu", {fill->output(0), ints({1}, true)}, "/Trilu_mask");
  attr(triu, "upper", int64_t(1));
  mask = triu->output(0);
}

void Builder::build() {
  // Input and output.
  onnx::ValueInfoProto *in = graph.add_input();
  in->set_name("input_ids");
  auto *inType = in->mutable_type()->mutable_tensor_type();
  inType->set_elem_type(onnx::TensorProto::INT64);
  inType->mutable_shape()->add_dim()->set_dim_param("batch");
  inType->mutable_shape()->add_dim()->set_dim_param("seq");

  // The sequence length, read once.
  onnx::NodeProto *shape = node("Shape", {"input_ids"}, "/Shape");
  attr(shape, "start", int64_t(1));
  attr(shape, "end", int64_t(2));
  seq1d = shape->output(0);
  seq = op("Squeeze", {seq1d, ints({0})}, "/Squeeze");
  Name positions =
      op("Range", {ints({0}, true), seq, ints({1}, true)}, "/Range");

  // The causal mask, shared by all layers: 0 on and below the diagonal,
  // -inf above (or is_causal on each Attention).
  if (!attentionOp)
    buildMask();

  int64_t h = c.hidden;
  Name x, out;
  if (c.arch == Arch::GPT) {
    Name wte = weight("transformer.wte.weight", {c.vocab, h});
    Name tok = op("Gather", {wte, "input_ids"}, "/transformer/wte/Gather");
    Name wpe = weight("transformer.wpe.weight", {c.maxPositions, h});
    Name pos = op("Gather", {wpe, positions}, "/transformer/wpe/Gather");
    x = op("Add", {tok, pos}, "/transformer/Add");
    for (int64_t i = 0; i < c.layers; ++i)
      x = gptBlock(x, i);
    x = layerNorm(x, "transformer.ln_f");
    if (c.tiedEmbeddings) {
      onnx::NodeProto *t = node("Transpose", {wte}, "/lm_head/Transpose");
      attr(t, "perm", llvm::ArrayRef<int64_t>{1, 0});
      out = op("MatMul", {x, t->output(0)}, "/lm_head/MatMul");
    } else {
      out = linear(x, "lm_head", h, c.vocab, false);
    }
  } else {
    // Rotary tables [seq, d] from the positions: inv_freq is a constant,
    // everything else folds on the host at import.
    int64_t d = c.headSize();
    std::vector<float> invFreq;
    for (int64_t i = 0; i < d / 2; ++i)
      invFreq.push_back(static_cast<float>(
          1.0 / std::pow(c.ropeTheta, double(2 * i) / double(d))));
    onnx::NodeProto *cast = node("Cast", {positions}, "/rotary_emb/Cast");
    attr(cast, "to", int64_t(onnx::TensorProto::FLOAT));
    Name col =
        op("Unsqueeze", {cast->output(0), ints({1})}, "/rotary_emb/Unsqueeze");
    Name freqs = op("Mul", {col, floats(invFreq, {d / 2})}, "/rotary_emb/Mul");
    onnx::NodeProto *emb = node("Concat", {freqs, freqs}, "/rotary_emb/Concat");
    attr(emb, "axis", int64_t(1));
    cos = op("Cos", {emb->output(0)}, "/rotary_emb/Cos");
    sin = op("Sin", {emb->output(0)}, "/rotary_emb/Sin");

    Name embed = weight("model.embed_tokens.weight", {c.vocab, h});
    x = op("Gather", {embed, "input_ids"}, "/model/embed_tokens/Gather");
    for (int64_t i = 0; i < c.layers; ++i)
      x = llamaBlock(x, i);
    x = rmsNorm(x, "model.norm.weight", h, "/model/norm");
    if (c.tiedEmbeddings) {
      onnx::NodeProto *t = node("Transpose", {embed}, "/lm_head/Transpose");
      attr(t, "perm", llvm::ArrayRef<int64_t>{1, 0});
      out = op("MatMul", {x, t->output(0)}, "/lm_head/MatMul");
    } else {
      out = linear(x, "lm_head", h, c.vocab, false);
    }
  }
  onnx::NodeProto *logits = node("Identity", {out}, "/logits");
  logits->set_output(0, "logits");
  onnx::ValueInfoProto *o = graph.add_output();
  o->set_name("logits");
  auto *outType = o->mutable_type()->mutable_tensor_type();
  outType->set_elem_type(onnx::TensorProto::FLOAT);
  outType->mutable_shape()->add_dim()->set_dim_param("batch");
  outType->mutable_shape()->add_dim()->set_dim_param("seq");
  outType->mutable_shape()->add_dim()->set_dim_value(c.vocab);
}

/// `value` as text that reads back exactly (metadata numbers).
std::string exactText(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  return text;
}

} // namespace

bool dtc::modelgen::usesCausalAttentionOp(const ModelConfig &config) {
  // The importer folds constants of up to 2^26 elements
  // (frontends/onnx/HostEval.cpp); a [seq, seq] mask over a longer context
  // (Mixtral's 32,768 positions: 2^30) is stated by ONNX's own causal
  // Attention (opset 23) instead of being built as a constant.
  constexpr int64_t kMaxFoldedMaskElements = int64_t(1) << 26;
  return config.maxPositions > 0 &&
         config.maxPositions > kMaxFoldedMaskElements / config.maxPositions;
}

Error dtc::modelgen::buildModel(const ModelConfig &config,
                                const GenOptions &options,
                                onnx::ModelProto &model) {
  if (Error err = validate(config))
    return err;
  int64_t params = parameterCount(config);
  // Protobuf messages stop at 2 GB; leave room for the graph.
  if (!options.shapeOnly && params > int64_t(450) * 1000 * 1000)
    return badInput("{0}: {1} parameters do not fit one ONNX file with "
                    "inline weights (2 GB); pass --shape-only",
                    config.name, params);
  model.Clear();
  bool attentionOp = usesCausalAttentionOp(config);
  model.set_ir_version(attentionOp ? 10 : 8);
  model.set_producer_name("dtc-modelgen");
  model.set_producer_version("1");
  model.set_domain("");
  model.set_model_version(1);
  onnx::OperatorSetIdProto *opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(attentionOp ? kAttentionOpset : kOpset);
  auto meta = [&](const char *key, const std::string &value) {
    onnx::StringStringEntryProto *e = model.add_metadata_props();
    e->set_key(key);
    e->set_value(value);
  };
  meta("max_position_embeddings", std::to_string(config.maxPositions));
  meta("dtc.modelgen.arch", archName(config.arch).str());
  meta("dtc.modelgen.name", config.name);
  meta("dtc.modelgen.parameters", std::to_string(params));
  if (config.arch == Arch::MoE) {
    meta("num_experts", std::to_string(config.experts));
    meta("num_experts_per_tok", std::to_string(config.topK));
    meta("router_aux_loss_coef", exactText(config.routerAuxLossCoef));
    meta("moe_capacity_factor", exactText(config.capacityFactor));
    onnx::OperatorSetIdProto *ms = model.add_opset_import();
    ms->set_domain("com.microsoft");
    ms->set_version(1);
  }
  onnx::GraphProto *graph = model.mutable_graph();
  graph->set_name(config.name);
  Builder(config, options, *graph).build();
  return Error::success();
}

Error dtc::modelgen::writeModel(const onnx::ModelProto &model,
                                llvm::StringRef path) {
  std::string bytes;
  if (!model.SerializeToString(&bytes))
    return failure("{0}: cannot serialize the model (over 2 GB?)", path);
  llvm::SmallString<256> tmp;
  int fd;
  std::string pattern = (path + ".tmp-%%%%%%").str();
  if (std::error_code ec = llvm::sys::fs::createUniqueFile(pattern, fd, tmp))
    return failure("{0}: cannot create a temporary file next to it: {1}", path,
                   ec.message());
  {
    llvm::raw_fd_ostream os(fd, /*shouldClose=*/true);
    os << bytes;
    os.close();
    if (os.has_error()) {
      std::string message = os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      return failure("{0}: cannot write: {1}", path, message);
    }
  }
  if (std::error_code ec = llvm::sys::fs::rename(tmp, path)) {
    llvm::sys::fs::remove(tmp);
    return failure("{0}: cannot move the model into place: {1}", path,
                   ec.message());
  }
  return Error::success();
}

Error dtc::modelgen::generate(const ModelConfig &config,
                              const GenOptions &options, llvm::StringRef path) {
  onnx::ModelProto model;
  if (Error err = buildModel(config, options, model))
    return err;
  return writeModel(model, path);
}
