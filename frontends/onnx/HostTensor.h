//===- HostTensor.h - Tensors the ONNX importer knows on the host -*- C++ -*-=//
//
// Exported graphs compute shapes, position ids and masks at run time from
// constants and `Shape`. Once the importer has bound every dimension, those
// values are fixed, so it evaluates them on the host. A HostTensor holds one
// such value: its ONNX element type, its shape, and its elements widened to
// int64 (integer and bool types) or double (floating-point types, rounded to
// their own precision after every operation so results match an fp32 run).
//
//===----------------------------------------------------------------------===//

#ifndef DTC_FRONTENDS_ONNX_HOSTTENSOR_H
#define DTC_FRONTENDS_ONNX_HOSTTENSOR_H

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/MLIRContext.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace onnx {
class TensorProto;
} // namespace onnx

namespace dtc::onnx {

/// ONNX element types (TensorProto::DataType), spelled out so that headers
/// need not include the generated protobuf code.
enum DataType : int32_t {
  kUndefined = 0,
  kFloat = 1,
  kUint8 = 2,
  kInt8 = 3,
  kUint16 = 4,
  kInt16 = 5,
  kInt32 = 6,
  kInt64 = 7,
  kString = 8,
  kBool = 9,
  kFloat16 = 10,
  kDouble = 11,
  kUint32 = 12,
  kUint64 = 13,
  kBfloat16 = 16,
};

bool isFloatType(int32_t dataType);
/// Integer and bool types: the ones a HostTensor stores as int64.
bool isIntegerType(int32_t dataType);
/// "float32", "int64", ... for messages.
std::string dataTypeName(int32_t dataType);
/// Rounds `value` to the precision of the floating-point `dataType`.
double roundToType(double value, int32_t dataType);
/// Wraps `value` into the range of the integer `dataType` (bool: 0 or 1).
int64_t wrapToType(int64_t value, int32_t dataType);
/// The dtc element type of `dataType`, or null where dtc has none.
mlir::Type toElementType(int32_t dataType, mlir::MLIRContext &context);

/// Product of `shape`.
int64_t numElements(llvm::ArrayRef<int64_t> shape);
/// "[2x16x64]" for messages.
std::string shapeString(llvm::ArrayRef<int64_t> shape);

/// Reserves room for `n` elements in `v`, still empty, before anything is
/// written: large buffers are backed by transparent huge pages where the
/// kernel gives them on request. Host-evaluated masks are [seq, seq]: at
/// 4096 that is 128 MB of doubles, 32k page faults of 4 KiB or 64 of 2 MiB,
/// most of what importing a long-context model costs.
void reserveElements(std::vector<double> &v, size_t n);
void reserveElements(std::vector<int64_t> &v, size_t n);
void reserveElements(std::vector<float> &v, size_t n);

struct HostTensor {
  int32_t dataType = kUndefined;
  llvm::SmallVector<int64_t, 4> shape;
  /// Elements of integer and bool tensors, row-major.
  std::vector<int64_t> ints;
  /// Elements of floating-point tensors, row-major.
  std::vector<double> floats;

  bool isFloat() const { return isFloatType(dataType); }
  int64_t size() const { return numElements(shape); }
  int64_t rank() const { return shape.size(); }
  double getDouble(int64_t i) const {
    return isFloat() ? floats[i] : static_cast<double>(ints[i]);
  }
  int64_t getInt(int64_t i) const {
    return isFloat() ? static_cast<int64_t>(floats[i]) : ints[i];
  }
  /// Stores `value` rounded (or wrapped and truncated) to the element type.
  void set(int64_t i, double value);
  void setInt(int64_t i, int64_t value);

  /// A zero-filled tensor.
  static HostTensor zeros(int32_t dataType, llvm::ArrayRef<int64_t> shape);
  /// `value`'s element in every position of `shape` (value has one).
  static HostTensor filled(const HostTensor &value,
                           llvm::ArrayRef<int64_t> shape);
  /// A copy of `t` whose storage is reserved as reserveElements does.
  static HostTensor copyOf(const HostTensor &t);
  /// An int64 tensor of `values`; `shape` defaults to [values.size()].
  static HostTensor
  fromInts(llvm::ArrayRef<int64_t> values,
           std::optional<llvm::ArrayRef<int64_t>> shape = std::nullopt);
  /// The elements as int64 (truncating floats).
  std::vector<int64_t> toInts() const;
};

/// The bytes of an external-data TensorProto, from a regular file inside
/// `baseDir` (never through a link out of it). On failure returns nullopt
/// and sets `error`.
std::optional<std::string> readExternalData(const ::onnx::TensorProto &proto,
                                            llvm::StringRef baseDir,
                                            std::string &error);

/// Decodes a TensorProto (typed fields, raw_data or external data relative
/// to `baseDir`). On failure returns nullopt and sets `error` to a message
/// without context.
std::optional<HostTensor> decodeTensor(const ::onnx::TensorProto &proto,
                                       llvm::StringRef baseDir,
                                       std::string &error);

/// A parameter stacked from per-expert initializers (FuseMoe.h): each member
/// (found by `lookup`, null if absent) decoded, transposed when
/// `transposeEach` (members are then matrices), and stacked along a new
/// leading dim. On failure returns nullopt and sets `error`.
std::optional<HostTensor> decodeStacked(
    llvm::ArrayRef<std::string> members, bool transposeEach,
    llvm::function_ref<const ::onnx::TensorProto *(llvm::StringRef)> lookup,
    llvm::StringRef baseDir, std::string &error);

/// The tensor as a dense attribute of its dtc element type (splat when all
/// elements are equal). The element type must have a dtc equivalent.
mlir::DenseElementsAttr toElementsAttr(const HostTensor &tensor,
                                       mlir::MLIRContext &context);

} // namespace dtc::onnx

#endif // DTC_FRONTENDS_ONNX_HOSTTENSOR_H
