//===- TrainableSetTest.cpp - which initializers train -------------------===//
//
// The rules of frontends/onnx/TrainableSet.h on hand-written evidence, as
// torch.onnx.export writes it (value_info metadata_props, ONNX IR 10: read
// from the unknown fields of this ONNX library's protobuf). The expected
// decisions are PyTorch's: parameters train, buffers and exporter
// constants do not.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/TrainableSet.h"

#include "llvm/Support/Error.h"

#include <gtest/gtest.h>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

using namespace dtc::onnx;

namespace {

/// Appends a metadata_props entry (field `field`) to `message`'s unknown
/// fields, as a newer ONNX writes it.
void addMetadata(google::protobuf::Message &message, int field,
                 const std::string &key, const std::string &value) {
  ::onnx::StringStringEntryProto entry;
  entry.set_key(key);
  entry.set_value(value);
  message.GetReflection()->MutableUnknownFields(&message)->AddLengthDelimited(
      field, entry.SerializeAsString());
}

const char *kKind = "pkg.torch.export.graph_signature.InputSpec.kind";

::onnx::GraphProto
graphWith(std::vector<std::pair<std::string, std::string>> tagged,
          std::vector<std::pair<std::string, std::string>> folded = {}) {
  ::onnx::GraphProto graph;
  for (const auto &[name, kind] : tagged) {
    graph.add_initializer()->set_name(name);
    auto *info = graph.add_value_info();
    info->set_name(name);
    addMetadata(*info, 4, kKind, kind);
  }
  for (const auto &[name, from] : folded) {
    graph.add_initializer()->set_name(name);
    auto *info = graph.add_value_info();
    info->set_name(name);
    addMetadata(*info, 4, "pkg.onnxscript.optimizer.folded_from", from);
  }
  return graph;
}

llvm::StringSet<> initializersOf(const ::onnx::GraphProto &graph) {
  llvm::StringSet<> names;
  for (const auto &init : graph.initializer())
    names.insert(init.name());
  return names;
}

} // namespace

TEST(TrainableSet, ParametersTrainBuffersDoNot) {
  auto graph =
      graphWith({{"fc.weight", "PARAMETER"}, {"rope.inv_freq", "BUFFER"}}, {});
  graph.add_initializer()->set_name("val_3"); // an exporter constant
  auto origins = readInitializerOrigins(graph);
  EXPECT_EQ(origins.lookup("fc.weight").kind, "PARAMETER");
  EXPECT_EQ(origins.lookup("rope.inv_freq").kind, "BUFFER");
  auto decisions = decideTrainable(
      {"fc.weight", "rope.inv_freq", "val_3"}, origins, StateDictInfo(),
      initializersOf(graph), {}, true, UseEvidence());
  ASSERT_TRUE(static_cast<bool>(decisions))
      << llvm::toString(decisions.takeError());
  EXPECT_TRUE(decisions->lookup("fc.weight").trained);
  EXPECT_FALSE(decisions->lookup("rope.inv_freq").trained);
  EXPECT_EQ(decisions->lookup("rope.inv_freq").reason, "buffer");
  EXPECT_FALSE(decisions->lookup("val_3").trained);
}

TEST(TrainableSet, WithoutSignatureEveryFloatInitializerTrains) {
  ::onnx::GraphProto graph;
  graph.add_initializer()->set_name("w");
  auto decisions =
      decideTrainable({"w"}, readInitializerOrigins(graph), StateDictInfo(),
                      initializersOf(graph), {}, true, UseEvidence());
  ASSERT_TRUE(static_cast<bool>(decisions));
  EXPECT_TRUE(decisions->lookup("w").trained);
}

