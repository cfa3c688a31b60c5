//===- HostTensor.cpp - Tensors the ONNX importer knows on the host -------===//

#include "frontends/onnx/HostTensor.h"

#include "onnx/onnx_pb.h"

#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/APFloat.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <sys/mman.h>

using namespace dtc::onnx;

bool dtc::onnx::isFloatType(int32_t t) {
  return t == kFloat || t == kFloat16 || t == kDouble || t == kBfloat16;
}

bool dtc::onnx::isIntegerType(int32_t t) {
  switch (t) {
  case kUint8:
  case kInt8:
  case kUint16:
  case kInt16:
  case kInt32:
  case kInt64:
  case kBool:
  case kUint32:
  case kUint64:
    return true;
  default:
    return false;
  }
}

std::string dtc::onnx::dataTypeName(int32_t t) {
  switch (t) {
  case kFloat:
    return "float32";
  case kUint8:
    return "uint8";
  case kInt8:
    return "int8";
  case kUint16:
    return "uint16";
  case kInt16:
    return "int16";
  case kInt32:
    return "int32";
  case kInt64:
    return "int64";
  case kString:
    return "string";
  case kBool:
    return "bool";
  case kFloat16:
    return "float16";
  case kDouble:
    return "float64";
  case kUint32:
    return "uint32";
  case kUint64:
    return "uint64";
  case kBfloat16:
    return "bfloat16";
  default:
    return "data type " + std::to_string(t);
  }
}

static const llvm::fltSemantics *semanticsOf(int32_t t) {
  switch (t) {
  case kFloat:
    return &llvm::APFloat::IEEEsingle();
  case kFloat16:
    return &llvm::APFloat::IEEEhalf();
  case kBfloat16:
    return &llvm::APFloat::BFloat();
  case kDouble:
    return &llvm::APFloat::IEEEdouble();
  default:
    return nullptr;
  }
}

double dtc::onnx::roundToType(double value, int32_t t) {
  if (t == kFloat)
    return static_cast<float>(value);
  if (t == kDouble || !semanticsOf(t))
    return value;
  llvm::APFloat f(value);
  bool losesInfo;
  f.convert(*semanticsOf(t), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
            &losesInfo);
  return f.convertToDouble();
}

int64_t dtc::onnx::wrapToType(int64_t v, int32_t t) {
  switch (t) {
  case kBool:
    return v != 0;
  case kUint8:
    return static_cast<uint8_t>(v);
  case kInt8:
    return static_cast<int8_t>(v);
  case kUint16:
    return static_cast<uint16_t>(v);
  case kInt16:
    return static_cast<int16_t>(v);
  case kInt32:
    return static_cast<int32_t>(v);
  case kUint32:
    return static_cast<uint32_t>(v);
  default:
    return v;
  }
}

mlir::Type dtc::onnx::toElementType(int32_t t, mlir::MLIRContext &ctx) {
  switch (t) {
  case kFloat:
    return mlir::Float32Type::get(&ctx);
  case kFloat16:
    return mlir::Float16Type::get(&ctx);
  case kBfloat16:
    return mlir::BFloat16Type::get(&ctx);
  case kDouble:
    return mlir::Float64Type::get(&ctx);
  case kInt64:
    return mlir::IntegerType::get(&ctx, 64);
  case kInt32:
    return mlir::IntegerType::get(&ctx, 32);
  case kInt8:
    return mlir::IntegerType::get(&ctx, 8);
  case kBool:
    return mlir::IntegerType::get(&ctx, 1);
  default:
    return nullptr;
  }
}

int64_t dtc::onnx::numElements(llvm::ArrayRef<int64_t> shape) {
  // Saturates at INT64_MAX: the dims of a model are untrusted, and a product
  // that wrapped (e.g. to 0) would pass every size limit (fuzz finding).
  if (llvm::is_contained(shape, 0))
    return 0;
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n))
      return INT64_MAX;
  return n;
}

std::string dtc::onnx::shapeString(llvm::ArrayRef<int64_t> shape) {
  std::string s = "[";
  llvm::raw_string_ostream os(s);
  llvm::interleave(shape, os, "x");
  return s + "]";
}

