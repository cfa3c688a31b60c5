//===- TrainableSet.cpp - Which initializers a training step trains -------===//

#include "frontends/onnx/TrainableSet.h"

#include "runtime/support/Error.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Regex.h"

#include <google/protobuf/unknown_field_set.h>

#include <cstring>

using namespace dtc::onnx;

namespace {

constexpr llvm::StringLiteral kKindKey =
    "pkg.torch.export.graph_signature.InputSpec.kind";
constexpr llvm::StringLiteral kFoldedKey =
    "pkg.onnxscript.optimizer.folded_from";
constexpr llvm::StringLiteral kPersistentKey =
    "pkg.torch.export.graph_signature.InputSpec.persistent";
constexpr llvm::StringLiteral kSignatureKey =
    "pkg.torch.export.ExportedProgram.graph_signature";
constexpr llvm::StringLiteral kScopesKey = "pkg.torch.onnx.name_scopes";
constexpr llvm::StringLiteral kFxNodeKey = "pkg.torch.onnx.fx_node";
/// The metadata_props fields of ONNX IR 10, newer than this ONNX library.
constexpr int kValueInfoMetadataField = 4, kNodeMetadataField = 9,
              kGraphMetadataField = 16;

/// The names in a Python list literal: "['a.weight', 'b']" -> a.weight, b.
std::vector<std::string> parseNameList(llvm::StringRef text) {
  std::vector<std::string> names;
  while (true) {
    size_t open = text.find_first_of("'\"");
    if (open == llvm::StringRef::npos)
      break;
    char quote = text[open];
    size_t close = text.find(quote, open + 1);
    if (close == llvm::StringRef::npos)
      break;
    names.push_back(text.slice(open + 1, close).str());
    text = text.drop_front(close + 1);
  }
  return names;
}

void addEntry(InitializerOrigin &origin, llvm::StringRef key,
              llvm::StringRef value) {
  if (key == kKindKey)
    origin.kind = value.str();
  else if (key == kFoldedKey)
    origin.foldedFrom = parseNameList(value);
  else if (key == kPersistentKey)
    origin.nonPersistent = value == "False";
}

/// The metadata entries of `message` (its metadata_props, field `field`),
/// read from the unknown fields: this ONNX library predates them.
std::vector<std::pair<std::string, std::string>>
metadataOf(const google::protobuf::Message &message, int fieldNumber) {
  std::vector<std::pair<std::string, std::string>> entries;
  const google::protobuf::UnknownFieldSet &unknown =
      message.GetReflection()->GetUnknownFields(message);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField &field = unknown.field(i);
    if (field.number() != fieldNumber ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    ::onnx::StringStringEntryProto entry;
    if (entry.ParseFromString(field.length_delimited()))
      entries.emplace_back(entry.key(), entry.value());
  }
  return entries;
}

} // namespace

std::optional<int64_t>
dtc::onnx::readEmbeddingPaddingIndex(const ::onnx::NodeProto &node) {
  for (const auto &[key, value] : metadataOf(node, kNodeMetadataField)) {
    if (key != kFxNodeKey)
      continue;
    // "... target=torch.ops.aten.embedding.default](args = (%w, %ids, 0),
    // kwargs = {})": the third argument, -1 (none) by default.
    llvm::StringRef text(value);
    if (!text.contains("aten.embedding.default"))
      return std::nullopt;
    size_t open = text.find("args = (");
    if (open == llvm::StringRef::npos)
      return std::nullopt;
    llvm::StringRef args = text.drop_front(open + 8);
    args = args.take_until([](char c) { return c == ')'; });
    llvm::SmallVector<llvm::StringRef> items;
    args.split(items, ',');
    int64_t padding = -1;
    if (items.size() < 3 || items[2].trim().getAsInteger(10, padding) ||
        padding < 0)
      return std::nullopt;
    return padding;
  }
  return std::nullopt;
}

llvm::StringMap<InitializerOrigin>
dtc::onnx::readInitializerOrigins(const ::onnx::GraphProto &graph) {
  // Every tagged value, initializer or not: FuseMoe replaces expert
  // initializers by their stack, whose members keep their tags here.
  llvm::StringMap<InitializerOrigin> origins;
  auto read = [&](const ::onnx::ValueInfoProto &info) {
    for (const auto &[key, value] : metadataOf(info, kValueInfoMetadataField))
      addEntry(origins[info.name()], key, value);
  };
  for (const auto &info : graph.value_info())
    read(info);
  for (const auto &info : graph.input())
    read(info);
  return origins;
}

