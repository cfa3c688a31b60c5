#!/usr/bin/env bash
# Runs every benchmark of the other issues and prints one table of their
# headline figures (issue 12), each against its target and, where the
# benchmark measures one in the same run, its baseline. Each benchmark's
# whole output is kept in the log directory. docs/performance.md records
# the latest table.
# Usage: bench/run-all.sh [BUILD_DIR] [LOG_DIR]   (default: build, a temp dir)
# About 12 minutes on the 2-core reference machine.
set -uo pipefail
cd "$(dirname "$0")/.."
# The project's Python (scripts/setup.sh), not the python3 on PATH.
source scripts/lib/python.sh
build="${1:-build}"
logs="${2:-$(mktemp -d)}"
mkdir -p "$logs"
ninja -C "$build" dtc bench-planner bench-costmodel costmodel-corpus \
  bench-import bench-sgemm bench-collectives >/dev/null || exit 1
start=$(date +%s)

# name | command (each writes its log; a failure is reported, not fatal)
run() {
  local name="$1"
  shift
  local t0
  t0=$(date +%s)
  if "$@" >"$logs/$name.txt" 2>&1; then
    echo "$name: $(($(date +%s) - t0)) s" >&2
  else
    echo "$name: FAILED after $(($(date +%s) - t0)) s (see $logs/$name.txt)" >&2
  fi
}
# TABLE_ONLY=1: only print the table of an earlier run's logs.
if [ -z "${TABLE_ONLY:-}" ]; then
run planner "$build/bench/planner/bench-planner" 3
run costmodel "$build/bench/costmodel/bench-costmodel"
run costmodel_corpus "$build/bench/costmodel/costmodel-corpus"
run import "$build/bench/import/bench-import" llama-70b gpt-1t
run compile bench/compile_speed.sh "$build"
run train_step bench/train_step.sh "$build" 4
run vs_pytorch bench/vs_pytorch.sh "$build" 6
run threads bench/threads.sh "$build" 3
run collectives bench/collectives.sh "$build" 16 5
run overlap bench/overlap.sh "$build" 6
run ckpt bench/ckpt.sh "$build"
run elastic bench/elastic.sh "$build"
run trace_error bench/trace-error.sh "$build"
echo "all benchmarks: $(($(date +%s) - start)) s; logs in $logs" >&2
fi

"$DTC_PYTHON" - "$logs" <<'PY'
import os, re, sys
logs = sys.argv[1]

def text(name):
    path = os.path.join(logs, name + ".txt")
    return open(path).read() if os.path.exists(path) else ""

rows = []
def row(figure, value, reference):
    rows.append((figure, value if value else "(not found: see log)", reference))

def grab(name, pattern, fmt="{0}"):
    m = re.search(pattern, text(name), re.M)
    return fmt.format(*m.groups()) if m else None

targets = {"llama-2-70b": 1, "gpt-3 175b": 2, "sc21 1t": 5}
for m in re.finditer(r"^(llama-2-70b|gpt-3 175b|sc21 1t)\s+(\d+)\s+([\d.]+)",
                     text("planner").split("Growth")[0], re.M):
    row(f"plan search {m.group(1)} on {m.group(2)} GPUs", f"{m.group(3)} s",
        f"target < {targets[m.group(1)]} s")
for m in re.finditer(r"^(llama-70b|gpt-1t)\s+\d+\s+\d+\s+\d+\s+[\d.]+\s+"
                     r"[\d.]+\s+[\d.]+\s+([\d.]+)\s+(\d+)", text("import"),
                     re.M):
    row(f"import + simplify {m.group(1)} (shapes only)",
        f"{m.group(2)} s, {m.group(3)} MiB peak",
        "target < 2 s and 1 GiB" if m.group(1) == "llama-70b"
        else "target < 10 s")
m = re.search(r"^gpt-175b tp8 pp8 dp16 interleaved\s+([\d.]+)", text("costmodel"), re.M)
row("cost model, one plan's prediction", m and f"{m.group(1)} us", "")
row("cost model step-time error on published runs, held out",
    grab("costmodel_corpus",
         r"^\s+all \(held out\)\s+(\d+)\s+median\s+([\d.]+%)\s+p90\s+([\d.]+%)",
         "median {1}, p90 {2} over {0} runs"),
    "leave-one-source-out (issue 30: median <= 10%, p90 <= 25%)")
for line in text("compile").splitlines()[1:]:
    cols = line.split()
    if len(cols) >= 5:
        row(f"whole dtc compile {cols[0]} on {cols[1]} GPUs (with its program)",
            f"{cols[3]} s", f"planner target < {cols[4]} s")
row("CPU training step", grab("train_step", r"^achieved\s+([\d.]+ GFLOP/s)"),
    grab("train_step", r"^ratio\s+([\d.]+)", "ratio {0} to sgemm (target >= 0.5)"))
for m in re.finditer(r"^(\w+ (?:1 rank|dp2 vs DDP\(gloo\)))\s+ratio\s+step ([\d.]+x)"
                     r"\s+peak ([\d.]+x)", text("vs_pytorch"), re.M):
    row(f"CPU training step vs PyTorch eager, {m.group(1)}",
        f"step {m.group(2)}, peak memory {m.group(3)}",
        "dtc / PyTorch (issue 31: <= 1.0, goal 0.8)")
for m in re.finditer(r"^(\S+)\s+(default|2 threads)\s+([\d.]+ ms)\s+([\d.]+x)",
                     text("threads"), re.M):
    row(f"one-device step, {m.group(1)}, {m.group(2)}", m.group(3),
        f"{m.group(4)} of 1 thread (issue 60: default <= 1.0)")
row("async checkpoint stall",
    grab("ckpt", r"async ([\d.]+ s), sync ([\d.]+ s); async / sync = ([\d.]+)",
         "{0} (sync {1})"),
    grab("ckpt", r"async / sync = ([\d.]+)", "ratio {0} (target < 0.10)"))
row("resharded checkpoint load",
    grab("ckpt", r"from one rank \(resharded\) ([\d.]+ s)"),
    grab("ckpt", r"resharded\) [\d.]+ s; ratio ([\d.]+)",
         "ratio {0} to an aligned load"))
row("dp4 step, gradient sync overlapped",
    grab("overlap", r"overlapped with backward:\s+([\d.]+ ms)"),
    grab("overlap", r"speedup from overlap: ([\d.]+x)", "{0} vs --no-overlap"))
row("cost model error on this machine",
    grab("trace_error", r"^cost model error on this machine: step "
         r"measured/predicted (.*)$"),
    "dtc plan report --trace: step time measured/predicted, and the "
    "time-weighted median kernel error")
ratios = re.findall(r"^\S+\s+\d+ MiB\s+[\d.]+\s+[\d.]+\s+([\d.]+)$",
                    text("collectives"), re.M)
if ratios:
    vals = sorted(float(r) for r in ratios)
    row("collective bus bandwidth vs MPI", f"{vals[0]:.2f} - {vals[-1]:.2f}",
        "ratio to blocking MPI, 1-16 MiB (target >= 0.9)")
else:
    row("collective bus bandwidth vs MPI", None, "target >= 0.9")

print("| figure | measured | against |")
print("|---|---|---|")
for figure, value, reference in rows:
    print(f"| {figure} | {value} | {reference or ''} |")
PY
