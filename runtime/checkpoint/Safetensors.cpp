//===- Safetensors.cpp - The safetensors file format ----------------------===//

#include "runtime/checkpoint/Safetensors.h"
#include "runtime/support/Error.h"
#include "runtime/support/OutputDir.h"

#include "runtime/support/Json.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/ScopeExit.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dtc::runtime {

namespace {
/// Headers larger than this are refused (safetensors' own limit).
constexpr uint64_t kMaxHeaderBytes = 100 << 20;

llvm::Error badFile(llvm::StringRef path, const llvm::Twine &why) {
  return dtc::failureText(path + ": " + why);
}

std::string errnoText() { return std::strerror(errno); }

} // namespace

llvm::Error ioError(const llvm::Twine &message) {
  return llvm::createStringError(std::make_error_code(std::errc::io_error),
                                 message);
}

llvm::StringRef safetensorsDType(DType dtype) {
  switch (dtype) {
  case DType::F64:
    return "F64";
  case DType::F32:
    return "F32";
  case DType::F16:
    return "F16";
  case DType::BF16:
    return "BF16";
  case DType::I64:
    return "I64";
  case DType::I32:
    return "I32";
  case DType::I8:
    return "I8";
  case DType::BOOL:
    return "BOOL";
  default:
    return "";
  }
}

DType parseSafetensorsDType(llvm::StringRef name) {
  for (DType dtype : {DType::F64, DType::F32, DType::F16, DType::BF16,
                      DType::I64, DType::I32, DType::I8, DType::BOOL})
    if (safetensorsDType(dtype) == name)
      return dtype;
  return DType::DTYPE_UNSPECIFIED;
}

