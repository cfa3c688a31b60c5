//===- LayoutFile.cpp - layout.json: placements, not chunks ---------------===//

#include "runtime/core/LayoutFile.h"
#include "runtime/support/Error.h"

#include "runtime/support/Json.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <map>

namespace dtc::runtime {

namespace {

constexpr llvm::StringLiteral kSchema = "dtc.layout/2";

llvm::Error layoutError(llvm::StringRef source, const llvm::Twine &why) {
  return dtc::failureText(source + ": " + why);
}

std::vector<int> ranksOf(const program::RankProgram &program) {
  std::vector<int> ranks(program.ranks().begin(), program.ranks().end());
  if (ranks.empty())
    ranks.push_back(program.rank());
  llvm::sort(ranks);
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  return ranks;
}

/// What makes two programs' copies of a variable the same placement.
std::string placementKey(const program::Variable &v) {
  std::string key;
  llvm::raw_string_ostream os(key);
  for (int64_t d : v.type().shape())
    os << d << ",";
  os << "|";
  for (int64_t d : v.global_shape())
    os << d << ",";
  os << "|";
  for (const program::DimShard &dim : v.shard()) {
    for (const std::string &axis : dim.axes())
      os << axis << ",";
    os << ":" << dim.block() << ";";
  }
  os << "|";
  for (const std::string &axis : v.flat_axes())
    os << axis << ",";
  return key;
}

} // namespace

std::string formatRankSet(llvm::ArrayRef<int> ranks) {
  std::string text;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1)
      ++j;
    if (!text.empty())
      text += ",";
    text += std::to_string(ranks[i]);
    if (j > i)
      text += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return text;
}

llvm::Expected<std::vector<int>> parseRankSet(llvm::StringRef text,
                                              int worldSize) {
  std::vector<int> ranks;
  auto bad = [&](const llvm::Twine &why) {
    return dtc::failureText("rank set '" + text + "': " + why);
  };
  llvm::SmallVector<llvm::StringRef, 8> ranges;
  text.split(ranges, ',');
  for (llvm::StringRef range : ranges) {
    auto [first, last] = range.split('-');
    bool isRange = range.contains('-');
    int lo = 0, hi = 0;
    if (first.getAsInteger(10, lo) ||
        (isRange ? last.getAsInteger(10, hi) : (hi = lo, false)))
      return bad("expected ranks and ranges like 0-3,8");
    if (lo < 0 || hi < lo || hi >= worldSize)
      return bad(llvm::formatv("{0} is not a range of ranks 0-{1}", range,
                               worldSize - 1));
    if (!ranks.empty() && lo <= ranks.back())
      return bad("ranges must be sorted and disjoint");
    for (int r = lo; r <= hi; ++r)
      ranks.push_back(r);
  }
  return ranks;
}

std::string writeLayoutFile(const program::Program &program) {
  // name -> placement key -> (ranks, variable), over the distinct programs.
  struct Holders {
    std::vector<int> ranks;
    const program::Variable *variable = nullptr;
  };
  std::map<std::string, std::map<std::string, Holders>> byName;
  for (const program::RankProgram &rankProgram : program.ranks()) {
    std::vector<int> ranks = ranksOf(rankProgram);
    for (const program::Variable &v : rankProgram.variables()) {
      Holders &holders = byName[v.name()][placementKey(v)];
      holders.variable = &v;
      holders.ranks.insert(holders.ranks.end(), ranks.begin(), ranks.end());
    }
  }

  std::string text;
  llvm::raw_string_ostream os(text);
  llvm::json::OStream json(os, 1);
  json.object([&] {
    json.attribute("mesh", program.mesh());
    json.attribute("schema", kSchema);
    json.attributeObject("tensors", [&] {
      for (auto &[name, placements] : byName) {
        std::vector<Holders *> ordered;
        for (auto &entry : placements) {
          llvm::sort(entry.second.ranks);
          ordered.push_back(&entry.second);
        }
        llvm::sort(ordered, [](const Holders *a, const Holders *b) {
          return a->ranks.front() < b->ranks.front();
        });
        const program::Variable &first = *ordered.front()->variable;
        json.attributeObject(name, [&] {
          json.attribute("dtype", dtypeName(first.type().dtype()));
          json.attribute("parameter", first.parameter());
          json.attributeArray("placements", [&] {
            for (const Holders *holders : ordered) {
              const program::Variable &v = *holders->variable;
              json.object([&] {
                if (v.shard_size())
                  json.attributeArray("dims", [&] {
                    for (const program::DimShard &dim : v.shard())
                      json.object([&] {
                        json.attributeArray("axes", [&] {
                          for (const std::string &axis : dim.axes())
                            json.value(axis);
                        });
                        json.attribute("block", dim.block());
                      });
                  });
                if (v.flat_axes_size())
                  json.attributeArray("flat_axes", [&] {
                    for (const std::string &axis : v.flat_axes())
                      json.value(axis);
                  });
                json.attribute("ranks", formatRankSet(holders->ranks));
              });
            }
          });
          json.attribute("role", first.role());
          json.attributeArray("shape", [&] {
            if (first.shard_size() || first.flat_axes_size())
              for (int64_t d : first.global_shape())
                json.value(d);
            else
              for (int64_t d : first.type().shape())
                json.value(d);
          });
        });
      }
    });
    json.attribute("world_size", program.world_size());
  });
  os << "\n";
  return text;
}

