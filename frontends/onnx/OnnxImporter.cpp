//===- OnnxImporter.cpp - ONNX -> dtc dialect -----------------------------===//
//
// Import runs in stages:
//   1. parse the file and check the opset and every node's op;
//   2. bind each dynamic input dim (by name, batch, sequence or the model's
//      maximum positions) and let the ONNX checker and shape inference
//      validate the now static graph;
//   3. walk the nodes in order. A node whose inputs are all known on the host
//      (constants, integer initializers, shapes) is evaluated there, so the
//      exported shape arithmetic and masks disappear; any other node becomes
//      dtc ops whose types the ops infer;
//   4. drop dead ops and raise idioms (Raise*.cpp).
//
// ONNX's own library throws; this file is compiled with -fexceptions and
// turns every exception into a ::dtc::badInput error where it is caught.
//
//===----------------------------------------------------------------------===//

#include "frontends/onnx/OnnxImporter.h"

#include "compiler/support/Error.h"
#include "dialects/dtc/DtcDialect.h"
#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/OnnxUtils.h"
#include "frontends/onnx/Raise.h"

#include "onnx/checker.h"
#include "onnx/common/constants.h"
#include "onnx/defs/parser.h"
#include "onnx/defs/schema.h"
#include "onnx/onnx_pb.h"
#include "onnx/shape_inference/implementation.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <map>
#include <memory>

using namespace mlir;
using namespace ::dtc::onnx;
namespace d = mlir::dtc;
using llvm::Error;
using llvm::Expected;

namespace {

/// Default-domain opsets the importer accepts.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 23;

/// Ops lowered to dtc ops (on top of those evaluated on the host).
const llvm::StringSet<> &loweredOps() {
  // clang-format off
  static const llvm::StringSet<> ops = {
      "Abs", "Add", "Cast", "CastLike", "Concat", "Constant", "Div", "Dropout",
      "Erf", "Exp", "Expand", "Flatten", "Gather", "Gelu", "Gemm", "Identity",
      "LayerNormalization", "Log", "MatMul", "Max", "Min", "Mul", "Neg", "Pow",
      "Reciprocal", "ReduceMax", "ReduceMean", "ReduceSum", "Relu", "Reshape",
      "Shape", "Sigmoid", "Size", "Slice", "Softmax", "Split", "Sqrt",
      "Squeeze", "Sub", "Sum", "Tanh", "Transpose", "Unsqueeze", "Where",
  };
  // clang-format on
  return ops;
}

bool isSupportedOp(llvm::StringRef opType) {
  return loweredOps().contains(opType) || canEvaluateOnHost(opType);
}

/// One ONNX value during import: known on the host, or a dtc value (graph
/// input, parameter, op result, or a materialized constant), or both.
struct Entry {
  /// Shared: repeated subgraphs (a causal mask per layer) share one result.
  std::shared_ptr<const HostTensor> known;
  Value value;
  int32_t dataType = kUndefined;
  llvm::SmallVector<int64_t, 4> shape;
};

int32_t dataTypeOf(Type elementType) {
  if (elementType.isF32())
    return kFloat;
  if (elementType.isF16())
    return kFloat16;
  if (elementType.isBF16())
    return kBfloat16;
  if (elementType.isF64())
    return kDouble;
  if (elementType.isInteger(64))
    return kInt64;
  if (elementType.isInteger(32))
    return kInt32;
  if (elementType.isInteger(8))
    return kInt8;
  if (elementType.isInteger(1))
    return kBool;
  return kUndefined;
}

/// Makes a protobuf/ONNX message one line.
std::string oneLine(llvm::StringRef text) {
  std::string out;
  for (char c : text.trim()) {
    if (c == '\n') {
      if (!out.empty() && out.back() != ' ')
        out += "; ";
      continue;
    }
    out += c;
  }
  return out;
}

class ModelImporter {
public:
  ModelImporter(llvm::StringRef path, const ImportOptions &options,
                MLIRContext &ctx)
      : path(path.str()), options(options), ctx(ctx), builder(&ctx) {}

  Expected<OwningOpRef<ModuleOp>> run();

private:
  // Stages.
  Error load();
  Error checkOpsetsAndOps();
  Error bindInputs();
  Error runOnnxChecks();
  Error importGraph(ModuleOp module);

  std::optional<int64_t> deduceMaxPositions(std::string &source);

  // Errors.
  template <typename... Ts> Error fileError(const char *fmt, Ts &&...args) {
    return ::dtc::badInput("{0}: {1}", path,
                           llvm::formatv(fmt, std::forward<Ts>(args)...).str());
  }
  template <typename... Ts> Error nodeError(const char *fmt, Ts &&...args) {
    if (!node)
      return fileError(fmt, std::forward<Ts>(args)...);
    return ::dtc::badInput("{0}: node '{1}' ({2}): {3}", path, nodeName(*node),
                           node->op_type(),
                           llvm::formatv(fmt, std::forward<Ts>(args)...).str());
  }

  // Values.
  Expected<Entry *> lookup(const std::string &name);
  Error define(const std::string &name, Entry entry);
  Error defineValue(int index, Value value);
  Error defineKnown(int index, HostTensor tensor);
  Error defineKnown(int index, std::shared_ptr<const HostTensor> tensor);
  /// The memo key of evaluating the current node on `args`, or "" when the
  /// node is not worth memoizing.
  std::string memoKey(llvm::ArrayRef<Entry *> args);
  Expected<Value> valueOf(Entry &entry);
  Expected<Value> constant(const HostTensor &tensor);
  /// The int64 values of a known input, or an error naming the input.
  Expected<std::vector<int64_t>> knownInts(int index, llvm::StringRef what);
  Location loc() const { return nodeLoc; }
  Location locFor(llvm::StringRef name) {
    return NameLoc::get(StringAttr::get(&ctx, name), fileLoc);
  }

  // Building ops: infer the result type of `op` (created with a placeholder
  // type where it has InferTypeOpInterface) and verify it; on failure the op
  // is erased and the verifier's message names the node.
  Expected<Value> finish(Operation *op);
  Type placeholder() { return NoneType::get(&ctx); }
  Expected<Value> reshape(Value input, llvm::ArrayRef<int64_t> shape);
  Expected<Value> expandTo(Value input, llvm::ArrayRef<int64_t> shape);
  Expected<Value> sliceAxis(Value input, int64_t axis, int64_t start,
                            int64_t count, int64_t step = 1);

  // Nodes.
  Error importNode();
  Error lowerNode(llvm::ArrayRef<Entry *> ins);
  Error lowerBinary(llvm::ArrayRef<Entry *> ins);
  Error lowerUnary(llvm::ArrayRef<Entry *> ins);
  Error lowerMatMul(llvm::ArrayRef<Entry *> ins);
  Error lowerGemm(llvm::ArrayRef<Entry *> ins);
  Error lowerLayerNorm(llvm::ArrayRef<Entry *> ins);
  Error lowerReshapeLike(llvm::ArrayRef<Entry *> ins);
  Error lowerConcat(llvm::ArrayRef<Entry *> ins);
  Error lowerSlice(llvm::ArrayRef<Entry *> ins);
  Error lowerSplit(llvm::ArrayRef<Entry *> ins);
  Error lowerGather(llvm::ArrayRef<Entry *> ins);
  Error lowerWhere(llvm::ArrayRef<Entry *> ins);
  Error lowerReduce(llvm::ArrayRef<Entry *> ins);
  Error lowerExpand(llvm::ArrayRef<Entry *> ins);
  Error lowerCast(llvm::ArrayRef<Entry *> ins, int32_t to);
  Error checkUnusedOutputs(int from);
  Expected<HostTensor> decodeConstantNode();

  std::string path, baseDir;
  const ImportOptions &options;
  MLIRContext &ctx;
  OpBuilder builder;
  ::onnx::ModelProto model;
  int64_t opset = 0;

  /// Shapes of the graph inputs after binding, by name.
  llvm::StringMap<llvm::SmallVector<int64_t, 4>> inputShapes;
  llvm::StringMap<int64_t> boundDims;
  /// Static shapes from ONNX shape inference, by value name.
  llvm::StringMap<llvm::SmallVector<int64_t, 4>> inferredShapes;
  /// How many times each value is read (node inputs and graph outputs).
  llvm::StringMap<int> useCounts;

