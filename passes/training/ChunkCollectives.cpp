//===- ChunkCollectives.cpp - TP collectives in chunks behind GEMMs -------===//
//
// Tensor-parallel communication split into chunks that overlap the GEMMs
// next to it (the decomposition of Megatron's TP comm overlap and of
// "collective matmul"): a row-parallel GEMM whose partial sums are
// all-reduced (or reduce-scattered, with sequence parallelism) becomes k
// GEMMs on k row blocks of its input, each block's reduction started as soon
// as its GEMM ends, so that it runs while the next block multiplies; the
// all-gather that feeds a column-parallel GEMM becomes k gathers, and block
// i multiplies as soon as gather i arrives while the later ones are still
// in flight. Blocks are cut along a row dimension (Blocking below); a
// reshape that keeps the last dimension between GEMM and collective only
// regroups rows, so it moves onto the GEMM's input.
//
// scheduleCollectives then places the chunk starts and waits; the cost
// model prices the same pipeline (docs/partition.md, "Overlap").
//
//===----------------------------------------------------------------------===//

#include "passes/training/StepParts.h"

#include <optional>

namespace dtc::training {

namespace {

/// The dimension a collective's tensor is cut into `k` row blocks along: its
/// outermost one that divides by k, other than the features (the last) and
/// the one the collective itself gathers or scatters. None if there is none.
std::optional<unsigned> chunkDim(mlir::RankedTensorType type, int64_t k,
                                 std::optional<int64_t> collectiveDim) {
  for (int64_t i = 0; i + 1 < type.getRank(); ++i)
    if (i != collectiveDim && type.getDimSize(i) > 1 &&
        type.getDimSize(i) % k == 0)
      return static_cast<unsigned>(i);
  return std::nullopt;
}

mlir::RankedTensorType chunkType(mlir::RankedTensorType type, unsigned dim,
                                 int64_t k) {
  auto shape = llvm::to_vector(type.getShape());
  shape[dim] /= k;
  return mlir::RankedTensorType::get(shape, type.getElementType());
}

/// `type` with its last dimension `last`.
mlir::RankedTensorType withLastDim(mlir::RankedTensorType type, int64_t last) {
  auto shape = llvm::to_vector(type.getShape());
  shape.back() = last;
  return mlir::RankedTensorType::get(shape, type.getElementType());
}

/// `op` on other operands and result types, with its attributes.
mlir::Operation *cloneWith(mlir::OpBuilder &b, mlir::Operation *op,
                           mlir::ValueRange operands, mlir::TypeRange types) {
  mlir::OperationState state(op->getLoc(), op->getName());
  state.addOperands(operands);
  state.addTypes(types);
  state.addAttributes(op->getAttrs());
  return b.create(state);
}

mlir::Value sliceChunk(mlir::OpBuilder &b, mlir::Location loc, mlir::Value v,
                       unsigned dim, int64_t k, int64_t i) {
  auto type = tensorType(v);
  int64_t rank = type.getRank();
  llvm::SmallVector<int64_t> starts(rank, 0), limits(type.getShape()),
      strides(rank, 1);
  int64_t size = type.getDimSize(dim) / k;
  starts[dim] = i * size;
  limits[dim] = (i + 1) * size;
  return d::SliceOp::create(
      b, loc, chunkType(type, dim, k), v, b.getDenseI64ArrayAttr(starts),
      b.getDenseI64ArrayAttr(limits), b.getDenseI64ArrayAttr(strides));
}

/// A matmul that computes its result row by row: its lhs rows are not
/// transposed and every row multiplies one rhs matrix. Any regrouping of
/// its rows (a reshape that keeps the last dimension) is then a matmul of
/// the lhs rows regrouped the same way.
bool rowWise(d::MatmulOp matmul) {
  return !matmul.getTransposeLhs() &&
         tensorType(matmul.getRhs()).getRank() == 2 &&
         tensorType(matmul.getLhs()).getRank() >= 2;
}

bool keepsRows(d::ReshapeOp reshape) {
  return tensorType(reshape.getInput()).getShape().back() ==
         tensorType(reshape.getOutput()).getShape().back();
}

/// The row-wise matmul that computes `v` (maybe behind reshapes that
/// regroup its rows), read by nothing else; null if there is none.
d::MatmulOp rowProducer(mlir::Value v) {
  while (v.hasOneUse()) {
    mlir::Operation *def = v.getDefiningOp();
    if (auto reshape = llvm::dyn_cast_or_null<d::ReshapeOp>(def)) {
      if (!keepsRows(reshape))
        return nullptr;
      v = reshape.getInput();
      continue;
    }
    auto matmul = llvm::dyn_cast_or_null<d::MatmulOp>(def);
    return matmul && rowWise(matmul) ? matmul : nullptr;
  }
  return nullptr;
}

/// `matmul`'s lhs with its rows regrouped like the result's `rows` (the
/// shape of its rows, then its columns).
mlir::Value regroupedLhs(mlir::OpBuilder &b, d::MatmulOp matmul,
                         mlir::RankedTensorType rows) {
  mlir::Value lhs = matmul.getLhs();
  auto regrouped = withLastDim(rows, tensorType(lhs).getShape().back());
  if (regrouped == tensorType(lhs))
    return lhs;
  return d::ReshapeOp::create(b, matmul.getLoc(), regrouped, lhs);
}

/// Erases `op` and then each producer left without users.
void eraseDeadChain(mlir::Operation *op) {
  llvm::SmallVector<mlir::Operation *> worklist{op};
  while (!worklist.empty()) {
    mlir::Operation *dead = worklist.pop_back_val();
    if (!dead->use_empty())
      continue;
    llvm::SmallVector<mlir::Operation *> defs;
    for (mlir::Value operand : dead->getOperands())
      if (mlir::Operation *def = operand.getDefiningOp())
        if (llvm::isa<d::MatmulOp, d::ReshapeOp, d::SliceOp>(def))
          defs.push_back(def);
    dead->erase();
    llvm::append_range(worklist, defs);
  }
}

/// The op before which a value computed by `wait` is needed: its first
/// user, or the next forward end if that comes first (a pipeline chunk's
/// forward pass must not wait for what its backward pass reads).
mlir::Operation *firstNeed(mlir::Value value, mlir::Operation *from) {
  if (value.use_empty())
    return nullptr;
  mlir::Block *body = from->getBlock();
  mlir::Operation *first = nullptr;
  for (mlir::Operation *user : value.getUsers()) {
    user = body->findAncestorOpInBlock(*user);
    if (user && (!first || user->isBeforeInBlock(first)))
      first = user;
  }
  for (mlir::Operation *op = from->getNextNode(); op && op != first;
       op = op->getNextNode())
    if (op->hasAttr(kForwardEndAttr))
      return op;
  return first;
}

/// Starts and waits chunk i of `inputs` like `start` (its attributes, its
/// place); returns the waited chunks.
llvm::SmallVector<mlir::Value> startChunks(mlir::OpBuilder &b,
                                           mlir::Operation *start,
                                           mlir::Operation *wait,
                                           llvm::ArrayRef<mlir::Value> inputs,
                                           mlir::RankedTensorType outputChunk) {
  llvm::SmallVector<mlir::Operation *> starts;
  b.setInsertionPoint(start);
  for (mlir::Value input : inputs)
    starts.push_back(cloneWith(b, start, input,
                               d::AsyncType::get(b.getContext(), outputChunk)));
  llvm::SmallVector<mlir::Value> waited;
  b.setInsertionPoint(wait);
  for (mlir::Operation *chunk : starts)
    waited.push_back(
        cloneWith(b, wait, chunk->getResult(0), outputChunk)->getResult(0));
  return waited;
}

/// How a collective's tensor is cut into `k` row blocks. Along `dim`, each
/// block a contiguous k-th, where a dimension other than the one the
/// collective gathers or scatters divides; otherwise along that dimension
/// itself, strided (`group` > 1, the collective's rank count): rank r's
/// part of it holds rows [r L, (r + 1) L), and block i takes rows
/// [r L + i L / k, r L + (i + 1) L / k) of every r. Either way block i of a
/// rank's own part is its i-th contiguous k-th.
struct Blocking {
  unsigned dim = 0;
  int64_t k = 1;
  int64_t group = 1;

