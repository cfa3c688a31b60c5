//===- ImporterImpl.h - The ONNX importer's internals -----------*- C++ -*-===//
//
// The importer class shared by OnnxImporter.cpp (loading, binding, checks,
// the graph walk and host evaluation) and ops/*.cpp (one lowering function
// per ONNX op, grouped by category like onnx-mlir and torch-mlir do). Each
// ops file registers its op types in the lowering table.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_ONNX_IMPORTERIMPL_H
#define DTC_FRONTENDS_ONNX_IMPORTERIMPL_H

#include "frontends/onnx/BatchRebind.h"
#include "frontends/onnx/FuseMoe.h"
#include "frontends/onnx/HostTensor.h"
#include "frontends/onnx/OnnxImporter.h"
#include "frontends/onnx/OnnxUtils.h"
#include "frontends/onnx/TrainableSet.h"
#include "runtime/support/Error.h"

#include "onnx/onnx_pb.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>
#include <memory>

namespace dtc::onnx::detail {

using llvm::Error;
using llvm::Expected;
using mlir::Location;
using mlir::MLIRContext;
using mlir::ModuleOp;
using mlir::NameLoc;
using mlir::NoneType;
using mlir::OpBuilder;
using mlir::Operation;
using mlir::OwningOpRef;
using mlir::StringAttr;
using mlir::Type;
using mlir::UnknownLoc;
using mlir::Value;

/// Default-domain opsets the importer accepts.
constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 23;

/// One ONNX value during import: known on the host, or a dtc value (graph
/// input, parameter, op result, or a materialized constant), or both.
struct Entry {
  /// Shared: repeated subgraphs (a causal mask per layer) share one result.
  std::shared_ptr<const HostTensor> known;
  Value value;
  int32_t dataType = kUndefined;
  llvm::SmallVector<int64_t, 4> shape;
};

/// The ONNX data type of an MLIR element type (kUndefined if none).
int32_t dataTypeOf(Type elementType);

/// The lowering table's key of an op: its type in the default domain,
/// "<domain>::<type>" in others.
std::string loweringKey(const ::onnx::NodeProto &node);

class ModelImporter {
public:
  ModelImporter(llvm::StringRef path, const ImportOptions &options,
                MLIRContext &ctx)
      : path(path.str()), options(options), ctx(ctx), builder(&ctx) {}

  Expected<OwningOpRef<ModuleOp>> run();

  // The rest is internal to the importer (OnnxImporter.cpp and ops/*.cpp).
  // Stages.
  Error load();
  /// Replaces calls to the model's local functions (torchlib's
  /// aten_getitem, Rank, ...) by their bodies, values renamed.
  Error inlineLocalFunctions();
  /// Finds the floating-point initializers that are buffers evaluated on
  /// the host (see hostConstants).
  void findHostConstants();
  /// Drops the bytes of floating-point initializers (the weights).
  void releaseWeights();
  Error checkOpsetsAndOps();
  /// Every node input defined before the node (no cycles, no missing
  /// initializers) and every graph output defined.
  Error checkGraphOrder();
  bool hasCycle();
  Error bindInputs();
  Error runOnnxChecks();
  /// Every value's shape (and host-known elements) from an import at the
  /// exported batch, for BatchRebinder.
  Expected<ValuesAtExportedBatch> importAtExportedBatch();
  /// Binds the graph inputs to `batch`, followed by a BatchRebinder.
  Error startRebinding(int64_t batch);
  /// The module imported at the exported batch (the fallback), which says
  /// why the batch is pinned there.
  Expected<OwningOpRef<ModuleOp>> importPinned(llvm::StringRef reason);
  /// Records the PyTorch state_dict the graph signature lists (module
  /// attribute `dtc.state_dict`: name, type and tied aliases of each key
  /// with a tensor), for checkpoints and `dtc ckpt consolidate`.
  void recordStateDict(mlir::ModuleOp module, const StateDictInfo &stateDict);
  Error importGraph(ModuleOp module);
  /// Counts the uses of every value by nodes and graph outputs.
  void countUses();
  /// Tags each stack of expert weights with its members' common origin.
  void tagStackedWeights(llvm::StringMap<InitializerOrigin> &origins) const;
  /// Which of the floating-point initializers train.
  Expected<llvm::StringMap<TrainableDecision>>
  decideWeights(const StateDictInfo &stateDict);
  /// Declares the weights as parameters (the other initializers are read
  /// lazily) and records the state dict.
  Error declareParameters(ModuleOp module);
  /// Imports every node, re-binding the batch where asked.
  Error importNodes();
  /// The graph outputs' values, checked against their declared shapes.
  Error graphResults(llvm::SmallVectorImpl<Value> &results);

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
                           loweringKey(*node),
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
  Expected<Value> indexValue(Entry &indices);
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
  /// dtc.compare (i1, broadcast shape) and dtc.select at the current node.
  Expected<Value> compare(Value lhs, Value rhs, llvm::StringRef predicate);
  Expected<Value> select(Value cond, Value onTrue, Value onFalse);
  /// A rank-0 constant of `dataType` holding `value` (broadcasts).
  Expected<Value> scalarConstant(int32_t dataType, double value);
  Expected<Value> sliceAxis(Value input, int64_t axis, int64_t start,
                            int64_t count, int64_t step = 1);

