//===- ProgramFile.h - Reading a bundle's runtime program -------*- C++ -*-===//
//
// One reader for program.pb (and reference.pb) for every command that
// needs a bundle's program: `dtc run`/`verify`, `plan show --rank` and
// `plan report --trace`.
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

} // namespace dtc

#endif // DTC_COMPILER_SUPPORT_PROGRAMFILE_H
