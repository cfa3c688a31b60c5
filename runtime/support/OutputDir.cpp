//===- OutputDir.cpp - Output directories that belong to dtc --------------===//

#include "runtime/support/OutputDir.h"

#include "runtime/support/Error.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

namespace dtc {

namespace {

const char *describe(OutputKind kind) {
  return kind == OutputKind::Bundle ? "a dtc bundle" : "dtc run's outputs";
}

/// The entries of `dir` other than "." and "..", or an error text.
llvm::Expected<std::vector<std::string>> entries(llvm::StringRef dir) {
  DIR *d = ::opendir(dir.str().c_str());
  if (!d)
    return badInput("{0}: cannot list: {1}", dir, std::strerror(errno));
  std::vector<std::string> names;
  while (dirent *e = ::readdir(d)) {
    llvm::StringRef name(e->d_name);
    if (name != "." && name != "..")
      names.push_back(name.str());
  }
  ::closedir(d);
  return names;
}

std::string realPath(llvm::StringRef path) {
  char buffer[PATH_MAX];
  if (!::realpath(path.str().c_str(), buffer))
    return "";
  return buffer;
}

/// Whether `dir` is `path` or one of the directories above it.
bool containsOrIs(llvm::StringRef dir, llvm::StringRef path) {
  if (dir == path)
    return true;
  if (dir == "/")
    return true;
  return path.starts_with(dir) && path.size() > dir.size() &&
         path[dir.size()] == '/';
}

/// A new directory `<prefix>XXXXXX` with the permissions of a plain mkdir.
llvm::Expected<std::string> makeUniqueDirectory(llvm::StringRef prefix) {
  std::string pattern = (prefix + "XXXXXX").str();
  if (!::mkdtemp(pattern.data()))
    return failure("cannot create a directory {0}: {1}", pattern,
                   std::strerror(errno));
  mode_t mask = ::umask(0);
  ::umask(mask);
  ::chmod(pattern.c_str(), 0777 & ~mask);
  return pattern;
}

/// Removes the entries of `dir` that dtc writes into a directory of `kind`,
/// then `dir` itself if that left it empty.
void removeOwnEntries(llvm::StringRef dir, OutputKind kind) {
  auto names = entries(dir);
  if (!names) {
    llvm::consumeError(names.takeError());
    return;
  }
  for (const std::string &name : *names)
    if (isOwnOutputEntry(kind, name))
      ::unlink((dir + "/" + name).str().c_str());
  ::rmdir(dir.str().c_str());
}

} // namespace

bool isOwnOutputEntry(OutputKind kind, llvm::StringRef name) {
  if (kind == OutputKind::Bundle)
    return llvm::StringSwitch<bool>(name)
        .Cases({"plan.json", "program.pb", "layout.json", "reference.pb",
                "program.mlir"},
               true)
        .Default(false);
  if (!name.consume_front("output_") || !name.consume_back(".pb"))
    return false;
  return !name.empty() && llvm::all_of(name, llvm::isDigit);
}

llvm::Error checkOutputDirectory(llvm::StringRef path, llvm::StringRef flag,
                                 OutputKind kind, bool force) {
  if (path.empty())
    return badInput("{0}: an empty path; name a directory", flag);
  struct stat link;
  if (::lstat(path.str().c_str(), &link) != 0) {
    if (errno == ENOENT)
      return llvm::Error::success();
    return badInput("{0} {1}: cannot read: {2}", flag, path,
                    std::strerror(errno));
  }
  if (S_ISLNK(link.st_mode) && !force)
    return badInput("{0} {1}: is a symbolic link; name the directory itself, "
                    "or pass --force to write through it",
                    flag, path);
  struct stat target;
  if (::stat(path.str().c_str(), &target) != 0 || !S_ISDIR(target.st_mode))
    return badInput("{0} {1}: exists and is not a directory; name a new or "
                    "empty directory",
                    flag, path);
  std::string real = realPath(path);
  if (real == "/")
    return badInput("{0} {1}: is the root directory; name a directory of its "
                    "own",
                    flag, path);
  if (!force && containsOrIs(real, realPath(".")))
    return badInput("{0} {1}: is the working directory or holds it; name a "
                    "directory of its own, or pass --force",
                    flag, path);
  auto names = entries(path);
  if (!names)
    return names.takeError();
  for (const std::string &name : *names)
    if (!isOwnOutputEntry(kind, name) && !force)
      return badInput("{0} {1}: not empty and not {2} (it holds '{3}'); name "
                      "a new or empty directory, or pass --force to write "
                      "dtc's files into it (nothing else is deleted)",
                      flag, path, describe(kind), name);
  return llvm::Error::success();
}

llvm::Error
writeOutputDirectory(llvm::StringRef path, OutputKind kind, bool force,
                     llvm::function_ref<llvm::Error(llvm::StringRef)> fill) {
  struct stat st;
  bool exists = ::lstat(path.str().c_str(), &st) == 0;
  if (exists && force) {
    // Into the directory itself: dtc's files replace their namesakes one
    // by one, everything else stays.
    auto tmp = makeUniqueDirectory((path + "/.dtc-partial-").str());
    if (!tmp)
      return tmp.takeError();
    if (llvm::Error e = fill(*tmp)) {
      llvm::sys::fs::remove_directories(*tmp);
      return e;
    }
    auto names = entries(*tmp);
    if (!names)
      return names.takeError();
    for (const std::string &name : *names)
      if (::rename((*tmp + "/" + name).c_str(),
                   (path + "/" + name).str().c_str()) != 0) {
        std::string why = std::strerror(errno);
        llvm::sys::fs::remove_directories(*tmp);
        return failure("cannot move {0} into {1}: {2}", name, path, why);
      }
    ::rmdir(tmp->c_str());
    return llvm::Error::success();
  }

  llvm::SmallString<256> parent = llvm::sys::path::parent_path(path);
  if (parent.empty())
    parent = ".";
  if (std::error_code ec = llvm::sys::fs::create_directories(parent))
    return failure("cannot create {0}: {1}", parent, ec.message());
  // A fresh sibling, never an existing `<path>.partial` of someone else's.
  auto tmp = makeUniqueDirectory(
      (parent + "/" + llvm::sys::path::filename(path) + ".partial-").str());
  if (!tmp)
    return tmp.takeError();
  if (llvm::Error e = fill(*tmp)) {
    llvm::sys::fs::remove_directories(*tmp);
    return e;
  }
  // Onto nothing or an empty directory, rename is the whole move.
  if (::rename(tmp->c_str(), path.str().c_str()) == 0)
    return llvm::Error::success();
  // A previous directory of dtc's: swap the two atomically, then remove
  // the old one's entries (checkOutputDirectory saw only dtc's).
  if (errno == ENOTEMPTY || errno == EEXIST) {
    if (::renameat2(AT_FDCWD, tmp->c_str(), AT_FDCWD, path.str().c_str(),
                    RENAME_EXCHANGE) == 0) {
      removeOwnEntries(*tmp, kind);
      return llvm::Error::success();
    }
    // No RENAME_EXCHANGE on this filesystem: move the old one aside first.
    auto aside = makeUniqueDirectory(
        (parent + "/" + llvm::sys::path::filename(path) + ".old-").str());
    if (!aside)
      return aside.takeError();
    if (::rename(path.str().c_str(), aside->c_str()) == 0) {
      if (::rename(tmp->c_str(), path.str().c_str()) == 0) {
        removeOwnEntries(*aside, kind);
        return llvm::Error::success();
      }
      std::string why = std::strerror(errno);
      ::rename(aside->c_str(), path.str().c_str());
      llvm::sys::fs::remove_directories(*tmp);
      return failure("cannot move the new contents into {0}: {1}", path, why);
    }
    ::rmdir(aside->c_str());
  }
  std::string why = std::strerror(errno);
  llvm::sys::fs::remove_directories(*tmp);
  return failure("cannot move the new contents into {0}: {1}", path, why);
}

int createFreshFile(llvm::StringRef path, unsigned mode) {
  std::string name = path.str();
  if (::unlink(name.c_str()) != 0 && errno != ENOENT)
    return -1;
  return ::open(name.c_str(),
                O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
}

llvm::Expected<DirectoryLock> DirectoryLock::acquire(llvm::StringRef root,
                                                     llvm::StringRef flag,
                                                     bool exclusive) {
  struct stat st;
  if (::stat(root.str().c_str(), &st) == 0 && !S_ISDIR(st.st_mode))
    return badInput("{0} {1}: exists and is not a directory; name a "
                    "checkpoint directory",
                    flag, root);
  // A reader of a root it cannot write (or that does not exist: its own
  // error follows) goes on unlocked: no writer can hold it either.
  if (!exclusive && !llvm::sys::fs::is_directory(root))
    return DirectoryLock(-1);
  if (std::error_code ec = llvm::sys::fs::create_directories(root))
    return badInput("{0} {1}: cannot create: {2}", flag, root, ec.message());
  std::string path = (root + "/.lock").str();
  int fd = ::open(path.c_str(),
                  O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0 && !exclusive && (errno == EACCES || errno == EROFS))
    return DirectoryLock(-1);
  if (fd < 0)
    return badInput("{0} {1}: cannot open its lock file .lock: {2}", flag, root,
                    std::strerror(errno));
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return badInput("{0} {1}: .lock is not a regular file; remove it", flag,
                    root);
  }
  if (::flock(fd, (exclusive ? LOCK_EX : LOCK_SH) | LOCK_NB) != 0) {
    char holder[32] = {};
    ssize_t n = ::pread(fd, holder, sizeof(holder) - 1, 0);
    ::close(fd);
    std::string pid = llvm::StringRef(holder, n > 0 ? n : 0).trim().str();
    return badInput("{0} {1}: another dtc {2} this checkpoint root{3}; wait "
                    "for it to end or name another directory",
                    flag, root, exclusive ? "process uses" : "run writes",
                    pid.empty() ? "" : " (pid " + pid + ")");
  }
  if (exclusive) {
    std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, pid.data(), pid.size(), 0) !=
                                       static_cast<ssize_t>(pid.size())) {
      // The lock holds without the pid; only the next error is vaguer.
    }
  }
  return DirectoryLock(fd);
}

DirectoryLock::~DirectoryLock() {
  if (fd_ >= 0)
    ::close(fd_);
}

} // namespace dtc