  // Nodes.
  Error importNode();
  /// Dispatches the current node through loweringTable().
  Error lowerNode(llvm::ArrayRef<Entry *> ins);
  Error alias(Entry *entry);
  // ops/Math.cpp
  Error lowerBinary(llvm::ArrayRef<Entry *> ins);
  Error lowerUnary(llvm::ArrayRef<Entry *> ins);
  Error lowerMatMul(llvm::ArrayRef<Entry *> ins);
  Error lowerGemm(llvm::ArrayRef<Entry *> ins);
  Error lowerReduce(llvm::ArrayRef<Entry *> ins);
  Error lowerCumSum(llvm::ArrayRef<Entry *> ins);
  Error lowerActivation(llvm::ArrayRef<Entry *> ins);
  Error lowerArgExtreme(llvm::ArrayRef<Entry *> ins);
  Error lowerMod(llvm::ArrayRef<Entry *> ins);
  Error lowerEinsum(llvm::ArrayRef<Entry *> ins);
  Error lowerEinsumUnary(Entry &x);
  Expected<Value> einsumOperand(Value input, std::string from,
                                llvm::StringRef summed, llvm::StringRef order,
                                llvm::ArrayRef<int64_t> shape);
  Error lowerPad(llvm::ArrayRef<Entry *> ins);
  Error lowerTile(llvm::ArrayRef<Entry *> ins);
  // ops/NN.cpp
  /// Softmax over the node's `axis` of its first input, shared by Softmax
  /// and LogSoftmax.
  struct SoftmaxParts {
    mlir::Value input;
    int64_t axis;
    mlir::Value softmax;
  };
  Expected<SoftmaxParts> importSoftmax(llvm::ArrayRef<Entry *> ins);
  Error lowerSoftmax(llvm::ArrayRef<Entry *> ins);
  Error lowerAttention(llvm::ArrayRef<Entry *> ins);
  Error lowerLayerNorm(llvm::ArrayRef<Entry *> ins);
  Error lowerDropout(llvm::ArrayRef<Entry *> ins);
  Error lowerLogSoftmax(llvm::ArrayRef<Entry *> ins);
  Error lowerSoftmaxCrossEntropy(llvm::ArrayRef<Entry *> ins);
  Error lowerNllLoss(llvm::ArrayRef<Entry *> ins);
  Error crossEntropy(Value scores, int64_t classAxis, Entry *labels);
  Error nllLoss(Value logProbs, Entry *labels, Entry *weight);
  Error lowerNormalization(llvm::ArrayRef<Entry *> ins);
  Error lowerConv(llvm::ArrayRef<Entry *> ins);
  Error lowerGlobalAveragePool(llvm::ArrayRef<Entry *> ins);
  Error lowerPool(llvm::ArrayRef<Entry *> ins);
  // ops/Tensor.cpp
  Error lowerIdentity(llvm::ArrayRef<Entry *> ins);
  Error lowerTranspose(llvm::ArrayRef<Entry *> ins);
  Error lowerReshapeLike(llvm::ArrayRef<Entry *> ins);
  Error lowerConcat(llvm::ArrayRef<Entry *> ins);
  Error lowerSlice(llvm::ArrayRef<Entry *> ins);
  Error lowerSplit(llvm::ArrayRef<Entry *> ins);
  Error lowerSplitToSequence(llvm::ArrayRef<Entry *> ins);
  Error lowerSequenceAt(llvm::ArrayRef<Entry *> ins);
  Error lowerGather(llvm::ArrayRef<Entry *> ins);
  Error lowerGatherND(llvm::ArrayRef<Entry *> ins);
  /// Gather of `indices` along `axis` of `data`: a slice for consecutive
  /// constant indices, else dtc.embedding.
  Expected<Value> gatherAlong(Entry &data, Entry &indices, int64_t axis);
  Error lowerGatherElements(llvm::ArrayRef<Entry *> ins);
  Error lowerWhere(llvm::ArrayRef<Entry *> ins);
  Error lowerCompare(llvm::ArrayRef<Entry *> ins);
  Error lowerLogic(llvm::ArrayRef<Entry *> ins);
  Error lowerIsNaNOrInf(llvm::ArrayRef<Entry *> ins);
  Error lowerClip(llvm::ArrayRef<Entry *> ins);
  Error lowerExpand(llvm::ArrayRef<Entry *> ins);
  Error lowerTrilu(llvm::ArrayRef<Entry *> ins);
  Error lowerDepthToSpace(llvm::ArrayRef<Entry *> ins);
  Error lowerCompress(llvm::ArrayRef<Entry *> ins);
  Error lowerEyeLike(llvm::ArrayRef<Entry *> ins);
  Error lowerOneHot(llvm::ArrayRef<Entry *> ins);
  Error lowerCastOp(llvm::ArrayRef<Entry *> ins);
  Error lowerCastLike(llvm::ArrayRef<Entry *> ins);
  Error lowerCast(llvm::ArrayRef<Entry *> ins, int32_t to);
  // ops/Microsoft.cpp
  Error lowerSkipLayerNorm(llvm::ArrayRef<Entry *> ins);
  Error lowerContribGelu(llvm::ArrayRef<Entry *> ins);
  Error lowerContribAttention(llvm::ArrayRef<Entry *> ins);
  /// The gated activation of ORT's MoE activation_type "swiglu" on the
  /// fc1 projection (gate and value fused per `fusion`) or on fc1 and
  /// `value` (fc3's projection, fusion 0), with the node's alpha, beta and
  /// swiglu_limit.
  Expected<Value> swiGlu(Value projected, int64_t fusion,
                         Expected<Value> value);
  Error lowerMoE(llvm::ArrayRef<Entry *> ins);
  Error lowerMultiHeadAttention(llvm::ArrayRef<Entry *> ins);
  Error lowerGroupQueryAttention(llvm::ArrayRef<Entry *> ins);
  Error lowerRotaryEmbedding(llvm::ArrayRef<Entry *> ins);
  Error lowerSimplifiedLayerNorm(llvm::ArrayRef<Entry *> ins);
  /// Rotary embedding of x [b, n, s, h] at `positions` ([b * s], or [s]
  /// shared) from known cos/sin caches [max positions, >= rot / 2]: the
  /// first `rot` features of each head turned, in halves or in pairs.
  Expected<Value> applyRotary(Value x, llvm::ArrayRef<int64_t> positions,
                              const HostTensor &cosCache,
                              const HostTensor &sinCache, int64_t rot,
                              bool interleaved);
  /// A number from the model's metadata_props, or `fallback`.
  double metadataNumber(llvm::StringRef key, double fallback) const;
  /// `x + bias`, or x when there is no bias.
  Expected<Value> addOptional(Value x, Entry *bias);
  Error checkUnusedOutputs(int from);
  Expected<HostTensor> decodeConstantNode();

