"""Compiles a grid of models and GPU counts and checks the plan's promise:
every plan `dtc compile` returns has its program (issue 62).

Usage: plan_grid.py DTC WORKDIR MODEL[@FLAGS] ... [--gpus N,N,...]
    [--pins "FLAGS;FLAGS;..."] [--jobs N]

Each model is compiled at each GPU count with the planner's own search, and
again under each pin set. A searched compile must exit 0 with a program (or
say, exit 2, that the model does not fit on that many GPUs); a pinned one
may instead refuse the pins (exit 2, one line naming them, no bundle
left). Exit 1 (the compiler failed on a plan it chose), "no program for this
plan" (the planner returned a plan the compiler then refused, pinned or
not) and any other outcome is a broken promise: a plan without a
program ("program none"), a crash, a multi-line or empty error, or a bundle
left behind by a failed compile. Prints one line per broken case and a
summary; exits 1 if any.
"""
import argparse
import concurrent.futures
import os
import shlex
import shutil
import subprocess
import sys


def compile_case(dtc, workdir, model, extra, gpus, pins, index):
    out = os.path.join(workdir, f"case{index}.dtc")
    shutil.rmtree(out, ignore_errors=True)
    argv = [dtc, "compile", model, "--gpus", str(gpus), *extra, *pins,
            "-o", out]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    name = " ".join(shlex.quote(a) for a in argv[2:-2])
    problem = None
    if proc.returncode == 0:
        has_program = os.path.exists(os.path.join(out, "program.pb"))
        said_none = "program  none" in proc.stdout
        if said_none or not has_program:
            problem = "exit 0 without a program"
    else:
        err = proc.stderr.strip().splitlines()
        if proc.returncode != 2:
            problem = f"exit {proc.returncode}: {proc.stderr.strip()[:300]}"
        elif len(err) != 1 or not err[0].startswith("dtc: error: "):
            problem = f"error is not one line: {proc.stderr.strip()[:300]!r}"
        elif "no program for this plan" in err[0]:
            problem = f"a plan without its program: {err[0][:300]}"
        elif not pins and " does not fit on " not in err[0]:
            problem = f"searched plan refused: {err[0][:300]}"
        elif os.path.exists(os.path.join(out, "plan.json")):
            problem = "a failed compile left a bundle"
    shutil.rmtree(out, ignore_errors=True)
    refusal = proc.stderr.strip() if proc.returncode == 2 else ""
    return name, proc.returncode, problem, refusal


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dtc")
    parser.add_argument("workdir")
    parser.add_argument("models", nargs="+")
    parser.add_argument("--gpus", default="1,2,4,8")
    parser.add_argument("--pins", default="")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--refusals", action="store_true",
                        help="also print each refused pin set's error")
    args = parser.parse_args()
    pin_sets = [shlex.split(p) for p in args.pins.split(";") if p.strip()]
    cases = []
    for spec in args.models:
        model, _, flags = spec.partition("@")
        extra = shlex.split(flags)
        for gpus in (int(g) for g in args.gpus.split(",")):
            cases.append((model, extra, gpus, []))
            for pins in pin_sets:
                cases.append((model, extra, gpus, pins))
    os.makedirs(args.workdir, exist_ok=True)
    broken = 0
    outcomes = {0: 0, 1: 0, 2: 0}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = [pool.submit(compile_case, args.dtc, args.workdir, m, e, g,
                               p, i) for i, (m, e, g, p) in enumerate(cases)]
        for future in futures:
            name, rc, problem, refusal = future.result()
            if refusal and args.refusals:
                print(f"REFUSED {name}: {refusal[:400]}")
            outcomes[rc] = outcomes.get(rc, 0) + 1
            if problem:
                broken += 1
                print(f"BROKEN {name}: {problem}")
    print(f"grid {len(cases)} compiles: {outcomes[0]} with a program, "
          f"{outcomes.get(2, 0)} pins refused, {broken} broken")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
