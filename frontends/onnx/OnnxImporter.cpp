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

#include "dialects/dtc/DtcDialect.h"
#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/ImporterImpl.h"
#include "frontends/onnx/OnnxUtils.h"
#include "frontends/onnx/Raise.h"
#include "frontends/onnx/TrainableSet.h"
#include "runtime/support/Error.h"

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
#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/bit.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <map>
#include <memory>

using namespace mlir;
using namespace ::dtc::onnx;
using namespace ::dtc::onnx::detail;
namespace d = mlir::dtc;
using llvm::Error;
using llvm::Expected;
namespace {

/// Ops handled by the graph walk itself rather than a lowering.
bool isWalkOp(llvm::StringRef opType) {
  return opType == "Constant" || opType == "Shape" || opType == "Size";
}

bool isSupportedOp(llvm::StringRef opType) {
  return loweringTable().contains(opType) || isWalkOp(opType) ||
         canEvaluateOnHost(opType);
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

/// No tensor of a model trained or served on any cluster reaches 2^50 bytes
/// (a PiB); a graph that states one is a mistake, and its sizes would
/// overflow the int64 and double arithmetic of the planner and runtime.
constexpr int64_t kMaxTensorBytes = int64_t(1) << 50;

/// Bytes of a tensor of `shape` with `elementBits`-bit elements, or nullopt
/// when they exceed kMaxTensorBytes (or a dim is negative).
std::optional<int64_t> boundedTensorBytes(llvm::ArrayRef<int64_t> shape,
                                          int64_t elementBits) {
  int64_t bytes = std::max<int64_t>(elementBits / 8, 1);
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(bytes, d, &bytes) ||
        bytes > kMaxTensorBytes)
      return std::nullopt;
  return bytes;
}

std::string formatShape(llvm::ArrayRef<int64_t> shape) {
  std::string out = "[";
  for (auto [i, d] : llvm::enumerate(shape))
    out += (i ? "x" : "") + std::to_string(d);
  return out + "]";
}

} // namespace

const LoweringTable & ::dtc::onnx::detail::loweringTable() {
  static const LoweringTable table = [] {
    LoweringTable t;
    registerMathOps(t);
    registerNNOps(t);
    registerTensorOps(t);
    registerLogicOps(t);
    registerMicrosoftOps(t);
    return t;
  }();
  return table;
}

std::string(::dtc::onnx::detail::loweringKey)(const ::onnx::NodeProto &node) {
  if (isDefaultDomain(node.domain()))
    return node.op_type();
  return node.domain() + "::" + node.op_type();
}

// Parenthesized: clang reads `int32_t ::dtc` as a nested name.
int32_t(::dtc::onnx::detail::dataTypeOf)(Type elementType) {
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

//===----------------------------------------------------------------------===//
// Loading and checking
//===----------------------------------------------------------------------===//

Error ModelImporter::load() {
  // A FIFO would block the read forever, a device never end.
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status) &&
      status.type() != llvm::sys::fs::file_type::regular_file)
    return fileError("not a regular file; name the .onnx model file");
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    if (buffer.getError() == std::errc::no_such_file_or_directory)
      return fileError("no such file");
    return fileError("cannot read the file: {0}", buffer.getError().message());
  }
  // A model named without a directory lies in the working one.
  baseDir = llvm::sys::path::parent_path(path).str();
  if (baseDir.empty())
    baseDir = ".";
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
    return fileError("not an ONNX model: the file does not parse as a "
                     "ModelProto protobuf (truncated, or not ONNX; models "
                     "over 2 GB must keep their weights in external data)");
  }
  // Protobuf accepts many byte strings as *some* message; a model has a
  // graph with outputs and imports an opset.
  if (!model.has_graph() || model.graph().output_size() == 0 ||
      model.opset_import_size() == 0)
    return fileError("not an ONNX model: it has no graph, graph outputs or "
                     "opset imports");
  // ONNX requires unique graph output names; the program's results (and
  // `dtc run --outputs`) are named by them.
  llvm::StringSet<> outputNames;
  for (const auto &output : model.graph().output())
    if (!outputNames.insert(output.name()).second)
      return fileError("graph output '{0}' is listed twice; ONNX requires "
                       "unique output names (re-export the model)",
                       output.name());
  fileLoc = FileLineColLoc::get(&ctx, path, 0, 0);
  if (Error err = inlineLocalFunctions())
    return err;
  auto stacked = fuseSparseMoeBlocks(model, path);
  if (!stacked)
    return stacked.takeError();
  for (StackedWeight &weight : *stacked)
    stackedWeights[weight.name] = std::move(weight);
  findHostConstants();
  foldedTiedCopy = findFoldedTiedCopy(model.graph());
  releaseWeights();
  return Error::success();
}