StateDictInfo dtc::onnx::readStateDict(const ::onnx::GraphProto &graph) {
  StateDictInfo info;
  std::string signature;
  for (const auto &[key, value] : metadataOf(graph, kGraphMetadataField))
    if (key == kSignatureKey)
      signature = value;
  // Lines "p_wte_weight: PARAMETER target='wte.weight'" and
  // "b_mask: BUFFER target='mask' persistent=True", up to "# outputs".
  llvm::SmallVector<llvm::StringRef> lines;
  llvm::StringRef(signature).split(lines, '\n');
  llvm::StringSet<> parameters;
  for (llvm::StringRef line : lines) {
    if (line.starts_with("# outputs"))
      break;
    bool parameter = line.contains(": PARAMETER ");
    if (!parameter && !line.contains(": BUFFER "))
      continue;
    if (line.contains("persistent=False"))
      continue;
    size_t at = line.find("target='");
    if (at == llvm::StringRef::npos)
      continue;
    llvm::StringRef target = line.drop_front(at + 8);
    target = target.take_until([](char c) { return c == '\''; });
    info.keys.push_back(target.str());
    if (parameter) {
      parameters.insert(target);
      info.parameters.push_back(target.str());
    }
  }
  if (info.keys.empty())
    return info;
  // Tied aliases: a node of module M reading initializer I as its own
  // parameter "M.<leaf of I>" that has no initializer.
  llvm::StringSet<> initializers;
  for (const auto &init : graph.initializer())
    initializers.insert(init.name());
  for (const auto &node : graph.node()) {
    std::vector<std::string> scopes;
    for (const auto &[key, value] : metadataOf(node, kNodeMetadataField))
      if (key == kScopesKey)
        scopes = parseNameList(value);
    if (scopes.size() < 2)
      continue;
    // The first scope is the root module (''), the last the op itself;
    // each between is the qualified name of a module on the call stack
    // ('distilbert', 'distilbert.embeddings', ...), so the innermost is the
    // module whose parameter the node reads.
    llvm::StringRef module = scopes[scopes.size() - 2];
    for (const std::string &input : node.input()) {
      if (!initializers.contains(input) || !parameters.contains(input))
        continue;
      llvm::StringRef leaf = llvm::StringRef(input).rsplit('.').second;
      if (leaf.empty())
        leaf = input;
      std::string own =
          module.empty() ? leaf.str() : module.str() + "." + leaf.str();
      if (own != input && parameters.contains(own) &&
          !initializers.contains(own))
        info.aliasOf[own] = input;
    }
  }
  // A parameter no node reads whose module's one direct child holds a
  // parameter of the same leaf: the child's tensor, assigned to the parent
  // (Hugging Face's `self.decoder.bias = self.bias` in BERT's LM head; the
  // exporter keeps the name the graph reads).
  for (const std::string &parameter : info.parameters) {
    if (initializers.contains(parameter) || info.aliasOf.contains(parameter))
      continue;
    auto [module, leaf] = llvm::StringRef(parameter).rsplit('.');
    if (leaf.empty())
      continue;
    llvm::SmallVector<std::string, 2> children;
    for (const auto &init : graph.initializer()) {
      llvm::StringRef name = init.name();
      if (parameters.contains(name) && name.consume_front(module) &&
          name.consume_front(".") && name.consume_back("." + leaf.str()) &&
          !name.empty() && !name.contains('.'))
        children.push_back(init.name());
    }
    if (children.size() == 1)
      info.aliasOf[parameter] = children.front();
  }
  return info;
}

/// What the ONNX optimizer visibly did to the model's parameters, worst
/// first: a parameter folded into an anonymous constant, a parameter of the
/// signature with no tensor (merged into another or dropped), else any
/// fold; nullopt when it left no mark.
static std::optional<std::string>
optimizerHazard(const llvm::StringMap<InitializerOrigin> &origins,
                const StateDictInfo &stateDict,
                const llvm::StringSet<> &initializers) {
  auto kindOf = [&](llvm::StringRef name) -> llvm::StringRef {
    auto it = origins.find(name);
    return it == origins.end() ? llvm::StringRef() : it->second.kind;
  };
  std::string anyFold;
  // In name order: the message does not depend on hash order.
  std::vector<std::string> names;
  for (const auto &entry : origins)
    names.push_back(entry.getKey().str());
  llvm::sort(names);
  for (const std::string &name : names) {
    const InitializerOrigin &origin = origins.find(name)->second;
    if (origin.foldedFrom.empty())
      continue;
    std::string what =
        llvm::formatv("it folded '{0}' into '{1}'",
                      llvm::join(origin.foldedFrom, "', '"), name)
            .str();
    if (llvm::any_of(origin.foldedFrom, [&](const std::string &source) {
          return kindOf(source) == "PARAMETER";
        }))
      return what;
    if (anyFold.empty())
      anyFold = what;
  }
  if (anyFold.empty())
    return std::nullopt;
  for (const std::string &parameter : stateDict.parameters)
    if (!initializers.contains(parameter) &&
        !stateDict.aliasOf.contains(parameter))
      return llvm::formatv("the graph signature's parameter '{0}' has no "
                           "tensor in the graph (merged into another, or "
                           "dropped)",
                           parameter)
          .str();
  return anyFold;
}

