//===- Layout.h - A value's layout over the device mesh ---------*- C++ -*-===//
//
// The one model of a sharded value that dtc-propagate-sharding searches over
// and dtc-partition rewrites with: per mesh axis, the dim the value splits
// and that dim's interleave block, and the axes it is a partial sum over.
// Its attribute form is ShardingAttr (`dtc.sharding`). The reshape rule
// (which splits survive a reshape) lives here too, so the two passes always
// agree.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_PASSES_LAYOUT_H
#define DTC_PASSES_LAYOUT_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/Sequence.h"
#include "llvm/ADT/SmallVector.h"

#include <algorithm>
#include <cassert>
#include <charconv>
#include <cstdint>
#include <string>

namespace mlir::dtc {

/// The most mesh axes a layout holds.
constexpr size_t kMaxMeshAxes = 8;

/// One value per mesh axis, stored inline: the propagation search copies
/// millions of layouts, so a layout is trivially copyable.
template <typename T> class PerAxis {
public:
  size_t size() const { return count; }
  T &operator[](size_t a) { return values[a]; }
  const T &operator[](size_t a) const { return values[a]; }
  T *begin() { return values; }
  T *end() { return values + count; }
  const T *begin() const { return values; }
  const T *end() const { return values + count; }
  void assign(size_t n, T value) {
    assert(n <= kMaxMeshAxes && "more mesh axes than a layout holds");
    count = static_cast<uint8_t>(n);
    std::fill(values, values + n, value);
  }
  bool operator==(const PerAxis &o) const {
    return count == o.count && std::equal(begin(), end(), o.begin());
  }
  bool operator!=(const PerAxis &o) const { return !(*this == o); }

private:
  T values[kMaxMeshAxes] = {};
  uint8_t count = 0;
};

/// A value's layout over the mesh, per axis: the dim it splits (-1: none),
/// that dim's interleave block (0: the whole dim) and whether the value is
/// a partial sum over the axis (bit a of `partial`). Several axes on one
/// dim cut it in mesh order, outermost first.
struct Layout {
  PerAxis<int8_t> dim;
  PerAxis<int64_t> block;
  uint32_t partial = 0;

  static Layout replicated(size_t numAxes) {
    Layout l;
    l.dim.assign(numAxes, -1);
    l.block.assign(numAxes, 0);
    return l;
  }
  size_t numAxes() const { return dim.size(); }
  bool splits(size_t a) const { return dim[a] >= 0; }
  /// The dim axis `a` splits, -1 for none (as an integer, not a char).
  int64_t dimOf(size_t a) const { return dim[a]; }
  void split(size_t a, int64_t d, int64_t interleave = 0) {
    dim[a] = static_cast<int8_t>(d);
    block[a] = interleave;
  }
  void unsplit(size_t a) { split(a, -1); }
  bool isPartial(size_t a) const { return partial & (1u << a); }
  bool anyPartial() const { return partial != 0; }
  void setPartial(size_t a, bool on = true) {
    partial = on ? partial | (1u << a) : partial & ~(1u << a);
  }
  /// The same splits, no partial sums.
  Layout dimsOnly() const {
    Layout l = *this;
    l.partial = 0;
    return l;
  }
  /// The axis whose split of `a`'s dim nests inside `a`'s (a later mesh
  /// axis on the same dim), or an interleaved one sharing it; -1 when `a`
  /// is alone or innermost on its dim, so that a local slice, gather or
  /// reduce-scatter of `a` acts on contiguous parts of the others' chunk.
  int nestedInside(size_t a) const {
    for (size_t b = 0; b < numAxes(); ++b)
      if (b != a && dim[b] == dim[a] && (b > a || block[a] || block[b]))
        return static_cast<int>(b);
    return -1;
  }
  bool operator==(const Layout &o) const {
    return dim == o.dim && block == o.block && partial == o.partial;
  }
  bool operator!=(const Layout &o) const { return !(*this == o); }