/// False for the inputs a node reads only the type or shape of.
static bool readsData(const ::onnx::NodeProto &n, int input) {
  if (n.op_type() == "Shape" || n.op_type() == "Size")
    return false;
  return !(n.op_type() == "CastLike" && input == 1);
}

/// Lowered ops through which an input-independent float initializer is a
/// buffer, not a weight: comparisons and NaN/Inf tests (a boolean carries no
/// gradient), GatherND (the dynamo exporter's indexing of position
/// tables such as GPT-J's sin/cos; weights are read by MatMul, Gemm and
/// Gather) and Tile (lowered only for run-time inputs).
static bool readsBuffers(llvm::StringRef op) {
  return llvm::is_contained({"Equal", "Less", "LessOrEqual", "Greater",
                             "GreaterOrEqual", "IsNaN", "IsInf", "GatherND",
                             "Tile"},
                            op);
}

void ModelImporter::findHostConstants() {
  // Values that depend on the graph inputs' contents (Shape and Size only
  // read their shapes, which are bound).
  const auto &graph = model.graph();
  llvm::StringSet<> initializerNames;
  for (const auto &init : graph.initializer())
    initializerNames.insert(init.name());
  llvm::StringSet<> dynamic;
  for (const auto &input : graph.input())
    if (!initializerNames.contains(input.name()))
      dynamic.insert(input.name());
  // What the export tags PARAMETER trains, so whatever is computed from it
  // changes every step, even through ops dtc could fold: Whisper's decoder
  // positions, a PARAMETER transposed and gathered at constant positions,
  // would otherwise become a constant and never train.
  llvm::StringSet<> parameters;
  for (const auto &[name, origin] : readInitializerOrigins(graph))
    if (origin.kind == "PARAMETER") {
      parameters.insert(name);
      dynamic.insert(name);
    }
  llvm::StringMap<const ::onnx::NodeProto *> producers;
  for (const auto &n : graph.node()) {
    bool isDynamic = false;
    for (auto [i, in] : llvm::enumerate(n.input()))
      isDynamic |= readsData(n, i) && dynamic.contains(in);
    for (const auto &out : n.output()) {
      producers[out] = &n;
      if (isDynamic)
        dynamic.insert(out);
    }
  }
  // A floating-point initializer that reaches, through input-independent
  // nodes, an op dtc evaluates on the host only (Cos, Sin, Range, ...) or
  // one of readsBuffers (nanoGPT's `bias == 0` on its tril buffer) is a
  // buffer such as rotary inv_freq or a causal mask, not a weight: it is
  // known on the host.
  llvm::SmallVector<std::string> work;
  for (const auto &n : graph.node()) {
    // onnxruntime's rotary caches are tables the importer reads.
    if (n.domain() == "com.microsoft") {
      int first = n.op_type() == "RotaryEmbedding"       ? 2
                  : n.op_type() == "GroupQueryAttention" ? 7
                                                         : n.input_size();
      for (int i = first; i < n.input_size() && i < first + 2; ++i)
        work.push_back(n.input(i));
    }
    if ((loweringTable().contains(n.op_type()) && !readsBuffers(n.op_type())) ||
        !isDefaultDomain(n.domain()))
      continue;
    bool isDynamic = false;
    for (const auto &in : n.input())
      isDynamic |= dynamic.contains(in);
    if (!isDynamic)
      work.append(n.input().begin(), n.input().end());
  }
  // Untagged scalars are exporter constants (scales, epsilons,
  // constant-folded Constant nodes), not weights; a scalar PARAMETER (a
  // learned temperature) trains.
  for (const auto &init : graph.initializer()) {
    int64_t count = 1;
    for (int64_t dim : init.dims())
      count *= dim;
    if (isFloatType(init.data_type()) && count <= 1 &&
        !parameters.contains(init.name()))
      hostConstants.insert(init.name());
  }
  llvm::StringSet<> seen;
  while (!work.empty()) {
    std::string name = work.pop_back_val();
    if (name.empty() || dynamic.contains(name) || !seen.insert(name).second)
      continue;
    if (initializerNames.contains(name)) {
      hostConstants.insert(name);
      continue;
    }
    auto it = producers.find(name);
    // Shape and Size read only the (bound) shape of their input.
    if (it != producers.end())
      for (auto [i, in] : llvm::enumerate(it->second->input()))
        if (readsData(*it->second, i))
          work.push_back(in);
  }
}

