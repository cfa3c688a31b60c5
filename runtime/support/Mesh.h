//===- Mesh.h - The device mesh ---------------------------------*- C++ -*-===//
//
// The one definition of the device mesh and its text form ("dp:2,tp:4":
// pass options, the command line and program.pb's mesh; the IR holds it as
// #dtc.mesh, which converts to and from this): which ranks form the group
// of a set of axes. LLVM Support only, so the dialect, the passes, the
// compiler and the runtime all read it with the same parser.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_SUPPORT_MESH_H
#define DTC_RUNTIME_SUPPORT_MESH_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dtc::runtime {

/// The device mesh: named axes, outermost first. Rank r sits at the
/// row-major coordinates of r (the last axis varies fastest).
class Mesh {
public:
  struct Axis {
    std::string name;
    int64_t size = 1;
  };

  Mesh() = default;
  explicit Mesh(std::vector<Axis> axes) : axes_(std::move(axes)) {}
  /// "dp:2,tp:4"; "" is one rank.
  static llvm::Expected<Mesh> parse(llvm::StringRef text);
  std::string str() const;

  llvm::ArrayRef<Axis> axes() const { return axes_; }
  int worldSize() const;
  /// The index of `name` in axes(), or -1.
  int axisIndex(llvm::StringRef name) const;

  std::vector<int64_t> coordinates(int rank) const;
  int rankAt(llvm::ArrayRef<int64_t> coordinates) const;

  /// The ranks that differ from `rank` only in `axes`, ordered by their
  /// coordinates on those axes (mesh order, outermost first): the order of
  /// gathers and scatters. Errors on an unknown axis.
  llvm::Expected<std::vector<int>>
  group(int rank, llvm::ArrayRef<std::string> axes) const;

  /// The rank whose coordinate on `axis` is `rank`'s plus `offset`, all
  /// others equal; nullopt past either end of the axis.
  std::optional<int> peer(int rank, llvm::StringRef axis, int64_t offset) const;

private:
  std::vector<Axis> axes_;
};

} // namespace dtc::runtime

#endif // DTC_RUNTIME_SUPPORT_MESH_H