const LayoutFile::Tensor *LayoutFile::find(llvm::StringRef name) const {
  auto it = llvm::partition_point(
      tensors, [&](const Tensor &t) { return t.name < name; });
  return it != tensors.end() && it->name == name ? &*it : nullptr;
}

llvm::Expected<std::optional<ShardLayout>>
LayoutFile::chunkOf(const Tensor &tensor, int rank) const {
  for (const Placement &placement : tensor.placements)
    if (std::binary_search(placement.ranks.begin(), placement.ranks.end(),
                           rank)) {
      auto layout = ShardLayout::of(placement.variable, mesh, rank);
      if (!layout)
        return layout.takeError();
      return std::optional<ShardLayout>(std::move(*layout));
    }
  return std::nullopt;
}

namespace {

/// Reads one placement of `tensor` into a Variable ShardLayout::of reads.
llvm::Error readPlacement(const llvm::json::Object &object,
                          LayoutFile::Tensor &tensor, const LayoutFile &file,
                          llvm::StringRef where) {
  LayoutFile::Placement placement;
  std::optional<llvm::StringRef> ranks = object.getString("ranks");
  if (!ranks)
    return layoutError(where, "missing \"ranks\"");
  auto parsed = parseRankSet(*ranks, file.worldSize);
  if (!parsed)
    return layoutError(where, llvm::toString(parsed.takeError()));
  placement.ranks = std::move(*parsed);

  program::Variable &v = placement.variable;
  v.set_name(tensor.name);
  v.set_role(tensor.role);
  v.set_parameter(tensor.parameter);
  v.mutable_type()->set_dtype(tensor.dtype);
  auto readAxes = [&](const llvm::json::Array &array,
                      auto *out) -> llvm::Error {
    for (const llvm::json::Value &axis : array) {
      std::optional<llvm::StringRef> name = axis.getAsString();
      if (!name || file.mesh.axisIndex(*name) < 0)
        return layoutError(where, "an axis is not one of mesh '" +
                                      file.meshText + "''s");
      out->Add(name->str());
    }
    return llvm::Error::success();
  };

  std::vector<int64_t> shard = tensor.shape;
  auto groupSize = [&](llvm::ArrayRef<std::string> axes) {
    int64_t size = 1;
    for (const std::string &axis : axes)
      size *= file.mesh.axes()[file.mesh.axisIndex(axis)].size;
    return size;
  };
  if (const llvm::json::Array *dims = object.getArray("dims")) {
    if (dims->size() != tensor.shape.size())
      return layoutError(where,
                         llvm::formatv("{0} dims for a tensor of {1}",
                                       dims->size(), tensor.shape.size()));
    for (auto [d, dimValue] : llvm::enumerate(*dims)) {
      const llvm::json::Object *dim = dimValue.getAsObject();
      const llvm::json::Array *axes = dim ? dim->getArray("axes") : nullptr;
      std::optional<int64_t> block = dim ? dim->getInteger("block") : 0;
      if (!axes || !block || *block < 0)
        return layoutError(where, "a dim needs \"axes\" and \"block\" >= 0");
      program::DimShard *out = v.add_shard();
      if (llvm::Error e = readAxes(*axes, out->mutable_axes()))
        return e;
      out->set_block(*block);
      std::vector<std::string> names(out->axes().begin(), out->axes().end());
      int64_t parts = groupSize(names);
      if (shard[d] % parts)
        return layoutError(where, llvm::formatv("dim {0} ({1}) is not cut "
                                                "into {2} equal parts",
                                                d, shard[d], parts));
      shard[d] /= parts;
    }
    for (int64_t d : tensor.shape)
      v.add_global_shape(d);
  }
  if (const llvm::json::Array *flat = object.getArray("flat_axes")) {
    if (v.shard_size() == 0)
      for (int64_t d : tensor.shape) {
        v.add_global_shape(d);
        v.add_shard();
      }
    if (llvm::Error e = readAxes(*flat, v.mutable_flat_axes()))
      return e;
    std::vector<std::string> names(v.flat_axes().begin(), v.flat_axes().end());
    int64_t elements = numElements(shard), parts = groupSize(names);
    if (elements % parts)
      return layoutError(where, llvm::formatv("its shard of {0} elements is "
                                              "not cut into {1} equal parts",
                                              elements, parts));
    shard = {elements / parts};
  }
  for (int64_t d : shard)
    v.mutable_type()->add_shape(d);
  tensor.placements.push_back(std::move(placement));
  return llvm::Error::success();
}

} // namespace

