"""dtc's one-device step at 1 thread, 2 threads and the default (issue 60).

usage: threads.py DTC WORKDIR [--steps N] [--repeats R]

For test/models/tiny-gpt.onnx (the quick start's model, as committed) and
the two bench/vs_pytorch models (exported here), compiles a one-device
bundle and trains it with OMP_NUM_THREADS=1, =2 and unset (dtc's own
choice), alternating the three so that a drift of the machine's load
affects them alike. Prints each median step time and the ratios to one
thread: the default must never be slower than one thread (ratio <= 1.0),
and the large models should gain from two.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
SETTINGS = (("1 thread", "1"), ("2 threads", "2"), ("default", None))


def compile_bundle(dtc, onnx, seq, work, name):
    bundle = os.path.join(work, f"{name}-threads.dtc")
    subprocess.run([dtc, "compile", onnx, "--gpus", "1", "--dtype", "fp32",
                    "--global-batch", str(run.MICRO_BATCH), "--micro-batch",
                    str(run.MICRO_BATCH), "--seq-len", str(seq),
                    "-o", bundle], check=True, stdout=subprocess.DEVNULL)
    return bundle


def step_times(dtc, bundle, tokens, steps, threads):
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)
    if threads:
        env["OMP_NUM_THREADS"] = threads
    out = subprocess.run([dtc, "run", bundle, "--steps", str(steps), "--data",
                          tokens, "--log-json"], env=env, check=True,
                         stdout=subprocess.PIPE, text=True).stdout
    log = [json.loads(line) for line in out.splitlines() if line.strip()]
    # The first step warms caches and the allocator.
    return [entry["step_time_s"] for entry in log[1:]]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dtc")
    ap.add_argument("work")
    ap.add_argument("--steps", type=int, default=0,
                    help="steps per run (default: 40 tiny, 6 large)")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    tokens = os.path.join(args.work, "tokens.bin")
    if not os.path.exists(tokens):
        run.write_tokens(tokens)
    models = [("tiny-gpt", os.path.join(REPO, "test/models/tiny-gpt.onnx"),
               32, 40)]
    for name in ("gpt", "llama"):
        onnx = os.path.join(args.work, f"{name}.onnx")
        if not os.path.exists(onnx):
            run.export(name, onnx)
        models.append((name, onnx, run.models.SHAPES[name]["seq"], 6))
    print(f"{'model':10} {'setting':10} {'step':>10}  ratio to 1 thread")
    for name, onnx, seq, default_steps in models:
        bundle = compile_bundle(args.dtc, onnx, seq, args.work, name)
        times = {label: [] for label, _ in SETTINGS}
        for _ in range(args.repeats):
            for label, threads in SETTINGS:
                times[label] += step_times(args.dtc, bundle, tokens,
                                           args.steps or default_steps,
                                           threads)
        one = statistics.median(times["1 thread"])
        for label, _ in SETTINGS:
            t = statistics.median(times[label])
            print(f"{name:10} {label:10} {t * 1e3:8.2f} ms  {t / one:.2f}x")


if __name__ == "__main__":
    main()
