"""Helpers for the disk-full tests (test/cli/ckpt-disk-full.test).

usage:
  disk_full.py mount REF DIR WHERE
      Mounts at DIR a tmpfs that holds one checkpoint like the one under REF
      (a root after its first save) but not a second one: its size is what
      REF's files take on a tmpfs (each rounded up to whole pages), plus
      WHERE=rank-file: half of REF's smallest rank file (every rank file of
        the second save runs out of space midway);
      WHERE=index: the second save's rank files and manifests, and half of
        index.json (every rank writes its part, then rank 0 runs out of
        space midway through index.json, before anything is committed).
  disk_full.py run SECONDS CMD [ARG...]
      Runs CMD (and the processes it starts) for at most SECONDS; prints its
      output (stderr into stdout), then "exit code N", or "killed after
      SECONDS s: it hung" when it did not end in time.
"""
import os
import signal
import subprocess
import sys

PAGE = os.sysconf("SC_PAGE_SIZE")


def pages(n):
    return -(-n // PAGE) * PAGE


def mount(ref, where, fail_at):
    used, rank_files, manifests, index = 0, [], [], 0
    for parent, _, files in os.walk(ref):
        for name in files:
            size = os.path.getsize(os.path.join(parent, name))
            used += pages(size)
            if name.endswith(".safetensors"):
                rank_files.append(size)
            elif name.startswith("rank-") and name.endswith(".json"):
                manifests.append(size)
            elif name == "index.json":
                index = size
    assert rank_files and index, "no checkpoint under %s" % ref
    if fail_at == "rank-file":
        size = used + pages(min(rank_files) // 2)
    elif fail_at == "index":
        size = (used + sum(pages(n) for n in rank_files + manifests) +
                pages(index) // PAGE // 2 * PAGE)
    else:
        sys.exit("WHERE is rank-file or index, not %s" % fail_at)
    os.makedirs(where, exist_ok=True)
    subprocess.check_call(["mount", "-t", "tmpfs", "-o",
                           "size=%dk" % (size // 1024), "tmpfs", where])
    print("mounted a %dk tmpfs: one save takes %dk" %
          (size // 1024, used // 1024))


def run(seconds, cmd):
    # Its own session, so that a hung launcher's ranks are killed with it.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        sys.stdout.write(out)
        print("killed after %g s: it hung" % seconds)
        return
    sys.stdout.write(out)
    print("exit code %d" % proc.returncode)


if sys.argv[1] == "mount":
    mount(sys.argv[2], sys.argv[3], sys.argv[4])
elif sys.argv[1] == "run":
    run(float(sys.argv[2]), sys.argv[3:])
else:
    sys.exit("usage: disk_full.py mount REF DIR WHERE | run SECONDS CMD...")