void ModelImporter::releaseWeights() {
  // Floating-point initializers become dtc.parameter ops: only their names,
  // types and dims matter. Their bytes (inline or external) are dropped now,
  // so external data files are never opened and may be absent (a
  // "shape-only" model). Integer initializers stay: they are shape
  // arithmetic and indices evaluated on the host.
  for (auto &init : *model.mutable_graph()->mutable_initializer()) {
    if (!isFloatType(init.data_type()) || hostConstants.contains(init.name()))
      continue;
    init.clear_raw_data();
    init.clear_float_data();
    init.clear_double_data();
    init.clear_int32_data();
    init.clear_external_data();
    init.clear_data_location();
  }
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

  std::map<std::string, int64_t> domainOpsets;
  for (const auto &import : model.opset_import())
    domainOpsets[isDefaultDomain(import.domain()) ? "ai.onnx"
                                                  : import.domain()] =
        import.version();
  for (const auto &n : model.graph().node()) {
    node = &n;
    bool supported = isDefaultDomain(n.domain())
                         ? isSupportedOp(n.op_type())
                         : loweringTable().contains(loweringKey(n));
    if (!supported) {
      std::string domain = isDefaultDomain(n.domain()) ? "ai.onnx" : n.domain();
      auto version = domainOpsets.find(domain);
      return nodeError("unsupported ONNX op {0} of domain '{1}' (opset {2}); "
                       "supported ops are listed in docs/onnx-ops.md",
                       n.op_type(), domain,
                       version == domainOpsets.end()
                           ? std::string("not imported")
                           : std::to_string(version->second));
    }
    for (const auto &attr : n.attribute())
      if (attr.type() == ::onnx::AttributeProto::GRAPH ||
          attr.type() == ::onnx::AttributeProto::GRAPHS)
        return nodeError("subgraphs (control flow) are not supported");
  }
  node = nullptr;
  return checkGraphOrder();
}

Error ModelImporter::checkGraphOrder() {
  const auto &graph = model.graph();
  llvm::StringSet<> defined;
  for (const auto &input : graph.input())
    defined.insert(input.name());
  for (const auto &init : graph.initializer())
    defined.insert(init.name());
  llvm::StringMap<int> producer;
  for (auto [i, n] : llvm::enumerate(graph.node()))
    for (const auto &out : n.output())
      if (!out.empty())
        producer.try_emplace(out, i);
  for (const auto &n : graph.node()) {
    node = &n;
    for (const auto &in : n.input()) {
      if (in.empty() || defined.contains(in))
        continue;
      auto it = producer.find(in);
      if (it == producer.end())
        return nodeError("input '{0}' is not produced by any node and is "
                         "neither an initializer nor a graph input (a "
                         "missing initializer?)",
                         in);
      const auto &later = graph.node(it->second);
      if (hasCycle())
        return nodeError("the graph has a cycle: input '{0}' comes from node "
                         "'{1}', which depends on this node; dtc imports "
                         "acyclic graphs only",
                         in, nodeName(later));
      return nodeError("the graph is not topologically sorted: input '{0}' "
                       "comes from the later node '{1}'; re-save the model "
                       "with its nodes sorted",
                       in, nodeName(later));
    }
    for (const auto &out : n.output())
      defined.insert(out);
  }
  node = nullptr;
  for (const auto &output : graph.output())
    if (!defined.contains(output.name()))
      return fileError("graph output '{0}' is not produced by any node, "
                       "initializer or graph input",
                       output.name());
  return Error::success();
}