void HostTensor::set(int64_t i, double value) {
  if (isFloat())
    floats[i] = roundToType(value, dataType);
  else if (dataType == kBool)
    ints[i] = value != 0;
  else
    ints[i] = wrapToType(static_cast<int64_t>(value), dataType);
}

void HostTensor::setInt(int64_t i, int64_t value) {
  if (isFloat())
    floats[i] = roundToType(static_cast<double>(value), dataType);
  else
    ints[i] = wrapToType(value, dataType);
}

namespace {
template <typename T> void reserveLarge(std::vector<T> &v, size_t n) {
  v.reserve(n);
  constexpr uintptr_t kHugePage = uintptr_t(2) << 20;
  if (n * sizeof(T) < 4 * kHugePage)
    return;
  auto address = reinterpret_cast<uintptr_t>(v.data());
  uintptr_t begin = (address + kHugePage - 1) & ~(kHugePage - 1);
  uintptr_t end = (address + n * sizeof(T)) & ~(kHugePage - 1);
  // Advice only: where the kernel declines, the pages stay small.
  if (end > begin)
    (void)madvise(reinterpret_cast<void *>(begin), end - begin, MADV_HUGEPAGE);
}
} // namespace

void dtc::onnx::reserveElements(std::vector<double> &v, size_t n) {
  reserveLarge(v, n);
}
void dtc::onnx::reserveElements(std::vector<int64_t> &v, size_t n) {
  reserveLarge(v, n);
}
void dtc::onnx::reserveElements(std::vector<float> &v, size_t n) {
  reserveLarge(v, n);
}

/// A tensor of `shape` holding `f` (floating-point types) or `i`.
static HostTensor filledWith(int32_t dataType, llvm::ArrayRef<int64_t> shape,
                             double f, int64_t i) {
  HostTensor t;
  t.dataType = dataType;
  t.shape.assign(shape.begin(), shape.end());
  if (t.isFloat()) {
    reserveElements(t.floats, t.size());
    t.floats.assign(t.size(), f);
  } else {
    reserveElements(t.ints, t.size());
    t.ints.assign(t.size(), i);
  }
  return t;
}

HostTensor HostTensor::zeros(int32_t dataType, llvm::ArrayRef<int64_t> shape) {
  return filledWith(dataType, shape, 0.0, 0);
}

HostTensor HostTensor::filled(const HostTensor &value,
                              llvm::ArrayRef<int64_t> shape) {
  return value.isFloat() ? filledWith(value.dataType, shape, value.floats[0], 0)
                         : filledWith(value.dataType, shape, 0, value.ints[0]);
}

HostTensor HostTensor::copyOf(const HostTensor &t) {
  HostTensor out;
  out.dataType = t.dataType;
  out.shape = t.shape;
  reserveElements(out.floats, t.floats.size());
  out.floats.assign(t.floats.begin(), t.floats.end());
  reserveElements(out.ints, t.ints.size());
  out.ints.assign(t.ints.begin(), t.ints.end());
  return out;
}

HostTensor HostTensor::fromInts(llvm::ArrayRef<int64_t> values,
                                std::optional<llvm::ArrayRef<int64_t>> shape) {
  HostTensor t;
  t.dataType = kInt64;
  if (shape)
    t.shape.assign(shape->begin(), shape->end());
  else
    t.shape = {static_cast<int64_t>(values.size())};
  t.ints.assign(values.begin(), values.end());
  return t;
}

std::vector<int64_t> HostTensor::toInts() const {
  if (!isFloat())
    return ints;
  std::vector<int64_t> result;
  for (double v : floats)
    result.push_back(static_cast<int64_t>(v));
  return result;
}

/// Size in bytes of one element in raw_data, or 0 if unsupported.
static size_t rawElementSize(int32_t t) {
  switch (t) {
  case kBool:
  case kUint8:
  case kInt8:
    return 1;
  case kUint16:
  case kInt16:
  case kFloat16:
  case kBfloat16:
    return 2;
  case kInt32:
  case kUint32:
  case kFloat:
    return 4;
  case kInt64:
  case kUint64:
  case kDouble:
    return 8;
  default:
    return 0;
  }
}

