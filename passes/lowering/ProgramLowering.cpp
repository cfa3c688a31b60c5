//===- ProgramLowering.cpp - dtc IR -> runtime program --------------------===//

#include "passes/lowering/ProgramLowering.h"

#include "dialects/dtc/DtcAttrs.h"
#include "dialects/dtc/DtcCollectiveOps.h"
#include "dialects/dtc/DtcOps.h"
#include "runtime/support/Error.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace d = mlir::dtc;

namespace dtc {
namespace {

constexpr int64_t kAlignment = 64;

int64_t alignUp(int64_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

std::optional<program::DType> dtypeOf(mlir::Type type) {
  if (type.isF32())
    return program::F32;
  if (type.isF16())
    return program::F16;
  if (type.isBF16())
    return program::BF16;
  if (type.isF64())
    return program::F64;
  if (type.isInteger(64))
    return program::I64;
  if (type.isInteger(32))
    return program::I32;
  if (type.isInteger(8))
    return program::I8;
  if (type.isInteger(1))
    return program::BOOL;
  return std::nullopt;
}

int64_t elementBytes(program::DType dtype) {
  switch (dtype) {
  case program::F64:
  case program::I64:
    return 8;
  case program::F32:
  case program::I32:
    return 4;
  case program::F16:
  case program::BF16:
    return 2;
  default:
    return 1;
  }
}

/// The handle of a send (`!dtc.async<none>`): no bytes, so no value.
bool isNoneHandle(mlir::Value value) {
  auto async = llvm::dyn_cast<d::AsyncType>(value.getType());
  return async && llvm::isa<mlir::NoneType>(async.getValueType());
}

bool isCommunicationStart(mlir::Operation *op) {
  return llvm::isa<d::AllReduceStartOp, d::AllGatherStartOp,
                   d::ReduceScatterStartOp, d::AllToAllStartOp, d::SendStartOp,
                   d::RecvStartOp>(op);
}

llvm::Error setType(program::TensorType &out, mlir::Type type,
                    mlir::Location loc) {
  // A communication handle is stored as the buffer its wait yields.
  if (auto async = llvm::dyn_cast<d::AsyncType>(type))
    type = async.getValueType();
  auto tensor = llvm::dyn_cast<mlir::RankedTensorType>(type);
  std::optional<program::DType> dtype = tensor && tensor.hasStaticShape()
                                            ? dtypeOf(tensor.getElementType())
                                            : std::nullopt;
  if (!dtype) {
    std::string s;
    llvm::raw_string_ostream os(s);
    os << type;
    return failure("program lowering: type {0} has no runtime representation "
                   "(static tensors of f32/f16/bf16/f64/i64/i32/i8/i1 only)",
                   s);
  }
  out.set_dtype(*dtype);
  for (int64_t dim : tensor.getShape())
    out.add_shape(dim);
  (void)loc;
  return llvm::Error::success();
}

int64_t bytesOf(const program::TensorType &type) {
  int64_t n = elementBytes(type.dtype());
  for (int64_t dim : type.shape())
    n *= dim;
  return n;
}

/// The node name of an op's location (the importer's `loc("name"(...))`).
std::string locationName(mlir::Location loc) {
  if (auto named = llvm::dyn_cast<mlir::NameLoc>(loc))
    return named.getName().str();
  if (auto fused = llvm::dyn_cast<mlir::FusedLoc>(loc))
    for (mlir::Location inner : fused.getLocations())
      if (std::string name = locationName(inner); !name.empty())
        return name;
  return "";
}

/// Converts an op attribute; returns false for attributes with no runtime
/// meaning (discardable `dtc.*` annotations, segment sizes).
bool convertAttribute(mlir::Attribute attr, program::Attribute &out) {
  if (llvm::isa<mlir::UnitAttr>(attr)) {
    out.set_b(true);
  } else if (auto b = llvm::dyn_cast<mlir::BoolAttr>(attr)) {
    out.set_b(b.getValue());
  } else if (auto i = llvm::dyn_cast<mlir::IntegerAttr>(attr)) {
    out.set_i(i.getValue().getSExtValue());
  } else if (auto f = llvm::dyn_cast<mlir::FloatAttr>(attr)) {
    out.set_f(f.getValueAsDouble());
  } else if (auto ints = llvm::dyn_cast<mlir::DenseI64ArrayAttr>(attr)) {
    for (int64_t v : ints.asArrayRef())
      out.mutable_ints()->add_values(v);
  } else if (auto floats = llvm::dyn_cast<mlir::DenseF64ArrayAttr>(attr)) {
    for (double v : floats.asArrayRef())
      out.mutable_floats()->add_values(v);
  } else if (auto type = llvm::dyn_cast<mlir::TypeAttr>(attr)) {
    std::optional<program::DType> dtype = dtypeOf(type.getValue());
    if (!dtype)
      return false;
    static const char *names[] = {"?",   "f32", "f16", "bf16", "f64",
                                  "i64", "i32", "i8",  "i1"};
    out.set_s(names[*dtype]);
  } else if (auto str = llvm::dyn_cast<mlir::StringAttr>(attr)) {
    out.set_s(str.getValue().str());
  } else if (auto array = llvm::dyn_cast<mlir::ArrayAttr>(attr);
             array && !array.empty() && llvm::isa<mlir::StringAttr>(array[0])) {
    for (mlir::Attribute element : array) {
      auto str = llvm::dyn_cast<mlir::StringAttr>(element);
      if (!str)
        return false;
      out.mutable_strings()->add_values(str.getValue().str());
    }
  } else if (auto array = llvm::dyn_cast<mlir::ArrayAttr>(attr)) {
    for (mlir::Attribute element : array) {
      auto i = llvm::dyn_cast<mlir::IntegerAttr>(element);
      if (!i)
        return false;
      out.mutable_ints()->add_values(i.getValue().getSExtValue());
    }
  } else {
    return false;
  }
  return true;
}

/// Little-endian bytes of a dense constant (one element when splat).
llvm::Error encodeConstant(mlir::DenseElementsAttr attr,
                           program::Constant &out) {
  program::DType dtype = out.type().dtype();
  int64_t width = elementBytes(dtype);
  out.set_splat(attr.isSplat());
  int64_t count = attr.isSplat() ? 1 : attr.getNumElements();
  std::string bytes(count * width, '\0');
  char *p = bytes.data();
  auto putInt = [&](int64_t i, const llvm::APInt &v) {
    uint64_t raw =
        dtype == program::BOOL ? (v.isZero() ? 0 : 1) : v.getZExtValue();
    std::memcpy(p + i * width, &raw, width); // little-endian host
  };
  if (llvm::isa<mlir::FloatType>(attr.getElementType())) {
    int64_t i = 0;
    for (const llvm::APFloat &v : attr.getValues<llvm::APFloat>()) {
      llvm::APInt bits = v.bitcastToAPInt();
      uint64_t raw = bits.getZExtValue();
      std::memcpy(p + i * width, &raw, width);
      if (++i == count)
        break;
    }
  } else {
    int64_t i = 0;
    for (const llvm::APInt &v : attr.getValues<llvm::APInt>()) {
      putInt(i, v);
      if (++i == count)
        break;
    }
  }
  out.set_data(std::move(bytes));
  return llvm::Error::success();
}

/// `op`'s attributes with its definition's defaults filled in (ODS
/// DefaultValuedAttr, and those ComputedDefaultsOpInterface computes from
/// operand types, as attention's 1/sqrt(head dim) scale): the program
/// states every value a kernel reads, so no backend restates a default.
mlir::NamedAttrList attributesWithDefaults(mlir::Operation *op) {
  if (op->getPropertiesStorageSize())
    op->getName().populateDefaultProperties(op->getPropertiesStorage());
  mlir::NamedAttrList attrs(op->getAttrDictionary());
  if (auto computed = llvm::dyn_cast<d::ComputedDefaultsOpInterface>(op))
    computed.addComputedDefaults(attrs);
  return attrs;
}

/// The (result, operand) pairs whose buffers the op's kernels allow to be
/// shared (InPlaceOpInterface); the planner also needs equal types.
llvm::SmallVector<std::pair<unsigned, unsigned>>
inPlaceCandidates(mlir::Operation *op) {
  if (auto inPlace = llvm::dyn_cast<d::InPlaceOpInterface>(op))
    return inPlace.getInPlaceOperands();
  return {};
}

/// A byte range of the arena.
struct Block {
  int64_t offset, size;
};

/// First-fit placement of live blocks in one arena.
class ArenaAllocator {
public:
  int64_t allocate(int64_t size) {
    int64_t offset = 0;
    auto it = live_.begin();
    for (; it != live_.end(); ++it) {
      if (it->first - offset >= size)
        break;
      offset = std::max(offset, it->first + it->second);
    }
    live_.emplace(offset, size);
    peak_ = std::max(peak_, offset + size);
    return offset;
  }
  void release(int64_t offset) { live_.erase(offset); }
  int64_t peak() const { return peak_; }

private:
  std::map<int64_t, int64_t> live_; // offset -> size
  int64_t peak_ = 0;
};

class FunctionLowering {
public:
  FunctionLowering(mlir::func::FuncOp func, program::RankProgram &program,
                   llvm::StringMap<int> &variableIndex,
                   llvm::DenseMap<mlir::Attribute, int> &constantIndex)
      : func_(func), program_(program), variableIndex_(variableIndex),
        constantIndex_(constantIndex) {}

  llvm::Error lower(program::Function &out);

private:
  llvm::Expected<int> addValue(mlir::Value value, program::Function &out);
  /// The value ids of `values`, without send handles (which have none).
  llvm::SmallVector<int> idsOf(mlir::ValueRange values) const;
  llvm::Error setArgumentShard(program::Argument &a, mlir::BlockArgument arg);
  llvm::Error addVariable(llvm::StringRef name, mlir::Type type,
                          llvm::StringRef role, llvm::StringRef parameter,
                          mlir::Location loc);
  std::string fallbackInit(mlir::Operation *parameterOp);
  llvm::Error lowerPipeline(mlir::DictionaryAttr attr, program::Pipeline &out);

  /// Values that share storage: union-find parents and, per root, the last
  /// instruction index any member is read at.
  struct StorageGroups {
    std::vector<int> parent, end;
    int find(int v) {
      while (parent[v] != v)
        v = parent[v] = parent[parent[v]];
      return v;
    }
  };
  // lower(), one concern each, in order.
  llvm::Error lowerArguments(program::Function &out);
  llvm::Expected<llvm::SmallVector<mlir::Operation *>>
  lowerValues(program::Function &out);
  llvm::Error lowerParameter(d::ParameterOp parameter, program::Function &out);
  std::vector<int> lastUses(const program::Function &out,
                            llvm::ArrayRef<mlir::Operation *> computeOps);
  StorageGroups groupStorage(program::Function &out,
                             llvm::ArrayRef<mlir::Operation *> computeOps);
  void placeInArena(program::Function &out,
                    llvm::ArrayRef<mlir::Operation *> computeOps,
                    StorageGroups &groups);
  llvm::Error emitInstructions(program::Function &out,
                               llvm::ArrayRef<mlir::Operation *> computeOps);
  llvm::Error lowerResults(program::Function &out);

  mlir::func::FuncOp func_;
  program::RankProgram &program_;
  llvm::StringMap<int> &variableIndex_;
  /// Each distinct constant is stored once in the program: a pipeline step
  /// inlines its stage's constants (RoPE tables, masks) into every pass.
  llvm::DenseMap<mlir::Attribute, int> &constantIndex_;
  llvm::DenseMap<mlir::Value, int> ids_;
};

llvm::Expected<int> FunctionLowering::addValue(mlir::Value value,
                                               program::Function &out) {
  int id = out.values_size();
  program::Value *v = out.add_values();
  v->set_id(id);
  if (llvm::Error e =
          setType(*v->mutable_type(), value.getType(), value.getLoc()))
    return std::move(e);
  ids_[value] = id;
  return id;
}

llvm::SmallVector<int> FunctionLowering::idsOf(mlir::ValueRange values) const {
  llvm::SmallVector<int> ids;
  for (mlir::Value v : values)
    if (!isNoneHandle(v))
      ids.push_back(ids_.lookup(v));
  return ids;
}

/// Records how a partitioned parameter's variable is a shard of the whole
/// tensor (dtc-partition's `dtc.shard` and `dtc.global_type`).
llvm::Error setShard(program::Variable &var, mlir::Operation *parameterOp) {
  auto shard = parameterOp->getAttrOfType<d::ShardingAttr>("dtc.shard");
  auto global = parameterOp->getAttrOfType<mlir::TypeAttr>("dtc.global_type");
  if (!shard && !global)
    return llvm::Error::success();
  auto globalType =
      global ? llvm::dyn_cast<mlir::RankedTensorType>(global.getValue())
             : nullptr;
  if (!shard || !globalType ||
      globalType.getRank() != static_cast<int64_t>(shard.getDims().size()))
    return failure("program lowering: parameter '{0}' has an inconsistent "
                   "dtc.shard / dtc.global_type",
                   var.name());
  for (int64_t dim : globalType.getShape())
    var.add_global_shape(dim);
  for (unsigned dim = 0; dim < shard.getDims().size(); ++dim) {
    program::DimShard *d = var.add_shard();
    for (llvm::StringRef axis : shard.getDimAxes(dim))
      d->add_axes(axis.str());
    d->set_block(shard.getBlocks()[dim]);
  }
  if (auto flat = parameterOp->getAttrOfType<mlir::ArrayAttr>("dtc.flat_shard"))
    for (mlir::Attribute axis : flat)
      var.add_flat_axes(llvm::cast<mlir::StringAttr>(axis).getValue().str());
  return llvm::Error::success();
}

/// A partitioned input that each rank reads part of: its whole shape (the
/// local one times the group size of each split dim, from the function's
/// `dtc.mesh`) and split, so the runtime can cut the rank's part.
llvm::Error FunctionLowering::setArgumentShard(program::Argument &a,
                                               mlir::BlockArgument arg) {
  auto sharding = func_.getArgAttrOfType<d::ShardingAttr>(arg.getArgNumber(),
                                                          "dtc.sharding");
  std::optional<d::DeviceMesh> mesh = d::DeviceMesh::lookup(func_);
  if (!sharding || !mesh)
    return llvm::Error::success();
  auto type = llvm::cast<mlir::RankedTensorType>(arg.getType());
  bool split = false;
  for (unsigned dim = 0; dim < sharding.getDims().size(); ++dim) {
    program::DimShard *d = a.add_shard();
    int64_t parts = 1;
    for (llvm::StringRef axis : sharding.getDimAxes(dim)) {
      d->add_axes(axis.str());
      if (std::optional<size_t> i = mesh->find(axis))
        parts *= mesh->axes[*i].size;
      split = true;
    }
    d->set_block(sharding.getBlocks()[dim]);
    a.add_global_shape(type.getDimSize(dim) * parts);
  }
  if (!split) {
    a.clear_shard();
    a.clear_global_shape();
  }
  return llvm::Error::success();
}

/// What `dtc run --init` gives a parameter of a model without weight data:
/// norm scales 1, biases and other vectors 0, matrices N(0, 0.02).
std::string FunctionLowering::fallbackInit(mlir::Operation *parameterOp) {
  mlir::Value value = parameterOp->getResult(0);
  for (mlir::OpOperand &use : value.getUses()) {
    mlir::Operation *user = use.getOwner();
    if (llvm::isa<d::LayerNormOp, d::RmsNormOp>(user))
      return use.getOperandNumber() == 1 ? "ones" : "zeros";
  }
  auto type = llvm::cast<mlir::RankedTensorType>(value.getType());
  return type.getRank() >= 2 ? "normal" : "zeros";
}

llvm::Error FunctionLowering::addVariable(llvm::StringRef name, mlir::Type type,
                                          llvm::StringRef role,
                                          llvm::StringRef parameter,
                                          mlir::Location loc) {
  auto it = variableIndex_.find(name);
  if (it != variableIndex_.end()) {
    program::TensorType expected;
    if (llvm::Error e = setType(expected, type, loc))
      return e;
    const program::Variable &existing = program_.variables(it->second);
    if (existing.type().SerializeAsString() != expected.SerializeAsString())
      return failure("program lowering: variable '{0}' is used with two "
                     "different types",
                     name);
    return llvm::Error::success();
  }
  variableIndex_[name] = program_.variables_size();
  program::Variable *v = program_.add_variables();
  v->set_name(name.str());
  v->set_role(role.str());
  v->set_parameter(parameter.str());
  v->set_init(role == "parameter" || role == "buffer" ? "model" : "zeros");
  return setType(*v->mutable_type(), type, loc);
}

llvm::Error FunctionLowering::lower(program::Function &out) {
  out.set_name(func_.getSymName().str());
  if (llvm::Error e = lowerArguments(out))
    return e;
  auto computeOps = lowerValues(out);
  if (!computeOps)
    return computeOps.takeError();
  StorageGroups groups = groupStorage(out, *computeOps);
  placeInArena(out, *computeOps, groups);
  if (llvm::Error e = emitInstructions(out, *computeOps))
    return e;
  if (llvm::Error e = lowerResults(out))
    return e;
  if (auto pipeline =
          func_->getAttrOfType<mlir::DictionaryAttr>("dtc.pipeline"))
    return lowerPipeline(pipeline, *out.mutable_pipeline());
  return llvm::Error::success();
}

/// Arguments: fed by the runtime, or persistent variables (`dtc.state`).
llvm::Error FunctionLowering::lowerArguments(program::Function &out) {
  for (mlir::BlockArgument arg : func_.getBody().front().getArguments()) {
    auto id = addValue(arg, out);
    if (!id)
      return id.takeError();
    unsigned index = arg.getArgNumber();
    program::Value &v = *out.mutable_values(*id);
    if (auto state =
            func_.getArgAttrOfType<mlir::StringAttr>(index, "dtc.state")) {
      auto role =
          func_.getArgAttrOfType<mlir::StringAttr>(index, "dtc.state_role");
      auto of = func_.getArgAttrOfType<mlir::StringAttr>(index, "dtc.state_of");
      if (llvm::Error e = addVariable(state.getValue(), arg.getType(),
                                      role ? role.getValue() : "state",
                                      of ? of.getValue() : "", arg.getLoc()))
        return e;
      if (auto flat = func_.getArgAttrOfType<mlir::ArrayAttr>(
              index, "dtc.flat_shard")) {
        program::Variable &var =
            *program_.mutable_variables(variableIndex_[state.getValue()]);
        var.clear_flat_axes();
        for (mlir::Attribute axis : flat)
          var.add_flat_axes(
              llvm::cast<mlir::StringAttr>(axis).getValue().str());
      }
      v.set_state(state.getValue().str());
      continue;
    }
    v.set_argument(index);
    program::Argument *a = out.add_arguments();
    a->set_value(*id);
    if (auto name = func_.getArgAttrOfType<mlir::StringAttr>(index, "dtc.name"))
      a->set_name(name.getValue().str());
    auto feed = func_.getArgAttrOfType<mlir::StringAttr>(index, "dtc.feed");
    a->set_feed(feed ? feed.getValue().str() : "input");
    if (llvm::Error e = setArgumentShard(*a, arg))
      return e;
    a->set_zigzag(func_.getArgAttr(index, "dtc.zigzag") != nullptr);
  }
  return llvm::Error::success();
}

/// Values in program order: constants (stored once in the program),
/// parameters (variables), and the results of the ops that compute, which
/// are returned.
llvm::Expected<llvm::SmallVector<mlir::Operation *>>
FunctionLowering::lowerValues(program::Function &out) {
  llvm::SmallVector<mlir::Operation *> computeOps;
  for (mlir::Operation &op : func_.getBody().front().without_terminator()) {
    if (auto constant = llvm::dyn_cast<d::ConstantOp>(op)) {
      auto id = addValue(constant.getResult(), out);
      if (!id)
        return id.takeError();
      auto dense = llvm::dyn_cast<mlir::DenseElementsAttr>(constant.getValue());
      if (!dense)
        return failure("program lowering: constant at {0} is not a dense "
                       "elements attribute",
                       locationName(op.getLoc()));
      auto [index, isNew] =
          constantIndex_.try_emplace(dense, program_.constants_size());
      if (isNew) {
        program::Constant *c = program_.add_constants();
        *c->mutable_type() = out.values(*id).type();
        if (llvm::Error e = encodeConstant(dense, *c))
          return std::move(e);
      }
      out.mutable_values(*id)->set_constant(index->second);
      continue;
    }
    if (auto parameter = llvm::dyn_cast<d::ParameterOp>(op)) {
      if (llvm::Error e = lowerParameter(parameter, out))
        return std::move(e);
      continue;
    }
    if (op.getNumRegions() != 0)
      return failure("program lowering: op '{0}' at '{1}' has regions; the "
                     "runtime executes flat dtc programs only",
                     op.getName().getStringRef(), locationName(op.getLoc()));
    for (mlir::Value result : op.getResults())
      if (isNoneHandle(result))
        continue;
      else if (auto id = addValue(result, out); !id)
        return id.takeError();
    computeOps.push_back(&op);
  }
  return computeOps;
}

/// A parameter's value reads its variable; the first read creates it.
llvm::Error FunctionLowering::lowerParameter(d::ParameterOp parameter,
                                             program::Function &out) {
  auto id = addValue(parameter.getResult(), out);
  if (!id)
    return id.takeError();
  llvm::StringRef name = parameter.getName();
  bool isNew = !variableIndex_.count(name);
  // A frozen tensor is the model's buffer: kept and checkpointed, never
  // trained.
  llvm::StringRef role = parameter.getFrozen() ? "buffer" : "parameter";
  if (llvm::Error e = addVariable(name, parameter.getType(), role, name,
                                  parameter.getLoc()))
    return e;
  program::Variable &var = *program_.mutable_variables(variableIndex_[name]);
  if (isNew) {
    var.set_fallback_init(fallbackInit(parameter));
    var.set_init_std(0.02);
    if (llvm::Error e = setShard(var, parameter))
      return e;
  }
  if (std::optional<mlir::ArrayAttr> stack = parameter.getStack()) {
    var.clear_stack();
    for (auto member : stack->getAsValueRange<mlir::StringAttr>())
      var.add_stack(member.str());
    var.set_stack_transposed(parameter.getStackTransposed());
  }
  out.mutable_values(*id)->set_state(name.str());
  return llvm::Error::success();
}

/// Liveness: the index of the last of `computeOps` reading each value;
/// values returned by the function live to the end.
std::vector<int>
FunctionLowering::lastUses(const program::Function &out,
                           llvm::ArrayRef<mlir::Operation *> computeOps) {
  const int end = static_cast<int>(computeOps.size());
  std::vector<int> lastUse(out.values_size(), -1);
  llvm::DenseMap<mlir::Operation *, int> indexOf;
  for (int i = 0; i < end; ++i)
    indexOf[computeOps[i]] = i;
  for (int i = 0; i < end; ++i)
    for (int id : idsOf(computeOps[i]->getOperands()))
      lastUse[id] = i;
  // A communication reads its input until its wait: the bytes stay
  // reserved while the network reads them.
  for (int i = 0; i < end; ++i) {
    if (!isCommunicationStart(computeOps[i]))
      continue;
    for (mlir::Operation *wait : computeOps[i]->getResult(0).getUsers())
      for (int id : idsOf(computeOps[i]->getOperands()))
        lastUse[id] = std::max(lastUse[id], indexOf.lookup(wait));
  }
  for (mlir::Value operand :
       func_.getBody().front().getTerminator()->getOperands())
    lastUse[ids_.lookup(operand)] = end;
  return lastUse;
}

/// Storage groups (union-find): a reshape is a view of its operand, a wait
/// yields the buffer its start received into, and an elementwise result
/// may share the bytes of an operand that dies there (or of the variable it
/// updates). A group takes the storage of its root and lives until the last
/// use of any member; members of a persistent, constant or argument group
/// read its storage.
FunctionLowering::StorageGroups
FunctionLowering::groupStorage(program::Function &out,
                               llvm::ArrayRef<mlir::Operation *> computeOps) {
  const int end = static_cast<int>(computeOps.size());
  const int numValues = out.values_size();
  StorageGroups g;
  g.parent.resize(numValues);
  for (int i = 0; i < numValues; ++i)
    g.parent[i] = i;
  auto isTemporary = [&](int id) {
    return out.values(id).storage_case() == program::Value::STORAGE_NOT_SET;
  };
  for (mlir::Operation *op : computeOps)
    if (llvm::isa<d::ReshapeOp>(op) ||
        (llvm::isa<d::WaitOp>(op) && op->getNumResults() == 1))
      g.parent[ids_.lookup(op->getResult(0))] =
          g.find(ids_.lookup(op->getOperand(0)));
  std::vector<int> lastUse = lastUses(out, computeOps);
  g.end.assign(numValues, -1);
  for (int v = 0; v < numValues; ++v)
    g.end[g.find(v)] = std::max(g.end[g.find(v)], lastUse[v]);
  // For each persistent variable: the last use of any value stored in it.
  llvm::StringMap<int> stateEnd;
  for (int v = 0; v < numValues; ++v)
    if (out.values(v).has_state())
      stateEnd[out.values(v).state()] =
          std::max(stateEnd.lookup(out.values(v).state()), g.end[v]);
  // Results that write a variable, by value id.
  llvm::DenseMap<int, std::string> writesState;
  mlir::Operation *terminator = func_.getBody().front().getTerminator();
  for (auto [index, operand] : llvm::enumerate(terminator->getOperands()))
    if (auto state =
            func_.getResultAttrOfType<mlir::StringAttr>(index, "dtc.state"))
      writesState[ids_.lookup(operand)] = state.getValue().str();

  for (int i = 0; i < end; ++i) {
    mlir::Operation *op = computeOps[i];
    for (auto [resultIndex, operandIndex] : inPlaceCandidates(op)) {
      if (operandIndex >= op->getNumOperands() ||
          op->getResult(resultIndex).getType() !=
              op->getOperand(operandIndex).getType())
        continue;
      int result = g.find(ids_.lookup(op->getResult(resultIndex)));
      int operand = g.find(ids_.lookup(op->getOperand(operandIndex)));
      if (result != ids_.lookup(op->getResult(resultIndex)) ||
          result == operand)
        continue; // already placed
      bool share = false;
      if (isTemporary(operand)) {
        // The operand's bytes are free after this op: write over them.
        share = g.end[operand] == i && !writesState.count(result);
      } else if (out.values(operand).has_state()) {
        // The update of a variable that nothing reads afterwards, returned
        // as that variable's new value (AdamW, gradient accumulation).
        auto it = writesState.find(result);
        share = it != writesState.end() &&
                it->second == out.values(operand).state() &&
                stateEnd.lookup(it->second) == i;
      }
      if (!share)
        continue;
      g.parent[result] = operand;
      g.end[operand] = std::max(g.end[operand], g.end[result]);
      if (out.values(operand).has_state())
        stateEnd[out.values(operand).state()] = g.end[operand];
    }
  }
  for (int v = 0; v < numValues; ++v) {
    int r = g.find(v);
    if (r == v || isTemporary(r))
      continue;
    const program::Value &source = out.values(r);
    program::Value &target = *out.mutable_values(v);
    if (source.has_state())
      target.set_state(source.state());
    else if (source.has_constant())
      target.set_constant(source.constant());
    else
      target.set_argument(source.argument());
  }
  return g;
}

/// Arena placement of the temporary groups in program order: each group's
/// root is allocated where its first member is computed and released after
/// the group's last use.
void FunctionLowering::placeInArena(
    program::Function &out, llvm::ArrayRef<mlir::Operation *> computeOps,
    StorageGroups &groups) {
  const int end = static_cast<int>(computeOps.size());
  const int numValues = out.values_size();
  auto isTemporary = [&](int id) {
    return out.values(id).storage_case() == program::Value::STORAGE_NOT_SET;
  };
  ArenaAllocator arena;
  std::vector<int64_t> offsetOf(numValues, -1);
  std::vector<std::vector<int>> releaseAt(end + 1);
  int64_t temporaries = 0, live = 0, livePeak = 0;
  for (int i = 0; i < end; ++i) {
    for (mlir::Value result : computeOps[i]->getResults()) {
      int id = ids_.lookup(result);
      if (!isTemporary(id))
        continue;
      int64_t bytes =
          alignUp(std::max<int64_t>(bytesOf(out.values(id).type()), 1));
      if (!llvm::isa<d::ReshapeOp, d::WaitOp>(computeOps[i]))
        temporaries += bytes;
      if (groups.find(id) != id)
        continue;
      offsetOf[id] = arena.allocate(bytes);
      live += bytes;
      releaseAt[std::max(groups.end[id], i)].push_back(id);
    }
    livePeak = std::max(livePeak, live);
    for (int id : releaseAt[i]) {
      arena.release(offsetOf[id]);
      live -= alignUp(std::max<int64_t>(bytesOf(out.values(id).type()), 1));
    }
  }
  for (int v = 0; v < numValues; ++v)
    if (isTemporary(v))
      out.mutable_values(v)->set_arena_offset(offsetOf[groups.find(v)]);
  out.set_arena_bytes(arena.peak());
  out.set_temporaries_bytes(temporaries);
  out.set_live_bytes_peak(livePeak);
}

/// Instructions (reshapes of views emit nothing). A start and its wait
/// share a `request` number and run on the communication stream.
llvm::Error FunctionLowering::emitInstructions(
    program::Function &out, llvm::ArrayRef<mlir::Operation *> computeOps) {
  llvm::DenseMap<mlir::Operation *, int64_t> requestOf;
  for (mlir::Operation *op : computeOps) {
    if (llvm::isa<d::ReshapeOp>(op))
      continue;
    program::Instruction *inst = out.add_instructions();
    inst->set_op(op->getName().getStringRef().str());
    inst->set_loc(locationName(op->getLoc()));
    for (int id : idsOf(op->getOperands()))
      inst->add_inputs(id);
    for (int id : idsOf(op->getResults()))
      inst->add_outputs(id);
    if (isCommunicationStart(op) || llvm::isa<d::WaitOp>(op)) {
      mlir::Operation *start =
          llvm::isa<d::WaitOp>(op) ? op->getOperand(0).getDefiningOp() : op;
      if (!start)
        return failure("program lowering: dtc.wait at '{0}' waits on a "
                       "handle no start in this function made",
                       locationName(op->getLoc()));
      auto [it, inserted] = requestOf.try_emplace(start, requestOf.size());
      (void)inserted;
      (*inst->mutable_attrs())["request"].set_i(it->second);
      inst->set_stream(1);
    }
    // A recomputed op says so (the MoE routing metrics count a route once).
    if (op->hasAttr("dtc.recomputed"))
      (*inst->mutable_attrs())["recomputed"].set_b(true);
    for (mlir::NamedAttribute attr : attributesWithDefaults(op)) {
      llvm::StringRef name = attr.getName().getValue();
      if (name.contains('.') || name == "operandSegmentSizes")
        continue;
      program::Attribute converted;
      if (!convertAttribute(attr.getValue(), converted))
        return failure("program lowering: attribute '{0}' of {1} at '{2}' "
                       "has no runtime representation",
                       name, op->getName().getStringRef(),
                       locationName(op->getLoc()));
      (*inst->mutable_attrs())[name.str()] = std::move(converted);
    }
  }
  return llvm::Error::success();
}

/// Results: named outputs, or a variable's new value (`dtc.state`).
llvm::Error FunctionLowering::lowerResults(program::Function &out) {
  mlir::Operation *terminator = func_.getBody().front().getTerminator();
  for (auto [index, operand] : llvm::enumerate(terminator->getOperands())) {
    program::Result *r = out.add_results();
    r->set_value(ids_.lookup(operand));
    if (auto name =
            func_.getResultAttrOfType<mlir::StringAttr>(index, "dtc.name"))
      r->set_name(name.getValue().str());
    if (auto state =
            func_.getResultAttrOfType<mlir::StringAttr>(index, "dtc.state")) {
      if (!variableIndex_.count(state.getValue()))
        if (llvm::Error e = addVariable(state.getValue(), operand.getType(),
                                        "state", "", operand.getLoc()))
          return e;
      r->set_state(state.getValue().str());
    }
  }
  return llvm::Error::success();
}

/// The pipeline step's schedule attribute (Pipeline.cpp) as data.
llvm::Error FunctionLowering::lowerPipeline(mlir::DictionaryAttr attr,
                                            program::Pipeline &out) {
  auto integer = [&](llvm::StringRef name) -> int64_t {
    auto value = attr.getAs<mlir::IntegerAttr>(name);
    return value ? value.getInt() : 0;
  };
  auto string = [&](mlir::DictionaryAttr d, llvm::StringRef name) {
    auto value = d.getAs<mlir::StringAttr>(name);
    return value ? value.getValue().str() : std::string();
  };
  out.set_schedule(string(attr, "schedule"));
  out.set_stages(static_cast<int32_t>(integer("stages")));
  out.set_stage(static_cast<int32_t>(integer("stage")));
  out.set_virtual_stages(static_cast<int32_t>(integer("virtual_stages")));
  out.set_micro_batches(static_cast<int32_t>(integer("micro_batches")));
  auto overlap = attr.getAs<mlir::BoolAttr>("overlap");
  out.set_overlap(overlap && overlap.getValue());
  out.set_axis(string(attr, "axis"));
  out.set_loss(string(attr, "loss"));
  auto chunks = attr.getAs<mlir::ArrayAttr>("chunks");
  if (!chunks)
    return failure("program lowering: '{0}' has a pipeline without chunks",
                   func_.getSymName());
  for (mlir::Attribute c : chunks) {
    auto chunk = llvm::dyn_cast<mlir::DictionaryAttr>(c);
    auto data = chunk ? chunk.getAs<mlir::DenseI64ArrayAttr>("data") : nullptr;
    if (!data)
      return failure("program lowering: '{0}' has a malformed pipeline chunk",
                     func_.getSymName());
    program::PipelineChunk *into = out.add_chunks();
    into->set_forward(string(chunk, "forward"));
    into->set_backward(string(chunk, "backward"));
    into->set_weight(string(chunk, "weight"));
    for (int64_t arg : data.asArrayRef())
      into->add_data(static_cast<int32_t>(arg));
  }
  return llvm::Error::success();
}

} // namespace

/// The model's state_dict (the importer's `dtc.state_dict`, on the
/// outermost module) onto the variables: a frozen tensor outside it is a
/// "constant"; a key no function reads (a buffer the importer folded into
/// constants) still becomes a variable, kept and saved; tied aliases are
/// recorded on the tensor they name.
static llvm::Error applyStateDict(mlir::ModuleOp module,
                                  program::RankProgram &program,
                                  llvm::StringMap<int> &variableIndex) {
  mlir::ModuleOp root = module;
  while (auto parent = root->getParentOfType<mlir::ModuleOp>())
    root = parent;
  auto entries = root->getAttrOfType<mlir::ArrayAttr>("dtc.state_dict");
  if (!entries)
    return llvm::Error::success();
  // Tensors some function of the model reads (any pipeline stage's).
  llvm::StringSet<> read;
  root.walk([&](d::ParameterOp p) { read.insert(p.getName()); });
  llvm::StringSet<> keys;
  for (mlir::Attribute attr : entries) {
    auto entry = llvm::dyn_cast<mlir::DictionaryAttr>(attr);
    auto name = entry ? entry.getAs<mlir::StringAttr>("name") : nullptr;
    auto type = entry ? entry.getAs<mlir::TypeAttr>("type") : nullptr;
    if (!name || !type)
      return failure("program lowering: malformed dtc.state_dict entry");
    keys.insert(name.getValue());
    auto it = variableIndex.find(name.getValue());
    if (it == variableIndex.end() && read.contains(name.getValue()))
      continue; // another stage's
    if (it == variableIndex.end()) {
      variableIndex[name.getValue()] = program.variables_size();
      program::Variable *v = program.add_variables();
      v->set_name(name.getValue().str());
      v->set_role("buffer");
      v->set_parameter(name.getValue().str());
      v->set_init("model");
      v->set_fallback_init("zeros");
      if (llvm::Error e =
              setType(*v->mutable_type(), type.getValue(), module.getLoc()))
        return e;
      it = variableIndex.find(name.getValue());
    }
    if (auto aliases = entry.getAs<mlir::ArrayAttr>("aliases"))
      for (auto alias : aliases.getAsValueRange<mlir::StringAttr>())
        program.mutable_variables(it->second)->add_aliases(alias.str());
  }
  for (program::Variable &v : *program.mutable_variables())
    if (v.role() == "buffer" && !keys.contains(v.name()))
      v.set_role("constant");
  return llvm::Error::success();
}

llvm::Expected<program::RankProgram> lowerToRankProgram(mlir::ModuleOp module) {
  program::RankProgram program;
  llvm::StringMap<int> variableIndex;
  llvm::DenseMap<mlir::Attribute, int> constantIndex;
  for (auto func : module.getOps<mlir::func::FuncOp>()) {
    if (func.isExternal())
      continue;
    if (!func.getBody().hasOneBlock())
      return failure("program lowering: function '{0}' has more than one "
                     "block",
                     func.getSymName());
    FunctionLowering lowering(func, program, variableIndex, constantIndex);
    if (llvm::Error e = lowering.lower(*program.add_functions()))
      return std::move(e);
  }
  // A gradient accumulator or optimizer moment of the parameter's shape is
  // sharded like it.
  for (program::Variable &var : *program.mutable_variables()) {
    auto it = variableIndex.find(var.parameter());
    if (var.role() == "parameter" || it == variableIndex.end())
      continue;
    const program::Variable &param = program.variables(it->second);
    // ... and a ZeRO moment (flat axes set by its state argument) is the
    // flat part of the parameter's shard.
    if (var.flat_axes_size() && param.global_shape_size()) {
      *var.mutable_global_shape() = param.global_shape();
      *var.mutable_shard() = param.shard();
    } else if (param.shard_size() && param.type().SerializeAsString() ==
                                         var.type().SerializeAsString()) {
      *var.mutable_global_shape() = param.global_shape();
      *var.mutable_shard() = param.shard();
      *var.mutable_flat_axes() = param.flat_axes();
    }
  }
  if (llvm::Error e = applyStateDict(module, program, variableIndex))
    return std::move(e);
  return program;
}

} // namespace dtc