bool ModelImporter::hasCycle() {
  // Kahn's algorithm over the node dependencies.
  const auto &graph = model.graph();
  llvm::StringMap<int> producer;
  for (auto [i, n] : llvm::enumerate(graph.node()))
    for (const auto &out : n.output())
      if (!out.empty())
        producer.try_emplace(out, i);
  int count = graph.node_size();
  std::vector<int> pending(count, 0);
  std::vector<std::vector<int>> users(count);
  for (auto [i, n] : llvm::enumerate(graph.node()))
    for (const auto &in : n.input()) {
      auto it = producer.find(in);
      if (in.empty() || it == producer.end())
        continue;
      ++pending[i];
      users[it->second].push_back(i);
    }
  std::vector<int> ready;
  for (int i = 0; i < count; ++i)
    if (!pending[i])
      ready.push_back(i);
  int visited = 0;
  while (!ready.empty()) {
    int i = ready.back();
    ready.pop_back();
    ++visited;
    for (int user : users[i])
      if (--pending[user] == 0)
        ready.push_back(user);
  }
  return visited != count;
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
    // A batch the export (or --dim) fixed: every input's dim 0 a number,
    // the same.
    if (tensorType.shape().dim_size() > 0) {
      const auto &first = tensorType.shape().dim(0);
      std::optional<int64_t> batch;
      if (first.has_dim_value() && first.dim_value() > 0) {
        batch = first.dim_value();
      } else if (auto it = options.dimParams.find(first.dim_param());
                 !first.dim_param().empty() && it != options.dimParams.end()) {
        batch = it->second; // `--dim NAME=SIZE` fixes it as well
        batchFromDim = true;
        batchDimName = first.dim_param();
      }
      if (!batch || (sawInput && fixedBatch != batch))
        fixedBatch.reset();
      else if (!sawInput)
        fixedBatch = batch;
      sawInput = true;
    }
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
      return fileError(
          "dynamic dim {0} of input '{1}' is unbound; only the batch (dim 0) "
          "and sequence (dim 1 of integer inputs, --seq-len) dims are bound "
          "automatically: export it static or bind it by name "
          "(dtc compile --dim {2}=SIZE)",
          p.param.empty() ? std::to_string(p.dim) : "'" + p.param + "'",
          p.input, p.param.empty() ? std::string("NAME") : p.param);
    inputShapes[p.input][p.dim] = it->second;
  }
  for (const auto &input : graph.input()) {
    auto it = inputShapes.find(input.name());
    if (it == inputShapes.end())
      continue;
    Type element = toElementType(input.type().tensor_type().elem_type(), ctx);
    if (!boundedTensorBytes(it->second, element.getIntOrFloatBitWidth()))
      return fileError("input '{0}' of shape {1} is over 2^50 bytes, more than "
                       "any cluster holds; export it with its real shape or "
                       "bind smaller dims",
                       input.name(), formatShape(it->second));
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
  // Nor do they know contrib domains (com.microsoft) or newer versions of
  // other domains (ONNX 1.12's shape inference crashes on some).
  for (const auto &import : model.opset_import()) {
    if (isDefaultDomain(import.domain()))
      continue;
    auto range = versions.find(import.domain());
    if (range == versions.end() || import.version() > range->second.second)
      return Error::success();
  }
  for (const auto &n : model.graph().node())
    if (!isDefaultDomain(n.domain()))
      return Error::success();
  // The weights have no data any more (releaseWeights): the checker and
  // shape inference see them as graph inputs of their type and shape, and
  // the initializer list is restored afterwards.
  auto *graph = model.mutable_graph();
  const int inputCount = graph->input_size();
  google::protobuf::RepeatedPtrField<::onnx::TensorProto> initializers;
  initializers.Swap(graph->mutable_initializer());
  auto restore = llvm::make_scope_exit([&] {
    graph->mutable_initializer()->Swap(&initializers);
    graph->mutable_input()->DeleteSubrange(inputCount,
                                           graph->input_size() - inputCount);
  });
  {
    llvm::StringSet<> inputNames;
    for (const auto &input : graph->input())
      inputNames.insert(input.name());
    for (const auto &init : initializers) {
      if (!isFloatType(init.data_type()) ||
          hostConstants.contains(init.name())) {
        ::onnx::TensorProto *kept = graph->add_initializer();
        *kept = init;
        // The checker resolves external data against the working directory:
        // it gets the bytes inline (shape inference reads them too).
        if (init.data_location() == ::onnx::TensorProto::EXTERNAL) {
          std::string error;
          std::optional<std::string> bytes =
              readExternalData(init, baseDir, error);
          if (!bytes)
            return fileError("initializer '{0}': {1}", init.name(), error);
          kept->clear_external_data();
          kept->set_data_location(::onnx::TensorProto::DEFAULT);
          kept->set_raw_data(std::move(*bytes));
        }
        continue;
      }
      if (inputNames.contains(init.name()))
        continue;
      auto *input = graph->add_input();
      input->set_name(init.name());
      auto *tensorType = input->mutable_type()->mutable_tensor_type();
      tensorType->set_elem_type(init.data_type());
      auto *shape = tensorType->mutable_shape();
      for (int64_t dim : init.dims())
        shape->add_dim()->set_dim_value(dim);
    }
  }
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception &e) {
    return fileError("the ONNX checker rejects the model: {0}",
                     oneLine(e.what()));
  }
  // Not strict: a node ONNX cannot infer is reported by dtc's own shape
  // rules below, with the node's name. Stored value_info may hold the
  // export-time shapes; infer from the bound inputs only.
  model.mutable_graph()->clear_value_info();
  // No data propagation: ONNX 1.12's dereferences missing types and
  // overflows on huge Slice steps (segfaults inside libonnx, found by
  // fuzz-onnx-importer: a Shape of a Concat that fails inference; a Slice
  // step of INT64_MAX). dtc evaluates that shape arithmetic itself; ONNX
  // still infers every shape that does not depend on tensor contents.
  try {
    ::onnx::ShapeInferenceOptions inferOptions(/*check_type=*/true,
                                               /*strict_mode=*/0,
                                               /*data_prop=*/false);
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
        for (auto [result, type] : llvm::zip(op->getResults(), types))
          result.setType(type);
    }
    ok = ok && succeeded(verify(op, /*verifyRecursively=*/false));
  }
  if (ok) {
    for (Type type : op->getResultTypes()) {
      auto shaped = dyn_cast<ShapedType>(type);
      if (shaped && shaped.hasStaticShape() &&
          !boundedTensorBytes(shaped.getShape(),
                              shaped.getElementTypeBitWidth()))
        return nodeError("its result {0} is over 2^50 bytes, more than any "
                         "cluster holds; check the shapes the graph computes",
                         formatShape(shaped.getShape()));
    }
    return op->getResult(0);
  }
  std::string name = op->getName().getStringRef().str();
  op->erase();
  return nodeError("cannot build {0}: {1}", name, message);
}