/// Decodes one little-endian element of raw data.
static void decodeRawElement(HostTensor &t, int64_t i, const char *p) {
  using namespace llvm::support;
  switch (t.dataType) {
  case kBool:
  case kUint8:
    t.ints[i] = static_cast<uint8_t>(*p);
    break;
  case kInt8:
    t.ints[i] = static_cast<int8_t>(*p);
    break;
  case kUint16:
    t.ints[i] = endian::read16le(p);
    break;
  case kInt16:
    t.ints[i] = static_cast<int16_t>(endian::read16le(p));
    break;
  case kInt32:
    t.ints[i] = static_cast<int32_t>(endian::read32le(p));
    break;
  case kUint32:
    t.ints[i] = endian::read32le(p);
    break;
  case kInt64:
  case kUint64:
    t.ints[i] = static_cast<int64_t>(endian::read64le(p));
    break;
  case kFloat: {
    uint32_t bits = endian::read32le(p);
    float f;
    std::memcpy(&f, &bits, 4);
    t.floats[i] = f;
    break;
  }
  case kDouble: {
    uint64_t bits = endian::read64le(p);
    double d;
    std::memcpy(&d, &bits, 8);
    t.floats[i] = d;
    break;
  }
  case kFloat16:
  case kBfloat16: {
    llvm::APFloat f(*semanticsOf(t.dataType),
                    llvm::APInt(16, endian::read16le(p)));
    bool losesInfo;
    f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven,
              &losesInfo);
    t.floats[i] = f.convertToDouble();
    break;
  }
  default:
    break;
  }
}

std::optional<std::string>
dtc::onnx::readExternalData(const ::onnx::TensorProto &proto,
                            llvm::StringRef baseDir, std::string &error) {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const auto &entry : proto.external_data()) {
    llvm::StringRef value = entry.value();
    uint64_t number = 0;
    if (entry.key() == "location") {
      location = entry.value();
      continue;
    }
    if (entry.key() != "offset" && entry.key() != "length")
      continue;
    if (value.getAsInteger(10, number)) {
      error = "external data " + entry.key() + " '" + value.str() +
              "' is not a number";
      return std::nullopt;
    }
    if (entry.key() == "offset")
      offset = number;
    else
      length = number;
  }
  if (location.empty()) {
    error = "external data without a location";
    return std::nullopt;
  }
  // As ONNX requires: the file lies in the model's directory or below it.
  // Without this a model could make dtc read any file (or a device such as
  // /dev/zero); constants outside an initializer have no directory.
  if (baseDir.empty() || llvm::sys::path::is_absolute(location) ||
      llvm::is_contained(llvm::make_range(llvm::sys::path::begin(location),
                                          llvm::sys::path::end(location)),
                         "..")) {
    error = "external data location '" + location +
            "' is not a relative path inside the model's directory";
    return std::nullopt;
  }
  llvm::SmallString<256> path(baseDir);
  llvm::sys::path::append(path, location);
  // Links are resolved before the check: a link inside the directory to a
  // file elsewhere (or to /dev/zero) is outside it all the same. A FIFO or
  // device would block or never end: only regular files are read.
  llvm::SmallString<256> real, realBase;
  if (!llvm::sys::fs::real_path(path, real) &&
      !llvm::sys::fs::real_path(baseDir, realBase) &&
      !llvm::StringRef(real).starts_with((realBase + "/").str())) {
    error = "external data location '" + location +
            "' resolves outside the model's directory (a symbolic link); copy "
            "the file into it";
    return std::nullopt;
  }
  llvm::sys::fs::file_status status;
  if (!llvm::sys::fs::status(path, status) &&
      status.type() != llvm::sys::fs::file_type::regular_file) {
    error =
        "external data file " + std::string(path) + " is not a regular file";
    return std::nullopt;
  }
  auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                            /*RequiresNullTerminator=*/false);
  if (!buffer) {
    error = "cannot read external data file " + std::string(path) + ": " +
            buffer.getError().message();
    return std::nullopt;
  }
  llvm::StringRef bytes = (*buffer)->getBuffer();
  if (offset > bytes.size() || (length && *length > bytes.size() - offset)) {
    error = "external data range is outside " + std::string(path);
    return std::nullopt;
  }
  return bytes.substr(offset, length ? *length : bytes.size() - offset).str();
}

