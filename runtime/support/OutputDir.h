//===- OutputDir.h - Output directories that belong to dtc ------*- C++ -*-===//
//
// What dtc writes as a directory (a plan bundle, `dtc run --outputs`) is
// created, or replaces a directory dtc wrote before; it never deletes what
// it did not write. A non-empty directory holding anything but dtc's own
// files of that kind, a symbolic link, the working directory (or one above
// it) and `/` are refused with one line unless the user passes --force,
// which writes dtc's files into the directory and leaves the rest alone.
// The new contents are written into a fresh sibling directory and moved
// into place, so the target holds either the old or the new whole.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_RUNTIME_SUPPORT_OUTPUTDIR_H
#define DTC_RUNTIME_SUPPORT_OUTPUTDIR_H

#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

namespace dtc {

enum class OutputKind {
  Bundle,     ///< plan.json, program.pb, layout.json, reference.pb, ...
  RunOutputs, ///< output_<i>.pb
};

/// Whether dtc writes an entry named `name` into a directory of `kind`.
bool isOwnOutputEntry(OutputKind kind, llvm::StringRef name);

/// Checks, before any work, that `path` (named by `flag`, e.g. "-o") may
/// receive a directory of `kind`; a bad-input error naming the culprit and
/// what to do otherwise.
llvm::Error checkOutputDirectory(llvm::StringRef path, llvm::StringRef flag,
                                 OutputKind kind, bool force);

/// Makes `path` hold what `fill` writes into the directory it is given, as
/// the header describes; `path` must have passed checkOutputDirectory.
llvm::Error
writeOutputDirectory(llvm::StringRef path, OutputKind kind, bool force,
                     llvm::function_ref<llvm::Error(llvm::StringRef dir)> fill);

/// Opens `path`, a temporary name dtc renames into place, as a new file for
/// writing: whatever sits at that name (a stale file from a crash, a planted
/// symbolic link) is unlinked first, never followed, and the file is created
/// with O_CREAT | O_EXCL | O_NOFOLLOW. A descriptor, or -1 with errno set.
int createFreshFile(llvm::StringRef path, unsigned mode = 0644);

/// An advisory lock (flock) on a checkpoint root, held while it lives: one
/// writer per root. Taken through `<root>/.lock`, opened without following
/// a link; the holder's pid is written into it for the next one's error.
class DirectoryLock {
public:
  /// Creates `root` if needed and takes the lock, exclusive (a run that
  /// writes) or shared (a reader). Bad input (exit 2) when `root` is not a
  /// directory or another process holds the lock: the line names its pid.
  static llvm::Expected<DirectoryLock>
  acquire(llvm::StringRef root, llvm::StringRef flag, bool exclusive);
  DirectoryLock(DirectoryLock &&other) : fd_(other.fd_) { other.fd_ = -1; }
  DirectoryLock &operator=(DirectoryLock &&) = delete;
  ~DirectoryLock();

private:
  explicit DirectoryLock(int fd) : fd_(fd) {}
  int fd_;
};

} // namespace dtc

#endif // DTC_RUNTIME_SUPPORT_OUTPUTDIR_H