double ModelImporter::metadataNumber(llvm::StringRef key,
                                     double fallback) const {
  for (const auto &prop : model.metadata_props()) {
    double value;
    if (prop.key() == key && !llvm::StringRef(prop.value()).getAsDouble(value))
      return value;
  }
  return fallback;
}

Expected<Value> ModelImporter::reshape(Value input,
                                       llvm::ArrayRef<int64_t> shape) {
  auto type = cast<RankedTensorType>(input.getType());
  if (type.getShape() == shape)
    return input;
  return finish(d::ReshapeOp::create(builder, loc(), type.clone(shape), input));
}

Expected<Value> ModelImporter::scalarConstant(int32_t dataType, double value) {
  HostTensor t = HostTensor::zeros(dataType, {});
  t.set(0, value);
  return constant(t);
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
  // A splat attribute: O(1) memory whatever the shape (GQA's repeated K/V
  // at long sequences would otherwise allocate the whole tensor per layer).
  Type elementType = type.getElementType();
  auto zeros = DenseElementsAttr::get(RankedTensorType::get(shape, elementType),
                                      builder.getZeroAttr(elementType));
  auto zero = finish(d::ConstantOp::create(builder, loc(), zeros));
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

  // CastLike reads only the type of its second input: torchlib casts
  // constants (the attention scale 1/sqrt(d)) like computed tensors.
  if (op == "CastLike" && ins.size() == 2 && ins[0] && ins[0]->known &&
      ins[1] && !ins[1]->known) {
    HostTensor typeOnly;
    typeOnly.dataType = ins[1]->dataType;
    const HostTensor *args[] = {ins[0]->known.get(), &typeOnly};
    std::string error;
    auto results = evaluateNode(*node, args, error);
    if (!results)
      return nodeError("{0}", error);
    return defineKnown(0, std::move((*results)[0]));
  }

  bool allKnown = llvm::all_of(ins, [](Entry *e) { return !e || e->known; });
  if (allKnown && !ins.empty() && isDefaultDomain(node->domain()) &&
      canEvaluateOnHost(op)) {
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
Error ModelImporter::alias(Entry *entry) {
  Entry copy = *entry;
  return define(node->output(0), std::move(copy));
}

Error ModelImporter::lowerNode(llvm::ArrayRef<Entry *> ins) {
  llvm::StringRef op = node->op_type();
  if (ins.empty() || !ins[0])
    return nodeError("its first input is missing");
  const LoweringTable &table = loweringTable();
  auto it = table.find(loweringKey(*node));
  if (it != table.end())
    return (this->*it->second)(ins);

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

//===----------------------------------------------------------------------===//
// The graph
//===----------------------------------------------------------------------===//

void ModelImporter::recordStateDict(ModuleOp module,
                                    const StateDictInfo &stateDict) {
  if (stateDict.keys.empty())
    return;
  llvm::StringMap<const ::onnx::TensorProto *> initializers;
  for (const auto &init : model.graph().initializer())
    initializers[init.name()] = &init;
  llvm::StringMap<llvm::SmallVector<Attribute>> aliases;
  for (const auto &[alias, source] : stateDict.aliasOf)
    aliases[source].push_back(StringAttr::get(&ctx, alias));
  Builder b(&ctx);
  llvm::SmallVector<Attribute> entries;
  for (const std::string &key : stateDict.keys) {
    auto it = initializers.find(key);
    Type element = it == initializers.end()
                       ? Type()
                       : toElementType(it->second->data_type(), ctx);
    if (!element)
      continue; // an alias (listed with its tensor) or not in the export
    llvm::SmallVector<int64_t> shape(it->second->dims().begin(),
                                     it->second->dims().end());
    llvm::SmallVector<NamedAttribute> fields = {
        b.getNamedAttr("name", b.getStringAttr(key)),
        b.getNamedAttr("type",
                       TypeAttr::get(RankedTensorType::get(shape, element)))};
    if (auto a = aliases.find(key); a != aliases.end()) {
      llvm::sort(a->second, [](Attribute x, Attribute y) {
        return cast<StringAttr>(x).getValue() < cast<StringAttr>(y).getValue();
      });
      fields.push_back(b.getNamedAttr("aliases", b.getArrayAttr(a->second)));
    }
    entries.push_back(b.getDictionaryAttr(fields));
  }
  module->setAttr("dtc.state_dict", b.getArrayAttr(entries));
  // Parameters of the signature the export holds no tensor of and no
  // alias was found for: tied to a tensor saved under another name, or
  // dropped because forward never reads them (DINOv2's mask_token outside
  // masked image modeling); no checkpoint can hold them under that name.
  llvm::SmallVector<Attribute> notExported;
  for (const std::string &key : stateDict.parameters)
    if (!initializers.count(key) && !stateDict.aliasOf.count(key))
      notExported.push_back(b.getStringAttr(key));
  if (!notExported.empty())
    module->setAttr("dtc.not_exported", b.getArrayAttr(notExported));
}

void ModelImporter::countUses() {
  const auto &graph = model.graph();
  for (const auto &n : graph.node())
    for (const auto &input : n.input())
      ++useCounts[input];
  for (const auto &output : graph.output())
    ++useCounts[output.name()];
}

void ModelImporter::tagStackedWeights(
    llvm::StringMap<InitializerOrigin> &origins) const {
  // A stack of expert weights (FuseMoe) is what its members are.
  for (const auto &[name, stack] : stackedWeights) {
    std::optional<std::string> kind;
    for (const std::string &member : stack.members) {
      auto it = origins.find(member);
      std::string memberKind = it == origins.end() ? "" : it->second.kind;
      if (!kind)
        kind = memberKind;
      else if (*kind != memberKind)
        kind = ""; // mixed: decided as an untagged tensor
    }
    if (kind && !kind->empty())
      origins[name].kind = *kind;
  }
}

Expected<llvm::StringMap<TrainableDecision>>
ModelImporter::decideWeights(const StateDictInfo &stateDict) {
  const auto &graph = model.graph();
  // Floating-point initializers are the model's weights and buffers
  // (which of them train: TrainableSet.h); integer ones are constants known
  // on the host.
  auto isWeight = [&](const ::onnx::TensorProto &init) {
    return !values.contains(init.name()) && // not shadowed by a graph input
           isFloatType(init.data_type()) &&
           !hostConstants.contains(init.name()) &&
           useCounts.lookup(init.name());
  };
  std::vector<std::string> weightNames;
  for (const auto &init : graph.initializer())
    if (isWeight(init))
      weightNames.push_back(init.name());
  llvm::StringMap<InitializerOrigin> origins = readInitializerOrigins(graph);
  tagStackedWeights(origins);
  llvm::StringSet<> allInitializers;
  for (const auto &init : graph.initializer())
    allInitializers.insert(init.name());
  UseEvidence uses = readUseEvidence(graph);
  if (!uses.hazard)
    uses.hazard = foldedTiedCopy;
  return decideTrainable(weightNames, origins, stateDict, allInitializers,
                         options.trainable, options.training, uses);
}

Error ModelImporter::declareParameters(ModuleOp module) {
  const auto &graph = model.graph();
  StateDictInfo stateDict = readStateDict(graph);
  auto decisions = decideWeights(stateDict);
  if (!decisions)
    return fileError("{0}", llvm::toString(decisions.takeError()));
  for (const auto &init : graph.initializer()) {
    if (values.contains(init.name()))
      continue; // shadowed by a graph input
    if (!isFloatType(init.data_type()) || hostConstants.contains(init.name())) {
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
    auto parameter =
        d::ParameterOp::create(builder, locFor(init.name()), type, init.name());
    if (!decisions->lookup(init.name()).trained)
      parameter.setFrozen(true);
    if (auto it = stackedWeights.find(init.name());
        it != stackedWeights.end()) {
      llvm::SmallVector<llvm::StringRef> members(it->second.members.begin(),
                                                 it->second.members.end());
      parameter.setStackAttr(builder.getStrArrayAttr(members));
      parameter.setStackTransposed(it->second.transposed);
    }
    entry.value = parameter;
    values[init.name()] = std::move(entry);
  }
  recordStateDict(module, stateDict);
  return Error::success();
}

Error ModelImporter::importNodes() {
  for (const auto &n : model.graph().node()) {
    node = &n;
    if (rebinder) {
      auto prepared = rebinder->prepare(*this);
      if (!prepared)
        return prepared.takeError();
      node = *prepared;
    }
    if (Error err = importNode())
      return err;
    if (rebinder)
      if (Error err = rebinder->classifyOutputs(*this, *node))
        return err;
  }
  node = nullptr;
  if (rebinder)
    if (Error err = rebinder->checkGraphOutputs(*this))
      return err;
  return Error::success();
}

Error ModelImporter::graphResults(llvm::SmallVectorImpl<Value> &results) {
  for (const auto &output : model.graph().output()) {
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
    // The declared static dims must agree with what the graph computes (at
    // the exported batch: re-bound, the reference import checked them).
    if (!rebinder && output.type().has_tensor_type() &&
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
  return Error::success();
}

Error ModelImporter::importGraph(ModuleOp module) {
  const auto &graph = model.graph();
  countUses();

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
    if (rebinder && type.getRank() > 0)
      rebinder->addGraphInput(name);
  }

  if (Error err = declareParameters(module))
    return err;
  if (Error err = importNodes())
    return err;
  llvm::SmallVector<Value> results;
  if (Error err = graphResults(results))
    return err;
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

Expected<ValuesAtExportedBatch> ModelImporter::importAtExportedBatch() {
  ImportOptions reference = options;
  reference.batch = fixedBatch;
  reference.rebindFixedBatch = false;
  ModelImporter importer(path, reference, ctx);
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(fileLoc);
  for (auto stage : {&ModelImporter::load, &ModelImporter::checkOpsetsAndOps,
                     &ModelImporter::bindInputs, &ModelImporter::runOnnxChecks})
    if (Error err = (importer.*stage)())
      return std::move(err);
  if (Error err = importer.importGraph(*scratch))
    return std::move(err);
  ValuesAtExportedBatch values;
  for (auto &[name, entry] : importer.values)
    values[name] = ValueAtExportedBatch{entry.shape, entry.known};
  return values;
}

Error ModelImporter::startRebinding(int64_t batch) {
  auto reference = importAtExportedBatch();
  if (!reference)
    return reference.takeError();
  rebinder = std::make_unique<BatchRebinder>(*fixedBatch, batch,
                                             std::move(*reference));
  for (auto &[name, shape] : inputShapes)
    if (!shape.empty())
      shape[0] = batch;
  // ONNX shape inference ran at the exported batch; the reference import
  // checked every shape against it there.
  inferredShapes.clear();
  return Error::success();
}

Expected<OwningOpRef<ModuleOp>>
ModelImporter::importPinned(llvm::StringRef reason) {
  ImportOptions pinned = options;
  pinned.rebindFixedBatch = false;
  ModelImporter importer(path, pinned, ctx);
  auto module = importer.run();
  if (module)
    (**module)->setAttr("dtc.fixed_batch_reason",
                        StringAttr::get(&ctx, reason));
  return module;
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

  // A batch the export fixed, asked for at another batch: re-bound where
  // the batch provably flows, else imported at the exported batch.
  bool rebinding = fixedBatch && options.batch &&
                   *options.batch != *fixedBatch && options.rebindFixedBatch;
  if (rebinding && !batchFromDim)
    if (Error err = startRebinding(*options.batch))
      return std::move(err);

  OwningOpRef<ModuleOp> module = ModuleOp::create(fileLoc);
  if (Error err = importGraph(*module)) {
    if (!rebinder)
      return std::move(err);
    // Why the batch does not re-bind: the message without the file.
    std::string reason = llvm::toString(std::move(err));
    llvm::StringRef why(reason);
    why.consume_front(path + ": ");
    if (options.requireBatch)
      return ::dtc::badInput("{0}: cannot re-bind its exported batch {1} to "
                             "{2}: {3}",
                             path, *fixedBatch, *options.batch, why);
    return importPinned(why);
  }
  if (fixedBatch)
    (*module)->setAttr("dtc.fixed_batch",
                       Builder(&ctx).getI64IntegerAttr(*fixedBatch));
  if (rebinder)
    (*module)->setAttr("dtc.rebound_batch",
                       Builder(&ctx).getI64IntegerAttr(*options.batch));
  else if (fixedBatch && batchFromDim)
    (*module)->setAttr(
        "dtc.fixed_batch_reason",
        StringAttr::get(&ctx, llvm::formatv("bound by --dim {0}={1}",
                                            batchDimName, *fixedBatch)
                                  .str()));
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
