"""Runs a command under strace and checks which files it touched: every file
it opened for reading lies under a --read folder (or a system folder), every
file it created, wrote, renamed, removed or changed lies under a --write
path or is staged beside it (PATH.partial-XXXXXX/, PATH.tmp). Prints "touched paths: ok" and the command's exit code, or each
path outside with what was done to it (and exits 1).

    touched_paths.py --read DIR... --write DIR... -- CMD ARGS...

Only successful system calls count. Paths are resolved through symbolic
links (strace -y prints the file an fd names), so a write through a planted
link counts at the link's target."""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Libraries, locale data, /proc and /sys probes: what any program reads;
# MPI's hardware discovery lists "/" and "/dev".
SYSTEM_READS = ("/usr", "/lib", "/lib64", "/etc", "/proc", "/sys",
                "/dev/null", "/dev/urandom", "/dev/tty", "/dev/shm",
                "/dev/pts", "/dev/ptmx")
SYSTEM_READ_DIRS = ("/", "/dev")
# MPI's shared-memory segments and the launcher's terminal. (Its session
# directory follows TMPDIR: tests point that at a --write folder.)
SYSTEM_WRITES = ("/dev/shm", "/dev/ptmx", "/dev/pts", "/dev/null")

WRITE_CALLS = {"unlink", "unlinkat", "rmdir", "rename", "renameat",
               "renameat2", "mkdir", "mkdirat", "symlink", "symlinkat",
               "link", "linkat", "chmod", "fchmodat", "truncate", "mknod",
               "mknodat", "utimensat"}
OPEN_CALLS = {"open", "openat", "creat"}
WRITE_FLAGS = ("O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC")

CALL = re.compile(r"^(\d+)\s+([a-z0-9_]+)\((.*)\)\s+=\s+(-?\d+)(<[^>]*>)?")
DIRFD = re.compile(r"^(AT_FDCWD|\d+)<([^>]*)>,\s*")
STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def under(path, roots, siblings=False):
    """Whether `path` is a root or inside one; with `siblings`, also what a
    writer stages beside a root: ROOT.partial-XXXXXX/..., ROOT.tmp."""
    for r in roots:
        r = r.rstrip("/")
        if path == r or path.startswith(r + "/"):
            return True
        if siblings and path.startswith(r + "."):
            return True
    return False


def resolve(base, path):
    """The real path of `path` (relative to `base`); a missing file is
    resolved through its parent."""
    full = os.path.normpath(os.path.join(base, path))
    parent, name = os.path.split(full)
    return os.path.join(os.path.realpath(parent), name)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--read", action="append", default=[])
    parser.add_argument("--write", action="append", default=[])
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    writes = [os.path.realpath(p) for p in args.write]
    reads = [os.path.realpath(p) for p in args.read] + writes
    # The program's own install tree (its libraries, plugins).
    program = shutil.which(command[0]) or command[0]
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(program)))
    reads += [os.path.join(prefix, "bin"), os.path.join(prefix, "lib")]
    # A writer opens the folder of what it writes (to fsync the rename):
    # that folder itself, not what else it holds.
    read_dirs = set(SYSTEM_READ_DIRS) | {os.path.dirname(p) for p in writes}
    reads = [os.path.normpath(p) for p in reads] + list(SYSTEM_READS)
    writes += list(SYSTEM_WRITES)
    with tempfile.NamedTemporaryFile(suffix=".strace") as log:
        code = subprocess.call(
            ["strace", "-f", "-qq", "-y", "-s", "4096", "-e",
             "trace=%file", "-e", "signal=none", "-o", log.name] + command,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        lines = open(log.name, errors="replace").read().splitlines()
    cwd = os.getcwd()
    bad = []
    for line in lines:
        m = CALL.match(line)
        if not m or int(m.group(4)) < 0:
            continue
        call, argtext, result = m.group(2), m.group(3), m.group(5)
        base = cwd
        dirfd = DIRFD.match(argtext)
        if dirfd:
            base = dirfd.group(2)
            argtext = argtext[dirfd.end():]
        names = STRING.findall(argtext)
        if not names:
            continue
        if call in OPEN_CALLS:
            # The fd's own path: where the open really landed.
            path = result[1:-1] if result else resolve(base, names[0])
            if any(f in argtext for f in WRITE_FLAGS):
                if not under(path, writes, siblings=True):
                    bad.append("wrote " + path)
            elif (path.startswith("/") and not under(path, reads) and
                  path not in read_dirs):
                bad.append("read " + path)
        elif call in WRITE_CALLS:
            if call.startswith("symlink"):
                names = names[-1:]  # the link; its target is only text
            elif not call.startswith(("rename", "link")):
                names = names[:1]
            for name in names[:2]:
                path = resolve(base, name)
                if not under(path, writes, siblings=True):
                    bad.append(call + " " + path)
    for b in sorted(set(bad)):
        print("outside the named paths: " + b)
    if not bad:
        print("touched paths: ok")
    print("exit code %d" % code)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
