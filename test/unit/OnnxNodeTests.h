//===- OnnxNodeTests.h - Walk ONNX backend node tests ----------*- C++ -*-===//
//
// TEST-ONLY, shared by the importer test (numerics through the test
// interpreter: the single-node tests of the ops docs/onnx-ops.md lists as
// lowered) and the conformance test (numerics through the CPU runtime: every
// test directory of Debian's libonnx-testdata), each prepared for import
// (constant operands turned into initializers, old opsets restamped where
// the op's schema is unchanged) and with its test-data files.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_TEST_UNIT_ONNXNODETESTS_H
#define DTC_TEST_UNIT_ONNXNODETESTS_H

#include "frontends/onnx/HostTensor.h"

#include "onnx/onnx_pb.h"

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace dtc::test {

inline const char *const kNodeTestDir = "/usr/share/libonnx-testdata/data/node";

/// Op types docs/onnx-ops.md lists as lowered (not the host-only ones: node
/// tests feed run-time inputs).
inline const std::set<std::string> &claimedOps() {
  static const std::set<std::string> ops = {
      "Abs",
      "Add",
      "And",
      "ArgMax",
      "ArgMin",
      "AveragePool",
      "BatchNormalization",
      "Cast",
      "CastLike",
      "Celu",
      "Clip",
      "Compress",
      "Concat",
      "Conv",
      "CumSum",
      "DepthToSpace",
      "Div",
      "Dropout",
      "Einsum",
      "Elu",
      "Equal",
      "Erf",
      "Exp",
      "Expand",
      "EyeLike",
      "Flatten",
      "Gather",
      "GatherElements",
      "GatherND",
      "Gelu",
      "Gemm",
      "GlobalAveragePool",
      "GlobalMaxPool",
      "Greater",
      "GreaterOrEqual",
      "HardSigmoid",
      "HardSwish",
      "Hardmax",
      "Identity",
      "InstanceNormalization",
      "IsInf",
      "IsNaN",
      "LayerNormalization",
      "LeakyRelu",
      "Less",
      "LessOrEqual",
      "Log",
      "LogSoftmax",
      "MatMul",
      "Max",
      "MaxPool",
      "Mean",
      "MeanVarianceNormalization",
      "Min",
      "Mod",
      "Mul",
      "Neg",
      "NegativeLogLikelihoodLoss",
      "Not",
      "OneHot",
      "Or",
      "PRelu",
      "Pad",
      "Pow",
      "Reciprocal",
      "ReduceL1",
      "ReduceL2",
      "ReduceLogSum",
      "ReduceLogSumExp",
      "ReduceMax",
      "ReduceMean",
      "ReduceMin",
      "ReduceSum",
      "ReduceSumSquare",
      "Relu",
      "Reshape",
      "Selu",
      "Shrink",
      "Sigmoid",
      "Sign",
      "Slice",
      "Softmax",
      "SoftmaxCrossEntropyLoss",
      "Softplus",
      "Softsign",
      "SpaceToDepth",
      "Split",
      "Sqrt",
      "Squeeze",
      "Sub",
      "Sum",
      "Tanh",
      "ThresholdedRelu",
      "Tile",
      "Transpose",
      "Trilu",
      "Unsqueeze",
      "Where",
      "Xor",
  };
  return ops;
}

/// A test-data tensor; old test data stores bfloat16 as its uint16 bits.
inline std::optional<::dtc::onnx::HostTensor>
readNodeTensor(const std::string &path, int32_t modelType) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return std::nullopt;
  ::onnx::TensorProto proto;
  if (!proto.ParseFromArray((*buffer)->getBufferStart(),
                            (*buffer)->getBufferSize()))
    return std::nullopt;
  if (proto.data_type() == ::onnx::TensorProto::UINT16 &&
      modelType == ::onnx::TensorProto::BFLOAT16)
    proto.set_data_type(::onnx::TensorProto::BFLOAT16);
  std::string error;
  return ::dtc::onnx::decodeTensor(proto, "", error);
}

/// Operands dtc needs as constants (shapes, axes, sizes, repeats, pads, a
/// Pow exponent of another type): (op type, input index). Range's and
/// ConstantOfShape's inputs are all such operands.
inline bool isConstantOperand(const std::string &op, int index) {
  static const std::set<std::string> fromFirst = {"Range", "ConstantOfShape"};
  static const std::set<std::string> fromSecond = {"Reshape",
                                                   "Slice",
                                                   "Split",
                                                   "Squeeze",
                                                   "Unsqueeze",
                                                   "Expand",
                                                   "ReduceSum",
                                                   "ReduceMean",
                                                   "ReduceMax",
                                                   "ReduceMin",
                                                   "ReduceProd",
                                                   "ReduceL1",
                                                   "ReduceL2",
                                                   "ReduceLogSum",
                                                   "ReduceLogSumExp",
                                                   "ReduceSumSquare",
                                                   "Pow",
                                                   "CumSum",
                                                   "Tile",
                                                   "Pad",
                                                   "Trilu",
                                                   "TopK",
                                                   "Compress"};
  if (op == "OneHot") // depth; indices and values are data
    return index == 1;
  return (fromFirst.count(op) && index >= 0) ||
         (fromSecond.count(op) && index >= 1);
}

