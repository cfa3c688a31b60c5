"""Trains one model in PyTorch and in dtc in the same run; prints both.

usage: run.py DTC WORKDIR MODEL [--steps N] [--dp2]

MODEL is ``gpt`` or ``llama`` (bench/vs_pytorch/models.py). The PyTorch
side is eager mode with AdamW, the default a user gets; dtc compiles the
same model's ONNX export (torch's default exporter) for one device, or
for two data-parallel ranks against DistributedDataParallel over gloo with
``--dp2``. Both use every core of the machine: one process with all its
threads, or two processes splitting them. Step time is the median after
the first step (which warms caches and the allocator); peak memory is the
largest resident set of any one process (the Python process on the
PyTorch side, interpreter and libraries included; each rank on dtc's).
"""

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402

MICRO_BATCH = 4


def batches(tokens, seq, batch, seed):
    rng = np.random.default_rng(seed)
    while True:
        starts = rng.integers(0, len(tokens) - seq - 1, batch)
        window = np.stack([tokens[s:s + seq + 1] for s in starts])
        window = torch.from_numpy(window.astype(np.int64))
        yield window[:, :-1], window[:, 1:]


def peak_rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def train_torch(name, tokens_path, steps, rank=0, world=1):
    """Eager PyTorch: forward, cross-entropy, backward, AdamW."""
    model, s = models.build(name)
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    # dtc's defaults: AdamW, lr 3e-4, betas (0.9, 0.95), weight decay 0.1.
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95),
                            weight_decay=0.1)
    tokens = np.fromfile(tokens_path, dtype=np.uint16)
    data = batches(tokens, s["seq"], MICRO_BATCH // world, rank)
    times, losses = [], []
    for _ in range(steps):
        x, y = next(data)
        t0 = time.perf_counter()
        logits = model(x)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return dict(step_s=statistics.median(times[1:]), loss0=losses[0],
                loss=losses[-1], peak_mib=peak_rss_mib())


def ddp_worker(rank, world, name, tokens_path, steps, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, os.cpu_count() // world))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    result = train_torch(name, tokens_path, steps, rank, world)
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)
    torch.distributed.destroy_process_group()


def run_torch(name, tokens_path, steps, dp2, work):
    if not dp2:
        torch.set_num_threads(os.cpu_count())
        return train_torch(name, tokens_path, steps)
    out = os.path.join(work, f"{name}-ddp")
    torch.multiprocessing.spawn(
        ddp_worker, args=(2, name, tokens_path, steps, 29500 + os.getpid() %
                          1000, out), nprocs=2)
    ranks = [json.load(open(f"{out}.{r}")) for r in range(2)]
    return dict(step_s=max(r["step_s"] for r in ranks),
                loss0=ranks[0]["loss0"], loss=ranks[0]["loss"],
                peak_mib=max(r["peak_mib"] for r in ranks))


def write_tokens(path, count=200000):
    """A learnable stream: random repeats of 40 short random phrases."""
    rng = np.random.default_rng(0)
    vocab = min(v["vocab"] for v in models.SHAPES.values())
    phrases = [rng.integers(0, vocab, rng.integers(3, 9)) for _ in range(40)]
    stream = np.concatenate([phrases[i] for i in
                             rng.integers(0, len(phrases), count // 3)])
    stream[:count].astype(np.uint16).tofile(path)


def export(name, path):
    model, s = models.build(name)
    model.eval()  # no dropout either way; silences the exporter's warning
    example = torch.zeros(MICRO_BATCH, s["seq"], dtype=torch.int64)
    with contextlib.redirect_stdout(sys.stderr):  # the exporter's progress
        torch.onnx.export(model, (example,), path, input_names=["input_ids"],
                          output_names=["logits"], external_data=False)


def run_dtc(dtc, name, onnx, tokens_path, steps, dp2, work):
    s = models.SHAPES[name]
    bundle = os.path.join(work, f"{name}-{'dp2' if dp2 else 'one'}.dtc")
    ranks = ["--gpus", "2", "--dp", "2", "--tp", "1", "--pp", "1",
             "--zero", "0"] if dp2 else ["--gpus", "1"]
    subprocess.run([dtc, "compile", onnx, *ranks, "--dtype", "fp32",
                    "--global-batch", str(MICRO_BATCH), "--micro-batch",
                    str(MICRO_BATCH // 2 if dp2 else MICRO_BATCH),
                    "--seq-len", str(s["seq"]), "-o", bundle],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(work, "dtc-log.json"), "w") as log:
        proc = subprocess.Popen([dtc, "run", bundle, "--steps", str(steps),
                                 "--data", tokens_path, "--log-json"],
                                stdout=log)
        # The largest resident set of the dtc process or any of its ranks.
        _, status, usage = os.wait4(proc.pid, 0)
    if status != 0:
        sys.exit(f"dtc run {bundle} failed (status {status})")
    log = [json.loads(line) for line in open(log.name)]
    return dict(step_s=statistics.median(l["step_time_s"] for l in log[1:]),
                loss0=log[0]["loss"], loss=log[-1]["loss"],
                peak_mib=usage.ru_maxrss / 1024)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dtc")
    ap.add_argument("work")
    ap.add_argument("model", choices=sorted(models.SHAPES))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--dp2", action="store_true")
    ap.add_argument("--torch-only", action="store_true",
                    help="(internal) train the PyTorch side, print JSON")
    args = ap.parse_args()
    tokens_path = os.path.join(args.work, "tokens.bin")
    if args.torch_only:
        print(json.dumps(run_torch(args.model, tokens_path, args.steps,
                                   args.dp2, args.work)))
        return
    s = models.SHAPES[args.model]
    onnx = os.path.join(args.work, f"{args.model}.onnx")
    if not os.path.exists(onnx):
        export(args.model, onnx)
    if not os.path.exists(tokens_path):
        write_tokens(tokens_path)
    ours = run_dtc(args.dtc, args.model, onnx, tokens_path, args.steps,
                   args.dp2, args.work)
    # A fresh process, so that its peak memory is the training's alone.
    theirs = json.loads(subprocess.run(
        [sys.executable, __file__, *sys.argv[1:], "--torch-only"],
        check=True, stdout=subprocess.PIPE, text=True).stdout)
    tokens = MICRO_BATCH * s["seq"]
    label = f"{args.model} {'dp2 vs DDP(gloo)' if args.dp2 else '1 rank'}"
    for side, r in (("dtc", ours), ("pytorch", theirs)):
        print(f"{label:24} {side:8} step {r['step_s']:7.3f} s  "
              f"{tokens / r['step_s']:8.0f} tokens/s  peak "
              f"{r['peak_mib']:7.0f} MiB  loss {r['loss0']:.3f} -> "
              f"{r['loss']:.3f}")
    print(f"{label:24} ratio    step {ours['step_s'] / theirs['step_s']:.2f}x"
          f"  peak {ours['peak_mib'] / theirs['peak_mib']:.2f}x  "
          "(dtc / pytorch; target <= 1.0, goal 0.8)")


if __name__ == "__main__":
    main()