llvm::Expected<LayoutFile> readLayoutFile(llvm::StringRef text,
                                          llvm::StringRef source) {
  auto value = parseJson(text);
  if (!value)
    return layoutError(source, llvm::toString(value.takeError()));
  const llvm::json::Object *top = value->getAsObject();
  if (!top)
    return layoutError(source, "not a JSON object");
  std::optional<llvm::StringRef> schema = top->getString("schema");
  if (!schema || *schema != kSchema)
    return layoutError(source, "schema is not \"" + kSchema +
                                   "\" (recompile the bundle with this dtc)");
  LayoutFile file;
  std::optional<llvm::StringRef> meshText = top->getString("mesh");
  std::optional<int64_t> worldSize = top->getInteger("world_size");
  if (!meshText || !worldSize)
    return layoutError(source, "missing \"mesh\" or \"world_size\"");
  file.meshText = meshText->str();
  auto mesh = Mesh::parse(*meshText);
  if (!mesh)
    return layoutError(source, llvm::toString(mesh.takeError()));
  file.mesh = std::move(*mesh);
  file.worldSize = static_cast<int>(*worldSize);
  if (file.worldSize != file.mesh.worldSize())
    return layoutError(source, llvm::formatv("world_size {0} is not mesh "
                                             "'{1}''s {2} ranks",
                                             file.worldSize, file.meshText,
                                             file.mesh.worldSize()));
  const llvm::json::Object *tensors = top->getObject("tensors");
  if (!tensors)
    return layoutError(source, "missing \"tensors\"");
  for (const auto &[key, entry] : *tensors) {
    std::string where = (source + ": tensor '" + key.str() + "'").str();
    const llvm::json::Object *object = entry.getAsObject();
    if (!object)
      return layoutError(where, "not an object");
    LayoutFile::Tensor tensor;
    tensor.name = key.str();
    tensor.role = object->getString("role").value_or("").str();
    tensor.parameter = object->getString("parameter").value_or("").str();
    tensor.dtype = parseDType(object->getString("dtype").value_or(""));
    if (tensor.dtype == program::DTYPE_UNSPECIFIED)
      return layoutError(where, "missing or unknown \"dtype\"");
    const llvm::json::Array *shape = object->getArray("shape");
    if (!shape)
      return layoutError(where, "missing \"shape\"");
    for (const llvm::json::Value &d : *shape) {
      std::optional<int64_t> size = d.getAsInteger();
      if (!size || *size < 0)
        return layoutError(where, "\"shape\" holds a non-size");
      tensor.shape.push_back(*size);
    }
    const llvm::json::Array *placements = object->getArray("placements");
    if (!placements || placements->empty())
      return layoutError(where, "missing \"placements\"");
    for (const llvm::json::Value &p : *placements) {
      const llvm::json::Object *placement = p.getAsObject();
      if (!placement)
        return layoutError(where, "a placement is not an object");
      if (llvm::Error e = readPlacement(*placement, tensor, file, where))
        return e;
    }
    file.tensors.push_back(std::move(tensor));
  }
  llvm::sort(file.tensors,
             [](const LayoutFile::Tensor &a, const LayoutFile::Tensor &b) {
               return a.name < b.name;
             });
  return file;
}

} // namespace dtc::runtime
