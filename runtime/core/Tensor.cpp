//===- Tensor.cpp - Runtime tensors ---------------------------------------===//

#include "runtime/core/Tensor.h"
#include "runtime/support/Error.h"

#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/ErrorHandling.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include <unistd.h>

namespace dtc::runtime {

size_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::F64:
  case DType::I64:
    return 8;
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::I8:
  case DType::BOOL:
    return 1;
  default:
    return 0;
  }
}

llvm::StringRef dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::F64:
    return "f64";
  case DType::I64:
    return "i64";
  case DType::I32:
    return "i32";
  case DType::I8:
    return "i8";
  case DType::BOOL:
    return "i1";
  default:
    return "?";
  }
}

DType parseDType(llvm::StringRef name) {
  return llvm::StringSwitch<DType>(name)
      .Case("f32", DType::F32)
      .Case("f16", DType::F16)
      .Case("bf16", DType::BF16)
      .Case("f64", DType::F64)
      .Case("i64", DType::I64)
      .Case("i32", DType::I32)
      .Case("i8", DType::I8)
      .Case("i1", DType::BOOL)
      .Default(DType::DTYPE_UNSPECIFIED);
}

bool isFloat(DType dtype) {
  return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16 ||
         dtype == DType::F64;
}

int64_t numElements(llvm::ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

void Tensor::Free::operator()(void *p) const { std::free(p); }

Tensor::Tensor(DType dtype, llvm::ArrayRef<int64_t> shape) {
  ref_.dtype = dtype;
  ref_.shape.assign(shape.begin(), shape.end());
  size_t bytes = std::max<size_t>(ref_.bytes(), 1);
  size_t rounded = (bytes + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, rounded);
  if (!p) // as operator new does: no tensor without its memory
    llvm::report_bad_alloc_error("dtc: out of host memory for a tensor");
  std::memset(p, 0, rounded);
  storage_ = std::shared_ptr<void>(p, Free());
  ref_.data = p;
}

int64_t hostMemoryBytes() {
  static const int64_t bytes = [] {
    long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
    return pages > 0 && size > 0 ? static_cast<int64_t>(pages) * size
                                 : std::numeric_limits<int64_t>::max();
  }();
  return bytes;
}

llvm::Expected<Tensor> Tensor::allocate(DType dtype,
                                        llvm::ArrayRef<int64_t> shape,
                                        MemorySpace &memory) {
  if (memory.isHost())
    return Tensor(dtype, shape);
  Tensor t;
  t.ref_.dtype = dtype;
  t.ref_.shape.assign(shape.begin(), shape.end());
  size_t bytes = std::max<size_t>(t.ref_.bytes(), 1);
  void *p = memory.allocate(bytes);
  if (!p)
    return dtc::failureText("out of " + memory.name() + " memory allocating " +
                            std::to_string(bytes) + " bytes");
  MemorySpace *space = &memory;
  t.storage_ =
      std::shared_ptr<void>(p, [space](void *q) { space->release(q); });
  t.ref_.data = p;
  return t;
}

MemorySpace::~MemorySpace() = default;

void *HostMemory::allocate(size_t bytes) {
  size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void *p = std::aligned_alloc(64, rounded);
  if (p)
    std::memset(p, 0, rounded);
  return p;
}

void HostMemory::release(void *pointer) { std::free(pointer); }

llvm::Error HostMemory::copyToDevice(void *dst, const void *src, size_t bytes) {
  if (dst != src && bytes)
    std::memmove(dst, src, bytes);
  return llvm::Error::success();
}

llvm::Error HostMemory::copyToHost(void *dst, const void *src, size_t bytes) {
  return copyToDevice(dst, src, bytes);
}

llvm::Error HostMemory::copyOnDevice(void *dst, const void *src, size_t bytes) {
  return copyToDevice(dst, src, bytes);
}

HostMemory &hostMemory() {
  static HostMemory memory;
  return memory;
}

uint16_t floatToBF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if ((bits & 0x7f800000u) == 0x7f800000u && (bits & 0x7fffffu))
    return static_cast<uint16_t>((bits >> 16) | 0x40); // quiet NaN
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float bf16ToFloat(uint16_t bits) {
  uint32_t wide = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &wide, 4);
  return value;
}

uint16_t floatToHalf(float value) {
  _Float16 h = static_cast<_Float16>(value);
  uint16_t bits;
  std::memcpy(&bits, &h, 2);
  return bits;
}

float halfToFloat(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, 2);
  return static_cast<float>(h);
}

float loadAsFloat(const TensorRef &t, int64_t i) {
  switch (t.dtype) {
  case DType::F32:
    return t.as<float>()[i];
  case DType::F64:
    return static_cast<float>(t.as<double>()[i]);
  case DType::BF16:
    return bf16ToFloat(t.as<uint16_t>()[i]);
  case DType::F16:
    return halfToFloat(t.as<uint16_t>()[i]);
  default:
    return static_cast<float>(loadAsInt(t, i));
  }
}

int64_t loadAsInt(const TensorRef &t, int64_t i) {
  switch (t.dtype) {
  case DType::I64:
    return t.as<int64_t>()[i];
  case DType::I32:
    return t.as<int32_t>()[i];
  case DType::I8:
    return t.as<int8_t>()[i];
  case DType::BOOL:
    return t.as<uint8_t>()[i] != 0;
  default:
    return static_cast<int64_t>(loadAsFloat(t, i));
  }
}

llvm::SmallVector<int64_t, 6> stridesOf(llvm::ArrayRef<int64_t> shape) {
  llvm::SmallVector<int64_t, 6> strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

bool broadcastStrides(llvm::ArrayRef<int64_t> operand,
                      llvm::ArrayRef<int64_t> result,
                      llvm::SmallVectorImpl<int64_t> &strides) {
  if (operand.size() > result.size())
    return false;
  strides.assign(result.size(), 0);
  auto own = stridesOf(operand);
  size_t offset = result.size() - operand.size();
  for (size_t i = 0; i < operand.size(); ++i) {
    if (operand[i] == result[offset + i])
      strides[offset + i] = operand[i] == 1 ? 0 : own[i];
    else if (operand[i] != 1)
      return false;
  }
  return true;
}

} // namespace dtc::runtime
