//===- Mesh.cpp - The device mesh -----------------------------------------===//

#include "runtime/support/Mesh.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"

namespace dtc::runtime {

namespace {
llvm::Error meshError(const llvm::Twine &message) {
  return dtc::failureText("mesh: " + message);
}
} // namespace

llvm::Expected<Mesh> Mesh::parse(llvm::StringRef text) {
  std::vector<Axis> axes;
  llvm::SmallVector<llvm::StringRef> parts;
  text.split(parts, ',', -1, /*KeepEmpty=*/false);
  for (llvm::StringRef part : parts) {
    auto [name, size] = part.trim().split(':');
    Axis axis{name.trim().str(), 0};
    if (axis.name.empty() || size.trim().getAsInteger(10, axis.size) ||
        axis.size < 1)
      return meshError("bad axis '" + part + "' in '" + text +
                       "' (expected name:size pairs such as dp:2,tp:4)");
    for (const Axis &other : axes)
      if (other.name == axis.name)
        return meshError("axis '" + axis.name + "' appears twice in '" + text +
                         "'");
    axes.push_back(std::move(axis));
  }
  return Mesh(std::move(axes));
}

std::string Mesh::str() const {
  std::string s;
  for (const Axis &axis : axes_)
    s += (s.empty() ? "" : ",") + axis.name + ":" + std::to_string(axis.size);
  return s;
}

int Mesh::worldSize() const {
  int64_t n = 1;
  for (const Axis &axis : axes_)
    n *= axis.size;
  return static_cast<int>(n);
}

int Mesh::axisIndex(llvm::StringRef name) const {
  for (auto [i, axis] : llvm::enumerate(axes_))
    if (axis.name == name)
      return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> Mesh::coordinates(int rank) const {
  std::vector<int64_t> coords(axes_.size());
  int64_t rest = rank;
  for (size_t i = axes_.size(); i-- > 0;) {
    coords[i] = rest % axes_[i].size;
    rest /= axes_[i].size;
  }
  return coords;
}

int Mesh::rankAt(llvm::ArrayRef<int64_t> coordinates) const {
  int64_t rank = 0;
  for (auto [axis, c] : llvm::zip_equal(axes_, coordinates))
    rank = rank * axis.size + c;
  return static_cast<int>(rank);
}

llvm::Expected<std::vector<int>>
Mesh::group(int rank, llvm::ArrayRef<std::string> axes) const {
  std::vector<bool> inGroup(axes_.size(), false);
  for (const std::string &name : axes) {
    int index = axisIndex(name);
    if (index < 0)
      return meshError("no axis '" + name + "' in '" + str() + "'");
    inGroup[index] = true;
  }
  std::vector<int64_t> coords = coordinates(rank);
  // Enumerate the group's coordinates row-major over its axes in mesh
  // order: the last group axis varies fastest.
  std::vector<int> ranks;
  for (size_t i = 0; i < axes_.size(); ++i)
    if (inGroup[i])
      coords[i] = 0;
  while (true) {
    ranks.push_back(rankAt(coords));
    size_t i = axes_.size();
    while (i-- > 0) {
      if (!inGroup[i])
        continue;
      if (++coords[i] < axes_[i].size)
        break;
      coords[i] = 0;
    }
    if (i == static_cast<size_t>(-1))
      break;
  }
  return ranks;
}

std::optional<int> Mesh::peer(int rank, llvm::StringRef axis,
                              int64_t offset) const {
  int index = axisIndex(axis);
  if (index < 0)
    return std::nullopt;
  std::vector<int64_t> coords = coordinates(rank);
  coords[index] += offset;
  if (coords[index] < 0 || coords[index] >= axes_[index].size)
    return std::nullopt;
  return rankAt(coords);
}

} // namespace dtc::runtime