  llvm::StringMap<Entry> values;
  /// Host evaluations by memoKey: exporters repeat shape arithmetic and the
  /// causal mask in every layer; each is computed once.
  std::map<std::string, llvm::SmallVector<std::shared_ptr<const HostTensor>>>
      hostMemo;
  llvm::DenseMap<const HostTensor *, Value> materialized;
  llvm::StringMap<const ::onnx::TensorProto *> lazyInitializers;
  const ::onnx::NodeProto *node = nullptr;
  Location fileLoc = UnknownLoc::get(&ctx);
  Location nodeLoc = UnknownLoc::get(&ctx);
};

} // namespace

//===----------------------------------------------------------------------===//
// Loading and checking
//===----------------------------------------------------------------------===//

Error ModelImporter::load() {
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    if (buffer.getError() == std::errc::no_such_file_or_directory)
      return fileError("no such file");
    return fileError("cannot read the file: {0}", buffer.getError().message());
  }
  baseDir = llvm::sys::path::parent_path(path).str();
  llvm::StringRef bytes = (*buffer)->getBuffer();

  // The ONNX text format (onnx.printer / onnx.parser) for small hand-written
  // models, mainly tests.
  if (llvm::sys::path::extension(path) == ".onnxtxt") {
    std::string text = bytes.str();
    std::string problem;
    try {
      ::onnx::OnnxParser parser(text.c_str());
      auto status = parser.Parse(model);
      if (!status.IsOK())
        problem = status.ErrorMessage();
    } catch (const std::exception &e) {
      problem = e.what(); // e.g. a number std::stof rejects
    }
    if (!problem.empty())
      return fileError("not a valid ONNX text model: {0}", oneLine(problem));
  } else if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
             !model.ParseFromArray(bytes.data(),
                                   static_cast<int>(bytes.size()))) {
    return fileError("not an ONNX model: the file is not a ModelProto "
                     "protobuf (models over 2 GB must keep their weights "
                     "in external data)");
  }
  // Protobuf accepts many byte strings as *some* message; a model has a
  // graph with outputs and imports an opset.
  if (!model.has_graph() || model.graph().output_size() == 0 ||
      model.opset_import_size() == 0)
    return fileError("not an ONNX model: it has no graph, graph outputs or "
                     "opset imports");
  fileLoc = FileLineColLoc::get(&ctx, path, 0, 0);
  return Error::success();
}

Error ModelImporter::checkOpsetsAndOps() {
  std::optional<int64_t> version;
  for (const auto &import : model.opset_import())
    if (isDefaultDomain(import.domain()))
      version = import.version();
  if (!version)
    return fileError("the model imports no opset of the default ONNX domain; "
                     "dtc supports opsets {0} to {1}",
                     kMinOpset, kMaxOpset);
  if (*version < kMinOpset || *version > kMaxOpset)
    return fileError("ONNX opset {0} is not supported; dtc supports opsets "
                     "{1} to {2} of the default domain (re-export, e.g. "
                     "torch.onnx.export(..., opset_version=17))",
                     *version, kMinOpset, kMaxOpset);
  opset = *version;

  for (const auto &n : model.graph().node()) {
    node = &n;
    if (!isDefaultDomain(n.domain()))
      return ::dtc::badInput(
          "{0}: node '{1}' ({2}): unsupported ONNX op domain '{3}'; supported "
          "ops are listed in docs/onnx-ops.md",
          path, nodeName(n), n.domain() + "::" + n.op_type(), n.domain());
    if (!isSupportedOp(n.op_type()))
      return nodeError("unsupported ONNX op; supported ops are listed in "
                       "docs/onnx-ops.md");
    for (const auto &attr : n.attribute())
      if (attr.type() == ::onnx::AttributeProto::GRAPH ||
          attr.type() == ::onnx::AttributeProto::GRAPHS)
        return nodeError("subgraphs (control flow) are not supported");
  }
  node = nullptr;
  return Error::success();
}

/// The model's maximum sequence length where the graph shows it: the rows
/// of a rank-2 table gathered with Range (learned positions) or with an
/// input named like position ids, or a metadata entry.
std::optional<int64_t> ModelImporter::deduceMaxPositions(std::string &source) {
  const auto &graph = model.graph();
  llvm::StringMap<const ::onnx::TensorProto *> floatTables;
  for (const auto &init : graph.initializer())
    if (isFloatType(init.data_type()) && init.dims_size() == 2)
      floatTables[init.name()] = &init;
  llvm::StringMap<const ::onnx::NodeProto *> producers;
  for (const auto &n : graph.node())
    for (const auto &out : n.output())
      producers[out] = &n;
  llvm::StringSet<> graphInputs;
  for (const auto &input : graph.input())
    graphInputs.insert(input.name());

  // Follows index arithmetic that keeps the Range's bound back to its source.
  auto comesFromRange = [&](std::string name) {
    for (int depth = 0; depth < 8; ++depth) {
      auto it = producers.find(name);
      if (it == producers.end())
        return false;
      const auto &p = *it->second;
      if (p.op_type() == "Range")
        return true;
      if (p.op_type() != "Cast" && p.op_type() != "Unsqueeze" &&
          p.op_type() != "Reshape" && p.op_type() != "Expand" &&
          p.op_type() != "Identity")
        return false;
      name = p.input(0);
    }
    return false;
  };

  std::optional<int64_t> best;
  auto consider = [&](int64_t rows, std::string why) {
    if (!best || rows < *best) {
      best = rows;
      source = std::move(why);
    }
  };
  for (const auto &n : graph.node()) {
    if (n.op_type() != "Gather" || n.input_size() < 2 ||
        getIntAttr(n, "axis", 0) != 0)
      continue;
    auto table = floatTables.find(n.input(0));
    if (table == floatTables.end())
      continue;
    llvm::StringRef ids = n.input(1);
    bool isPositions = comesFromRange(ids.str()) ||
                       (graphInputs.contains(ids) &&
                        ids.lower().find("position") != std::string::npos);
    if (isPositions)
      consider(table->second->dims(0), "rows of '" + n.input(0) + "'");
  }
  for (const auto &prop : model.metadata_props()) {
    llvm::StringRef key = prop.key();
    int64_t value;
    if ((key == "max_position_embeddings" || key == "n_positions" ||
         key == "max_seq_len") &&
        !llvm::StringRef(prop.value()).getAsInteger(10, value) && value > 0)
      consider(value, "metadata '" + key.str() + "'");
  }
  return best;
}