std::optional<HostTensor>
dtc::onnx::decodeTensor(const ::onnx::TensorProto &proto,
                        llvm::StringRef baseDir, std::string &error) {
  HostTensor t;
  t.dataType = proto.data_type();
  for (int64_t d : proto.dims()) {
    if (d < 0) {
      error = "negative dimension " + std::to_string(d);
      return std::nullopt;
    }
    t.shape.push_back(d);
  }
  size_t elementSize = rawElementSize(t.dataType);
  if (!elementSize) {
    error = "element type " + dataTypeName(t.dataType) + " is not supported";
    return std::nullopt;
  }
  int64_t n = t.size();
  // The data must be there before anything is allocated for it: dims are
  // untrusted (fuzz finding: dims [2^40] without data allocated 8 TiB).
  auto allocate = [&] {
    if (t.isFloat())
      t.floats.assign(n, 0.0);
    else
      t.ints.assign(n, 0);
  };

  std::optional<std::string> external;
  if (proto.data_location() == ::onnx::TensorProto::EXTERNAL) {
    external = readExternalData(proto, baseDir, error);
    if (!external)
      return std::nullopt;
  }
  if (external || proto.has_raw_data()) {
    const std::string &raw = external ? *external : proto.raw_data();
    if (raw.size() % elementSize != 0 ||
        raw.size() / elementSize != static_cast<uint64_t>(n)) {
      error = "has " + std::to_string(raw.size()) + " bytes of data for " +
              std::to_string(n) + " elements of " + dataTypeName(t.dataType);
      return std::nullopt;
    }
    allocate();
    for (int64_t i = 0; i < n; ++i)
      decodeRawElement(t, i, raw.data() + i * elementSize);
    return t;
  }

  // Typed fields: which one holds the data depends on the element type.
  auto checkCount = [&](int64_t count) {
    if (count == n) {
      allocate();
      return true;
    }
    error = "has " + std::to_string(count) + " values for " +
            std::to_string(n) + " elements";
    return false;
  };
  switch (t.dataType) {
  case kFloat:
    if (!checkCount(proto.float_data_size()))
      return std::nullopt;
    for (int64_t i = 0; i < n; ++i)
      t.floats[i] = proto.float_data(i);
    break;
  case kDouble:
    if (!checkCount(proto.double_data_size()))
      return std::nullopt;
    for (int64_t i = 0; i < n; ++i)
      t.floats[i] = proto.double_data(i);
    break;
  case kInt64:
    if (!checkCount(proto.int64_data_size()))
      return std::nullopt;
    for (int64_t i = 0; i < n; ++i)
      t.ints[i] = proto.int64_data(i);
    break;
  case kUint32:
  case kUint64:
    if (!checkCount(proto.uint64_data_size()))
      return std::nullopt;
    for (int64_t i = 0; i < n; ++i)
      t.ints[i] = static_cast<int64_t>(proto.uint64_data(i));
    break;
  case kFloat16:
  case kBfloat16:
    if (!checkCount(proto.int32_data_size()))
      return std::nullopt;
    for (int64_t i = 0; i < n; ++i) {
      char bytes[2];
      llvm::support::endian::write16le(bytes, proto.int32_data(i));
      decodeRawElement(t, i, bytes);
    }
    break;
  default: // int32, int16, int8, uint16, uint8, bool
    if (!checkCount(proto.int32_data_size()))
      return std::nullopt;
    for (int64_t i = 0; i < n; ++i)
      t.ints[i] = wrapToType(proto.int32_data(i), t.dataType);
    break;
  }
  return t;
}

