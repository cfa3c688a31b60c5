"""Holds an exclusive flock on LOCKFILE (writing a pid into it, as dtc
does) while it runs COMMAND; exits with COMMAND's exit code.

usage: hold_lock.py LOCKFILE COMMAND [ARG ...]
"""
import fcntl
import os
import subprocess
import sys

path = sys.argv[1]
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.write("4242\n")
    f.flush()
    sys.exit(subprocess.run(sys.argv[2:]).returncode)