Error ModelImporter::bindInputs() {
  const auto &graph = model.graph();
  llvm::StringSet<> initializers;
  for (const auto &init : graph.initializer())
    initializers.insert(init.name());

  std::string positionsSource;
  std::optional<int64_t> maxPositions = deduceMaxPositions(positionsSource);
  if (options.seqLen && maxPositions && *options.seqLen > *maxPositions)
    return fileError("--seq-len {0} exceeds the model's maximum of {1} "
                     "positions ({2})",
                     *options.seqLen, *maxPositions, positionsSource);
  if (options.batch && *options.batch < 1)
    return fileError("the batch size must be >= 1, got {0}", *options.batch);
  if (options.seqLen && *options.seqLen < 1)
    return fileError("--seq-len must be >= 1, got {0}", *options.seqLen);
  for (auto [name, size] : options.dimParams)
    if (size < 1)
      return fileError("dim '{0}' is bound to {1}; sizes must be >= 1", name,
                       size);

  struct Pending {
    std::string input, param;
    size_t dim;
  };
  std::vector<Pending> pending;
  auto bindName = [&](const std::string &param, int64_t size,
                      const std::string &input) -> Error {
    if (param.empty())
      return Error::success();
    auto [it, inserted] = boundDims.try_emplace(param, size);
    if (!inserted && it->second != size)
      return fileError("dynamic dim '{0}' is bound to both {1} and {2} (at "
                       "input '{3}'); bind it by name",
                       param, it->second, size, input);
    return Error::success();
  };

  for (const auto &input : graph.input()) {
    if (initializers.contains(input.name()))
      continue; // IR < 4 lists initializers as inputs too
    if (!input.type().has_tensor_type())
      return fileError("input '{0}' is not a tensor", input.name());
    const auto &tensorType = input.type().tensor_type();
    if (!tensorType.has_shape())
      return fileError("input '{0}' has no shape; re-export it with a shape",
                       input.name());
    int32_t dataType = tensorType.elem_type();
    if (!toElementType(dataType, ctx))
      return fileError("input '{0}' has element type {1}, which dtc does not "
                       "support",
                       input.name(), dataTypeName(dataType));
    auto &shape = inputShapes[input.name()];
    for (const auto &[i, dim] : llvm::enumerate(tensorType.shape().dim())) {
      if (dim.has_dim_value() && dim.dim_value() >= 0) {
        shape.push_back(dim.dim_value());
        continue;
      }
      const std::string &param = dim.dim_param();
      std::optional<int64_t> size;
      if (auto it = options.dimParams.find(param);
          !param.empty() && it != options.dimParams.end())
        size = it->second;
      else if (i == 0)
        size = options.batch.value_or(1);
      else if (i == 1 && isIntegerType(dataType)) {
        size = options.seqLen ? options.seqLen : maxPositions;
        if (!size)
          return fileError("dynamic dim '{0}' of input '{1}' is unbound; pass "
                           "--seq-len",
                           param.empty() ? "seq" : param, input.name());
      }
      if (size) {
        if (Error err = bindName(param, *size, input.name()))
          return err;
      } else {
        pending.push_back({input.name(), param, i});
      }
      shape.push_back(size.value_or(-1));
    }
  }
  // Other dims can still share a name with a bound one.
  for (const Pending &p : pending) {
    auto it = boundDims.find(p.param);
    if (p.param.empty() || it == boundDims.end())
      return fileError("dynamic dim {0} of input '{1}' is unbound; only the "
                       "batch (dim 0) and sequence (dim 1 of integer inputs) "
                       "dims are bound automatically",
                       p.param.empty() ? std::to_string(p.dim)
                                       : "'" + p.param + "'",
                       p.input);
    inputShapes[p.input][p.dim] = it->second;
  }

  // Write the bindings into the model, for the ONNX checks.
  auto *mutableGraph = model.mutable_graph();
  for (auto &input : *mutableGraph->mutable_input()) {
    auto it = inputShapes.find(input.name());
    if (it == inputShapes.end())
      continue;
    auto *shape = input.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (auto [dim, size] : llvm::zip(*shape->mutable_dim(), it->second))
      dim.set_dim_value(size);
  }
  for (auto &output : *mutableGraph->mutable_output()) {
    if (!output.type().has_tensor_type() ||
        !output.type().tensor_type().has_shape())
      continue;
    auto *shape = output.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (auto &dim : *shape->mutable_dim())
      if (dim.has_dim_param())
        if (auto it = boundDims.find(dim.dim_param()); it != boundDims.end())
          dim.set_dim_value(it->second);
  }
  return Error::success();
}

Error ModelImporter::runOnnxChecks() {
  // The ONNX library here knows opsets and IR versions up to its release;
  // newer models are still imported, checked by dtc's own rules only.
  const auto &versions =
      ::onnx::OpSchemaRegistry::DomainToVersionRange::Instance().Map();
  auto known = versions.find(::onnx::ONNX_DOMAIN);
  if (known == versions.end() || opset > known->second.second ||
      model.ir_version() > ::onnx::IR_VERSION)
    return Error::success();
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception &e) {
    return fileError("the ONNX checker rejects the model: {0}",
                     oneLine(e.what()));
  }
  // Not strict: a node ONNX cannot infer is reported by dtc's own shape
  // rules below, with the node's name.
  try {
    ::onnx::ShapeInferenceOptions inferOptions(/*check_type=*/true,
                                               /*strict_mode=*/0,
                                               /*data_prop=*/true);
    ::onnx::shape_inference::InferShapes(
        model, ::onnx::OpSchemaRegistry::Instance(), inferOptions);
  } catch (const std::exception &e) {
    return fileError("ONNX shape inference fails with the bound dims: {0}",
                     oneLine(e.what()));
  }
  for (const auto &info : model.graph().value_info()) {
    if (!info.type().has_tensor_type() ||
        !info.type().tensor_type().has_shape())
      continue;
    llvm::SmallVector<int64_t, 4> shape;
    bool isStatic = true;
    for (const auto &dim : info.type().tensor_type().shape().dim()) {
      isStatic &= dim.has_dim_value();
      shape.push_back(dim.dim_value());
    }
    if (isStatic)
      inferredShapes[info.name()] = shape;
  }
  return Error::success();
}

//===----------------------------------------------------------------------===//
// Values
//===----------------------------------------------------------------------===//

Expected<Entry *> ModelImporter::lookup(const std::string &name) {
  auto it = values.find(name);
  if (it != values.end())
    return &it->second;
  // Integer initializers are decoded when first read.
  auto lazy = lazyInitializers.find(name);
  if (lazy != lazyInitializers.end()) {
    std::string error;
    std::optional<HostTensor> tensor =
        decodeTensor(*lazy->second, baseDir, error);
    if (!tensor)
      return fileError("initializer '{0}': {1}", name, error);
    Entry entry;
    entry.dataType = tensor->dataType;
    entry.shape = tensor->shape;
    entry.known = std::make_shared<const HostTensor>(std::move(*tensor));
    return &values.try_emplace(name, std::move(entry)).first->second;
  }
  return nodeError("input '{0}' is not defined by an earlier node, an "
                   "initializer or a graph input (is the graph sorted?)",
                   name);
}

Error ModelImporter::define(const std::string &name, Entry entry) {
  if (name.empty())
    return Error::success(); // an omitted optional output
  // Cross-check against ONNX shape inference: a mismatch is an importer bug
  // or a model whose shapes only work dynamically.
  auto inferred = inferredShapes.find(name);
  if (inferred != inferredShapes.end() &&
      llvm::ArrayRef<int64_t>(inferred->second) !=
          llvm::ArrayRef<int64_t>(entry.shape))
    return nodeError("output '{0}' has shape {1} here but {2} by ONNX shape "
                     "inference",
                     name, shapeString(entry.shape),
                     shapeString(inferred->second));
  if (!values.try_emplace(name, std::move(entry)).second)
    return nodeError("output '{0}' is defined twice", name);
  return Error::success();
}

Error ModelImporter::defineValue(int index, Value value) {
  auto type = cast<RankedTensorType>(value.getType());
  Entry entry;
  entry.value = value;
  entry.dataType = dataTypeOf(type.getElementType());
  entry.shape.assign(type.getShape().begin(), type.getShape().end());
  return define(node->output(index), std::move(entry));
}

Error ModelImporter::defineKnown(int index, HostTensor tensor) {
  return defineKnown(index,
                     std::make_shared<const HostTensor>(std::move(tensor)));
}

Error ModelImporter::defineKnown(int index,
                                 std::shared_ptr<const HostTensor> tensor) {
  Entry entry;
  entry.dataType = tensor->dataType;
  entry.shape = tensor->shape;
  entry.known = std::move(tensor);
  return define(node->output(index), std::move(entry));
}

Expected<Value> ModelImporter::constant(const HostTensor &tensor) {
  if (!toElementType(tensor.dataType, ctx))
    return nodeError("a constant of element type {0} cannot be used by dtc "
                     "ops",
                     dataTypeName(tensor.dataType));
  return finish(
      d::ConstantOp::create(builder, loc(), toElementsAttr(tensor, ctx)));
}

Expected<Value> ModelImporter::valueOf(Entry &entry) {
  if (!entry.value) {
    // Constants are materialized once, where first needed; values shared
    // by several entries (memoized host results) share the constant.
    Value &cached = materialized[entry.known.get()];
    if (!cached) {
      auto value = constant(*entry.known);
      if (!value)
        return value.takeError();
      cached = *value;
    }
    entry.value = cached;
  }
  return entry.value;
}

Expected<std::vector<int64_t>> ModelImporter::knownInts(int index,
                                                        llvm::StringRef what) {
  auto entry = lookup(node->input(index));
  if (!entry)
    return entry.takeError();
  if (!(*entry)->known)
    return nodeError("the {0} '{1}' is computed at run time; dtc needs it to "
                     "be a constant (after binding the dynamic dims)",
                     what, node->input(index));
  if ((*entry)->known->isFloat())
    return nodeError("the {0} '{1}' must be an integer tensor", what,
                     node->input(index));
  return (*entry)->known->ints;
}

