//===- Tensor.cpp - Shapes, data movement, casts --------------------------===//
//
// Lowerings of Identity, Reshape-like ops, Transpose, Concat, Slice, Split,
// SplitToSequence / SequenceAt, Gather, GatherElements, Where, Expand and
// casts.
//
//===----------------------------------------------------------------------===//

#include "dialects/dtc/DtcOps.h"
#include "frontends/onnx/HostEval.h"
#include "frontends/onnx/ImporterImpl.h"
#include "frontends/onnx/ops/Formula.h"

using namespace mlir;
using namespace ::dtc::onnx;
using namespace ::dtc::onnx::detail;
namespace d = mlir::dtc;

Error ModelImporter::lowerIdentity(llvm::ArrayRef<Entry *> ins) {
  return alias(ins[0]);
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

Error ModelImporter::lowerTranspose(llvm::ArrayRef<Entry *> ins) {
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

Error ModelImporter::lowerSplitToSequence(llvm::ArrayRef<Entry *> ins) {
  // dtc has no sequence values: the parts are ordinary entries that only
  // SequenceAt reads (torchlib's aten_getitem after inlining).
  const std::string &name = node->output(0);
  for (const auto &n : model.graph().node())
    for (auto [i, in] : llvm::enumerate(n.input()))
      if (in == name && (i != 0 || n.op_type() != "SequenceAt" ||
                         !isDefaultDomain(n.domain())))
        return nodeError("its sequence '{0}' is read by node '{1}' ({2}); dtc "
                         "reads sequences only with SequenceAt",
                         name, nodeName(n), loweringKey(n));
  for (const auto &output : model.graph().output())
    if (output.name() == name)
      return nodeError("its sequence '{0}' is a graph output; dtc outputs "
                       "tensors only",
                       name);

  std::string error;
  auto axis =
      normalizeAxis(getIntAttr(*node, "axis", 0), ins[0]->shape.size(), error);
  if (!axis)
    return nodeError("{0}", error);
  int64_t dim = ins[0]->shape[*axis];
  llvm::SmallVector<int64_t> sizes;
  bool squeeze = false;
  // One slice per part: bound the count for malformed models.
  constexpr int64_t kMaxParts = int64_t(1) << 16;
  if (ins.size() > 1 && ins[1]) {
    auto known = knownInts(1, "split");
    if (!known)
      return known.takeError();
    if (ins[1]->shape.empty()) {
      // A scalar is the chunk length; the last chunk may be shorter.
      int64_t chunk = known->front();
      if (chunk < 1)
        return nodeError("the split length must be >= 1, got {0}", chunk);
      if (dim / chunk > kMaxParts)
        return nodeError("splits a dim of size {0} into more than {1} parts",
                         dim, kMaxParts);
      for (int64_t at = 0; at < dim; at += chunk)
        sizes.push_back(std::min(chunk, dim - at));
    } else {
      auto given = resolveSplit(dim, llvm::ArrayRef<int64_t>(*known),
                                known->size(), false, error);
      if (!given)
        return nodeError("{0}", error);
      sizes = *given;
    }
  } else {
    // Without split: parts of length 1, squeezed unless keepdims.
    if (dim > kMaxParts)
      return nodeError("splits a dim of size {0} into more than {1} parts", dim,
                       kMaxParts);
    sizes.assign(dim, 1);
    squeeze = getIntAttr(*node, "keepdims", 1) == 0;
  }

  llvm::SmallVector<Entry> parts;
  int64_t offset = 0;
  for (int64_t size : sizes) {
    Entry part;
    part.dataType = ins[0]->dataType;
    part.shape = ins[0]->shape;
    part.shape[*axis] = size;
    if (squeeze)
      part.shape.erase(part.shape.begin() + *axis);
    if (ins[0]->known) {
      // Known data stays known (shape arithmetic split into a sequence).
      ::onnx::NodeProto slice;
      slice.set_op_type("Slice");
      HostTensor starts = HostTensor::fromInts({offset}),
                 ends = HostTensor::fromInts({offset + size}),
                 axes = HostTensor::fromInts({*axis});
      const HostTensor *args[] = {ins[0]->known.get(), &starts, &ends, &axes};
      auto sliced = evaluateNode(slice, args, error);
      if (!sliced)
        return nodeError("{0}", error);
      HostTensor t = std::move((*sliced)[0]);
      t.shape = part.shape;
      part.known = std::make_shared<const HostTensor>(std::move(t));
    } else {
      auto input = valueOf(*ins[0]);
      if (!input)
        return input.takeError();
      auto sliced = sliceAxis(*input, *axis, offset, size);
      if (!sliced)
        return sliced.takeError();
      auto value = reshape(*sliced, part.shape);
      if (!value)
        return value.takeError();
      part.value = *value;
    }
    offset += size;
    parts.push_back(std::move(part));
  }
  // The sequence itself: an entry with neither value nor known tensor.
  if (Error err = define(name, Entry()))
    return err;
  sequences[name] = std::move(parts);
  return Error::success();
}

Error ModelImporter::lowerSequenceAt(llvm::ArrayRef<Entry *> ins) {
  auto seq = sequences.find(node->input(0));
  if (seq == sequences.end())
    return nodeError("input '{0}' is not a sequence made by SplitToSequence, "
                     "the only sequences dtc imports",
                     node->input(0));
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs a position input");
  auto position = knownInts(1, "position");
  if (!position)
    return position.takeError();
  if (position->size() != 1)
    return nodeError("the position must be a scalar, got {0} values",
                     position->size());
  int64_t count = seq->second.size(), i = position->front();
  if (i < -count || i >= count)
    return nodeError("position {0} is out of range for a sequence of {1} "
                     "tensors",
                     i, count);
  Entry copy = seq->second[i < 0 ? i + count : i];
  return define(node->output(0), std::move(copy));
}

/// An index tensor computed at run time as the dtc ops read it: int32 and
/// int64 as they are, other integer types cast to i64.
Expected<Value> ModelImporter::indexValue(Entry &indices) {
  auto v = valueOf(indices);
  if (!v)
    return v.takeError();
  if (indices.dataType == kInt64 || indices.dataType == kInt32)
    return *v;
  return finish(d::CastOp::create(builder, loc(), placeholder(), *v,
                                  builder.getI64Type()));
}

Error ModelImporter::lowerGather(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs data and indices inputs");
  auto result = gatherAlong(*ins[0], *ins[1], getIntAttr(*node, "axis", 0));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Expected<Value> ModelImporter::gatherAlong(Entry &data, Entry &indices,
                                           int64_t axisAttr) {
  if (!isIntegerType(indices.dataType) || indices.dataType == kBool)
    return nodeError("indices must be integers, got {0}",
                     dataTypeName(indices.dataType));
  std::string error;
  int64_t rank = data.shape.size();
  auto axis = normalizeAxis(axisAttr, rank, error);
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
    // the cost model understand, with no ids tensor. The same row of
    // positions repeated over a batch ([b, s] ids, BART's learned
    // positions) is that slice broadcast over the batch, which shards.
    size_t row = indices.shape.empty() ? idx.size() : indices.shape.back();
    bool consecutive = !idx.empty() && row > 0;
    for (size_t i = 1; i < idx.size() && consecutive; ++i)
      consecutive = idx[i] == (i % row ? idx[i - 1] + 1 : idx.front());
    if (consecutive) {
      auto input = valueOf(data);
      if (!input)
        return input.takeError();
      auto part = sliceAxis(*input, *axis, idx.front(), row);
      if (!part)
        return part.takeError();
      llvm::SmallVector<int64_t> oneRow(outShape);
      for (size_t d = 0; d + 1 < indices.shape.size(); ++d)
        oneRow[*axis + d] = 1;
      auto result = reshape(*part, oneRow);
      if (!result)
        return result.takeError();
      if (llvm::ArrayRef<int64_t>(oneRow) == llvm::ArrayRef<int64_t>(outShape))
        return *result;
      return expandTo(*result, outShape);
    }
    auto c = constant(HostTensor::fromInts(idx, indices.shape));
    if (!c)
      return c.takeError();
    ids = *c;
  } else {
    auto v = indexValue(indices);
    if (!v)
      return v.takeError();
    ids = *v;
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
  // nn.Embedding's padding_idx, which only the export's FX call records.
  IntegerAttr padding;
  if (std::optional<int64_t> row = readEmbeddingPaddingIndex(*node))
    padding = builder.getI64IntegerAttr(*row);
  auto looked = finish(
      d::EmbeddingOp::create(builder, loc(), placeholder(), t, ids, padding));
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
  return result;
}

/// GatherElements with run-time data or indices (both known fold on the
/// host): dtc.gather_elements, after slicing the data to the indices'
/// extent off the axis (ONNX lets them be smaller) and checking constant
/// indices here, where the error can name the node.
Error ModelImporter::lowerGatherElements(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs data and indices inputs");
  Entry &data = *ins[0], &indices = *ins[1];
  if (!isIntegerType(indices.dataType) || indices.dataType == kBool)
    return nodeError("indices must be integers, got {0}",
                     dataTypeName(indices.dataType));
  int64_t rank = data.shape.size();
  if (static_cast<int64_t>(indices.shape.size()) != rank)
    return nodeError("data {0} and indices {1} differ in rank",
                     shapeString(data.shape), shapeString(indices.shape));
  std::string error;
  auto axis = normalizeAxis(getIntAttr(*node, "axis", 0), rank, error);
  if (!axis)
    return nodeError("{0}", error);
  auto input = valueOf(data);
  if (!input)
    return input.takeError();
  Value table = *input;
  for (int64_t d = 0; d < rank; ++d) {
    if (d == *axis || indices.shape[d] == data.shape[d])
      continue;
    if (indices.shape[d] > data.shape[d])
      return nodeError("indices {0} exceed the data {1} in dim {2}",
                       shapeString(indices.shape), shapeString(data.shape), d);
    auto part = sliceAxis(table, d, 0, indices.shape[d]);
    if (!part)
      return part.takeError();
    table = *part;
  }
  Value ids;
  if (indices.known) {
    int64_t size = data.shape[*axis];
    for (int64_t i : indices.known->ints)
      if (i < -size || i >= size)
        return nodeError("index {0} is out of range for dim {1} of size {2}", i,
                         *axis, size);
    auto c = constant(HostTensor::fromInts(indices.known->ints, indices.shape));
    if (!c)
      return c.takeError();
    ids = *c;
  } else {
    auto v = indexValue(indices);
    if (!v)
      return v.takeError();
    ids = *v;
  }
  auto result = finish(d::GatherElementsOp::create(
      builder, loc(), placeholder(), table, ids, *axis));
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

Error ModelImporter::lowerWhere(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 3 || !ins[1] || !ins[2])
    return nodeError("needs condition, X and Y inputs");
  Entry &cond = *ins[0], &x = *ins[1], &y = *ins[2];
  if (x.dataType != y.dataType)
    return nodeError("X and Y types differ: {0} and {1}",
                     dataTypeName(x.dataType), dataTypeName(y.dataType));
  if (cond.dataType != kBool)
    return nodeError("the condition is {0}, not bool",
                     dataTypeName(cond.dataType));
  if (!cond.known) {
    // A run-time condition (e.g. the NaN guard Where(IsNaN(p), 0, p)).
    auto c = valueOf(cond);
    if (!c)
      return c.takeError();
    auto onTrue = valueOf(x);
    if (!onTrue)
      return onTrue.takeError();
    auto onFalse = valueOf(y);
    if (!onFalse)
      return onFalse.takeError();
    auto result = select(*c, *onTrue, *onFalse);
    if (!result)
      return result.takeError();
    return defineValue(0, *result);
  }
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

// Trilu of a run-time matrix (stack): a select against the constant
// triangle (shapes are static, `k` is known), exact for every value.
Error ModelImporter::lowerTrilu(llvm::ArrayRef<Entry *> ins) {
  llvm::ArrayRef<int64_t> shape = ins[0]->shape;
  if (shape.size() < 2)
    return nodeError("expects a matrix or a stack of them, got {0}",
                     shapeString(shape));
  int64_t k = 0;
  if (ins.size() > 1 && ins[1]) {
    auto known = knownInts(1, "k");
    if (!known)
      return known.takeError();
    if (known->size() != 1)
      return nodeError("k must be a scalar");
    k = (*known)[0];
  }
  bool upper = getIntAttr(*node, "upper", 1) != 0;
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  HostTensor keep = HostTensor::zeros(kBool, {rows, cols});
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      keep.set(i * cols + j, upper ? j - i >= k : j - i <= k);
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  Formula f(*this, ins[0]->dataType);
  return f.define(0, f.sel(f.constant(keep), *input, f.c(0)));
}

// DepthToSpace (DCR or CRD order) and SpaceToDepth of [N, C, H, W]: one
// reshape, transpose and reshape each.
Error ModelImporter::lowerDepthToSpace(llvm::ArrayRef<Entry *> ins) {
  llvm::ArrayRef<int64_t> x = ins[0]->shape;
  int64_t b = getIntAttr(*node, "blocksize", 0);
  if (x.size() != 4 || b <= 0)
    return nodeError("expects X [N, C, H, W] and a positive blocksize");
  int64_t n = x[0], c = x[1], h = x[2], w = x[3];
  llvm::SmallVector<int64_t> split, perm, out;
  if (node->op_type() == "SpaceToDepth") {
    if (h % b || w % b)
      return nodeError("H and W must be multiples of blocksize {0}", b);
    split = {n, c, h / b, b, w / b, b};
    perm = {0, 3, 5, 1, 2, 4};
    out = {n, c * b * b, h / b, w / b};
  } else {
    if (c % (b * b))
      return nodeError("C must be a multiple of blocksize^2 = {0}", b * b);
    bool crd = getStringAttr(*node, "mode", "DCR") == "CRD";
    split = crd ? llvm::SmallVector<int64_t>{n, c / (b * b), b, b, h, w}
                : llvm::SmallVector<int64_t>{n, b, b, c / (b * b), h, w};
    perm = crd ? llvm::SmallVector<int64_t>{0, 1, 4, 2, 5, 3}
               : llvm::SmallVector<int64_t>{0, 3, 4, 1, 5, 2};
    out = {n, c / (b * b), h * b, w * b};
  }
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  auto blocks = reshape(*input, split);
  if (!blocks)
    return blocks.takeError();
  auto moved = finish(
      d::TransposeOp::create(builder, loc(), placeholder(), *blocks, perm));
  if (!moved)
    return moved.takeError();
  auto result = reshape(*moved, out);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

// Compress with a known condition (it decides the output's shape): a gather
// of the selected positions along the axis (of the flattened input without
// one).
Error ModelImporter::lowerCompress(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs input and condition");
  if (!ins[1]->known)
    return nodeError("the condition '{0}' is computed at run time; dtc needs "
                     "it constant (it decides the output's shape)",
                     node->input(1));
  Entry data = *ins[0];
  int64_t axis = getIntAttr(*node, "axis", 0);
  if (!findAttribute(*node, "axis")) {
    int64_t size = numElements(data.shape);
    auto input = valueOf(data);
    if (!input)
      return input.takeError();
    auto flat = reshape(*input, {size});
    if (!flat)
      return flat.takeError();
    data.known.reset();
    data.value = *flat;
    data.shape = {size};
    axis = 0;
  }
  std::string error;
  auto dim = normalizeAxis(axis, data.shape.size(), error);
  if (!dim)
    return nodeError("{0}", error);
  HostTensor selected = HostTensor::zeros(kInt64, {0});
  for (int64_t i = 0, e = ins[1]->known->size(); i < e; ++i)
    if (i < data.shape[*dim] && ins[1]->known->getInt(i))
      selected.ints.push_back(i);
  selected.shape = {static_cast<int64_t>(selected.ints.size())};
  if (selected.ints.empty())
    return nodeError("the condition selects nothing (an empty result)");
  Entry indices;
  indices.known = std::make_shared<const HostTensor>(std::move(selected));
  indices.dataType = kInt64;
  indices.shape = {static_cast<int64_t>(indices.known->size())};
  auto result = gatherAlong(data, indices, *dim);
  if (!result)
    return result.takeError();
  return defineValue(0, *result);
}

// EyeLike: ones on diagonal k of the input's shape; only the shape is read,
// so the result is a constant.
Error ModelImporter::lowerEyeLike(llvm::ArrayRef<Entry *> ins) {
  llvm::ArrayRef<int64_t> shape = ins[0]->shape;
  if (shape.size() != 2)
    return nodeError("expects a matrix, got {0}", shapeString(shape));
  int32_t type = getIntAttr(*node, "dtype", ins[0]->dataType);
  int64_t k = getIntAttr(*node, "k", 0);
  HostTensor eye = HostTensor::zeros(type, shape);
  for (int64_t i = 0; i < shape[0]; ++i)
    if (i + k >= 0 && i + k < shape[1])
      eye.set(i * shape[1] + i + k, 1);
  return defineKnown(0, std::move(eye));
}

// OneHot of run-time indices with a known depth (it decides the output's
// shape): compare against a constant ramp of classes on the new axis, then
// select values[1] (on) or values[0] (off). Negative indices count from
// depth.
Error ModelImporter::lowerOneHot(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 3 || !ins[1] || !ins[2])
    return nodeError("needs indices, depth and values");
  if (!ins[1]->known || ins[1]->known->size() != 1)
    return nodeError("the depth '{0}' must be a constant scalar",
                     node->input(1));
  int64_t depth = static_cast<int64_t>(ins[1]->known->getDouble(0));
  if (ins[2]->shape.size() != 1 || ins[2]->shape[0] != 2)
    return nodeError("values must be [off, on]");
  llvm::SmallVector<int64_t> shape(ins[0]->shape.begin(), ins[0]->shape.end());
  int64_t rank = shape.size() + 1;
  std::string error;
  auto axis = normalizeAxis(getIntAttr(*node, "axis", -1), rank, error);
  if (!axis)
    return nodeError("{0}", error);
  auto ids = indexValue(*ins[0]);
  if (!ids)
    return ids.takeError();
  auto values = valueOf(*ins[2]);
  if (!values)
    return values.takeError();
  int32_t idType =
      dataTypeOf(cast<RankedTensorType>(ids->getType()).getElementType());
  Formula f(*this, idType);
  Value id = f.sel(f.cmp(*ids, f.c(0), "lt"), f.add(*ids, f.c(depth)), *ids);
  shape.insert(shape.begin() + *axis, 1);
  id = id ? f.take(reshape(id, shape)) : id;
  llvm::SmallVector<int64_t> rampShape(rank, 1);
  rampShape[*axis] = depth;
  HostTensor ramp = HostTensor::zeros(idType, rampShape);
  for (int64_t i = 0; i < depth; ++i)
    ramp.set(i, i);
  auto scalarAt = [&](int64_t i) -> Value {
    Value part = f.take(sliceAxis(*values, 0, i, 1));
    return part ? f.take(reshape(part, {})) : part;
  };
  return f.define(
      0, f.sel(f.cmp(id, f.constant(ramp), "eq"), scalarAt(1), scalarAt(0)));
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

/// Pad in constant mode with constant pads: a negative pad is a slice, a
/// positive one a concatenation with a splat of the constant value on that
/// side. Mamba2's chunked scan pads the sequence to whole chunks this way.
Error ModelImporter::lowerPad(llvm::ArrayRef<Entry *> ins) {
  std::string mode = getStringAttr(*node, "mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect")
    return nodeError("mode '{0}' is not supported; dtc pads with a "
                     "constant, the edge or a reflection",
                     mode);
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs data and pads inputs");
  auto pads = knownInts(1, "pads");
  if (!pads)
    return pads.takeError();
  int64_t rank = ins[0]->shape.size();
  std::vector<int64_t> axes;
  if (ins.size() > 3 && ins[3]) {
    auto known = knownInts(3, "axes");
    if (!known)
      return known.takeError();
    std::string error;
    for (int64_t axis : *known) {
      auto normalized = normalizeAxis(axis, rank, error);
      if (!normalized)
        return nodeError("{0}", error);
      axes.push_back(*normalized);
    }
  } else {
    for (int64_t axis = 0; axis < rank; ++axis)
      axes.push_back(axis);
  }
  if (pads->size() != 2 * axes.size())
    return nodeError("has {0} pads for {1} axes (two per axis)", pads->size(),
                     axes.size());
  std::optional<HostTensor> fill;
  if (ins.size() > 2 && ins[2]) {
    if (!ins[2]->known || ins[2]->known->size() != 1)
      return nodeError("the constant_value '{0}' must be a constant scalar",
                       node->input(2));
    fill = *ins[2]->known;
  }
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  Value x = *input;
  for (auto [i, axis] : llvm::enumerate(axes)) {
    int64_t begin = (*pads)[i], end = (*pads)[i + axes.size()];
    int64_t size = cast<RankedTensorType>(x.getType()).getDimSize(axis);
    if (begin < 0 || end < 0) {
      int64_t start = std::max<int64_t>(-begin, 0);
      auto cut =
          sliceAxis(x, axis, start, size - start - std::max<int64_t>(-end, 0));
      if (!cut)
        return cut.takeError();
      x = *cut;
      begin = std::max<int64_t>(begin, 0);
      end = std::max<int64_t>(end, 0);
    }
    llvm::SmallVector<Value, 3> parts;
    size = cast<RankedTensorType>(x.getType()).getDimSize(axis);
    if (mode == "reflect" && std::max(begin, end) >= size)
      return nodeError("reflect pads of {0} need a dim larger than that, got "
                       "{1}",
                       std::max(begin, end), size);
    for (int64_t width : {begin, int64_t(-1), end}) {
      if (width < 0) {
        parts.push_back(x);
        continue;
      }
      if (width == 0)
        continue;
      if (mode != "constant") {
        // Copies of the edge, or the positions mirrored about it, one
        // slice each.
        bool atBegin = parts.empty();
        llvm::SmallVector<Value> copies;
        for (int64_t j = 0; j < width; ++j) {
          int64_t at = mode == "edge" ? (atBegin ? 0 : size - 1)
                       : atBegin      ? width - j
                                      : size - 2 - j;
          auto copy = sliceAxis(x, axis, at, 1);
          if (!copy)
            return copy.takeError();
          copies.push_back(*copy);
        }
        auto side = copies.size() == 1
                        ? Expected<Value>(copies[0])
                        : finish(d::ConcatOp::create(
                              builder, loc(), placeholder(), copies, axis));
        if (!side)
          return side.takeError();
        parts.push_back(*side);
        continue;
      }
      llvm::SmallVector<int64_t> shape(
          cast<RankedTensorType>(x.getType()).getShape());
      shape[axis] = width;
      HostTensor value = fill ? HostTensor::filled(*fill, shape)
                              : HostTensor::zeros(ins[0]->dataType, shape);
      auto side = constant(value);
      if (!side)
        return side.takeError();
      parts.push_back(*side);
    }
    if (parts.size() == 1)
      continue;
    auto joined =
        finish(d::ConcatOp::create(builder, loc(), placeholder(), parts, axis));
    if (!joined)
      return joined.takeError();
    x = *joined;
  }
  return defineValue(0, x);
}

/// Tile of a run-time tensor by constant repeats: each repeated axis a
/// concatenation of copies (DeBERTa's relative positions). Constant inputs
/// are tiled on the host.
Error ModelImporter::lowerTile(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs input and repeats");
  auto repeats = knownInts(1, "repeats");
  if (!repeats)
    return repeats.takeError();
  if (repeats->size() != ins[0]->shape.size())
    return nodeError("has {0} repeats for a rank-{1} input", repeats->size(),
                     ins[0]->shape.size());
  auto input = valueOf(*ins[0]);
  if (!input)
    return input.takeError();
  // Tile is a broadcast: each axis a repeated r times becomes [r, a] (a
  // new outer axis of size r, broadcast) merged back into r * a. So a
  // repeat over the batch (DeBERTa's relative positions, repeated per
  // sample) shards along the batch, which copies joined by a concat do not.
  llvm::SmallVector<int64_t> split, repeated, tiled;
  for (auto [axis, count] : llvm::enumerate(*repeats)) {
    if (count < 1)
      return nodeError("repeat {0} of axis {1} must be at least 1", count,
                       axis);
    int64_t size = ins[0]->shape[axis];
    if (count > 1 && size > 1) {
      split.push_back(1);
      repeated.push_back(count);
    }
    split.push_back(size);
    repeated.push_back(size == 1 ? count : size);
    tiled.push_back(count * size);
  }
  Value x = *input;
  if (split.size() != tiled.size()) {
    auto r = reshape(x, split);
    if (!r)
      return r.takeError();
    x = *r;
  }
  auto expanded = expandTo(x, repeated);
  if (!expanded)
    return expanded.takeError();
  x = *expanded;
  if (split.size() != tiled.size()) {
    auto merged = reshape(x, tiled);
    if (!merged)
      return merged.takeError();
    x = *merged;
  }
  return defineValue(0, x);
}

Error ModelImporter::lowerCastOp(llvm::ArrayRef<Entry *> ins) {
  return lowerCast(ins, getIntAttr(*node, "to", kUndefined));
}

Error ModelImporter::lowerCastLike(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() < 2 || !ins[1])
    return nodeError("needs a target_type input");
  return lowerCast(ins, ins[1]->dataType);
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

/// GatherND with constant indices on run-time data: the dynamo exporter's
/// `x[..., i]` tensor indexing (Falcon's fused qkv). Each index tuple picks
/// the sub-tensor data[i0, ..., im-1]: a slice per tuple, concatenated and
/// reshaped to indices.shape[:-1] + data.shape[m:].
Error ModelImporter::lowerGatherND(llvm::ArrayRef<Entry *> ins) {
  if (ins.size() != 2 || !ins[1])
    return nodeError("needs data and indices inputs");
  Entry &data = *ins[0], &indices = *ins[1];
  if (!indices.known)
    return nodeError("the indices '{0}' are computed at run time; dtc "
                     "supports GatherND with constant indices",
                     node->input(1));
  if (getIntAttr(*node, "batch_dims", 0) != 0)
    return nodeError("batch_dims != 0 is not supported");
  const HostTensor &idx = *indices.known;
  int64_t rank = data.shape.size();
  if (idx.rank() == 0 || idx.shape.back() < 1 || idx.shape.back() > rank)
    return nodeError("indices {0} must end in a dim of size 1 to {1}",
                     shapeString(idx.shape), rank);
  int64_t m = idx.shape.back(), tuples = idx.size() / m;
  if (m == 1) {
    // Whole rows of the first dim (Whisper's decoder positions): a Gather,
    // so a row lookup with a sharding rule and a scatter-add gradient.
    Entry rows;
    rows.dataType = kInt64;
    rows.shape.assign(idx.shape.begin(), idx.shape.end() - 1);
    rows.known = std::make_shared<const HostTensor>(
        HostTensor::fromInts(idx.toInts(), rows.shape));
    auto result = gatherAlong(data, rows, 0);
    if (!result)
      return result.takeError();
    return defineValue(0, *result);
  }
  auto input = valueOf(data);
  if (!input)
    return input.takeError();
  llvm::SmallVector<int64_t> rest(data.shape.begin() + m, data.shape.end());
  llvm::SmallVector<int64_t> one = {1};
  llvm::append_range(one, rest);
  llvm::SmallVector<Value> picks;
  for (int64_t t = 0; t < tuples; ++t) {
    Value pick = *input;
    for (int64_t d = 0; d < m; ++d) {
      int64_t i = idx.ints[t * m + d], size = data.shape[d];
      if (i < -size || i >= size)
        return nodeError("index {0} is out of range for dim {1} of size {2}", i,
                         d, size);
      auto sliced = sliceAxis(pick, d, i < 0 ? i + size : i, 1);
      if (!sliced)
        return sliced.takeError();
      pick = *sliced;
    }
    auto row = reshape(pick, one);
    if (!row)
      return row.takeError();
    picks.push_back(*row);
  }
  Value result = picks.front();
  if (picks.size() > 1) {
    auto joined = finish(
        d::ConcatOp::create(builder, loc(), placeholder(), picks, /*axis=*/0));
    if (!joined)
      return joined.takeError();
    result = *joined;
  }
  llvm::SmallVector<int64_t> outShape(idx.shape.begin(), idx.shape.end() - 1);
  llvm::append_range(outShape, rest);
  auto shaped = reshape(result, outShape);
  if (!shaped)
    return shaped.takeError();
  return defineValue(0, *shaped);
}

void ::dtc::onnx::detail::registerTensorOps(LoweringTable &table) {
  table["GatherND"] = &ModelImporter::lowerGatherND;
  table["Identity"] = &ModelImporter::lowerIdentity;
  table["Reshape"] = &ModelImporter::lowerReshapeLike;
  table["Flatten"] = &ModelImporter::lowerReshapeLike;
  table["Unsqueeze"] = &ModelImporter::lowerReshapeLike;
  table["Squeeze"] = &ModelImporter::lowerReshapeLike;
  table["Transpose"] = &ModelImporter::lowerTranspose;
  table["Concat"] = &ModelImporter::lowerConcat;
  table["Slice"] = &ModelImporter::lowerSlice;
  table["Split"] = &ModelImporter::lowerSplit;
  table["SplitToSequence"] = &ModelImporter::lowerSplitToSequence;
  table["SequenceAt"] = &ModelImporter::lowerSequenceAt;
  table["Gather"] = &ModelImporter::lowerGather;
  table["GatherElements"] = &ModelImporter::lowerGatherElements;
  table["Where"] = &ModelImporter::lowerWhere;
  table["Expand"] = &ModelImporter::lowerExpand;
  table["Trilu"] = &ModelImporter::lowerTrilu;
  table["Compress"] = &ModelImporter::lowerCompress;
  table["EyeLike"] = &ModelImporter::lowerEyeLike;
  table["OneHot"] = &ModelImporter::lowerOneHot;
  table["DepthToSpace"] = &ModelImporter::lowerDepthToSpace;
  table["SpaceToDepth"] = &ModelImporter::lowerDepthToSpace;
  table["Cast"] = &ModelImporter::lowerCastOp;
  table["CastLike"] = &ModelImporter::lowerCastLike;
  table["Pad"] = &ModelImporter::lowerPad;
  table["Tile"] = &ModelImporter::lowerTile;
}
