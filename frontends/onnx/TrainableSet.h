//===- TrainableSet.h - Which initializers a training step trains -*- C++
//-*-===//
//
// PyTorch trains its parameters, not its buffers or the constants an
// exporter makes. torch.onnx.export (dynamo) records which is which in the
// value_info metadata of each initializer
// (`pkg.torch.export.graph_signature.InputSpec.kind` = PARAMETER or
// BUFFER), and its ONNX optimizer records what it folded
// (`pkg.onnxscript.optimizer.folded_from`). This reads that evidence and
// decides, per float initializer, whether dtc trains it (docs/training.md,
// "What is trained").
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_ONNX_TRAINABLESET_H
#define DTC_FRONTENDS_ONNX_TRAINABLESET_H

#include "frontends/onnx/OnnxImporter.h"

#include "onnx/onnx_pb.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace dtc::onnx {

/// What the exporter says about one initializer.
struct InitializerOrigin {
  /// The graph signature's kind: "PARAMETER", "BUFFER", "CONSTANT_TENSOR"
  /// ...; empty when the exporter did not tag it.
  std::string kind;
  /// The initializers the ONNX optimizer folded into this one.
  std::vector<std::string> foldedFrom;
  /// A BUFFER registered with persistent=False: not in the state_dict.
  bool nonPersistent = false;
};

/// The PyTorch state_dict the export came from, as far as the graph
/// signature (graph metadata `pkg.torch.export.ExportedProgram.
/// graph_signature`) tells it: every PARAMETER and persistent BUFFER target
/// in order. A target without an initializer of its own is a tied alias the
/// exporter folded into another (nanoGPT's `transformer.wte.weight` into
/// `lm_head.weight`); `aliasOf` maps it to that initializer where a node's
/// module scope (`pkg.torch.onnx.name_scopes`) shows which, or where the
/// target's module has one direct child with a parameter of the target's
/// leaf (BERT's `cls.predictions.bias`, read as
/// `cls.predictions.decoder.bias`).
struct StateDictInfo {
  std::vector<std::string> keys;
  /// The keys that are PARAMETERs, in order.
  std::vector<std::string> parameters;
  llvm::StringMap<std::string> aliasOf;
};

/// Empty when the export carries no graph signature.
StateDictInfo readStateDict(const ::onnx::GraphProto &graph);

/// The origins recorded in `graph`'s value_info metadata, by initializer
/// name. The metadata_props of a ValueInfoProto (ONNX IR 10) are read from
/// the protobuf's unknown fields when the ONNX library predates them.
llvm::StringMap<InitializerOrigin>
readInitializerOrigins(const ::onnx::GraphProto &graph);

/// What the graph's uses of its initializers say, for an export without a
/// graph signature (TorchScript, other tools): which float initializers
/// are weights by use (read, through reshaping ops, as a matmul, Gemm or
/// convolution operand, an embedding table, a normalization's scale or
/// bias, or a rank-1 bias or scale), and the first hazard dtc cannot undo:
/// one initializer read as several tensors (identical initializers merged
/// behind Identity nodes: every layer's zero bias becomes one, and training
/// would tie them). A weight folded into an anonymous constant
/// (TorchScript's `onnx::MatMul_272`, a transposed Linear weight) is no
/// hazard for training (AdamW is elementwise); checkpoints use its graph
/// name.
struct UseEvidence {
  bool read = false; ///< false: not read (every float initializer trains)
  llvm::StringSet<> weights;
  std::optional<std::string> hazard;
};
UseEvidence readUseEvidence(const ::onnx::GraphProto &graph);

/// A weight the exporter's constant folding turned into a transposed copy
/// of another (TorchScript's `lm_head` as `onnx::MatMul_275` = the tied
/// embedding transposed): training would untie them. Compares the inline
/// fp32 data of each anonymous (`onnx::`) rank-2 initializer with every
/// named one of the transposed shape; call before the weights' bytes are
/// released. The hazard's text, or nullopt.
std::optional<std::string> findFoldedTiedCopy(const ::onnx::GraphProto &graph);

/// What PyTorch's embedding call said of its gradient, read from the
/// node's `pkg.torch.onnx.fx_node` metadata (`aten.embedding.default(args
/// = (weight, ids, padding_idx, ...))`), which the lookup's Gather does not
/// carry: nn.Embedding(padding_idx=p) gives row p no gradient. None when
/// the node has no such metadata or no padding row.
std::optional<int64_t> readEmbeddingPaddingIndex(const ::onnx::NodeProto &node);

/// Why an initializer is or is not trained.
struct TrainableDecision {
  bool trained = true;
  /// "parameter", "buffer", "exporter constant", "--frozen", ...
  std::string reason;
};

/// Decides every float initializer in `names`. A model whose ONNX graph
/// the exporter's optimizer rewrote (weights folded into anonymous
/// constants, identical initializers merged or dropped; it marks what it
/// folded) cannot be trained as PyTorch would: with `training`, that is a
/// bad-input error naming what it did to a parameter, unless `--trainable`
/// says what to train. `initializers` are every initializer's name, the
/// state dict is readStateDict's. Bad regular expressions are bad-input
/// errors too.
llvm::Expected<llvm::StringMap<TrainableDecision>>
decideTrainable(llvm::ArrayRef<std::string> names,
                const llvm::StringMap<InitializerOrigin> &origins,
                const StateDictInfo &stateDict,
                const llvm::StringSet<> &initializers,
                const TrainableOverrides &overrides, bool training,
                const UseEvidence &uses);

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_TRAINABLESET_H