Expected<Value> ModelImporter::finish(Operation *op) {
  std::string message;
  bool ok;
  {
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      if (message.empty())
        message = diag.str();
      return success();
    });
    ok = true;
    if (auto infer = dyn_cast<InferTypeOpInterface>(op)) {
      llvm::SmallVector<Type, 1> types;
      ok = succeeded(infer.inferReturnTypes(
          &ctx, op->getLoc(), op->getOperands(), op->getAttrDictionary(),
          op->getPropertiesStorage(), op->getRegions(), types));
      if (ok)
        op->getResult(0).setType(types.front());
    }
    ok = ok && succeeded(verify(op, /*verifyRecursively=*/false));
  }
  if (ok)
    return op->getResult(0);
  std::string name = op->getName().getStringRef().str();
  op->erase();
  return nodeError("cannot build {0}: {1}", name, message);
}

Expected<Value> ModelImporter::reshape(Value input,
                                       llvm::ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(input.getType());
  if (type.getShape() == shape)
    return input;
  return finish(d::ReshapeOp::create(builder, loc(), type.clone(shape), input));
}

Expected<Value> ModelImporter::expandTo(Value input,
                                        llvm::ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(input.getType());
  if (type.getShape() == shape)
    return input;
  // Only new leading/size-1 dims: the elements stay in place.
  if (type.getNumElements() == numElements(shape))
    return reshape(input, shape);
  // dtc has no broadcast op; adding a splat zero of the target shape
  // broadcasts through the elementwise rule (sharding follows the result).
  HostTensor zeros =
      HostTensor::zeros(dataTypeOf(type.getElementType()), shape);
  auto zero = constant(zeros);
  if (!zero)
    return zero.takeError();
  return finish(d::AddOp::create(builder, loc(), placeholder(), input, *zero));
}

Expected<Value> ModelImporter::sliceAxis(Value input, int64_t axis,
                                         int64_t start, int64_t count,
                                         int64_t step) {
  auto type = cast<RankedTensorType>(input.getType());
  llvm::SmallVector<int64_t> starts(type.getRank(), 0), limits(type.getShape()),
      strides(type.getRank(), 1);
  starts[axis] = start;
  limits[axis] = count > 0 ? start + (count - 1) * step + 1 : start;
  strides[axis] = step;
  return finish(d::SliceOp::create(builder, loc(), placeholder(), input, starts,
                                   limits, strides));
}

//===----------------------------------------------------------------------===//
// Nodes
//===----------------------------------------------------------------------===//

Expected<HostTensor> ModelImporter::decodeConstantNode() {
  std::string error;
  for (const auto &attr : node->attribute()) {
    llvm::StringRef name = attr.name();
    if (name == "value") {
      std::optional<HostTensor> t = decodeTensor(attr.t(), baseDir, error);
      if (!t)
        return nodeError("{0}", error);
      return *t;
    }
    if (name == "value_float" || name == "value_floats") {
      HostTensor t;
      t.dataType = kFloat;
      if (name == "value_float") {
        t.floats = {attr.f()};
      } else {
        t.floats.assign(attr.floats().begin(), attr.floats().end());
        t.shape = {static_cast<int64_t>(t.floats.size())};
      }
      return t;
    }
    if (name == "value_int")
      return HostTensor::fromInts({attr.i()}, llvm::ArrayRef<int64_t>{});
    if (name == "value_ints")
      return HostTensor::fromInts(
          llvm::SmallVector<int64_t>(attr.ints().begin(), attr.ints().end()));
  }
  return nodeError("only dense numeric constants (value, value_float(s), "
                   "value_int(s)) are supported");
}

Error ModelImporter::checkUnusedOutputs(int from) {
  for (int i = from; i < node->output_size(); ++i)
    if (!node->output(i).empty() && useCounts.lookup(node->output(i)))
      return nodeError("output {0} ('{1}') is used, but dtc only imports "
                       "the first {2} output(s) of this op",
                       i, node->output(i), from);
  return Error::success();
}

std::string ModelImporter::memoKey(llvm::ArrayRef<Entry *> args) {
  // Small inputs by content, large ones by identity: large host values are
  // results of (memoized) evaluations, so equal ones are the same object.
  // The memo keeps every result alive, so addresses are never reused.
  constexpr int64_t kByContent = 4096;
  std::string key =
      node->op_type() + '\0' + std::to_string(node->output_size()) + '\0';
  for (const auto &attr : node->attribute())
    key += attr.SerializeAsString() + '\0';
  llvm::raw_string_ostream os(key);
  for (Entry *e : args) {
    if (!e) {
      os << "-;";
      continue;
    }
    const HostTensor &t = *e->known;
    os << t.dataType << shapeString(t.shape);
    if (t.size() > kByContent) {
      os << '@' << static_cast<const void *>(&t) << ';';
      continue;
    }
    for (int64_t i = 0, n = t.size(); i < n; ++i) {
      if (t.isFloat())
        os << llvm::bit_cast<uint64_t>(t.floats[i]) << ',';
      else
        os << t.ints[i] << ',';
    }
    os << ';';
  }
  return key;
}

Error ModelImporter::importNode() {
  nodeLoc = locFor(nodeName(*node));
  llvm::StringRef op = node->op_type();

  if (op == "Constant") {
    auto tensor = decodeConstantNode();
    if (!tensor)
      return tensor.takeError();
    return defineKnown(0, std::move(*tensor));
  }

  llvm::SmallVector<Entry *> ins;
  for (const std::string &name : node->input()) {
    if (name.empty()) {
      ins.push_back(nullptr);
      continue;
    }
    auto entry = lookup(name);
    if (!entry)
      return entry.takeError();
    ins.push_back(*entry);
  }

  // Shape and Size read only the (static) shape of their input.
  if ((op == "Shape" || op == "Size") && !ins.empty() && ins[0]) {
    HostTensor shapeOnly;
    shapeOnly.dataType = ins[0]->dataType;
    shapeOnly.shape = ins[0]->shape;
    const HostTensor *args[] = {&shapeOnly};
    std::string error;
    auto results = evaluateNode(*node, args, error);
    if (!results)
      return nodeError("{0}", error);
    return defineKnown(0, std::move((*results)[0]));
  }

  bool allKnown = llvm::all_of(ins, [](Entry *e) { return !e || e->known; });
  if (allKnown && !ins.empty() && canEvaluateOnHost(op)) {
    std::string key = memoKey(ins);
    auto memo = hostMemo.find(key);
    if (memo == hostMemo.end()) {
      llvm::SmallVector<const HostTensor *> args;
      for (Entry *e : ins)
        args.push_back(e ? e->known.get() : nullptr);
      std::string error;
      auto results = evaluateNode(*node, args, error);
      if (!results)
        return nodeError("{0}", error);
      if (static_cast<int>(results->size()) < node->output_size())
        return nodeError("produces {0} outputs, expected {1}", results->size(),
                         node->output_size());
      llvm::SmallVector<std::shared_ptr<const HostTensor>> shared;
      for (HostTensor &result : *results)
        shared.push_back(std::make_shared<const HostTensor>(std::move(result)));
      memo = hostMemo.try_emplace(key, std::move(shared)).first;
    }
    for (auto [i, result] : llvm::enumerate(memo->second))
      if (Error err = defineKnown(i, result))
        return err;
    return Error::success();
  }
  return lowerNode(ins);
}

