//===- Ckpt.h - dtc ckpt inspect | verify | consolidate ---------*- C++ -*-===//
//
// The checkpoint tools over the runtime's checkpoint library
// (runtime/checkpoint, docs/checkpoints.md). DIR is a checkpoint root (its
// step directories and `latest`) or one step directory.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_COMPILER_CKPT_CKPT_H
#define DTC_COMPILER_CKPT_CKPT_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

namespace dtc {

/// `dtc ckpt inspect`: step, world size, mesh, meta summary and the tensor
/// table; on a root, the step directories and their commit status first.
llvm::Error inspectCheckpoint(llvm::StringRef dir, llvm::raw_ostream &out);

/// `dtc ckpt verify`: on a root, every committed step fully (hashes,
/// coverage, rank files) and each partial one reported and ignored; `latest`
/// must name a committed step. On a step directory, that step.
llvm::Error verifyCheckpoint(llvm::StringRef dir, llvm::raw_ostream &out);

/// `dtc ckpt consolidate`: the parameters (role "parameter") as whole
/// tensors named by their initializer names, in one safetensors file
/// written to a temporary and renamed onto `output`. An existing `output`
/// is refused (exit 2) unless `force`; a directory or link always.
llvm::Error consolidateCheckpoint(llvm::StringRef dir, llvm::StringRef output,
                                  bool force, llvm::raw_ostream &out);

/// A checkpoint library error as a DtcError: I/O failures (exit 1), bad or
/// corrupt input otherwise (exit 2).
llvm::Error toDtcError(llvm::Error err);

} // namespace dtc

#endif // DTC_COMPILER_CKPT_CKPT_H