TEST(TrainableSet, OptimizedExportIsRefusedForTrainingOnly) {
  auto graph =
      graphWith({{"ln.weight", "PARAMETER"}}, {{"val_2", "['fc.weight']"}});
  addMetadata(*graph.mutable_value_info(0), 4, kKind, "PARAMETER");
  auto origins = readInitializerOrigins(graph);
  origins["fc.weight"].kind = "PARAMETER"; // its tag, folded away
  EXPECT_EQ(origins.lookup("val_2").foldedFrom,
            std::vector<std::string>{"fc.weight"});
  auto refused = decideTrainable({"ln.weight", "val_2"}, origins,
                                 StateDictInfo(), initializersOf(graph), {},
                                 /*training=*/true, UseEvidence());
  ASSERT_FALSE(static_cast<bool>(refused));
  std::string message = llvm::toString(refused.takeError());
  EXPECT_NE(message.find("it folded 'fc.weight' into 'val_2'"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("optimize=False"), std::string::npos) << message;
  // Inference does not train: the same graph is accepted.
  auto serving = decideTrainable({"ln.weight", "val_2"}, origins,
                                 StateDictInfo(), initializersOf(graph), {},
                                 /*training=*/false, UseEvidence());
  EXPECT_TRUE(static_cast<bool>(serving));
  // --trainable names what trains: the user's choice, not a guess.
  TrainableOverrides overrides;
  overrides.trainable = "ln\\..*";
  auto chosen =
      decideTrainable({"ln.weight", "val_2"}, origins, StateDictInfo(),
                      initializersOf(graph), overrides, true, UseEvidence());
  ASSERT_TRUE(static_cast<bool>(chosen));
  EXPECT_TRUE(chosen->lookup("ln.weight").trained);
  EXPECT_FALSE(chosen->lookup("val_2").trained);
}

TEST(TrainableSet, FrozenWinsAndPatternsMatchWholeNames) {
  auto graph = graphWith({{"h.0.w", "PARAMETER"}, {"h.10.w", "PARAMETER"}});
  TrainableOverrides overrides;
  overrides.frozen = "h\\.1.*"; // matches h.10.w whole, not h.0.w
  auto decisions = decideTrainable(
      {"h.0.w", "h.10.w"}, readInitializerOrigins(graph), StateDictInfo(),
      initializersOf(graph), overrides, true, UseEvidence());
  ASSERT_TRUE(static_cast<bool>(decisions));
  EXPECT_TRUE(decisions->lookup("h.0.w").trained);
  EXPECT_FALSE(decisions->lookup("h.10.w").trained);
  overrides.frozen = "w"; // a part of a name is not the name
  decisions =
      decideTrainable({"h.0.w"}, readInitializerOrigins(graph), StateDictInfo(),
                      initializersOf(graph), overrides, true, UseEvidence());
  ASSERT_TRUE(static_cast<bool>(decisions));
  EXPECT_TRUE(decisions->lookup("h.0.w").trained);
}

TEST(TrainableSet, StateDictAndTiedAliasFromTheSignature) {
  ::onnx::GraphProto graph;
  graph.add_initializer()->set_name("lm_head.weight");
  graph.add_initializer()->set_name("mask");
  addMetadata(graph, 16, "pkg.torch.export.ExportedProgram.graph_signature",
              "\n# inputs\n"
              "p_wte_weight: PARAMETER target='wte.weight'\n"
              "p_lm_head_weight: PARAMETER target='lm_head.weight'\n"
              "b_mask: BUFFER target='mask' persistent=True\n"
              "b_cache: BUFFER target='cache' persistent=False\n"
              "idx: USER_INPUT\n\n# outputs\nlinear: USER_OUTPUT\n");
  // The embedding lookup of module `wte` reads lm_head.weight: the tie.
  auto *gather = graph.add_node();
  gather->set_op_type("Gather");
  gather->add_input("lm_head.weight");
  gather->add_input("idx");
  addMetadata(*gather, 9, "pkg.torch.onnx.name_scopes",
              "['', 'wte', 'embedding']");
  StateDictInfo info = readStateDict(graph);
  EXPECT_EQ(info.keys,
            (std::vector<std::string>{"wte.weight", "lm_head.weight", "mask"}));
  EXPECT_EQ(info.parameters,
            (std::vector<std::string>{"wte.weight", "lm_head.weight"}));
  EXPECT_EQ(info.aliasOf.lookup("wte.weight"), "lm_head.weight");
  EXPECT_EQ(info.aliasOf.size(), 1u);
}

namespace {

/// A float initializer of `dims` in `graph`.
void addFloat(::onnx::GraphProto &graph, const std::string &name,
              std::vector<int64_t> dims) {
  auto *init = graph.add_initializer();
  init->set_name(name);
  init->set_data_type(::onnx::TensorProto::FLOAT);
  for (int64_t d : dims)
    init->add_dims(d);
}

void addNode(::onnx::GraphProto &graph, const std::string &op,
             std::vector<std::string> inputs, const std::string &output) {
  auto *node = graph.add_node();
  node->set_op_type(op);
  for (const std::string &input : inputs)
    node->add_input(input);
  node->add_output(output);
}

} // namespace

// Without a graph signature (TorchScript), what a tensor is read as
// decides: a matmul operand (even an anonymous folded one), an embedding
// table, a normalization's scale, a rank-1 bias train; a mask, batch
// norm's running statistics and a position table read by nothing else do
// not (PyTorch's buffers).
TEST(TrainableSet, WithoutSignatureTheUseDecides) {
  ::onnx::GraphProto graph;
  addFloat(graph, "wte", {16, 8});
  addFloat(graph, "onnx::MatMul_7", {8, 8});
  addFloat(graph, "fc.bias", {8});
  addFloat(graph, "ln.weight", {8});
  addFloat(graph, "mask", {1, 1, 4, 4});
  addFloat(graph, "bn.running_mean", {8});
  addFloat(graph, "bn.weight", {8});
  addNode(graph, "Gather", {"wte", "ids"}, "x");
  addNode(graph, "Transpose", {"onnx::MatMul_7"}, "wt");
  addNode(graph, "MatMul", {"x", "wt"}, "y");
  addNode(graph, "Add", {"y", "fc.bias"}, "z");
  addNode(graph, "LayerNormalization", {"z", "ln.weight"}, "n");
  addNode(graph, "Add", {"scores", "mask"}, "masked");
  addNode(graph, "BatchNormalization",
          {"c", "bn.weight", "bias", "bn.running_mean", "var"}, "b");
  UseEvidence uses = readUseEvidence(graph);
  EXPECT_FALSE(uses.hazard);
  auto decisions =
      decideTrainable({"wte", "onnx::MatMul_7", "fc.bias", "ln.weight", "mask",
                       "bn.running_mean", "bn.weight"},
                      readInitializerOrigins(graph), StateDictInfo(),
                      initializersOf(graph), {}, /*training=*/true, uses);
  ASSERT_TRUE(static_cast<bool>(decisions))
      << llvm::toString(decisions.takeError());
  for (const char *trained :
       {"wte", "onnx::MatMul_7", "fc.bias", "ln.weight", "bn.weight"})
    EXPECT_TRUE(decisions->lookup(trained).trained) << trained;
  for (const char *frozen : {"mask", "bn.running_mean"}) {
    EXPECT_FALSE(decisions->lookup(frozen).trained) << frozen;
    EXPECT_EQ(decisions->lookup(frozen).reason, "constant by use");
  }
}

// One initializer read as several tensors through Identity nodes is the
// exporter merging identical initializers (every layer's zero bias):
// training would tie the layers, so it is refused, naming it, unless
// --trainable says what to train; inference is unaffected.
TEST(TrainableSet, MergedInitializersAreRefusedForTraining) {
  ::onnx::GraphProto graph;
  addFloat(graph, "h.0.bias", {8});
  addNode(graph, "Identity", {"h.0.bias"}, "h.1.bias");
  addNode(graph, "Identity", {"h.0.bias"}, "h.2.bias");
  addNode(graph, "Add", {"x", "h.0.bias"}, "y");
  UseEvidence uses = readUseEvidence(graph);
  ASSERT_TRUE(uses.hazard);
  auto refused = decideTrainable({"h.0.bias"}, readInitializerOrigins(graph),
                                 StateDictInfo(), initializersOf(graph), {},
                                 /*training=*/true, uses);
  ASSERT_FALSE(static_cast<bool>(refused));
  EXPECT_EQ(llvm::toString(refused.takeError()),
            "this export has no graph signature (not torch.onnx.export(..., "
            "dynamo=True)) and the weight 'h.0.bias' is read as 2 tensors "
            "through Identity nodes (the exporter merged identical "
            "initializers, e.g. every layer's zero bias), so training would "
            "tie them: dtc cannot train it as PyTorch would; re-export with "
            "torch.onnx.export(..., dynamo=True, optimize=False), or pass "
            "--trainable REGEX to choose what dtc trains");
  EXPECT_TRUE(static_cast<bool>(
      decideTrainable({"h.0.bias"}, readInitializerOrigins(graph),
                      StateDictInfo(), initializersOf(graph), {},
                      /*training=*/false, uses)));
}

// TorchScript's constant folding can turn a tied LM head into a transposed
// copy of the embedding, named `onnx::MatMul_N`: training the two would
// untie them, so the copy is named as a hazard. A copy that differs (an
// untied head of the same shape) is not.
TEST(TrainableSet, AFoldedCopyOfATiedWeightIsFound) {
  auto matrix = [](::onnx::GraphProto &graph, const std::string &name,
                   int64_t rows, int64_t cols, auto value) {
    auto *init = graph.add_initializer();
    init->set_name(name);
    init->set_data_type(::onnx::TensorProto::FLOAT);
    init->add_dims(rows);
    init->add_dims(cols);
    std::vector<float> data;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        data.push_back(value(r, c));
    init->set_raw_data(data.data(), data.size() * sizeof(float));
  };
  ::onnx::GraphProto tied;
  matrix(tied, "wte.weight", 3, 2,
         [](int64_t r, int64_t c) { return static_cast<float>(r * 10 + c); });
  matrix(tied, "onnx::MatMul_7", 2, 3,
         [](int64_t r, int64_t c) { return static_cast<float>(c * 10 + r); });
  EXPECT_EQ(findFoldedTiedCopy(tied).value_or(""),
            "the weight 'onnx::MatMul_7' is 'wte.weight' transposed (the "
            "exporter folded a tied weight into a second tensor), so "
            "training would untie them");

  ::onnx::GraphProto untied;
  matrix(untied, "wte.weight", 3, 2,
         [](int64_t r, int64_t c) { return static_cast<float>(r * 10 + c); });
  matrix(untied, "onnx::MatMul_7", 2, 3, [](int64_t r, int64_t c) {
    return static_cast<float>(c * 10 + r + (r == 1 && c == 2));
  });
  EXPECT_FALSE(findFoldedTiedCopy(untied));
}