  std::string path, baseDir;
  const ImportOptions &options;
  MLIRContext &ctx;
  OpBuilder builder;
  ::onnx::ModelProto model;
  /// Parameters stacked from per-expert initializers (FuseMoe.h), by name.
  llvm::StringMap<StackedWeight> stackedWeights;
  /// MoE layers imported so far (each dtc.moe_route's `layer`).
  int64_t moeLayers = 0;
  int64_t opset = 0;

  /// Shapes of the graph inputs after binding, by name.
  llvm::StringMap<llvm::SmallVector<int64_t, 4>> inputShapes;
  /// The batch every graph input fixes in its dim 0, if they all do and
  /// agree (module attribute `dtc.fixed_batch`): the compiled micro-batch
  /// must be it.
  std::optional<int64_t> fixedBatch;
  /// findFoldedTiedCopy's hazard, read before the weights' bytes go.
  std::optional<std::string> foldedTiedCopy;
  /// The fixed batch came from `--dim NAME=SIZE`: the user's, kept.
  bool batchFromDim = false;
  std::string batchDimName;
  bool sawInput = false;
  /// Set while importing a fixed-batch export at another batch.
  std::unique_ptr<BatchRebinder> rebinder;
  llvm::StringMap<int64_t> boundDims;
  /// Static shapes from ONNX shape inference, by value name.
  llvm::StringMap<llvm::SmallVector<int64_t, 4>> inferredShapes;
  /// How many times each value is read (node inputs and graph outputs).
  llvm::StringMap<int> useCounts;