  /// For a collective over `group` ranks that gathers or scatters
  /// `collectiveDim` of `local` (a rank's part; none for an all-reduce).
  /// `group` 1: no strided blocks (an interleaved gather or scatter).
  static std::optional<Blocking> of(mlir::RankedTensorType local, int64_t k,
                                    std::optional<int64_t> collectiveDim,
                                    int64_t group) {
    if (std::optional<unsigned> dim = chunkDim(local, k, collectiveDim))
      return Blocking{*dim, k, 1};
    if (collectiveDim && group > 1 && *collectiveDim + 1 < local.getRank() &&
        local.getDimSize(*collectiveDim) % k == 0)
      return Blocking{static_cast<unsigned>(*collectiveDim), k, group};
    return std::nullopt;
  }

  bool strided() const { return group > 1; }

  /// `type` (the whole, over all ranks) with `dim` split as
  /// [group, k, rows per block].
  llvm::SmallVector<int64_t> split(mlir::RankedTensorType type,
                                   int64_t blocks) const {
    llvm::SmallVector<int64_t> shape(type.getShape().take_front(dim));
    int64_t perRank = type.getDimSize(dim) / group;
    shape.append({group, blocks, perRank / blocks});
    llvm::append_range(shape, type.getShape().drop_front(dim + 1));
    return shape;
  }

