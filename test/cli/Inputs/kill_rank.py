"""Kills one rank of a running multi-rank `dtc run` and checks that the run
stops: exit code 1 within 60 s and an error line naming the dead rank.

usage: kill_rank.py DTC BUNDLE TOKENS RANK
"""
import os
import signal
import subprocess
import sys
import time

dtc, bundle, tokens, victim = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
# DTC may be a bare name found on PATH (lit puts the build on it).
proc = subprocess.Popen(
    [dtc, "run", bundle, "--steps", "1000000", "--data", tokens, "--log-json"],
    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

# Wait until training runs (two steps logged by rank 0).
steps = 0
deadline = time.time() + 120
while steps < 2:
    line = proc.stdout.readline()
    assert line, "the run ended before training: %s" % proc.stderr.read()
    steps += line.startswith("{")
    assert time.time() < deadline, "no training steps within 120 s"


def rank_of(pid):
    try:
        env = open("/proc/%d/environ" % pid, "rb").read().split(b"\0")
        cmd = open("/proc/%d/cmdline" % pid, "rb").read()
    except OSError:
        return None
    if bundle.encode() not in cmd:
        return None
    for item in env:
        if item.startswith(b"OMPI_COMM_WORLD_RANK="):
            return item.split(b"=", 1)[1].decode()
    return None


pids = [int(p) for p in os.listdir("/proc") if p.isdigit()]
targets = [p for p in pids if rank_of(p) == victim]
assert targets, "rank %s not found" % victim
os.kill(targets[0], signal.SIGKILL)
killed_at = time.time()
try:
    _, err = proc.communicate(timeout=60)
except subprocess.TimeoutExpired:
    proc.kill()
    sys.exit("the run did not stop within 60 s of rank %s dying" % victim)
elapsed = time.time() - killed_at
print("exit code %d after %.1f s" % (proc.returncode, elapsed))
print(err.strip())
assert proc.returncode == 1, "exit code %d, expected 1" % proc.returncode