  llvm::StringMap<Entry> values;
  /// Tensor sequences (SplitToSequence outputs) by name, read by SequenceAt;
  /// their entry in `values` holds neither a value nor a known tensor.
  llvm::StringMap<llvm::SmallVector<Entry>> sequences;
  /// Host evaluations by memoKey: exporters repeat shape arithmetic and the
  /// causal mask in every layer; each is computed once.
  std::map<std::string, llvm::SmallVector<std::shared_ptr<const HostTensor>>>
      hostMemo;
  llvm::DenseMap<const HostTensor *, Value> materialized;
  llvm::StringMap<const ::onnx::TensorProto *> lazyInitializers;
  /// Floating-point initializers that only feed host-only computation
  /// (e.g. rotary inv_freq -> Cos/Sin): known values, not dtc.parameter.
  llvm::StringSet<> hostConstants;
  /// LogSoftmax outputs -> (input, axis), for NegativeLogLikelihoodLoss.
  llvm::StringMap<std::pair<Value, int64_t>> logSoftmaxInputs;
  const ::onnx::NodeProto *node = nullptr;
  Location fileLoc = UnknownLoc::get(&ctx);
  Location nodeLoc = UnknownLoc::get(&ctx);
};

/// How one ONNX op type becomes dtc ops: a member of ModelImporter that
/// lowers the current node (`node`) given its input entries.
using LowerFn = Error (ModelImporter::*)(llvm::ArrayRef<Entry *>);
using LoweringTable = llvm::StringMap<LowerFn>;

// Each ops/*.cpp file adds its op types.
void registerMathOps(LoweringTable &table);
void registerNNOps(LoweringTable &table);
void registerTensorOps(LoweringTable &table);
void registerLogicOps(LoweringTable &table);
void registerMicrosoftOps(LoweringTable &table);

/// Every registered op type -> its lowering.
const LoweringTable &loweringTable();

} // namespace dtc::onnx::detail

#endif // DTC_FRONTENDS_ONNX_IMPORTERIMPL_H