Error ModelImporter::lowerNode(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  if (ins.empty() || !ins[0])
    return nodeError("its first input is missing");
  auto alias = [&](Entry *e) -> Error {
    Entry copy = *e;
    return define(node->output(0), std::move(copy));
  };

  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" ||
      op == "Max" || op == "Min" || op == "Sum")
    return lowerBinary(ins);
  if (op == "Neg" || op == "Exp" || op == "Log" || op == "Sqrt" ||
      op == "Reciprocal" || op == "Tanh" || op == "Erf" || op == "Sigmoid" ||
      op == "Relu" || op == "Abs" || op == "Gelu")
    return lowerUnary(ins);
  if (op == "MatMul")
    return lowerMatMul(ins);
  if (op == "Gemm")
    return lowerGemm(ins);
  if (op == "Softmax") {
    auto input = valueOf(*ins[0]);
    if (!input)
      return input.takeError();
    std::string error;
    auto axis = normalizeAxis(getIntAttr(*node, "axis", -1),
                              ins[0]->shape.size(), error);
    if (!axis)
      return nodeError("{0}", error);
    auto result = finish(
        d::SoftmaxOp::create(builder, loc(), input->getType(), *input, *axis));
    if (!result)
      return result.takeError();
    return defineValue(0, *result);
  }
  if (op == "LayerNormalization")
    return lowerLayerNorm(ins);
  if (op == "Reshape" || op == "Flatten" || op == "Unsqueeze" ||
      op == "Squeeze")
    return lowerReshapeLike(ins);
  if (op == "Transpose") {
    auto input = valueOf(*ins[0]);
    if (!input)
      return input.takeError();
    llvm::SmallVector<int64_t> perm;
    if (auto attr = getIntsAttr(*node, "perm"))
      perm = *attr;
    else
      for (int64_t i = ins[0]->shape.size() - 1; i >= 0; --i)
        perm.push_back(i);
    auto result = finish(
        d::TransposeOp::create(builder, loc(), placeholder(), *input, perm));
    if (!result)
      return result.takeError();
    return defineValue(0, *result);
  }
  if (op == "Concat")
    return lowerConcat(ins);
  if (op == "Slice")
    return lowerSlice(ins);
  if (op == "Split")
    return lowerSplit(ins);
  if (op == "Gather")
    return lowerGather(ins);
  if (op == "Where")
    return lowerWhere(ins);
  if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax")
    return lowerReduce(ins);
  if (op == "Expand")
    return lowerExpand(ins);
  if (op == "Cast")
    return lowerCast(ins, getIntAttr(*node, "to", kUndefined));
  if (op == "CastLike") {
    if (ins.size() < 2 || !ins[1])
      return nodeError("needs a target_type input");
    return lowerCast(ins, ins[1]->dataType);
  }
  if (op == "Identity")
    return alias(ins[0]);
  if (op == "Dropout") {
    if (ins.size() > 2 && ins[2] &&
        (!ins[2]->known || ins[2]->known->getInt(0) != 0))
      return nodeError("training_mode must be a constant false; dtc imports "
                       "the inference graph and adds training itself");
    if (Error err = checkUnusedOutputs(1))
      return err;
    return alias(ins[0]);
  }

  // The rest are evaluated on the host only.
  for (auto [i, e] : llvm::enumerate(ins))
    if (e && !e->known)
      return nodeError("input '{0}' is computed at run time, but dtc "
                       "evaluates {1} only on constants (shape arithmetic "
                       "and masks)",
                       node->input(i), op);
  return nodeError("unsupported ONNX op; supported ops are listed in "
                   "docs/onnx-ops.md");
}

Error ModelImporter::lowerBinary(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  if (op != "Max" && op != "Min" && op != "Sum" && ins.size() != 2)
    return nodeError("needs two inputs");
  // Pow's exponent may have another type: convert a constant one on the host.
  if (op == "Pow" && ins[1] && ins[0]->dataType != ins[1]->dataType) {
    if (!ins[1]->known)
      return nodeError("the exponent's type {0} differs from the base's {1}",
                       dataTypeName(ins[1]->dataType),
                       dataTypeName(ins[0]->dataType));
    HostTensor converted =
        HostTensor::zeros(ins[0]->dataType, ins[1]->known->shape);
    for (int64_t i = 0, e = converted.size(); i < e; ++i)
      converted.set(i, ins[1]->known->getDouble(i));
    auto exponent = constant(converted);
    if (!exponent)
      return exponent.takeError();
    auto base = valueOf(*ins[0]);
    if (!base)
      return base.takeError();
    auto result = finish(
        d::PowOp::create(builder, loc(), placeholder(), *base, *exponent));
    if (!result)
      return result.takeError();
    return defineValue(0, *result);
  }

  auto acc = valueOf(*ins[0]);
  if (!acc)
    return acc.takeError();
  Value result = *acc;
  for (Entry *e : ins.drop_front()) {
    if (!e)
      return nodeError("an input is missing");
    if (e->dataType != ins[0]->dataType)
      return nodeError("input types differ: {0} and {1}",
                       dataTypeName(ins[0]->dataType),
                       dataTypeName(e->dataType));
    auto rhs = valueOf(*e);
    if (!rhs)
      return rhs.takeError();
    Operation *created;
    if (op == "Add" || op == "Sum")
      created = d::AddOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Sub")
      created = d::SubOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Mul")
      created = d::MulOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Div")
      created = d::DivOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Pow")
      created = d::PowOp::create(builder, loc(), placeholder(), result, *rhs);
    else if (op == "Max")
      created = d::MaxOp::create(builder, loc(), placeholder(), result, *rhs);
    else
      created = d::MinOp::create(builder, loc(), placeholder(), result, *rhs);
    auto value = finish(created);
    if (!value)
      return value.takeError();
    result = *value;
  }
  return defineValue(0, result);
}