  /// Block i of `whole` (rows of all ranks).
  mlir::Value slice(mlir::OpBuilder &b, mlir::Location loc, mlir::Value whole,
                    int64_t i) const {
    if (!strided())
      return sliceChunk(b, loc, whole, dim, k, i);
    auto type = tensorType(whole);
    auto split4 =
        mlir::RankedTensorType::get(split(type, k), type.getElementType());
    mlir::Value grouped = d::ReshapeOp::create(b, loc, split4, whole);
    mlir::Value block = sliceChunk(b, loc, grouped, dim + 1, k, i);
    return d::ReshapeOp::create(b, loc, chunkType(type, dim, k), block);
  }

  /// The whole of `type` from its blocks.
  mlir::Value combine(mlir::OpBuilder &b, mlir::Location loc,
                      llvm::ArrayRef<mlir::Value> blocks,
                      mlir::RankedTensorType type) const {
    if (!strided())
      return d::ConcatOp::create(b, loc, blocks, static_cast<int64_t>(dim));
    llvm::SmallVector<mlir::Value> grouped;
    for (mlir::Value block : blocks) {
      auto shape = split(type, k);
      shape[dim + 1] = 1;
      grouped.push_back(d::ReshapeOp::create(
          b, loc, mlir::RankedTensorType::get(shape, type.getElementType()),
          block));
    }
    mlir::Value whole =
        d::ConcatOp::create(b, loc, grouped, static_cast<int64_t>(dim + 1));
    return d::ReshapeOp::create(b, loc, type, whole);
  }
};

/// Replaces `wait`'s result by `combine`, built right before the result is
/// first needed.
void replaceWhenNeeded(mlir::OpBuilder &b, d::WaitOp wait,
                       llvm::function_ref<mlir::Value()> combine) {
  mlir::Operation *need = firstNeed(wait.getOutput(), wait);
  if (!need)
    return;
  b.setInsertionPoint(need);
  wait.getOutput().replaceAllUsesWith(combine());
}

/// A reduction (all-reduce or reduce-scatter over `group` ranks) of a
/// row-wise GEMM's partial sums: GEMM block i, then its reduction, started
/// before block i + 1's GEMM (all where the GEMM was).
bool chunkReduction(mlir::OpBuilder &b, mlir::Operation *start, d::WaitOp wait,
                    int64_t k, std::optional<int64_t> collectiveDim,
                    int64_t group) {
  mlir::Value input = start->getOperand(0);
  auto type = tensorType(input);
  auto outputType = tensorType(wait.getOutput());
  std::optional<Blocking> blocking =
      Blocking::of(outputType, k, collectiveDim, group);
  d::MatmulOp matmul = rowProducer(input);
  if (!blocking || !matmul)
    return false;
  unsigned dim = blocking->dim;
  b.setInsertionPoint(matmul);
  mlir::Value lhs = regroupedLhs(b, matmul, type);
  llvm::SmallVector<mlir::Value> blocks;
  for (int64_t i = 0; i < k; ++i)
    blocks.push_back(cloneWith(b, matmul,
                               {blocking->slice(b, matmul.getLoc(), lhs, i),
                                matmul.getRhs()},
                               chunkType(type, dim, k))
                         ->getResult(0));
  llvm::SmallVector<mlir::Value> waited =
      startChunks(b, start, wait, blocks, chunkType(outputType, dim, k));
  // Each rank's reduced blocks are contiguous parts of its result.
  replaceWhenNeeded(b, wait, [&] {
    return d::ConcatOp::create(b, wait.getLoc(), waited,
                               static_cast<int64_t>(dim));
  });
  wait->erase();
  eraseDeadChain(start);
  return true;
}

/// An all-gather whose result some row-wise GEMM multiplies (maybe
/// regrouped by a reshape): k gathers of row blocks, each block multiplied
/// as soon as it arrives. Other readers get the blocks combined.
bool chunkGather(mlir::OpBuilder &b, d::AllGatherStartOp start, d::WaitOp wait,
                 int64_t k) {
  mlir::Value input = start.getInput();
  mlir::Value gatheredWhole = wait.getOutput();
  auto gatheredType = tensorType(gatheredWhole);
  int64_t group = gatheredType.getDimSize(start.getDim()) /
                  tensorType(input).getDimSize(start.getDim());
  std::optional<Blocking> blocking = Blocking::of(
      tensorType(input), k, start.getDim(), start.getBlock() == 0 ? group : 1);
  if (!blocking)
    return false;
  unsigned dim = blocking->dim;
  // The GEMMs that multiply the gathered rows, directly or regrouped.
  struct Consumer {
    d::MatmulOp matmul;
    d::ReshapeOp reshape; ///< between the gathered value and the matmul
  };
  llvm::SmallVector<Consumer> consumers;
  auto consider = [&](mlir::Operation *user, mlir::Value lhs,
                      d::ReshapeOp reshape) {
    auto matmul = llvm::dyn_cast<d::MatmulOp>(user);
    if (matmul && matmul.getLhs() == lhs && matmul.getRhs() != lhs &&
        rowWise(matmul))
      consumers.push_back({matmul, reshape});
  };
  for (mlir::Operation *user : gatheredWhole.getUsers()) {
    auto reshape = llvm::dyn_cast<d::ReshapeOp>(user);
    if (!reshape) {
      consider(user, gatheredWhole, nullptr);
      continue;
    }
    if (keepsRows(reshape))
      for (mlir::Operation *next : reshape.getOutput().getUsers())
        consider(next, reshape.getOutput(), reshape);
  }
  if (consumers.empty())
    return false;

  b.setInsertionPoint(start);
  llvm::SmallVector<mlir::Value> slices;
  for (int64_t i = 0; i < k; ++i)
    slices.push_back(sliceChunk(b, start.getLoc(), input, dim, k, i));
  llvm::SmallVector<mlir::Value> gathered =
      startChunks(b, start, wait, slices, chunkType(gatheredType, dim, k));
  for (Consumer &consumer : consumers) {
    d::MatmulOp matmul = consumer.matmul;
    auto rows = withLastDim(gatheredType,
                            tensorType(matmul.getOutput()).getShape().back());
    b.setInsertionPoint(matmul);
    llvm::SmallVector<mlir::Value> products;
    for (mlir::Value block : gathered)
      products.push_back(cloneWith(b, matmul, {block, matmul.getRhs()},
                                   chunkType(rows, dim, k))
                             ->getResult(0));
    mlir::Value product = blocking->combine(b, matmul.getLoc(), products, rows);
    if (rows != tensorType(matmul.getOutput()))
      product = d::ReshapeOp::create(b, matmul.getLoc(),
                                     matmul.getOutput().getType(), product);
    matmul.getOutput().replaceAllUsesWith(product);
    matmul->erase();
    if (consumer.reshape && consumer.reshape->use_empty())
      consumer.reshape->erase();
  }
  // Whatever else reads the gathered value (the weight gradient's GEMM
  // reads all rows) gets the blocks combined.
  replaceWhenNeeded(b, wait, [&] {
    return blocking->combine(b, wait.getLoc(), gathered, gatheredType);
  });
  wait->erase();
  start->erase();
  return true;
}

} // namespace

void chunkTensorParallelCollectives(mlir::func::FuncOp func, int64_t chunks) {
  if (chunks < 2)
    return;
  mlir::OpBuilder b(func.getContext());
  mlir::Block &body = func.getBody().front();
  auto overTp = [](mlir::ArrayAttr axes) {
    return axes && axes.size() == 1 &&
           llvm::cast<mlir::StringAttr>(axes[0]).getValue() == "tp";
  };
  // Collected first: chunking erases ops around the one it visits.
  llvm::SmallVector<std::pair<mlir::Operation *, d::WaitOp>> collectives;
  for (mlir::Operation &op : body) {
    if (!llvm::isa<d::AllReduceStartOp, d::ReduceScatterStartOp,
                   d::AllGatherStartOp>(op) ||
        !op.hasOneUse() ||
        !overTp(op.getAttrOfType<mlir::ArrayAttr>("mesh_axes")))
      continue;
    auto wait = llvm::dyn_cast<d::WaitOp>(*op.getUsers().begin());
    if (wait && wait->getBlock() == &body)
      collectives.push_back({&op, wait});
  }
  for (auto [op, wait] : collectives) {
    if (auto scatter = llvm::dyn_cast<d::ReduceScatterStartOp>(op)) {
      int64_t dim = scatter.getDim();
      int64_t group = tensorType(scatter.getInput()).getDimSize(dim) /
                      tensorType(wait.getOutput()).getDimSize(dim);
      chunkReduction(b, op, wait, chunks, dim,
                     scatter.getBlock() == 0 ? group : 1);
    } else if (auto gather = llvm::dyn_cast<d::AllGatherStartOp>(op))
      chunkGather(b, gather, wait, chunks);
    else
      chunkReduction(b, op, wait, chunks, std::nullopt, 1);
  }
}

} // namespace dtc::training
