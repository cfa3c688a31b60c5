//===- DtcCollectiveOps.cpp - collectives, wait, async handles ------------===//
//
// Verifiers and shape rules of the ops in DtcCollectiveOps.td. A collective's
// group is named by mesh axes; its size is the product of their sizes in the
// mesh of the enclosing function or module (`dtc.mesh`), which is what the
// local-shape rules need.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcCollectiveOps.h"
#include "dialects/dtc/DtcOps.h"
#include "runtime/support/Mesh.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::dtc;

#define GET_TYPEDEF_CLASSES
#include "dialects/dtc/DtcCollectiveTypes.cpp.inc"

void DtcDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/dtc/DtcCollectiveTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// DeviceMesh
//===----------------------------------------------------------------------===//

DeviceMesh DeviceMesh::get(MeshAttr mesh) {
  DeviceMesh device;
  llvm::append_range(device.axes, mesh.getAxes());
  return device;
}

std::optional<DeviceMesh> DeviceMesh::lookup(Operation *op) {
  for (; op; op = op->getParentOp())
    if (Attribute attr = op->getAttr(kMeshAttrName)) {
      if (auto mesh = dyn_cast<MeshAttr>(attr))
        return get(mesh);
      return std::nullopt;
    }
  return std::nullopt;
}

std::optional<size_t> DeviceMesh::find(StringRef name) const {
  for (auto [i, axis] : llvm::enumerate(axes))
    if (axis.name == name)
      return i;
  return std::nullopt;
}

int64_t DeviceMesh::numRanks() const {
  int64_t n = 1;
  for (const Axis &axis : axes)
    n *= axis.size;
  return n;
}

std::string DeviceMesh::str() const {
  return ::dtc::runtime::Mesh(std::vector<Axis>(axes.begin(), axes.end()))
      .str();
}

//===----------------------------------------------------------------------===//
// AsyncType
//===----------------------------------------------------------------------===//

LogicalResult AsyncType::verify(function_ref<InFlightDiagnostic()> emitError,
                                Type valueType) {
  if (isa<NoneType>(valueType))
    return success();
  auto tensor = dyn_cast<RankedTensorType>(valueType);
  if (!tensor || !tensor.hasStaticShape())
    return emitError() << "!dtc.async holds a static tensor or none, got "
                       << valueType;
  return success();
}

//===----------------------------------------------------------------------===//
// Shared checks
//===----------------------------------------------------------------------===//

FailureOr<int64_t> mlir::dtc::groupSize(Operation *op, ArrayAttr axes) {
  if (axes.empty())
    return op->emitOpError("needs at least one mesh axis");
  std::optional<DeviceMesh> mesh = DeviceMesh::lookup(op);
  if (!mesh)
    return op->emitOpError("needs a valid `dtc.mesh` attribute on its "
                           "function or module to size its group");
  int64_t size = 1;
  llvm::SmallVector<StringRef> seen;
  for (Attribute attr : axes) {
    StringRef name = cast<StringAttr>(attr).getValue();
    if (llvm::is_contained(seen, name))
      return op->emitOpError("names mesh axis \"") << name << "\" twice";
    seen.push_back(name);
    std::optional<size_t> index = mesh->find(name);
    if (!index)
      return op->emitOpError("uses mesh axis \"")
             << name << "\", which is not in the mesh (" << mesh->str() << ")";
    size *= mesh->axes[*index].size;
  }
  return size;
}

static LogicalResult verifyReduction(Operation *op, StringRef reduction) {
  if (reduction != "sum" && reduction != "max" && reduction != "min")
    return op->emitOpError("reduction must be sum, max or min, got \"")
           << reduction << "\"";
  return success();
}

/// A start's handle is waited exactly once, by a `dtc.wait` in its block.
static LogicalResult verifyHandleUse(Operation *op, Value handle) {
  if (!handle.hasOneUse())
    return op->emitOpError("handle must have exactly one use, a dtc.wait");
  Operation *user = *handle.getUsers().begin();
  if (!isa<WaitOp>(user) || user->getBlock() != op->getBlock())
    return op->emitOpError("handle must be used by a dtc.wait in the same "
                           "block");
  return success();
}