llvm::Expected<std::string>
safetensorsHeader(llvm::ArrayRef<SafetensorsSpec> tensors,
                  const std::map<std::string, std::string> &metadata,
                  std::vector<uint64_t> *offsets) {
  llvm::json::Object header;
  uint64_t offset = 0;
  std::vector<uint64_t> begins;
  for (const SafetensorsSpec &t : tensors) {
    if (safetensorsDType(t.dtype).empty())
      return dtc::failureText("safetensors: tensor '" + t.name +
                              "' has a dtype safetensors lacks");
    if (t.name == "__metadata__" || header.find(t.name) != header.end())
      return dtc::failureText("safetensors: duplicate or reserved "
                              "tensor name '" +
                              t.name + "'");
    uint64_t bytes = numElements(t.shape) * dtypeSize(t.dtype);
    header[t.name] = llvm::json::Object{
        {"dtype", safetensorsDType(t.dtype)},
        {"shape", llvm::json::Array(t.shape)},
        {"data_offsets", llvm::json::Array{offset, offset + bytes}}};
    begins.push_back(offset);
    offset += bytes;
  }
  if (!metadata.empty()) {
    llvm::json::Object meta;
    for (const auto &[key, value] : metadata)
      meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::string json;
  llvm::raw_string_ostream os(json);
  os << llvm::json::Value(std::move(header));
  os.flush();
  // Pad with spaces so that the data starts 8-byte aligned.
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  llvm::support::endian::write64le(out.data(), json.size());
  out += json;
  if (offsets) {
    offsets->clear();
    for (uint64_t begin : begins)
      offsets->push_back(out.size() + begin);
  }
  return out;
}

llvm::Expected<SafetensorsFile> SafetensorsFile::open(llvm::StringRef path) {
  int fd = ::open(path.str().c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT)
      return badFile(path, "missing");
    return ioError(path + ": cannot open: " + errnoText());
  }
  llvm::scope_exit closeFd([fd] { ::close(fd); });
  struct stat st;
  if (::fstat(fd, &st) != 0)
    return ioError(path + ": cannot stat: " + errnoText());
  uint64_t size = st.st_size;
  if (size < 8)
    return badFile(path, "not a safetensors file (" + llvm::Twine(size) +
                             " bytes, shorter than its header length)");
  char lengthBytes[8];
  if (llvm::Error err = preadAll(fd, lengthBytes, 8, 0, path))
    return std::move(err);
  uint64_t length = llvm::support::endian::read64le(lengthBytes);
  if (length > kMaxHeaderBytes || length > size - 8)
    return badFile(path, "not a safetensors file (header length " +
                             llvm::Twine(length) + " past the file's " +
                             llvm::Twine(size) + " bytes)");
  std::string text(length, '\0');
  if (llvm::Error err = preadAll(fd, text.data(), length, 8, path))
    return std::move(err);
  auto json = parseJson(text);
  if (!json)
    return badFile(path, "invalid safetensors header: " +
                             llvm::toString(json.takeError()));
  const llvm::json::Object *header = json->getAsObject();
  if (!header)
    return badFile(path, "invalid safetensors header: not a JSON object");

  SafetensorsFile file;
  file.path_ = path.str();
  uint64_t dataStart = 8 + length;
  for (const auto &[key, value] : *header) {
    std::string name = key.str();
    if (name == "__metadata__") {
      const llvm::json::Object *meta = value.getAsObject();
      if (!meta)
        return badFile(path, "__metadata__ is not an object");
      for (const auto &[mkey, mvalue] : *meta) {
        auto s = mvalue.getAsString();
        if (!s)
          return badFile(path,
                         "__metadata__." + mkey.str() + " is not a string");
        file.metadata_[mkey.str()] = s->str();
      }
      continue;
    }
    const llvm::json::Object *entry = value.getAsObject();
    auto bad = [&](const llvm::Twine &why) {
      return badFile(path, "tensor '" + name + "': " + why);
    };
    if (!entry)
      return bad("not an object");
    SafetensorsEntry e;
    e.name = name;
    auto dtype = entry->getString("dtype");
    e.dtype = dtype ? parseSafetensorsDType(*dtype) : DType::DTYPE_UNSPECIFIED;
    if (e.dtype == DType::DTYPE_UNSPECIFIED)
      return bad("unsupported dtype " +
                 (dtype ? "'" + dtype->str() + "'" : std::string("(none)")));
    const llvm::json::Array *shape = entry->getArray("shape");
    if (!shape)
      return bad("no shape");
    // The element count is checked for overflow: a product that wraps could
    // match the data size while the shape claims far more elements.
    int64_t elements = 1;
    for (const llvm::json::Value &d : *shape) {
      auto dim = d.getAsInteger();
      if (!dim || *dim < 0 || llvm::MulOverflow(elements, *dim, elements))
        return bad("invalid shape");
      e.shape.push_back(*dim);
    }
    int64_t dataBytes;
    if (llvm::MulOverflow(elements, static_cast<int64_t>(dtypeSize(e.dtype)),
                          dataBytes))
      return bad("invalid shape");
    const llvm::json::Array *offsets = entry->getArray("data_offsets");
    std::optional<int64_t> begin, end;
    if (offsets && offsets->size() == 2) {
      begin = (*offsets)[0].getAsInteger();
      end = (*offsets)[1].getAsInteger();
    }
    if (!begin || !end || *begin < 0 || *end < *begin)
      return bad("invalid data_offsets");
    e.begin = dataStart + *begin;
    e.end = dataStart + *end;
    if (e.bytes() != static_cast<uint64_t>(dataBytes))
      return bad(llvm::Twine(e.bytes()) +
                 " data bytes for shape and dtype "
                 "of " +
                 llvm::Twine(dataBytes));
    file.entries_.push_back(std::move(e));
  }
  llvm::sort(file.entries_, [](const auto &a, const auto &b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  // Data back to back, as safetensors itself requires.
  uint64_t at = dataStart;
  for (const SafetensorsEntry &e : file.entries_) {
    if (e.begin != at)
      return badFile(path, "tensor '" + e.name + "' data at byte " +
                               llvm::Twine(e.begin) + ", expected " +
                               llvm::Twine(at) + " (gap or overlap)");
    at = e.end;
  }
  if (at != size)
    return badFile(path, "data ends at byte " + llvm::Twine(at) +
                             " but the file has " + llvm::Twine(size) +
                             " (truncated or trailing bytes)");
  return file;
}

const SafetensorsEntry *SafetensorsFile::find(llvm::StringRef name) const {
  for (const SafetensorsEntry &e : entries_)
    if (e.name == name)
      return &e;
  return nullptr;
}

llvm::Expected<Tensor> SafetensorsFile::read(llvm::StringRef name) const {
  const SafetensorsEntry *e = find(name);
  if (!e)
    return badFile(path_, "no tensor '" + name + "'");
  Tensor t(e->dtype, e->shape);
  int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return ioError(path_ + ": cannot open: " + errnoText());
  llvm::scope_exit closeFd([fd] { ::close(fd); });
  if (llvm::Error err = preadAll(fd, t.data(), e->bytes(), e->begin, path_))
    return std::move(err);
  return t;
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

llvm::Error
SafetensorsWriter::begin(llvm::StringRef path,
                         llvm::ArrayRef<SafetensorsSpec> tensors,
                         const std::map<std::string, std::string> &metadata) {
  auto header = safetensorsHeader(tensors, metadata, &offsets_);
  if (!header)
    return header.takeError();
  path_ = path.str();
  tmp_ = path_ + ".tmp";
  fd_ = createFreshFile(tmp_);
  if (fd_ < 0)
    return ioError(tmp_ + ": cannot create: " + errnoText());
  expected_ = header->size();
  for (const SafetensorsSpec &t : tensors)
    expected_ += numElements(t.shape) * dtypeSize(t.dtype);
  return write(header->data(), header->size());
}

llvm::Error SafetensorsWriter::write(const void *data, size_t bytes) {
  const char *p = static_cast<const char *>(data);
  while (bytes) {
    ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return ioError(tmp_ + ": write failed: " + errnoText());
    p += n;
    bytes -= n;
    written_ += n;
  }
  return llvm::Error::success();
}

llvm::Error SafetensorsWriter::commit() {
  if (written_ != expected_)
    return dtc::failureText(tmp_ + ": " + llvm::Twine(written_) +
                            " bytes written of " + llvm::Twine(expected_));
  if (::fsync(fd_) != 0)
    return ioError(tmp_ + ": fsync failed: " + errnoText());
  int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    ::unlink(tmp_.c_str());
    return ioError(tmp_ + ": close failed: " + errnoText());
  }
  if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
    std::string why = errnoText();
    ::unlink(tmp_.c_str());
    return ioError(path_ + ": cannot rename into place: " + why);
  }
  return syncDirectory(llvm::sys::path::parent_path(path_));
}

llvm::Error
writeSafetensors(llvm::StringRef path, llvm::ArrayRef<NamedTensor> tensors,
                 const std::map<std::string, std::string> &metadata) {
  std::vector<SafetensorsSpec> specs;
  for (const NamedTensor &t : tensors)
    specs.push_back({t.name, t.value.dtype, t.value.shape});
  SafetensorsWriter writer;
  if (llvm::Error err = writer.begin(path, specs, metadata))
    return err;
  for (const NamedTensor &t : tensors)
    if (llvm::Error err = writer.write(t.value.data, t.value.bytes()))
      return err;
  return writer.commit();
}

llvm::Error preadAll(int fd, void *buffer, size_t bytes, uint64_t offset,
                     llvm::StringRef path) {
  char *p = static_cast<char *>(buffer);
  while (bytes) {
    ssize_t n = ::pread(fd, p, bytes, offset);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return ioError(path + ": read failed at byte " + llvm::Twine(offset) +
                     ": " + errnoText());
    if (n == 0)
      return badFile(path,
                     "truncated (no bytes at " + llvm::Twine(offset) + ")");
    p += n;
    bytes -= n;
    offset += n;
  }
  return llvm::Error::success();
}

llvm::Error writeFileAtomic(llvm::StringRef path, llvm::StringRef text) {
  std::string tmp = (path + ".tmp").str();
  int fd = createFreshFile(tmp);
  if (fd < 0)
    return ioError(tmp + ": cannot create: " + errnoText());
  const char *p = text.data();
  size_t left = text.size();
  while (left) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0) {
      std::string why = errnoText();
      ::close(fd);
      ::unlink(tmp.c_str());
      return ioError(tmp + ": write failed: " + why);
    }
    p += n;
    left -= n;
  }
  // Closed whether or not fsync worked (no descriptor leaks per failed
  // save); the first failure is the one reported.
  bool synced = ::fsync(fd) == 0;
  std::string why = synced ? "" : errnoText();
  bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    if (synced)
      why = errnoText();
    ::unlink(tmp.c_str());
    return ioError(tmp + ": fsync failed: " + why);
  }
  if (::rename(tmp.c_str(), path.str().c_str()) != 0) {
    std::string why = errnoText();
    ::unlink(tmp.c_str());
    return ioError(path + ": cannot rename into place: " + why);
  }
  return syncDirectory(llvm::sys::path::parent_path(path));
}

llvm::Error syncDirectory(llvm::StringRef dir) {
  std::string name = dir.empty() ? "." : dir.str();
  int fd = ::open(name.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    return ioError(name + ": cannot open directory: " + errnoText());
  int rc = ::fsync(fd);
  std::string why = rc ? errnoText() : "";
  ::close(fd);
  if (rc != 0 && errno != EINVAL)
    return ioError(name + ": fsync failed: " + why);
  return llvm::Error::success();
}

} // namespace dtc::runtime