/// The node test with its constant operands (integer and bool graph inputs
/// that a node reads as shapes, axes or masks) turned into initializers
/// holding the test-data values, and, for single-node tests, with only the
/// first output of multi-output ops whose other outputs dtc does not import.
inline ::onnx::ModelProto withConstantOperands(const ::onnx::ModelProto &model,
                                               const std::string &data) {
  ::onnx::ModelProto out = model;
  auto *graph = out.mutable_graph();
  std::set<std::string> constant;
  std::map<std::string, int32_t> types;
  for (const auto &input : graph->input())
    types[input.name()] = input.type().tensor_type().elem_type();
  for (const auto &n : graph->node())
    for (int i = 0; i < n.input_size(); ++i) {
      int32_t type = types.count(n.input(i)) ? types[n.input(i)] : 0;
      bool integral = type == ::onnx::TensorProto::INT64 ||
                      type == ::onnx::TensorProto::INT32 ||
                      type == ::onnx::TensorProto::BOOL;
      // OneHot's depth and Range's operands decide the output's shape
      // whatever their type.
      bool shape = n.op_type() == "OneHot" || n.op_type() == "Range";
      if ((integral || shape) && isConstantOperand(n.op_type(), i))
        constant.insert(n.input(i));
    }
  google::protobuf::RepeatedPtrField<::onnx::ValueInfoProto> inputs;
  int index = 0;
  for (const auto &input : graph->input()) {
    std::string pb = data + "/input_" + std::to_string(index++) + ".pb";
    if (!constant.count(input.name())) {
      *inputs.Add() = input;
      continue;
    }
    auto buffer = llvm::MemoryBuffer::getFile(pb);
    ::onnx::TensorProto *init = graph->add_initializer();
    if (buffer)
      init->ParseFromArray((*buffer)->getBufferStart(),
                           (*buffer)->getBufferSize());
    init->set_name(input.name());
  }
  graph->mutable_input()->Swap(&inputs);
  const std::string &op = graph->node(0).op_type();
  if (graph->node_size() == 1 &&
      (op == "LayerNormalization" || op == "Dropout"))
    while (graph->output_size() > 1)
      graph->mutable_output()->RemoveLast();
  return out;
}

/// One node test, ready to import.
struct NodeTest {
  std::string name;   // "test_add_bcast"
  std::string opType; // "Add"
  std::string dataDir;
  /// The file to import: the shipped model, or a rewritten temporary copy.
  std::string modelPath;
  ::onnx::ModelProto shipped, model;
  /// Set for tests that are known differences, not bugs: the reason.
  std::string skipReason;

  /// The test-data files feeding the imported function's arguments, in
  /// order (the remaining graph inputs; files are numbered by the shipped
  /// inputs), each with the ONNX element type the model declares.
  std::vector<std::pair<std::string, int32_t>> argumentFiles() const {
    std::vector<std::pair<std::string, int32_t>> files;
    for (const auto &input : model.graph().input())
      for (int i = 0; i < shipped.graph().input_size(); ++i)
        if (shipped.graph().input(i).name() == input.name())
          files.emplace_back(dataDir + "/input_" + std::to_string(i) + ".pb",
                             input.type().tensor_type().elem_type());
    return files;
  }
  /// The expected output files with their declared element types.
  std::vector<std::pair<std::string, int32_t>> outputFiles() const {
    std::vector<std::pair<std::string, int32_t>> files;
    for (int i = 0; i < model.graph().output_size(); ++i)
      files.emplace_back(
          dataDir + "/output_" + std::to_string(i) + ".pb",
          model.graph().output(i).type().tensor_type().elem_type());
    return files;
  }
};

inline ::onnx::ModelProto readModelFile(const std::string &path) {
  ::onnx::ModelProto model;
  std::ifstream in(path, std::ios::binary);
  model.ParseFromIstream(&in);
  return model;
}

/// The op a test exercises: its node's type, or for a multi-node graph
/// (`*_expanded`: the function body of an op in primitive ops) that op's
/// type with an `_expanded` suffix.
inline std::string testedOp(const std::string &dir,
                            const ::onnx::ModelProto &model) {
  if (model.graph().node_size() == 1)
    return model.graph().node(0).op_type();
  llvm::StringRef name(dir);
  if (name.consume_back("_expanded")) {
    ::onnx::ModelProto single = readModelFile(name.str() + "/model.onnx");
    if (single.graph().node_size() == 1)
      return single.graph().node(0).op_type() + "_expanded";
  }
  return "(graph)";
}

