//===- Safetensors.h - The safetensors file format --------------*- C++ -*-===//
//
// safetensors (huggingface/safetensors): an 8-byte little-endian header
// length, a JSON header {name: {"dtype", "shape", "data_offsets": [begin,
// end]}, "__metadata__": {string: string}} padded with spaces to 8 bytes,
// then the tensors' bytes back to back (offsets relative to the end of the
// header). Checkpoint rank files and `dtc ckpt consolidate` write it; the
// reader parses the header only and leaves the data to ranged reads.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_CHECKPOINT_SAFETENSORS_H
#define DTC_RUNTIME_CHECKPOINT_SAFETENSORS_H

#include "runtime/core/Tensor.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtc::runtime {

/// "F32", "BF16", "I64", ... (safetensors' spelling); "" when it has none.
llvm::StringRef safetensorsDType(DType dtype);
/// Inverse of safetensorsDType; DTYPE_UNSPECIFIED when unknown.
DType parseSafetensorsDType(llvm::StringRef name);

/// An error for the operating system failing us (open, read, write, fsync,
/// rename): its error code is std::errc::io_error, so that callers can tell
/// it from bad or corrupt input (inconvertibleErrorCode).
llvm::Error ioError(const llvm::Twine &message);

/// One tensor of a file: its name, dtype, shape and where its data is.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::DTYPE_UNSPECIFIED;
  llvm::SmallVector<int64_t, 6> shape;
  /// Byte offsets of its data in the file (the header included).
  uint64_t begin = 0, end = 0;
  uint64_t bytes() const { return end - begin; }
};

/// What a writer writes before the data: the tensors in file order.
struct SafetensorsSpec {
  std::string name;
  DType dtype = DType::F32;
  llvm::SmallVector<int64_t, 6> shape;
};

/// The header of `tensors` (in this order in the data) and `metadata`:
/// the 8 length bytes and the padded JSON. `offsets` receives each tensor's
/// data offset in the file.
llvm::Expected<std::string>
safetensorsHeader(llvm::ArrayRef<SafetensorsSpec> tensors,
                  const std::map<std::string, std::string> &metadata,
                  std::vector<uint64_t> *offsets = nullptr);

/// A parsed safetensors header and the file it came from.
class SafetensorsFile {
public:
  /// Reads and checks the header of `path`: known dtypes, sizes that match
  /// the shapes, data back to back to the end of the file.
  static llvm::Expected<SafetensorsFile> open(llvm::StringRef path);

  llvm::StringRef path() const { return path_; }
  /// Entries in file order.
  llvm::ArrayRef<SafetensorsEntry> entries() const { return entries_; }
  const SafetensorsEntry *find(llvm::StringRef name) const;
  const std::map<std::string, std::string> &metadata() const {
    return metadata_;
  }
  /// Reads tensor `name` into a new host tensor.
  llvm::Expected<Tensor> read(llvm::StringRef name) const;

private:
  std::string path_;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// Writes a safetensors file atomically: `path`.tmp is written, fsynced and
/// renamed over `path` by commit(); a writer destroyed before commit()
/// removes the temporary file, so `path` is never half-written.
class SafetensorsWriter {
public:
  SafetensorsWriter() = default;
  SafetensorsWriter(const SafetensorsWriter &) = delete;
  SafetensorsWriter &operator=(const SafetensorsWriter &) = delete;
  ~SafetensorsWriter();

  /// Creates the temporary file and writes the header of `tensors`.
  llvm::Error begin(llvm::StringRef path,
                    llvm::ArrayRef<SafetensorsSpec> tensors,
                    const std::map<std::string, std::string> &metadata);
  /// Data offset in the file of each tensor of begin()'s list.
  llvm::ArrayRef<uint64_t> offsets() const { return offsets_; }
  /// Appends data; the tensors' bytes must come in begin()'s order.
  llvm::Error write(const void *data, size_t bytes);
  /// Checks every byte was written, fsyncs, renames onto the path and
  /// fsyncs the directory.
  llvm::Error commit();

private:
  std::string path_, tmp_;
  int fd_ = -1;
  uint64_t written_ = 0, expected_ = 0;
  std::vector<uint64_t> offsets_;
};

/// Writes `tensors` (name -> host tensor view, in this order) to `path`.
struct NamedTensor {
  std::string name;
  TensorRef value;
};
llvm::Error
writeSafetensors(llvm::StringRef path, llvm::ArrayRef<NamedTensor> tensors,
                 const std::map<std::string, std::string> &metadata = {});

// --- Small POSIX helpers the checkpoint code shares -------------------------

/// Reads `bytes` at `offset` of the open file `fd` (pread, retried).
llvm::Error preadAll(int fd, void *buffer, size_t bytes, uint64_t offset,
                     llvm::StringRef path);
/// Writes `text` to `path` atomically (tmp, fsync, rename, fsync dir).
llvm::Error writeFileAtomic(llvm::StringRef path, llvm::StringRef text);
/// fsyncs directory `dir` so that renames in it are durable.
llvm::Error syncDirectory(llvm::StringRef dir);

} // namespace dtc::runtime

#endif // DTC_RUNTIME_CHECKPOINT_SAFETENSORS_H
