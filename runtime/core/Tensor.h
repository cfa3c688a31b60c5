//===- Tensor.h - Runtime tensors -------------------------------*- C++ -*-===//
//
// The runtime's tensors: a non-owning view (what kernels see) and an owning
// tensor (inputs, outputs, variables; host memory unless a MemorySpace made
// it). Row-major, contiguous. MemorySpace is where a backend's executor keeps
// its buffers: the host (no copies) or a device.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CORE_TENSOR_H
#define DTC_RUNTIME_CORE_TENSOR_H

#include "runtime/proto/program.pb.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace dtc::runtime {

using DType = ::dtc::program::DType;

/// Bytes of one element.
size_t dtypeSize(DType dtype);
/// "f32", "bf16", "i64", ... (the MLIR spelling).
llvm::StringRef dtypeName(DType dtype);
/// Inverse of dtypeName; DTYPE_UNSPECIFIED when unknown.
DType parseDType(llvm::StringRef name);
bool isFloat(DType dtype);

int64_t numElements(llvm::ArrayRef<int64_t> shape);
/// Row-major strides (in elements) of `shape`.
llvm::SmallVector<int64_t, 6> stridesOf(llvm::ArrayRef<int64_t> shape);
/// The strides to read an operand of shape `operand` at the indices of a
/// result of shape `result` under numpy broadcasting: right-aligned, 0 where
/// the operand's dimension is 1 (or missing). Returns false when the shapes
/// do not broadcast to `result`.
bool broadcastStrides(llvm::ArrayRef<int64_t> operand,
                      llvm::ArrayRef<int64_t> result,
                      llvm::SmallVectorImpl<int64_t> &strides);

/// A view of a contiguous row-major tensor. Kernels read inputs and write
/// outputs through views; they never own memory.
struct TensorRef {
  void *data = nullptr;
  DType dtype = DType::F32;
  llvm::SmallVector<int64_t, 6> shape;

  int64_t numElements() const { return runtime::numElements(shape); }
  size_t bytes() const { return numElements() * dtypeSize(dtype); }
  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t dim(int64_t i) const { return shape[i < 0 ? i + rank() : i]; }
  template <typename T> T *as() const { return static_cast<T *>(data); }
  float *f32() const { return as<float>(); }
};

class MemorySpace;

/// This machine's physical memory in bytes (int64 max when unknown): the
/// bound on what a program file may ask the host to allocate.
int64_t hostMemoryBytes();

/// An owning tensor: host memory (zeroed, 64-byte aligned) from the
/// constructor, or memory of a MemorySpace from allocate().
class Tensor {
public:
  Tensor() = default;
  Tensor(DType dtype, llvm::ArrayRef<int64_t> shape);
  /// A zeroed tensor in `memory` (a host Tensor for host memory); fails when
  /// the space is out of memory.
  static llvm::Expected<Tensor>
  allocate(DType dtype, llvm::ArrayRef<int64_t> shape, MemorySpace &memory);

  DType dtype() const { return ref_.dtype; }
  llvm::ArrayRef<int64_t> shape() const { return ref_.shape; }
  int64_t numElements() const { return ref_.numElements(); }
  size_t bytes() const { return ref_.bytes(); }
  void *data() const { return ref_.data; }
  template <typename T> T *as() const { return ref_.as<T>(); }
  const TensorRef &ref() const { return ref_; }
  bool empty() const { return !storage_; }

private:
  struct Free {
    void operator()(void *p) const;
  };
  std::shared_ptr<void> storage_;
  TensorRef ref_;
};

/// Where an executor keeps variables, constants, arenas and arguments.
/// Device implementations copy through the backend's compute stream, so a
/// copy is ordered with the kernels around it; copyToHost returns once the
/// bytes are on the host.
class MemorySpace {
public:
  virtual ~MemorySpace();
  /// Host memory: kernels read host pointers, nothing is copied.
  virtual bool isHost() const { return false; }
  /// "host", "cuda", ...: for messages.
  virtual llvm::StringRef name() const = 0;
  /// `bytes` (>= 1) of zeroed memory, or nullptr when out of memory.
  virtual void *allocate(size_t bytes) = 0;
  virtual void release(void *pointer) = 0;
  virtual llvm::Error copyToDevice(void *dst, const void *src,
                                   size_t bytes) = 0;
  virtual llvm::Error copyToHost(void *dst, const void *src, size_t bytes) = 0;
  virtual llvm::Error copyOnDevice(void *dst, const void *src,
                                   size_t bytes) = 0;
  /// Waits for the work queued so far; reports what failed in it (a kernel
  /// fault, an out-of-range id a kernel flagged).
  virtual llvm::Error synchronize() { return llvm::Error::success(); }
  /// Opens and closes a named range around the work queued in between, for
  /// the device's profiler (traces); no-ops by default.
  virtual void pushRange(const std::string &name) {}
  virtual void popRange() {}
};

/// The host: copies are memcpy.
class HostMemory final : public MemorySpace {
public:
  bool isHost() const override { return true; }
  llvm::StringRef name() const override { return "host"; }
  void *allocate(size_t bytes) override;
  void release(void *pointer) override;
  llvm::Error copyToDevice(void *dst, const void *src, size_t bytes) override;
  llvm::Error copyToHost(void *dst, const void *src, size_t bytes) override;
  llvm::Error copyOnDevice(void *dst, const void *src, size_t bytes) override;
};

/// The process's host memory space.
HostMemory &hostMemory();

/// Reads a float tensor of any float dtype as f32 values (bf16/f16/f64
/// converted); integer tensors are converted exactly where representable.
float loadAsFloat(const TensorRef &t, int64_t index);
/// Reads an integer tensor (i64/i32/i8/bool) element as int64.
int64_t loadAsInt(const TensorRef &t, int64_t index);

/// bf16 <-> f32 with round-to-nearest-even (bf16 emulation on CPU).
uint16_t floatToBF16(float value);
float bf16ToFloat(uint16_t bits);
uint16_t floatToHalf(float value);
float halfToFloat(uint16_t bits);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CORE_TENSOR_H