Error ModelImporter::lowerUnary(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  if (!isFloatType(ins[0]->dataType))
    return nodeError("needs a floating-point input, got {0}",
                     dataTypeName(ins[0]->dataType));
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  Type type = input->getType();
  Location l = loc();
  Operation *created;
  if (op == "Neg")
    created = d::NegOp::create(builder, l, type, *input);
  else if (op == "Exp")
    created = d::ExpOp::create(builder, l, type, *input);
  else if (op == "Log")
    created = d::LogOp::create(builder, l, type, *input);
  else if (op == "Sqrt")
    created = d::SqrtOp::create(builder, l, type, *input);
  else if (op == "Reciprocal")
    created = d::ReciprocalOp::create(builder, l, type, *input);
  else if (op == "Tanh")
    created = d::TanhOp::create(builder, l, type, *input);
  else if (op == "Erf")
    created = d::ErfOp::create(builder, l, type, *input);
  else if (op == "Sigmoid")
    created = d::SigmoidOp::create(builder, l, type, *input);
  else if (op == "Relu")
    created = d::ReluOp::create(builder, l, type, *input);
  else if (op == "Abs")
    created = d::AbsOp::create(builder, l, type, *input);
  else {
    std::string approximate = getStringAttr(*node, "approximate", "none");
    if (approximate != "none" && approximate != "tanh")
      return nodeError("unknown approximate='{0}'", approximate);
    created =
        d::GeluOp::create(builder, l, type, *input, approximate == "tanh");
  }
  auto result = finish(created);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerMatMul(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs two inputs");
  if (!isFloatType(ins[0]->dataType) || ins[0]->dataType != ins[1]->dataType)
    return nodeError("needs floating-point inputs of one type, got {0} and "
                     "{1}",
                     dataTypeName(ins[0]->dataType),
                     dataTypeName(ins[1]->dataType));
  auto lhs = valueOf(*ins[0]);
  if (!lhs)
    return lhs.takeError();
  auto rhs = valueOf(*ins[1]);
  if (!rhs)
    return rhs.takeError();
  // numpy matmul: a 1-D lhs is a row [1, k], a 1-D rhs a column [k, 1];
  // the added dim is dropped from the result.
  int64_t lhsRank = ins[0]->shape.size(), rhsRank = ins[1]->shape.size();
  if (lhsRank == 0 || rhsRank == 0)
    return nodeError("inputs must have rank >= 1");
  Value a = *lhs, b = *rhs;
  if (lhsRank == 1) {
    auto r = reshape(a, {1, ins[0]->shape[0]});
    if (!r)
      return r.takeError();
    a = *r;
  }
  if (rhsRank == 1) {
    auto r = reshape(b, {ins[1]->shape[0], 1});
    if (!r)
      return r.takeError();
    b = *r;
  }
  auto product = finish(
      d::MatmulOp::create(builder, loc(), placeholder(), a, b, false, false));
  if (!product)
    return product.takeError();
  Value result = *product;
  if (lhsRank == 1 || rhsRank == 1) {
    llvm::SmallVector<int64_t> shape(
        cast<RankedTensorType>(result.getType()).getShape());
    if (rhsRank == 1)
      shape.pop_back();
    if (lhsRank == 1)
      shape.erase(shape.end() - (rhsRank == 1 ? 1 : 2));
    auto r = reshape(result, shape);
    if (!r)
      return r.takeError();
    result = *r;
  }
  return defineValue(0, result);
}

Error ModelImporter::lowerGemm(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs inputs A and B");
  if (!isFloatType(ins[0]->dataType))
    return nodeError("needs floating-point inputs, got {0}",
                     dataTypeName(ins[0]->dataType));
  if (ins[0]->shape.size() != 2 || ins[1]->shape.size() != 2)
    return nodeError("A and B must be matrices, got {0} and {1}",
                     shapeString(ins[0]->shape), shapeString(ins[1]->shape));
  auto a = valueOf(*ins[0]);
  if (!a)
    return a.takeError();
  auto b = valueOf(*ins[1]);
  if (!b)
    return b.takeError();
  auto product =
      finish(d::MatmulOp::create(builder, loc(), placeholder(), *a, *b,
                                 getIntAttr(*node, "transA", 0) != 0,
                                 getIntAttr(*node, "transB", 0) != 0));
  if (!product)
    return product.takeError();
  Value result = *product;
  int32_t type = ins[0]->dataType;
  auto scalar = [&](double v) {
    HostTensor t = HostTensor::zeros(type, {});
    t.set(0, v);
    return constant(t);
  };
  double alpha = getFloatAttr(*node, "alpha", 1.0f);
  double beta = getFloatAttr(*node, "beta", 1.0f);
  if (alpha != 1.0) {
    auto c = scalar(alpha);
    if (!c)
      return c.takeError();
    auto scaled =
        finish(d::MulOp::create(builder, loc(), placeholder(), result, *c));
    if (!scaled)
      return scaled.takeError();
    result = *scaled;
  }
  if (ins.size() > 2 && ins[2] && beta != 0.0) {
    Value c;
    if (ins[2]->known && beta != 1.0) {
      HostTensor scaled = *ins[2]->known;
      for (int64_t i = 0, e = scaled.size(); i < e; ++i)
        scaled.set(i, scaled.getDouble(i) * beta);
      auto v = constant(scaled);
      if (!v)
        return v.takeError();
      c = *v;
    } else {
      auto v = valueOf(*ins[2]);
      if (!v)
        return v.takeError();
      c = *v;
      if (beta != 1.0) {
        auto b = scalar(beta);
        if (!b)
          return b.takeError();
        auto scaledC =
            finish(d::MulOp::create(builder, loc(), placeholder(), c, *b));
        if (!scaledC)
          return scaledC.takeError();
        c = *scaledC;
      }
    }
    auto sum =
        finish(d::AddOp::create(builder, loc(), placeholder(), result, c));
    if (!sum)
      return sum.takeError();
    result = *sum;
  }
  return defineValue(0, result);
}

Error ModelImporter::lowerLayerNorm(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs a scale input");
  if (Error err = checkUnusedOutputs(1))
    return err;
  std::string error;
  int64_t rank = ins[0]->shape.size();
  auto axis = normalizeAxis(getIntAttr(*node, "axis", -1), rank, error);
  if (!axis)
    return nodeError("{0}", error);
  llvm::ArrayRef<int64_t> normalized =
      llvm::ArrayRef<int64_t>(ins[0]->shape).drop_front(*axis);
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  // dtc wants scale and bias in the normalized shape; ONNX lets them
  // broadcast. Same element count: reshape; a real broadcast: expand.
  auto affine = [&](Entry *e) -> Expected<Value> {
    auto v = valueOf(*e);
    if (!v)
      return v;
    return expandTo(*v, normalized);
  };
  auto scale = affine(ins[1]);
  if (!scale)
    return scale.takeError();
  Value bias;
  if (ins.size() > 2 && ins[2]) {
    auto b = affine(ins[2]);
    if (!b)
      return b.takeError();
    bias = *b;
  }
  double epsilon = getFloatAttr(*node, "epsilon", 1e-5f);
  auto result = finish(d::LayerNormOp::create(builder, loc(), placeholder(),
                                              *input, *scale, bias, *axis,
                                              llvm::APFloat(epsilon)));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerReshapeLike(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  std::string error;
  llvm::ArrayRef<int64_t> inShape = ins[0]->shape;
  std::optional<llvm::SmallVector<int64_t>> shape;
  if (op == "Reshape") {
    if (ins.size() < 2 || !ins[1])
      return nodeError("needs a shape input");
    auto target = knownInts(1, "target shape");
    if (!target)
      return target.takeError();
    shape = resolveReshape(inShape, *target,
                           getIntAttr(*node, "allowzero", 0) != 0, error);
  } else if (op == "Flatten") {
    int64_t rank = inShape.size();
    std::optional<int64_t> axis = getIntAttr(*node, "axis", 1);
    if (*axis != rank)
      axis = normalizeAxis(*axis, rank, error);
    if (axis)
      shape =
          llvm::SmallVector<int64_t>{numElements(inShape.take_front(*axis)),
                                     numElements(inShape.drop_front(*axis))};
  } else {
    std::vector<int64_t> axes;
    if (ins.size() > 1 && ins[1]) {
      auto known = knownInts(1, "axes");
      if (!known)
        return known.takeError();
      axes = *known;
    } else if (op == "Unsqueeze") {
      return nodeError("needs an axes input");
    }
    shape = op == "Unsqueeze" ? unsqueezeShape(inShape, axes, error)
                              : squeezeShape(inShape, axes, error);
  }
  if (!shape)
    return nodeError("{0}", error);
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  auto result = reshape(*input, *shape);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerConcat(llvm::ArrayRef<Entry *> ins) {
  std::string error;
  auto axis =
      normalizeAxis(getIntAttr(*node, "axis", 0), ins[0]->shape.size(), error);
  if (!axis)
    return nodeError("{0}", error);
  llvm::SmallVector<Value> parts;
  for (Entry *e : ins) {
    if (!e)
      continue;
    // Exporters concatenate empty tensors; they contribute nothing.
    if (numElements(e->shape) == 0 && ins.size() > 1)
      continue;
    auto v = valueOf(*e);
    if (!v)
      return v.takeError();
    parts.push_back(*v);
  }
  if (parts.size() == 1)
    return defineValue(0, parts.front());
  auto result =
      finish(d::ConcatOp::create(builder, loc(), placeholder(), parts, *axis));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerSlice(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 3 || !ins[1] || !ins[2])
    return nodeError("needs starts and ends inputs");
  auto starts = knownInts(1, "starts");
  if (!starts)
    return starts.takeError();
  auto ends = knownInts(2, "ends");
  if (!ends)
    return ends.takeError();
  std::vector<int64_t> axes, steps;
  if (ins.size() > 3 && ins[3]) {
    auto known = knownInts(3, "axes");
    if (!known)
      return known.takeError();
    axes = *known;
  }
  if (ins.size() > 4 && ins[4]) {
    auto known = knownInts(4, "steps");
    if (!known)
      return known.takeError();
    steps = *known;
  }
  std::string error;
  auto dims = resolveSlice(ins[0]->shape, *starts, *ends, axes, steps, error);
  if (!dims)
    return nodeError("{0}", error);
  llvm::SmallVector<int64_t> limits;
  for (auto [start, step, count] :
       llvm::zip(dims->starts, dims->steps, dims->counts)) {
    if (step < 0)
      return nodeError("negative steps (reversing a dim) are not supported");
    limits.push_back(count > 0 ? start + (count - 1) * step + 1 : start);
  }
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  auto result = finish(d::SliceOp::create(builder, loc(), placeholder(), *input,
                                          dims->starts, limits, dims->steps));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerSplit(llvm::ArrayRef<Entry *> ins) {
  std::string error;
  auto axis =
      normalizeAxis(getIntAttr(*node, "axis", 0), ins[0]->shape.size(), error);
  if (!axis)
    return nodeError("{0}", error);
  std::vector<int64_t> given;
  std::optional<llvm::ArrayRef<int64_t>> sizesArg;
  if (ins.size() > 1 && ins[1]) {
    auto known = knownInts(1, "split sizes");
    if (!known)
      return known.takeError();
    given = *known;
    sizesArg = given;
  }
  auto sizes =
      resolveSplit(ins[0]->shape[*axis], sizesArg, node->output_size(),
                   findAttribute(*node, "num_outputs") != nullptr, error);
  if (!sizes)
    return nodeError("{0}", error);
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  int64_t offset = 0;
  for (auto [i, size] : llvm::enumerate(*sizes)) {
    auto part = sliceAxis(*input, *axis, offset, size);
    if (!part)
      return part.takeError();
    offset += size;
    if (Error err = defineValue(i, *part))
      return err;
  }
  return Error::success();
}

Error ModelImporter::lowerGather(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs data and indices inputs");
  Entry &data = *ins[0], &indices = *ins[1];
  if (!isIntegerType(indices.dataType) || indices.dataType == kBool)
    return nodeError("indices must be integers, got {0}",
                     dataTypeName(indices.dataType));
  std::string error;
  int64_t rank = data.shape.size();
  auto axis = normalizeAxis(getIntAttr(*node, "axis", 0), rank, error);
  if (!axis)
    return nodeError("{0}", error);
  int64_t rows = data.shape[*axis];
  llvm::SmallVector<int64_t> outShape(data.shape.begin(),
                                      data.shape.begin() + *axis);
  llvm::append_range(outShape, indices.shape);
  outShape.append(data.shape.begin() + *axis + 1, data.shape.end());

  Value ids;
  if (indices.known) {
    std::vector<int64_t> idx = indices.known->ints;
    for (int64_t &i : idx) {
      if (i < -rows || i >= rows)
        return nodeError("index {0} is out of range for dim {1} of size {2} "
                         "(is --seq-len larger than the model supports?)",
                         i, *axis, rows);
      if (i < 0)
        i += rows;
    }
    // Consecutive constant indices (positions 0..seq-1 into a position
    // table, a last-token pick) are a slice: an affine access sharding and
    // the cost model understand, with no ids tensor.
    bool consecutive = !idx.empty();
    for (size_t i = 1; i < idx.size(); ++i)
      consecutive &= idx[i] == idx[i - 1] + 1;
    if (consecutive) {
      auto input = valueOf(data);
      if (!input)
        return input.takeError();
      auto part = sliceAxis(*input, *axis, idx.front(), idx.size());
      if (!part)
        return part.takeError();
      auto result = reshape(*part, outShape);
      if (!result)
        return result.takeError();
      return defineValue(0, *result);
    }
    auto c = constant(HostTensor::fromInts(idx, indices.shape));
    if (!c)
      return c.takeError();
    ids = *c;
  } else {
    auto v = valueOf(indices);
    if (!v)
      return v.takeError();
    ids = *v;
    if (indices.dataType != kInt64 && indices.dataType != kInt32) {
      auto cast = finish(d::CastOp::create(builder, loc(), placeholder(), ids,
                                           builder.getI64Type()));
      if (!cast)
        return cast.takeError();
      ids = *cast;
    }
  }

  // A row lookup: dtc.embedding, with the gathered axis moved to the front
  // and the others flattened into the row when the data is not [rows, d].
  if (!isFloatType(data.dataType))
    return nodeError("gathering from {0} data with run-time indices is not "
                     "supported; dtc looks up rows of floating-point tables",
                     dataTypeName(data.dataType));
  auto table = valueOf(data);
  if (!table)
    return table.takeError();
  Value t = *table;
  llvm::SmallVector<int64_t> rest;
  for (int64_t d = 0; d < rank; ++d)
    if (d != *axis)
      rest.push_back(data.shape[d]);
  if (*axis != 0) {
    llvm::SmallVector<int64_t> perm = {*axis};
    for (int64_t d = 0; d < rank; ++d)
      if (d != *axis)
        perm.push_back(d);
    auto moved =
        finish(d::TransposeOp::create(builder, loc(), placeholder(), t, perm));
    if (!moved)
      return moved.takeError();
    t = *moved;
  }
  if (rank != 2) {
    auto flat = reshape(t, {rows, numElements(rest)});
    if (!flat)
      return flat.takeError();
    t = *flat;
  }
  auto looked =
      finish(d::EmbeddingOp::create(builder, loc(), placeholder(), t, ids));
  if (!looked)
    return looked.takeError();
  Value result = *looked;
  // [ids..., rest...] -> [data[:axis], ids..., data[axis+1:]].
  llvm::SmallVector<int64_t> unflat(indices.shape.begin(), indices.shape.end());
  llvm::append_range(unflat, rest);
  auto r = reshape(result, unflat);
  if (!r)
    return r.takeError();
  result = *r;
  if (*axis != 0) {
    int64_t idsRank = indices.shape.size();
    llvm::SmallVector<int64_t> perm;
    for (int64_t d = 0; d < *axis; ++d)
      perm.push_back(idsRank + d);
    for (int64_t d = 0; d < idsRank; ++d)
      perm.push_back(d);
    for (int64_t d = idsRank + *axis; d < idsRank + rank - 1; ++d)
      perm.push_back(d);
    auto moved = finish(
        d::TransposeOp::create(builder, loc(), placeholder(), result, perm));
    if (!moved)
      return moved.takeError();
    result = *moved;
  }
  return defineValue(0, result);
}

Error ModelImporter::lowerWhere(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 3 || !ins[1] || !ins[2])
    return nodeError("needs condition, X and Y inputs");
  Entry &cond = *ins[0], &x = *ins[1], &y = *ins[2];
  if (!cond.known)
    return nodeError("the condition '{0}' is computed at run time; dtc "
                     "supports Where only with a constant condition (a mask)",
                     node->input(0));
  if (x.dataType != y.dataType)
    return nodeError("X and Y types differ: {0} and {1}",
                     dataTypeName(x.dataType), dataTypeName(y.dataType));
  std::string error;
  auto xy = broadcastShapes(x.shape, y.shape, error);
  auto shape = xy ? broadcastShapes(cond.shape, *xy, error) : std::nullopt;
  if (!shape)
    return nodeError("{0}", error);
  const HostTensor &c = *cond.known;
  bool allTrue = llvm::all_of(c.ints, [](int64_t v) { return v != 0; });
  bool allFalse = llvm::all_of(c.ints, [](int64_t v) { return v == 0; });
  if (allTrue || allFalse) {
    auto v = valueOf(allTrue ? x : y);
    if (!v)
      return v.takeError();
    auto result = expandTo(*v, *shape);
    if (!result)
      return result.takeError();
    return defineValue(0, *result);
  }

  // A constant condition makes Where arithmetic: with K = (c ? 0 : 1) and
  // A = (c ? x : 0) for a constant x, where(c, x, y) = y * K + A, which is
  // exact even for x = -inf (masked_fill). With both sides computed,
  // x * M + y * (1 - M), M = (c ? 1 : 0); exact for finite values.
  int32_t type = x.dataType;
  auto select = [&](auto pick, llvm::ArrayRef<int64_t> outShape) {
    HostTensor t = HostTensor::zeros(type, outShape);
    for (int64_t i = 0, e = t.size(); i < e; ++i) {
      // Index c and a constant side by broadcasting into outShape.
      int64_t flat = i, ci = 0, cs = 1;
      for (int64_t d = outShape.size() - 1,
                   cd = static_cast<int64_t>(c.shape.size()) - 1;
           d >= 0; --d, --cd) {
        int64_t idx = flat % outShape[d];
        flat /= outShape[d];
        if (cd >= 0) {
          if (c.shape[cd] != 1)
            ci += idx * cs;
          cs *= c.shape[cd];
        }
      }
      t.set(i, pick(c.ints[ci] != 0, i));
    }
    return t;
  };
  auto mulAdd = [&](Value v, const HostTensor &k,
                    std::optional<HostTensor> a) -> Expected<Value> {
    auto kc = constant(k);
    if (!kc)
      return kc;
    auto prod = finish(d::MulOp::create(builder, loc(), placeholder(), v, *kc));
    if (!prod || !a)
      return prod;
    auto ac = constant(*a);
    if (!ac)
      return ac;
    return finish(d::AddOp::create(builder, loc(), placeholder(), *prod, *ac));
  };

  Value result;
  if (bool(x.known) != bool(y.known)) {
    bool xKnown = bool(x.known);
    Entry &computed = xKnown ? y : x;
    const HostTensor &fixed = xKnown ? *x.known : *y.known;
    auto outShape = broadcastShapes(c.shape, fixed.shape, error);
    if (!outShape)
      return nodeError("{0}", error);
    // Broadcast the constant side into outShape once, on the host.
    HostTensor shapeTensor = HostTensor::fromInts(*outShape);
    ::onnx::NodeProto expand;
    expand.set_op_type("Expand");
    const HostTensor *expandArgs[] = {&fixed, &shapeTensor};
    auto expanded = evaluateNode(expand, expandArgs, error);
    if (!expanded)
      return nodeError("{0}", error);
    const HostTensor &f = (*expanded)[0];
    HostTensor keep = select(
        [&](bool cv, int64_t) { return (cv == xKnown) ? 0.0 : 1.0; }, c.shape);
    HostTensor add = select(
        [&](bool cv, int64_t i) { return cv == xKnown ? f.getDouble(i) : 0.0; },
        *outShape);
    auto v = valueOf(computed);
    if (!v)
      return v.takeError();
    auto r = mulAdd(*v, keep, add);
    if (!r)
      return r.takeError();
    result = *r;
  } else {
    auto xv = valueOf(x);
    if (!xv)
      return xv.takeError();
    auto yv = valueOf(y);
    if (!yv)
      return yv.takeError();
    HostTensor m =
        select([](bool cv, int64_t) { return cv ? 1.0 : 0.0; }, c.shape);
    HostTensor n =
        select([](bool cv, int64_t) { return cv ? 0.0 : 1.0; }, c.shape);
    auto left = mulAdd(*xv, m, std::nullopt);
    if (!left)
      return left.takeError();
    auto right = mulAdd(*yv, n, std::nullopt);
    if (!right)
      return right.takeError();
    auto sum =
        finish(d::AddOp::create(builder, loc(), placeholder(), *left, *right));
    if (!sum)
      return sum.takeError();
    result = *sum;
  }
  auto full = expandTo(result, *shape);
  if (!full)
    return full.takeError();
  return defineValue(0, *full);
}

Error ModelImporter::lowerReduce(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  std::vector<int64_t> axesList;
  if (ins.size() > 1 && ins[1]) {
    auto known = knownInts(1, "axes");
    if (!known)
      return known.takeError();
    axesList = *known;
  } else if (auto attr = getIntsAttr(*node, "axes")) {
    axesList.assign(attr->begin(), attr->end());
  }
  bool noop = getIntAttr(*node, "noop_with_empty_axes", 0) != 0;
  bool keepDims = getIntAttr(*node, "keepdims", 1) != 0;
  std::string error;
  auto axes = resolveReduceAxes(axesList, ins[0]->shape.size(), noop, error);
  if (!axes)
    return nodeError("{0}", error);
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  if (axes->empty())
    return defineValue(0, *input);
  Operation *created;
  if (op == "ReduceMean")
    created = d::ReduceMeanOp::create(builder, loc(), placeholder(), *input,
                                      *axes, keepDims);
  else if (op == "ReduceSum")
    created = d::ReduceSumOp::create(builder, loc(), placeholder(), *input,
                                     *axes, keepDims);
  else
    created = d::ReduceMaxOp::create(builder, loc(), placeholder(), *input,
                                     *axes, keepDims);
  auto result = finish(created);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerExpand(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs a shape input");
  auto target = knownInts(1, "target shape");
  if (!target)
    return target.takeError();
  std::string error;
  auto shape = broadcastShapes(ins[0]->shape, *target, error);
  if (!shape)
    return nodeError("{0}", error);
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  auto result = expandTo(*input, *shape);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerCast(llvm::ArrayRef<Entry *> ins, int32_t to) {
  Type elementType = toElementType(to, ctx);
  if (!elementType)
    return nodeError("casting to {0} is not supported", dataTypeName(to));
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  if (ins[0]->dataType == to)
    return defineValue(0, *input);
  auto result = finish(
      d::CastOp::create(builder, loc(), placeholder(), *input, elementType));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

//===----------------------------------------------------------------------===//
// The graph
//===----------------------------------------------------------------------===//

Error ModelImporter::importGraph(ModuleOp module) {
  const auto &graph = model.graph();
  for (const auto &n : graph.node())
    for (const auto &input : n.input())
      ++useCounts[input];
  for (const auto &output : graph.output())
    ++useCounts[output.name()];

  // Signature: the graph inputs (minus initializers) with bound shapes.
  llvm::SmallVector<Type> argTypes;
  llvm::SmallVector<std::string> argNames;
  llvm::StringSet<> initializerNames;
  for (const auto &init : graph.initializer())
    initializerNames.insert(init.name());
  for (const auto &input : graph.input()) {
    if (initializerNames.contains(input.name()))
      continue;
    Type elementType =
        toElementType(input.type().tensor_type().elem_type(), ctx);
    argTypes.push_back(
        RankedTensorType::get(inputShapes[input.name()], elementType));
    argNames.push_back(input.name());
  }
  builder.setInsertionPointToEnd(module.getBody());
  auto func = func::FuncOp::create(builder, fileLoc, "main",
                                   builder.getFunctionType(argTypes, {}));
  Block *body = func.addEntryBlock();
  builder.setInsertionPointToEnd(body);
  for (auto [i, name] : llvm::enumerate(argNames)) {
    func.setArgAttr(i, "dtc.name", builder.getStringAttr(name));
    Entry entry;
    entry.value = body->getArgument(i);
    auto type = cast<RankedTensorType>(argTypes[i]);
    entry.dataType = dataTypeOf(type.getElementType());
    entry.shape.assign(type.getShape().begin(), type.getShape().end());
    values[name] = std::move(entry);
  }

  // Floating-point initializers are the trainable weights; integer ones are
  // constants known on the host.
  for (const auto &init : graph.initializer()) {
    if (values.contains(init.name()))
      continue; // shadowed by a graph input
    if (!isFloatType(init.data_type())) {
      lazyInitializers[init.name()] = &init;
      continue;
    }
    if (!useCounts.lookup(init.name()))
      continue;
    Entry entry;
    entry.dataType = init.data_type();
    entry.shape.assign(init.dims().begin(), init.dims().end());
    auto type = RankedTensorType::get(entry.shape,
                                      toElementType(init.data_type(), ctx));
    entry.value =
        d::ParameterOp::create(builder, locFor(init.name()), type, init.name());
    values[init.name()] = std::move(entry);
  }

  for (const auto &n : graph.node()) {
    node = &n;
    if (Error err = importNode())
      return err;
  }
  node = nullptr;

  llvm::SmallVector<Value> results;
  for (const auto &output : graph.output()) {
    auto it = values.find(output.name());
    if (it == values.end())
      return fileError("graph output '{0}' is not computed by any node",
                       output.name());
    nodeLoc = locFor(output.name());
    Entry &entry = it->second;
    if (!entry.value) {
      auto c = constant(*entry.known);
      if (!c)
        return fileError("graph output '{0}': {1}", output.name(),
                         llvm::toString(c.takeError()));
      entry.value = *c;
    }
    // The declared static dims must agree with what the graph computes.
    if (output.type().has_tensor_type() &&
        output.type().tensor_type().has_shape()) {
      const auto &dims = output.type().tensor_type().shape().dim();
      bool agrees = dims.size() == static_cast<int>(entry.shape.size());
      for (int i = 0; agrees && i < dims.size(); ++i)
        agrees =
            !dims[i].has_dim_value() || dims[i].dim_value() == entry.shape[i];
      if (!agrees)
        return fileError("graph output '{0}' is declared with another shape "
                         "than the computed {1}",
                         output.name(), shapeString(entry.shape));
    }
    results.push_back(entry.value);
  }
  func::ReturnOp::create(builder, fileLoc, results);
  func.setType(
      builder.getFunctionType(argTypes, ValueRange(results).getTypes()));
  for (auto [i, output] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, "dtc.name", builder.getStringAttr(output.name()));

  // Values only shape arithmetic read (a transpose feeding Shape) and unused
  // parameters are dead now.
  for (Operation &op : llvm::make_early_inc_range(llvm::reverse(*body)))
    if (!op.hasTrait<OpTrait::IsTerminator>() && op.use_empty() && isPure(&op))
      op.erase();
  return Error::success();
}

Expected<OwningOpRef<ModuleOp>> ModelImporter::run() {
  ctx.getOrLoadDialect<mlir::dtc::DtcDialect>();
  ctx.getOrLoadDialect<func::FuncDialect>();
  if (Error err = load())
    return std::move(err);
  if (Error err = checkOpsetsAndOps())
    return std::move(err);
  if (Error err = bindInputs())
    return std::move(err);
  if (Error err = runOnnxChecks())
    return std::move(err);

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  if (Error err = importGraph(*module))
    return std::move(err);
  if (options.raiseIdioms && failed(raiseIdioms(*module)))
    return ::dtc::failure("{0}: raising idioms did not converge", path);

  // The importer's own invariants; a failure here is a bug, not bad input.
  std::string message;
  {
    ScopedDiagnosticHandler handler(&ctx, [&](Diagnostic &diag) {
      if (message.empty()) {
        llvm::raw_string_ostream os(message);
        os << diag.getLocation() << ": " << diag;
      }
      return success();
    });
    if (failed(verify(*module)))
      return ::dtc::failure("{0}: the imported module does not verify: {1}",
                            path, message);
  }
  return module;
}

namespace dtc::onnx {
Expected<OwningOpRef<ModuleOp>> importOnnxFile(llvm::StringRef path,
                                               const ImportOptions &options,
                                               MLIRContext &context) {
  ModelImporter importer(path, options, context);
  return importer.run();
}
} // namespace dtc::onnx