namespace {

/// Ops that pass a tensor on reshaped or retyped: a weight read through
/// them is still read as a weight.
bool passesOn(llvm::StringRef op) {
  return llvm::is_contained({"Identity", "Cast", "Transpose", "Reshape",
                             "Squeeze", "Unsqueeze", "Flatten"},
                            op);
}

/// Whether input `slot` of `node` is a learned weight's place.
bool isWeightSlot(const ::onnx::NodeProto &node, int slot, int64_t rank) {
  llvm::StringRef op = node.op_type();
  if (op == "MatMul" || op == "Einsum")
    return true;
  if (op == "Gemm")
    return slot <= 2;
  if (op == "Conv" || op == "ConvTranspose" || op == "PRelu")
    return slot >= 1 && slot <= 2;
  if (op == "Gather")
    return slot == 0; // an embedding table
  if (op == "LayerNormalization" || op == "BatchNormalization" ||
      op == "InstanceNormalization" || op == "GroupNormalization" ||
      op == "SimplifiedLayerNormalization" || op == "SkipLayerNormalization" ||
      op == "SkipSimplifiedLayerNormalization")
    return slot == 1 || slot == 2; // not batch norm's running statistics
  // A bias or a per-channel scale (RMSNorm's weight): rank 1. Masks, RoPE
  // tables and position tables have rank >= 2.
  if (op == "Add" || op == "Mul")
    return rank == 1;
  // ONNX Runtime's fused ops (com.microsoft MoE, Attention, the skip
  // norms) read weights, biases and scales.
  return !node.domain().empty() && node.domain() != "ai.onnx";
}

} // namespace

UseEvidence dtc::onnx::readUseEvidence(const ::onnx::GraphProto &graph) {
  UseEvidence evidence;
  evidence.read = true;
  llvm::StringMap<int64_t> floatRank;
  for (const auto &init : graph.initializer())
    if (init.data_type() == ::onnx::TensorProto::FLOAT ||
        init.data_type() == ::onnx::TensorProto::FLOAT16 ||
        init.data_type() == ::onnx::TensorProto::BFLOAT16 ||
        init.data_type() == ::onnx::TensorProto::DOUBLE)
      floatRank[init.name()] = init.dims_size();
  llvm::StringMap<llvm::SmallVector<std::pair<const ::onnx::NodeProto *, int>>>
      readers;
  for (const auto &node : graph.node())
    for (auto [slot, input] : llvm::enumerate(node.input()))
      readers[input].push_back({&node, static_cast<int>(slot)});

  // In initializer order: the first hazard found is the one named.
  for (const auto &init : graph.initializer()) {
    auto rankIt = floatRank.find(init.name());
    if (rankIt == floatRank.end())
      continue;
    int identities = 0;
    bool weight = false;
    llvm::SmallVector<std::string> frontier{init.name()};
    for (size_t depth = 0; depth < 8 && !frontier.empty(); ++depth) {
      llvm::SmallVector<std::string> next;
      for (const std::string &value : frontier)
        for (auto [node, slot] : readers.lookup(value)) {
          if (depth == 0 && node->op_type() == "Identity")
            ++identities;
          if (isWeightSlot(*node, slot, rankIt->second))
            weight = true;
          else if (passesOn(node->op_type()) && node->output_size() == 1)
            next.push_back(node->output(0));
        }
      frontier = std::move(next);
    }
    if (!weight)
      continue;
    evidence.weights.insert(init.name());
    if (evidence.hazard)
      continue;
    // A weight folded by the exporter's constant folding (TorchScript names
    // a transposed Linear weight `onnx::MatMul_272`) trains as the original
    // would, AdamW being elementwise; only its PyTorch name is lost, and
    // checkpoints use the graph's. A merged initializer would tie layers.
    if (identities >= 2)
      evidence.hazard =
          llvm::formatv("the weight '{0}' is read as {1} tensors through "
                        "Identity nodes (the exporter merged identical "
                        "initializers, e.g. every layer's zero bias), so "
                        "training would tie them",
                        init.name(), identities)
              .str();
  }
  return evidence;
}

