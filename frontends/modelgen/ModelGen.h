//===- ModelGen.h - Decoder-only transformers as ONNX -----------*- C++ -*-===//
//
// Builds a standard-ONNX (opset 17, default domain) decoder-only transformer
// from a ModelConfig, in the op forms PyTorch exports and the dtc ONNX
// importer raises (docs/modelgen.md): GPT-2, LLaMA/Mistral (RMSNorm, RoPE,
// GQA, SwiGLU) and mixtures of experts (Mixtral, Qwen-MoE). Weights are
// random with a fixed seed, or declared only (--shape-only): initializers
// with dims and type whose data lives in an external file that is never
// written, so a 1T-parameter model is a few hundred kilobytes.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_MODELGEN_MODELGEN_H
#define DTC_FRONTENDS_MODELGEN_MODELGEN_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtc::modelgen {

enum class Arch {
  /// GPT-2: learned positions, LayerNorm, fused QKV with bias, erf GELU.
  GPT,
  /// LLaMA/Mistral: RMSNorm, RoPE, GQA, SwiGLU, no biases.
  Llama,
  /// Mixtral/Qwen-MoE: LLaMA attention, a routed mixture of SwiGLU experts.
  MoE,
};

llvm::StringRef archName(Arch arch);
/// gpt, llama, mistral (= llama), mixtral, moe (= mixtral).
std::optional<Arch> parseArch(llvm::StringRef name);

struct ModelConfig {
  std::string name = "model";
  Arch arch = Arch::GPT;
  int64_t vocab = 0;
  int64_t hidden = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kvHeads = 0; ///< 0 = heads.
  int64_t headDim = 0; ///< 0 = hidden / heads.
  int64_t ffn = 0;     ///< 0 = 4 * hidden; per expert for MoE.
  int64_t maxPositions = 0;
  double normEps = 1e-5;
  double ropeTheta = 10000.0;
  bool tiedEmbeddings = false;
  /// Bias on q/k/v projections (Qwen2); GPT always has biases.
  bool qkvBias = false;
  /// RMSNorm of q and k per head before RoPE (Qwen3).
  bool qkNorm = false;
  // Mixture of experts.
  int64_t experts = 0; ///< Routed experts per layer (MoE only).
  int64_t topK = 0;
  /// Intermediate size of the always-on shared expert (Qwen2-MoE); 0: none.
  int64_t sharedExpertFfn = 0;
  /// HF naming of the MoE block: Mixtral's `block_sparse_moe.experts.E.w1`
  /// (false) or Qwen's `mlp.experts.E.gate_proj` (true).
  bool qwenMoeNames = false;
  /// Divide the chosen experts' router scores by their sum (Mixtral,
  /// Qwen3-MoE) or use them as they are (Qwen2-MoE).
  bool normTopKProb = true;
  /// Weight of each layer's load-balancing loss (HF router_aux_loss_coef).
  double routerAuxLossCoef = 0.001;
  /// Expert capacity as a multiple of the even share; 0: dropless.
  double capacityFactor = 0;

  int64_t kvHeadCount() const { return kvHeads ? kvHeads : heads; }
  int64_t headSize() const {
    return headDim ? headDim : (heads ? hidden / heads : 0);
  }
  int64_t ffnSize() const { return ffn ? ffn : 4 * hidden; }
};

/// Checks the sizes fit together; errors name the field as `--flag`
/// (`what` prefixes the message, e.g. a config.json path).
llvm::Error validate(const ModelConfig &config, llvm::StringRef what = "");

/// The named presets: gpt2, gpt2-medium, gpt2-large, gpt2-xl, gpt-1t,
/// llama-7b, llama-13b, llama-70b, mistral-7b, mixtral-8x7b, tiny-gpt,
/// tiny-llama, tiny-mixtral.
std::optional<ModelConfig> preset(llvm::StringRef name);
std::vector<std::string> presetNames();

/// Trainable parameters of the model modelgen builds for `config`.
int64_t parameterCount(const ModelConfig &config);

/// Whether the generated graph states causal attention with ONNX's own
/// Attention op (opset 23, is_causal) instead of a [seq, seq] mask: when
/// that mask over the whole context would be too large for the importer to
/// fold (more than 8,192 positions). Such graphs are opset 23 throughout.
bool usesCausalAttentionOp(const ModelConfig &config);

struct GenOptions {
  /// Declare the weights only (external data that is never written).
  bool shapeOnly = false;
  uint64_t seed = 0;
  /// The external-data file named by shape-only initializers.
  std::string externalDataFile = "weights.bin";
  /// Write HF repeat_kv's expand as a Concat of copies (imports faster; the
  /// importer does not raise it to grouped-query attention).
  bool repeatKvWithConcat = false;
};

/// Builds the model and writes it to `path` atomically (a temp file renamed
/// into place). Fails (bad input) when inline random weights would not fit
/// one protobuf (2 GB): pass shape-only then.
llvm::Error generate(const ModelConfig &config, const GenOptions &options,
                     llvm::StringRef path);

} // namespace dtc::modelgen

#endif // DTC_FRONTENDS_MODELGEN_MODELGEN_H