  /// Appends "dim:block," per axis and "p<partial>;" to `key` (a
  /// std::string, or a SmallString where the key is temporary).
  template <typename Key> void appendKey(Key &key) const {
    for (size_t a = 0; a < numAxes(); ++a) {
      appendDecimal(key, dim[a]);
      key += ':';
      appendDecimal(key, block[a]);
      key += ',';
    }
    key += 'p';
    appendDecimal(key, partial);
    key += ';';
  }
  std::string key() const {
    std::string k;
    appendKey(k);
    return k;
  }
  /// std::to_string's digits without its temporary: the search builds keys
  /// for every choice of every state of every op.
  template <typename Key> static void appendDecimal(Key &key, int64_t value) {
    char digits[24];
    char *end = std::to_chars(digits, digits + sizeof(digits), value).ptr;
    key.append(digits, end);
  }
};

/// A reshape's operand and result layouts for an input in `input`: the
/// operand is `input` less the axes whose digit of the flat index (a stride
/// and a count) no result dim holds whole, which are gathered first, with
/// every axis nested inside them on their input dim; the result holds the
/// rest where the reshape moves them, and the input's partial sums.
/// `axisSizes` are the mesh axes' sizes.
struct ReshapeLayouts {
  Layout operand, result;
  /// The axes the result splits.
  uint32_t splitAxes = 0;
};

inline ReshapeLayouts reshapeLayouts(llvm::ArrayRef<int64_t> inShape,
                                     llvm::ArrayRef<int64_t> outShape,
                                     const Layout &input,
                                     llvm::ArrayRef<int64_t> axisSizes) {
  auto trailing = [](llvm::ArrayRef<int64_t> shape) {
    llvm::SmallVector<int64_t> t(shape.size(), 1);
    for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
      t[i] = t[i + 1] * shape[i + 1];
    return t;
  };
  llvm::SmallVector<int64_t> inT = trailing(inShape), outT = trailing(outShape);
  size_t numAxes = input.numAxes();
  Layout result = Layout::replicated(numAxes);
  // The digit of each axis: its run within the dim is what the axes outside
  // it on that dim leave (or its interleave block when alone).
  for (size_t a = 0; a < numAxes; ++a) {
    if (!input.splits(a))
      continue;
    int64_t d = input.dim[a], n = axisSizes[a];
    bool shared = llvm::any_of(llvm::seq<size_t>(0, numAxes), [&](size_t b) {
      return b != a && input.dim[b] == d;
    });
    if (shared && llvm::any_of(llvm::seq<size_t>(0, numAxes), [&](size_t b) {
          return input.dim[b] == d && input.block[b];
        }))
      continue;
    int64_t run = input.block[a] ? input.block[a] : inShape[d];
    for (size_t b = 0; b < a; ++b)
      if (input.dim[b] == d)
        run /= axisSizes[b];
    int64_t stride = inT[d] * run / n;
    for (size_t j = 0; j < outShape.size(); ++j) {
      if (stride % outT[j] || stride * n > outT[j] * outShape[j] ||
          (outT[j] * outShape[j]) % (stride * n))
        continue;
      result.split(a, static_cast<int64_t>(j), stride * n / outT[j]);
      break;
    }
  }
  // In each result dim, the axes must nest in mesh order from the whole dim
  // down (a lone axis may be interleaved instead).
  for (size_t j = 0; j < outShape.size(); ++j) {
    llvm::SmallVector<size_t> on;
    for (size_t a = 0; a < numAxes; ++a)
      if (result.dim[a] == static_cast<int64_t>(j))
        on.push_back(a);
    if (on.size() == 1) {
      int64_t &block = result.block[on.front()];
      block = block == outShape[j] ? 0 : block;
      continue;
    }
    int64_t expected = outShape[j];
    bool nested = true;
    for (size_t a : on) {
      nested = nested && result.block[a] == expected;
      if (nested) {
        result.block[a] = 0;
        expected /= axisSizes[a];
      } else {
        result.unsplit(a);
      }
    }
  }
  // An axis that does not survive is gathered, and with it every axis cut
  // inside it on its input dim.
  for (size_t a = 0; a < numAxes; ++a)
    if (input.splits(a) && !result.splits(a))
      for (size_t b = a + 1; b < numAxes; ++b)
        if (input.dim[b] == input.dim[a])
          result.unsplit(b);
  ReshapeLayouts r{input, result, 0};
  r.result.partial = input.partial;
  for (size_t a = 0; a < numAxes; ++a) {
    if (!input.splits(a))
      continue;
    if (result.splits(a))
      r.splitAxes |= 1u << a;
    else
      r.operand.unsplit(a);
  }
  return r;
}

} // namespace mlir::dtc

#endif // DTC_PASSES_LAYOUT_H