mlir::DenseElementsAttr dtc::onnx::toElementsAttr(const HostTensor &t,
                                                  mlir::MLIRContext &ctx) {
  mlir::Type elementType = toElementType(t.dataType, ctx);
  assert(elementType && "no dtc element type");
  auto type = mlir::RankedTensorType::get(t.shape, elementType);
  int64_t n = t.size();
  bool splat = n > 0;
  for (int64_t i = 1; i < n && splat; ++i)
    splat = t.isFloat() ? t.floats[i] == t.floats[0] : t.ints[i] == t.ints[0];
  // Bit-identical comparison: -0.0 == 0.0 must not merge.
  if (splat && t.isFloat())
    for (int64_t i = 1; i < n && splat; ++i)
      splat = std::signbit(t.floats[i]) == std::signbit(t.floats[0]);

  // Typed buffers for the common types: building APFloats per element is
  // the bottleneck for large masks.
  if (elementType.isF32() && !splat) {
    std::vector<float> values;
    reserveElements(values, n);
    values.assign(t.floats.begin(), t.floats.end());
    return mlir::DenseElementsAttr::get(type, llvm::ArrayRef<float>(values));
  }
  if (elementType.isF64() && !splat)
    return mlir::DenseElementsAttr::get(type, llvm::ArrayRef<double>(t.floats));
  if (auto floatType = mlir::dyn_cast<mlir::FloatType>(elementType)) {
    auto toAP = [&](double v) {
      llvm::APFloat f(v);
      bool losesInfo;
      f.convert(floatType.getFloatSemantics(),
                llvm::APFloat::rmNearestTiesToEven, &losesInfo);
      return f;
    };
    if (splat)
      return mlir::DenseElementsAttr::get(type, toAP(t.floats[0]));
    llvm::SmallVector<llvm::APFloat> values;
    values.reserve(n);
    for (double v : t.floats)
      values.push_back(toAP(v));
    return mlir::DenseElementsAttr::get(type, values);
  }
  if (elementType.isInteger(64) && !splat)
    return mlir::DenseElementsAttr::get(type, llvm::ArrayRef<int64_t>(t.ints));
  unsigned width = elementType.getIntOrFloatBitWidth();
  if (width == 1) {
    if (splat)
      return mlir::DenseElementsAttr::get(type, t.ints[0] != 0);
    llvm::SmallVector<bool> values;
    for (int64_t v : t.ints)
      values.push_back(v != 0);
    return mlir::DenseElementsAttr::get(type, values);
  }
  auto toAP = [&](int64_t v) {
    return llvm::APInt(width, static_cast<uint64_t>(v), /*isSigned=*/true,
                       /*implicitTrunc=*/true);
  };
  if (splat)
    return mlir::DenseElementsAttr::get(type, toAP(t.ints[0]));
  llvm::SmallVector<llvm::APInt> values;
  values.reserve(n);
  for (int64_t v : t.ints)
    values.push_back(toAP(v));
  return mlir::DenseElementsAttr::get(type, values);
}

std::optional<HostTensor> dtc::onnx::decodeStacked(
    llvm::ArrayRef<std::string> members, bool transposeEach,
    llvm::function_ref<const ::onnx::TensorProto *(llvm::StringRef)> lookup,
    llvm::StringRef baseDir, std::string &error) {
  HostTensor stacked;
  for (auto [index, name] : llvm::enumerate(members)) {
    const ::onnx::TensorProto *proto = lookup(name);
    if (!proto) {
      error = "no initializer '" + name + "'";
      return std::nullopt;
    }
    auto member = decodeTensor(*proto, baseDir, error);
    if (!member) {
      error = "initializer '" + name + "': " + error;
      return std::nullopt;
    }
    if (!member->isFloat() || (transposeEach && member->rank() != 2)) {
      error = "initializer '" + name + "' is not a floating-point " +
              (transposeEach ? "matrix" : "tensor");
      return std::nullopt;
    }
    llvm::SmallVector<int64_t, 4> shape = member->shape;
    if (transposeEach)
      std::swap(shape[0], shape[1]);
    if (index == 0) {
      stacked.dataType = member->dataType;
      stacked.shape.push_back(static_cast<int64_t>(members.size()));
      stacked.shape.append(shape.begin(), shape.end());
      stacked.floats.reserve(stacked.size());
    } else if (llvm::ArrayRef<int64_t>(stacked.shape).drop_front() !=
               llvm::ArrayRef<int64_t>(shape)) {
      error = "initializer '" + name + "' is " + shapeString(member->shape) +
              ", unlike the other experts' weights";
      return std::nullopt;
    }
    if (!transposeEach) {
      stacked.floats.insert(stacked.floats.end(), member->floats.begin(),
                            member->floats.end());
      continue;
    }
    int64_t rows = member->shape[0], cols = member->shape[1];
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < rows; ++r)
        stacked.floats.push_back(member->floats[r * cols + c]);
  }
  return stacked;
}
