//===- ProgramFile.cpp - Reading a bundle's runtime program ---------------===//

#include "compiler/support/ProgramFile.h"

#include "runtime/support/Error.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

llvm::Expected<dtc::program::Program>
dtc::readBundleProgram(llvm::StringRef bundle, llvm::StringRef file,
                       llvm::StringRef whenMissing) {
  llvm::SmallString<256> path(bundle);
  llvm::sys::path::append(path, file);
  if (!llvm::sys::fs::exists(path))
    return badInput("{0}: missing; {1}", path, whenMissing);
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return badInput("{0}: cannot read: {1}", path, buffer.getError().message());
  program::Program p;
  if (!p.ParseFromArray((*buffer)->getBufferStart(),
                        static_cast<int>((*buffer)->getBufferSize())) ||
      p.schema() != "dtc.program/1" || p.ranks_size() == 0)
    return badInput("{0}: not a valid program (corrupt or from another "
                    "version); recompile the bundle with 'dtc compile'",
                    path);
  return p;
}

llvm::Expected<std::string> dtc::serializeProgram(const program::Program &p,
                                                  llvm::StringRef file) {
  size_t size = p.ByteSizeLong();
  if (size > static_cast<size_t>(INT32_MAX))
    return failure("{0}: the program of this plan is {1:f1} GB, over "
                   "protobuf's 2 GB limit; compile with --no-program to keep "
                   "the plan",
                   file, size / 1e9);
  std::string bytes;
  bytes.reserve(size);
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    if (!p.SerializeToCodedStream(&coded))
      return failure("{0}: the program could not be serialized", file);
  }
  return bytes;
}
