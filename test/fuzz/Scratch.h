//===- Scratch.h - Files a fuzz target writes for one input -----*- C++ -*-===//
//
// Shared by the fuzz targets that hand their input to code reading files
// (the ONNX importer, the checkpoint reader). Failures abort: a fuzz target
// has nowhere to report them.
//
//===----------------------------------------------------------------------===//

#ifndef DTC_TEST_FUZZ_SCRATCH_H
#define DTC_TEST_FUZZ_SCRATCH_H

#include "llvm/ADT/StringRef.h"

#include <cstdlib>
#include <fcntl.h>
#include <string>
#include <unistd.h>

namespace dtc::fuzz {

/// A new directory for one input, in /dev/shm when writable (the target
/// removes it after the input: libFuzzer leaves through _Exit, so nothing
/// would clean up at exit). `tag` names the target in the directory name.
inline std::string makeScratchDir(llvm::StringRef tag) {
  const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : nullptr;
  if (!base)
    base = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  std::string tmpl = std::string(base) + "/dtc-fuzz-" + tag.str() + "-XXXXXX";
  if (!mkdtemp(tmpl.data()))
    std::abort();
  return tmpl;
}

/// Writes `bytes` to `path` whole.
inline void writeScratchFile(const std::string &path, llvm::StringRef bytes) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    std::abort();
  const char *p = bytes.data();
  size_t left = bytes.size();
  while (left) {
    ssize_t n = ::write(fd, p, left);
    if (n <= 0)
      std::abort();
    p += n;
    left -= n;
  }
  ::close(fd);
}

} // namespace dtc::fuzz

#endif // DTC_TEST_FUZZ_SCRATCH_H