/// Calls `fn` in name order for every single-node test of a claimed op, or
/// with `everyTest` for every test directory (every op, and the multi-node
/// `_expanded` function-body tests). Returns false when the test data is
/// not installed.
inline bool forEachNodeTest(llvm::function_ref<void(const NodeTest &)> fn,
                            bool everyTest = false) {
  if (!llvm::sys::fs::is_directory(kNodeTestDir))
    return false;
  std::error_code ec;
  std::vector<std::string> dirs;
  for (llvm::sys::fs::directory_iterator it(kNodeTestDir, ec), end;
       it != end && !ec; it.increment(ec))
    dirs.push_back(it->path());
  std::sort(dirs.begin(), dirs.end());
  for (const std::string &dir : dirs) {
    NodeTest t;
    t.modelPath = dir + "/model.onnx";
    if (!llvm::sys::fs::exists(t.modelPath))
      continue;
    t.shipped = readModelFile(t.modelPath);
    if (t.shipped.graph().node_size() == 0)
      continue;
    const auto &n = t.shipped.graph().node(0);
    bool single = t.shipped.graph().node_size() == 1;
    if (!everyTest &&
        (!single || !n.domain().empty() || !claimedOps().count(n.op_type())))
      continue;
    t.opType = testedOp(dir, t.shipped);
    t.name = llvm::sys::path::filename(dir).str();
    t.dataDir = dir + "/test_data_set_0";
    t.model = withConstantOperands(t.shipped, t.dataDir);
    // Ops whose schema (attributes, inputs, outputs, semantics) is unchanged
    // from the test's opset up to 13, checked against the ONNX changelog and
    // onnx.defs.get_schema: Conv and AveragePool since 11, MaxPool since 12,
    // GlobalAveragePool/GlobalMaxPool since 1, the comparisons, logic ops,
    // IsNaN/IsInf, Clip and Where since the version below; the activations
    // Softplus/Softsign (1), Elu/Selu/HardSigmoid/InstanceNormalization (6),
    // Shrink (9), ThresholdedRelu (10), Celu (12); Range (11) and
    // ConstantOfShape (9); Einsum (12); Compress and OneHot (11); EyeLike
    // (9). DepthToSpace 13 and Pow 13 only add
    // bfloat16. Later versions only add types or, AveragePool 19,
    // dilations. Their tests are restamped to opset 13, dtc's oldest.
    static const std::map<std::string, int64_t> unchangedSince = {
        {"Conv", 11},
        {"GlobalAveragePool", 1},
        {"GlobalMaxPool", 1},
        {"MaxPool", 12},
        {"AveragePool", 11},
        {"And", 7},
        {"Or", 7},
        {"Xor", 7},
        {"Not", 1},
        {"Equal", 11},
        {"Less", 9},
        {"Greater", 9},
        {"LessOrEqual", 12},
        {"GreaterOrEqual", 12},
        {"IsNaN", 9},
        {"IsInf", 10},
        {"Clip", 11},
        {"Where", 9},
        {"Softplus", 1},
        {"Softsign", 1},
        {"Elu", 6},
        {"Selu", 6},
        {"HardSigmoid", 6},
        {"InstanceNormalization", 6},
        {"Shrink", 9},
        {"ThresholdedRelu", 10},
        {"Celu", 12},
        {"Range", 11},
        {"ConstantOfShape", 9},
        {"Einsum", 12},
        {"DepthToSpace", 11},
        {"Pow", 12},
        {"Compress", 11},
        {"EyeLike", 9},
        {"OneHot", 11}};
    std::string temporary; // the rewritten model, removed after the test
    bool restamped = false;
    if (auto it = unchangedSince.find(t.opType);
        single && it != unchangedSince.end())
      for (auto &opset : *t.model.mutable_opset_import())
        if ((opset.domain().empty() || opset.domain() == "ai.onnx") &&
            opset.version() >= it->second && opset.version() < 13) {
          opset.set_version(13);
          t.model.set_ir_version(std::max<int64_t>(t.model.ir_version(), 7));
          restamped = true;
        }
    if (restamped ||
        t.model.graph().input_size() != t.shipped.graph().input_size() ||
        t.model.graph().output_size() != t.shipped.graph().output_size()) {
      llvm::SmallString<128> path;
      if (!llvm::sys::fs::createTemporaryFile("dtc-node-test", "onnx", path)) {
        std::ofstream out(path.c_str(), std::ios::binary);
        t.model.SerializeToOstream(&out);
        t.modelPath = path.str().str();
        temporary = t.modelPath;
      }
    }
    // Known differences, not bugs: the bfloat16 test data was made by
    // truncating (dtc rounds to nearest), and dtc.embedding needs
    // non-negative run-time indices (docs/onnx-ops.md).
    if (t.name.find("BFLOAT16") != std::string::npos)
      t.skipReason = "bfloat16 test data made by truncation";
    else if (t.name == "test_gather_negative_indices")
      t.skipReason = "negative run-time gather indices";
    fn(t);
    if (!temporary.empty())
      llvm::sys::fs::remove(temporary);
  }
  return true;
}

} // namespace dtc::test

#endif // DTC_TEST_UNIT_ONNXNODETESTS_H
