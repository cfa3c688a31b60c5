#!/usr/bin/env python3
"""Writes the seeds of fuzz-plan-json (test/fuzz/corpus/plan-json/).

  python3 test/fuzz/make_plan_seeds.py DTC OUT_DIR

A seed is a bundle's plan.json as `dtc compile` writes it: tiny-gpt planned
on 1 and 8 GPUs (tp and pp pinned, so stages and a pipeline schedule are
there), served (`--mode infer`), the CNN fixture (the any-graph planner's
"ops" ranges); from test/models/plans, LLaMA-70B shapes on 64 GPUs with
the interleaved schedule and an old CNN bundle without a plan
(`pending_reason`). Then
the hostile ones of issue 61: numbers no plan has (1e308, -1, 2^62), a
plan nested 2,000 deep, and fields of the wrong type.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))))
MODELS = os.path.join(ROOT, "test", "models")


def compile_plan(dtc, work, name, args):
    out = os.path.join(work, name + ".dtc")
    subprocess.run([dtc, "compile"] + args + ["-o", out], check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "plan.json")) as f:
        return f.read()


def huge(value):
    """`value` with every integer replaced by 2^62, every float by 1e308."""
    if isinstance(value, dict):
        return {k: huge(v) for k, v in value.items()}
    if isinstance(value, list):
        return [huge(v) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return 1 << 62
    if isinstance(value, float):
        return 1e308
    return value


def main():
    dtc, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    tiny = os.path.join(MODELS, "tiny-gpt.onnx")
    cnn = os.path.join(MODELS, "cnn", "cnn.onnx")
    seeds = {}
    with tempfile.TemporaryDirectory() as work:
        seeds["tiny-gpt-1"] = compile_plan(dtc, work, "a", [
            tiny, "--gpus", "1", "--global-batch", "4", "--micro-batch", "4"])
        seeds["tiny-gpt-8-tp2-pp2"] = compile_plan(dtc, work, "b", [
            tiny, "--gpus", "8", "--seq-len", "16", "--global-batch", "16",
            "--tp", "2", "--pp", "2"])
        seeds["tiny-gpt-infer"] = compile_plan(dtc, work, "c", [
            tiny, "--gpus", "2", "--mode", "infer"])
        seeds["cnn-any-graph"] = compile_plan(dtc, work, "d", [
            cnn, "--gpus", "4", "--dim", "batch=8"])
    for name in ("llama-70b-64-tp4", "cnn-8"):
        with open(os.path.join(MODELS, "plans", name + ".dtc",
                               "plan.json")) as f:
            seeds[name] = f.read()

    base = json.loads(seeds["tiny-gpt-8-tp2-pp2"])
    hostile = {
        "huge-degrees": {"parallel": dict(base["parallel"], tp=1 << 62,
                                          dp=1 << 62)},
        "negative-counts": {"cluster": dict(base["cluster"], gpus=-1,
                                            gpus_per_node=0)},
        "huge-numbers": {"predicted": huge(base["predicted"])},
        "wrong-types": {"stages": "not a list", "mesh": [1, 2, 3]},
    }
    for name, patch in hostile.items():
        plan = dict(base)
        plan.update(patch)
        seeds[name] = json.dumps(plan)
    # Written as text: Python's encoder recurses too.
    nested = dict(base, alternatives="@DEEP@")
    seeds["nested-2000"] = json.dumps(nested).replace(
        '"@DEEP@"', '[' + '{"x":' * 2000 + '{}' + '}' * 2000 + ']')

    for name, text in seeds.items():
        with open(os.path.join(out_dir, name), "w") as f:
            f.write(text)
    print("wrote %d seeds to %s" % (len(seeds), out_dir))


if __name__ == "__main__":
    main()
