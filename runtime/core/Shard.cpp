//===- Shard.cpp - A rank's part of a sharded tensor ----------------------===//

#include "runtime/core/Shard.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cstring>

namespace dtc::runtime {

namespace {
llvm::Error shardError(const program::Variable &var, const llvm::Twine &why) {
  return dtc::failureText("variable '" + var.name() + "': " + why);
}
} // namespace

const program::RankProgram *rankProgramOf(const program::Program &program,
                                          int rank) {
  for (const program::RankProgram &r : program.ranks())
    if (r.rank() == rank || llvm::is_contained(r.ranks(), rank))
      return &r;
  return nullptr;
}

llvm::Expected<ShardLayout> ShardLayout::of(const program::Variable &var,
                                            const Mesh &mesh, int rank) {
  ShardLayout layout;
  layout.stored_.assign(var.type().shape().begin(), var.type().shape().end());
  if (var.shard_size() == 0 && var.flat_axes_size() == 0) {
    layout.global_ = layout.local_ = layout.stored_;
    layout.dims_.resize(layout.local_.size());
    return layout;
  }
  if (var.global_shape_size() != var.shard_size() ||
      (var.flat_axes_size() == 0 &&
       var.shard_size() != var.type().shape_size()))
    return shardError(var, "shard and global shape disagree with its rank");
  layout.global_.assign(var.global_shape().begin(), var.global_shape().end());
  if (var.flat_axes_size()) {
    std::vector<std::string> axes(var.flat_axes().begin(),
                                  var.flat_axes().end());
    auto group = mesh.group(rank, axes);
    if (!group)
      return shardError(var, llvm::toString(group.takeError()));
    layout.flatParts_ = static_cast<int64_t>(group->size());
    layout.flatIndex_ = llvm::find(*group, rank) - group->begin();
  }
  // The shard's shape: the whole dims divided by their parts.
  layout.local_ = layout.global_;
  for (auto [dim, shard] : llvm::enumerate(var.shard()))
    if (shard.axes_size()) {
      std::vector<std::string> axes(shard.axes().begin(), shard.axes().end());
      auto group = mesh.group(rank, axes);
      if (!group)
        return shardError(var, llvm::toString(group.takeError()));
      layout.local_[dim] /= static_cast<int64_t>(group->size());
    }
  if (var.flat_axes_size() &&
      (layout.stored_.size() != 1 ||
       layout.stored_[0] * layout.flatParts_ != numElements(layout.local_)))
    return shardError(var, "its flat part does not hold 1/" +
                               llvm::Twine(layout.flatParts_) +
                               " of its shard");
  if (!var.flat_axes_size() && layout.stored_ != layout.local_)
    return shardError(var, "its shape is not its shard's");
  for (auto [dim, shard] : llvm::enumerate(var.shard())) {
    DimPart part;
    part.block = shard.block();
    if (shard.axes_size()) {
      std::vector<std::string> axes(shard.axes().begin(), shard.axes().end());
      auto group = mesh.group(rank, axes);
      if (!group)
        return shardError(var, llvm::toString(group.takeError()));
      part.parts = static_cast<int64_t>(group->size());
      part.index = llvm::find(*group, rank) - group->begin();
    }
    int64_t whole = layout.global_[dim];
    int64_t run = part.block ? part.block : whole;
    if (part.block < 0 || whole % run || run % part.parts ||
        layout.local_[dim] * part.parts != whole)
      return shardError(var, "dim " + llvm::Twine(dim) + " of " +
                                 llvm::Twine(whole) + " cannot hold " +
                                 llvm::Twine(part.parts) + " parts of " +
                                 llvm::Twine(layout.local_[dim]));
    layout.dims_.push_back(part);
  }
  return layout;
}

llvm::Expected<ShardLayout>
ShardLayout::fromParts(llvm::ArrayRef<int64_t> globalShape,
                       llvm::ArrayRef<DimPart> dims, int64_t flatParts,
                       int64_t flatIndex) {
  auto fail = [](const llvm::Twine &why) {
    return dtc::failureText("shard layout: " + why);
  };
  if (!dims.empty() && dims.size() != globalShape.size())
    return fail(llvm::Twine(dims.size()) + " dim parts for a rank-" +
                llvm::Twine(globalShape.size()) + " tensor");
  ShardLayout layout;
  layout.global_.assign(globalShape.begin(), globalShape.end());
  layout.local_ = layout.global_;
  layout.dims_.assign(dims.begin(), dims.end());
  layout.dims_.resize(globalShape.size());
  for (auto [dim, part] : llvm::enumerate(layout.dims_)) {
    int64_t whole = layout.global_[dim];
    int64_t run = part.block ? part.block : whole;
    if (whole < 0 || part.parts < 1 || part.index < 0 ||
        part.index >= part.parts || part.block < 0 ||
        (part.parts > 1 && (run == 0 || whole % run || run % part.parts)))
      return fail("dim " + llvm::Twine(dim) + " of " + llvm::Twine(whole) +
                  " cannot hold part " + llvm::Twine(part.index) + " of " +
                  llvm::Twine(part.parts) + " (block " +
                  llvm::Twine(part.block) + ")");
    layout.local_[dim] = whole / part.parts;
  }
  int64_t shardElements = numElements(layout.local_);
  if (flatParts < 1 || flatIndex < 0 || flatIndex >= flatParts ||
      shardElements % flatParts)
    return fail("a shard of " + llvm::Twine(shardElements) +
                " elements cannot hold flat part " + llvm::Twine(flatIndex) +
                " of " + llvm::Twine(flatParts));
  layout.flatParts_ = flatParts;
  layout.flatIndex_ = flatIndex;
  if (flatParts > 1)
    layout.stored_ = {shardElements / flatParts};
  else
    layout.stored_ = layout.local_;
  return layout;
}

llvm::json::Object ShardLayout::chunkJson() const {
  llvm::json::Array dims;
  for (const DimPart &part : dims_)
    dims.push_back(llvm::json::Object{
        {"parts", part.parts}, {"index", part.index}, {"block", part.block}});
  llvm::json::Object chunk{{"dims", std::move(dims)}};
  if (flatParts_ > 1)
    chunk["flat"] =
        llvm::json::Object{{"parts", flatParts_}, {"index", flatIndex_}};
  return chunk;
}

llvm::Expected<ShardLayout>
ShardLayout::fromChunkJson(llvm::ArrayRef<int64_t> globalShape,
                           const llvm::json::Object &chunk) {
  auto fail = [](const llvm::Twine &why) {
    return dtc::failureText("chunk layout: " + why);
  };
  const llvm::json::Array *dims = chunk.getArray("dims");
  if (!dims)
    return fail("no \"dims\" array");
  llvm::SmallVector<DimPart, 6> parts;
  for (const llvm::json::Value &value : *dims) {
    const llvm::json::Object *dim = value.getAsObject();
    std::optional<int64_t> count =
        dim ? dim->getInteger("parts") : std::nullopt;
    std::optional<int64_t> index =
        dim ? dim->getInteger("index") : std::nullopt;
    if (!count || !index)
      return fail("a dim without integer \"parts\" and \"index\"");
    parts.push_back({*count, *index, dim->getInteger("block").value_or(0)});
  }
  if (parts.size() != globalShape.size())
    return fail(llvm::Twine(parts.size()) + " dims for a rank-" +
                llvm::Twine(globalShape.size()) + " tensor");
  int64_t flatParts = 1, flatIndex = 0;
  if (const llvm::json::Value *flatValue = chunk.get("flat")) {
    const llvm::json::Object *flat = flatValue->getAsObject();
    std::optional<int64_t> count =
        flat ? flat->getInteger("parts") : std::nullopt;
    std::optional<int64_t> index =
        flat ? flat->getInteger("index") : std::nullopt;
    if (!count || !index)
      return fail("\"flat\" without integer \"parts\" and \"index\"");
    flatParts = *count;
    flatIndex = *index;
  }
  return fromParts(globalShape, parts, flatParts, flatIndex);
}

int64_t ShardLayout::globalIndex(size_t dim, int64_t i) const {
  const DimPart &part = dims_[dim];
  if (part.parts == 1)
    return i;
  int64_t run = part.block ? part.block : global_[dim];
  int64_t piece = run / part.parts; // elements of each run this rank holds
  return i / piece * run + part.index * piece + i % piece;
}

/// Calls fn(local offset, global offset) for every local element, with
/// contiguous innermost runs handled by the caller through `count`.
template <typename Fn> void ShardLayout::forEach(Fn fn) const {
  size_t rank = local_.size();
  if (rank == 0) {
    fn(0, 0, 1);
    return;
  }
  int64_t inner = local_.back();
  // The innermost dim is contiguous in both tensors when it is not split.
  bool innerWhole = dims_.back().parts == 1;
  int64_t outer = numElements(local_) / std::max<int64_t>(inner, 1);
  llvm::SmallVector<int64_t, 6> index(rank, 0);
  for (int64_t o = 0; o < outer; ++o) {
    int64_t globalBase = 0;
    for (size_t d = 0; d + 1 < rank; ++d)
      globalBase = globalBase * global_[d] + globalIndex(d, index[d]);
    globalBase *= global_.back();
    if (innerWhole) {
      fn(o * inner, globalBase, inner);
    } else {
      for (int64_t i = 0; i < inner; ++i)
        fn(o * inner + i, globalBase + globalIndex(rank - 1, i), 1);
    }
    for (size_t d = rank - 1; d-- > 0;) {
      if (++index[d] < local_[d])
        break;
      index[d] = 0;
    }
  }
}

void ShardLayout::extract(const TensorRef &whole,
                          const TensorRef &stored) const {
  size_t width = dtypeSize(whole.dtype);
  // With a flat split, the shard goes through a temporary first.
  Tensor shard;
  if (flatParts_ > 1)
    shard = Tensor(whole.dtype, local_);
  auto *dst = static_cast<char *>(flatParts_ > 1 ? shard.data() : stored.data);
  auto *src = static_cast<const char *>(whole.data);
  forEach([&](int64_t local, int64_t global, int64_t count) {
    std::memcpy(dst + local * width, src + global * width, count * width);
  });
  if (flatParts_ > 1)
    std::memcpy(stored.data, dst + flatIndex_ * stored.bytes(), stored.bytes());
}

void ShardLayout::insert(const TensorRef &stored,
                         const TensorRef &whole) const {
  size_t width = dtypeSize(whole.dtype);
  auto *src = static_cast<const char *>(stored.data);
  auto *dst = static_cast<char *>(whole.data);
  // A flat part covers a contiguous range of the flattened shard.
  int64_t begin = flatIndex_ * numElements(stored_);
  int64_t end = begin + numElements(stored_);
  forEach([&](int64_t local, int64_t global, int64_t count) {
    int64_t lo = std::max(local, begin), hi = std::min(local + count, end);
    if (lo < hi)
      std::memcpy(dst + (global + lo - local) * width,
                  src + (lo - begin) * width, (hi - lo) * width);
  });
}

} // namespace dtc::runtime