std::optional<std::string>
dtc::onnx::findFoldedTiedCopy(const ::onnx::GraphProto &graph) {
  // Inline fp32 matrices, by name: [rows, cols] and their bytes.
  struct Matrix {
    const ::onnx::TensorProto *tensor;
    int64_t rows, cols;
  };
  auto matrixOf = [](const ::onnx::TensorProto &t) -> std::optional<Matrix> {
    if (t.data_type() != ::onnx::TensorProto::FLOAT || t.dims_size() != 2 ||
        t.data_location() == ::onnx::TensorProto::EXTERNAL ||
        t.raw_data().size() != static_cast<size_t>(t.dims(0) * t.dims(1) * 4))
      return std::nullopt;
    return Matrix{&t, t.dims(0), t.dims(1)};
  };
  auto at = [](const Matrix &m, int64_t r, int64_t c) {
    float v;
    std::memcpy(&v, m.tensor->raw_data().data() + (r * m.cols + c) * 4, 4);
    return v;
  };
  std::vector<Matrix> anonymous, named;
  for (const auto &init : graph.initializer())
    if (auto m = matrixOf(init))
      (llvm::StringRef(init.name()).starts_with("onnx::") ? anonymous : named)
          .push_back(*m);
  for (const Matrix &copy : anonymous)
    for (const Matrix &original : named) {
      if (copy.rows != original.cols || copy.cols != original.rows)
        continue;
      bool same = true;
      for (int64_t r = 0; same && r < copy.rows; ++r)
        for (int64_t c = 0; same && c < copy.cols; ++c)
          same = at(copy, r, c) == at(original, c, r);
      if (same)
        return llvm::formatv("the weight '{0}' is '{1}' transposed (the "
                             "exporter folded a tied weight into a second "
                             "tensor), so training would untie them",
                             copy.tensor->name(), original.tensor->name())
            .str();
    }
  return std::nullopt;
}

llvm::Expected<llvm::StringMap<TrainableDecision>>
dtc::onnx::decideTrainable(llvm::ArrayRef<std::string> names,
                           const llvm::StringMap<InitializerOrigin> &origins,
                           const StateDictInfo &stateDict,
                           const llvm::StringSet<> &initializers,
                           const TrainableOverrides &overrides, bool training,
                           const UseEvidence &uses) {
  auto compile =
      [](const std::optional<std::string> &pattern,
         llvm::StringRef flag) -> llvm::Expected<std::optional<llvm::Regex>> {
    if (!pattern)
      return std::nullopt;
    llvm::Regex regex("^(" + *pattern + ")$");
    std::string error;
    if (!regex.isValid(error))
      return badInput("{0} '{1}': not a regular expression: {2}", flag,
                      *pattern, error);
    return std::optional<llvm::Regex>(std::move(regex));
  };
  auto trainable = compile(overrides.trainable, "--trainable");
  if (!trainable)
    return trainable.takeError();
  auto frozen = compile(overrides.frozen, "--frozen");
  if (!frozen)
    return frozen.takeError();

  auto kindOf = [&](llvm::StringRef name) -> llvm::StringRef {
    auto it = origins.find(name);
    return it == origins.end() ? llvm::StringRef() : it->second.kind;
  };
  bool hasSignature = llvm::any_of(
      origins, [](const auto &entry) { return !entry.second.kind.empty(); });
  if (training && !*trainable)
    if (std::optional<std::string> hazard =
            optimizerHazard(origins, stateDict, initializers))
      return badInput(
          "the ONNX optimizer rewrote this export (torch.onnx.export's "
          "default optimize=True): {0}; it folds weights into anonymous "
          "constants and merges identical initializers into one tensor, so "
          "training it would not train the PyTorch model's parameters; "
          "re-export with torch.onnx.export(..., dynamo=True, "
          "optimize=False), or pass --trainable REGEX to choose what dtc "
          "trains",
          *hazard);

  if (training && !*trainable && !hasSignature && uses.hazard)
    return badInput(
        "this export has no graph signature (not torch.onnx.export(..., "
        "dynamo=True)) and {0}: dtc cannot train it as PyTorch would; "
        "re-export with torch.onnx.export(..., dynamo=True, "
        "optimize=False), or pass --trainable REGEX to choose what dtc "
        "trains",
        *uses.hazard);

  llvm::StringMap<TrainableDecision> decisions;
  for (const std::string &name : names) {
    TrainableDecision &d = decisions[name];
    if (*frozen && (*frozen)->match(name)) {
      d = {false, "--frozen"};
    } else if (*trainable) {
      bool match = (*trainable)->match(name);
      d = {match, match ? "--trainable" : "not matched by --trainable"};
    } else if (!hasSignature && !uses.read) {
      d = {true, "float initializer"};
    } else if (!hasSignature) {
      // No signature: decided by use (UseEvidence).
      bool weight = uses.weights.contains(name);
      d = {weight, weight ? "weight by use" : "constant by use"};
    } else if (llvm::StringRef kind = kindOf(name); kind == "PARAMETER") {
      d = {true, "parameter"};
    } else if (!kind.empty()) {
      d = {false, kind.lower()};
    } else {
      d = {false, "exporter constant"};
    }
  }
  return decisions;
}