/// The tensor a start's handle carries.
static FailureOr<RankedTensorType> handleTensor(Operation *op, Value handle) {
  auto tensor = dyn_cast<RankedTensorType>(
      cast<AsyncType>(handle.getType()).getValueType());
  if (!tensor)
    return op->emitOpError("handle must carry a tensor, got ")
           << handle.getType();
  return tensor;
}

/// `whole` is `part` with dim `dim` `n` times larger; `block` (0: whole dim)
/// must split into `n` runs.
static LogicalResult verifySplitDim(Operation *op, RankedTensorType whole,
                                    RankedTensorType part, int64_t dim,
                                    int64_t block, int64_t n,
                                    StringRef wholeName, StringRef partName) {
  if (whole.getElementType() != part.getElementType())
    return op->emitOpError("element types differ: ")
           << whole.getElementType() << " vs " << part.getElementType();
  if (whole.getRank() != part.getRank())
    return op->emitOpError("ranks differ: ")
           << whole.getRank() << " vs " << part.getRank();
  if (dim < 0 || dim >= whole.getRank())
    return op->emitOpError("dim ")
           << dim << " is out of range for rank " << whole.getRank();
  int64_t size = whole.getDimSize(dim);
  int64_t run = block ? block : size;
  if (block < 0 || size % run || run % n)
    return op->emitOpError("dim ")
           << dim << " of size " << size
           << (block ? " (block " + std::to_string(block) + ")" : "")
           << " does not split over a group of " << n;
  for (int64_t d = 0; d < whole.getRank(); ++d) {
    int64_t expected = d == dim ? size / n : whole.getDimSize(d);
    if (part.getDimSize(d) != expected)
      return op->emitOpError("the ")
             << partName << " must have size " << expected << " in dim " << d
             << " (the " << wholeName << " divided over a group of " << n
             << "), got " << part.getDimSize(d);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Starts
//===----------------------------------------------------------------------===//

LogicalResult AllReduceStartOp::verify() {
  FailureOr<int64_t> n = groupSize(*this, getMeshAxes());
  if (failed(n) || failed(verifyReduction(*this, getReduction())) ||
      failed(verifyHandleUse(*this, getHandle())))
    return failure();
  FailureOr<RankedTensorType> result = handleTensor(*this, getHandle());
  if (failed(result))
    return failure();
  if (*result != getInput().getType())
    return emitOpError("handle must carry the input type ")
           << getInput().getType() << ", got " << *result;
  return success();
}

LogicalResult AllGatherStartOp::verify() {
  FailureOr<int64_t> n = groupSize(*this, getMeshAxes());
  if (failed(n) || failed(verifyHandleUse(*this, getHandle())))
    return failure();
  FailureOr<RankedTensorType> result = handleTensor(*this, getHandle());
  if (failed(result))
    return failure();
  return verifySplitDim(*this, *result, getInput().getType(), getDim(),
                        getBlock(), *n, "result", "input");
}

LogicalResult ReduceScatterStartOp::verify() {
  FailureOr<int64_t> n = groupSize(*this, getMeshAxes());
  if (failed(n) || failed(verifyReduction(*this, getReduction())) ||
      failed(verifyHandleUse(*this, getHandle())))
    return failure();
  FailureOr<RankedTensorType> result = handleTensor(*this, getHandle());
  if (failed(result))
    return failure();
  return verifySplitDim(*this, getInput().getType(), *result, getDim(),
                        getBlock(), *n, "input", "result");
}

LogicalResult AllToAllStartOp::verify() {
  FailureOr<int64_t> n = groupSize(*this, getMeshAxes());
  if (failed(n) || failed(verifyHandleUse(*this, getHandle())))
    return failure();
  FailureOr<RankedTensorType> result = handleTensor(*this, getHandle());
  if (failed(result))
    return failure();
  RankedTensorType input = getInput().getType();
  int64_t rank = input.getRank();
  int64_t split = getSplitDim(), concat = getConcatDim();
  if (split < 0 || split >= rank || concat < 0 || concat >= rank)
    return emitOpError("split_dim and concat_dim must be in [0, ")
           << rank << ")";
  if (split == concat)
    return emitOpError("split_dim and concat_dim must differ");
  if (input.getDimSize(split) % *n)
    return emitOpError("split_dim ")
           << split << " of size " << input.getDimSize(split)
           << " does not split over a group of " << *n;
  SmallVector<int64_t> shape(input.getShape());
  shape[split] /= *n;
  shape[concat] *= *n;
  auto expected = RankedTensorType::get(shape, input.getElementType());
  if (*result != expected)
    return emitOpError("handle must carry ")
           << expected << " (split_dim divided, concat_dim multiplied by " << *n
           << "), got " << *result;
  return success();
}

/// Send and receive: one axis, a peer that exists on it.
static LogicalResult verifyPeer(Operation *op, ArrayAttr axes, int64_t offset) {
  if (axes.size() != 1)
    return op->emitOpError("needs exactly one mesh axis, got ") << axes.size();
  FailureOr<int64_t> n = groupSize(op, axes);
  if (failed(n))
    return failure();
  if (offset == 0 || std::abs(offset) >= *n)
    return op->emitOpError("peer_offset must be non-zero and within the "
                           "axis of size ")
           << *n << ", got " << offset;
  return success();
}

LogicalResult SendStartOp::verify() {
  if (failed(verifyPeer(*this, getMeshAxes(), getPeerOffset())) ||
      failed(verifyHandleUse(*this, getHandle())))
    return failure();
  if (!isa<NoneType>(getHandle().getType().getValueType()))
    return emitOpError("handle must be !dtc.async<none>, got ")
           << getHandle().getType();
  return success();
}

LogicalResult RecvStartOp::verify() {
  if (failed(verifyPeer(*this, getMeshAxes(), getPeerOffset())) ||
      failed(verifyHandleUse(*this, getHandle())))
    return failure();
  return handleTensor(*this, getHandle());
}

//===----------------------------------------------------------------------===//
// Wait and shard_slice
//===----------------------------------------------------------------------===//

LogicalResult WaitOp::inferReturnTypes(MLIRContext *,
                                       std::optional<Location> loc,
                                       Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  auto handle = dyn_cast<AsyncType>(adaptor.getHandle().getType());
  if (!handle)
    return emitOptionalError(loc, "dtc.wait needs a !dtc.async handle");
  if (!isa<NoneType>(handle.getValueType()))
    types.push_back(handle.getValueType());
  return success();
}

LogicalResult WaitOp::verify() {
  Operation *start = getHandle().getDefiningOp();
  if (!start || !isa<AllReduceStartOp, AllGatherStartOp, ReduceScatterStartOp,
                     AllToAllStartOp, SendStartOp, RecvStartOp>(start))
    return emitOpError("handle must be the result of a dtc.*_start op");
  return success();
}

LogicalResult ShardSliceOp::verify() {
  FailureOr<int64_t> n = groupSize(*this, getMeshAxes());
  if (failed(n))
    return failure();
  return verifySplitDim(*this, getInput().getType(), getOutput().getType(),
                        getDim(), getBlock(), *n, "input", "result");
}

//===----------------------------------------------------------------------===//
// Zigzag order
//===----------------------------------------------------------------------===//

LogicalResult ZigzagOrderOp::verify() {
  auto type = cast<RankedTensorType>(getInput().getType());
  int64_t dim = getDim(), parts = getParts();
  if (dim < 0 || dim >= type.getRank())
    return emitOpError("dim must be in [0, ") << type.getRank() << ")";
  if (parts < 1 || type.getDimSize(dim) % (2 * parts))
    return emitOpError("dimension ")
           << dim << " of size " << type.getDimSize(dim)
           << " does not split into 2 x " << parts << " equal pieces";
  return success();
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel cross-entropy
//===----------------------------------------------------------------------===//

/// Labels [...] against logits [..., v].
static LogicalResult verifyLabels(Operation *op, Type logits, Type labels) {
  auto l = cast<RankedTensorType>(logits);
  auto y = cast<RankedTensorType>(labels);
  if (l.getRank() < 1 || y.getShape() != l.getShape().drop_back())
    return op->emitOpError("labels ")
           << y << " must have the shape of logits " << l
           << " without its last (vocabulary) dim";
  return success();
}

/// Stats [..., 3 * shards] f32 for labels [...]; any number of shards when
/// `shards` is 0.
static LogicalResult verifyStats(Operation *op, Type stats, Type labels,
                                 int64_t shards) {
  auto s = cast<RankedTensorType>(stats);
  auto y = cast<RankedTensorType>(labels);
  int64_t last = s.getRank() ? s.getShape().back() : 0;
  if (!s.getElementType().isF32() || s.getRank() != y.getRank() + 1 ||
      s.getShape().drop_back() != y.getShape() || last < 3 || last % 3 ||
      (shards && last != 3 * shards))
    return op->emitOpError("stats must be f32 ")
           << y.getShape() << " plus a last dim of "
           << (shards ? std::to_string(3 * shards) : "3 per shard") << ", got "
           << s;
  return success();
}

LogicalResult CrossEntropyStatsOp::verify() {
  if (failed(groupSize(*this, getMeshAxes())) ||
      failed(verifyLabels(*this, getLogits().getType(), getLabels().getType())))
    return failure();
  return verifyStats(*this, getStats().getType(), getLabels().getType(), 1);
}

LogicalResult CrossEntropyFromStatsOp::verify() {
  return verifyStats(*this, getStats().getType(), getLabels().getType(), 0);
}

LogicalResult CrossEntropyShardGradOp::verify() {
  FailureOr<int64_t> n = groupSize(*this, getMeshAxes());
  if (failed(n) ||
      failed(verifyLabels(*this, getLogits().getType(), getLabels().getType())))
    return failure();
  if (getLogitsGrad().getType() != getLogits().getType())
    return emitOpError("result must have the logits' type ")
           << getLogits().getType();
  return verifyStats(*this, getStats().getType(), getLabels().getType(), *n);
}

//===----------------------------------------------------------------------===//
// Vocabulary-parallel embedding
//===----------------------------------------------------------------------===//

/// Ids [...] and rows [..., d] of a lookup into a table shard [v, d].
static LogicalResult verifyLookup(Operation *op, Type table, Type ids,
                                  Type rows, StringRef rowsName) {
  auto t = cast<RankedTensorType>(table);
  auto i = cast<RankedTensorType>(ids);
  auto r = cast<RankedTensorType>(rows);
  if (t.getRank() != 2)
    return op->emitOpError("table must be [rows, dim], got ") << t;
  SmallVector<int64_t> shape(i.getShape());
  shape.push_back(t.getDimSize(1));
  if (r.getShape() != ArrayRef<int64_t>(shape))
    return op->emitOpError() << rowsName << " " << r
                             << " must have the ids' shape plus the table's "
                                "dim ("
                             << t.getDimSize(1) << ")";
  return success();
}

LogicalResult EmbeddingShardOp::verify() {
  if (failed(groupSize(*this, getMeshAxes())))
    return failure();
  if (getOutput().getType().getElementType() !=
      getTable().getType().getElementType())
    return emitOpError("result must have the table's element type ")
           << getTable().getType().getElementType();
  return verifyLookup(*this, getTable().getType(), getIds().getType(),
                      getOutput().getType(), "result");
}

LogicalResult EmbeddingShardGradOp::verify() {
  if (failed(groupSize(*this, getMeshAxes())))
    return failure();
  auto result = getTableGrad().getType();
  if (result.getRank() != 2 || result.getDimSize(0) != getNumRows())
    return emitOpError("result must have num_rows (")
           << getNumRows() << ") rows, got " << result;
  return verifyLookup(*this, result, getIds().getType(), getGrad().getType(),
                      "grad");
}
