//===- ProgramFile.h - Reading a bundle's runtime program -------*- C++ -*-===//
//
// One reader for program.pb (and reference.pb) for every command that
// needs a bundle's program: `dtc run`/`verify`, `plan show --rank` and
// `plan report --trace`; and the one writer `dtc compile` uses.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_SUPPORT_PROGRAMFILE_H
#define DTC_COMPILER_SUPPORT_PROGRAMFILE_H

#include "runtime/proto/program.pb.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace dtc {

/// `bundle`/`file` read and checked: a `dtc.program/1` with at least one
/// rank, else a bad-input error naming the file. A missing file's message
/// ends with `whenMissing` (why the command needs it, what to do).
llvm::Expected<program::Program> readBundleProgram(llvm::StringRef bundle,
                                                   llvm::StringRef file,
                                                   llvm::StringRef whenMissing);

/// `p` as program.pb's bytes, the same on every compile of the same plan:
/// protobuf writes map fields (an instruction's attributes) in hash order,
/// which differs between processes, unless asked for deterministic output.
/// Fails for a program over protobuf's 2 GB limit, naming `file`.
llvm::Expected<std::string> serializeProgram(const program::Program &p,
                                             llvm::StringRef file);

} // namespace dtc

#endif // DTC_COMPILER_SUPPORT_PROGRAMFILE_H
