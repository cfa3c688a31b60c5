#!/usr/bin/env python3
"""Fills runs.csv fields that a submission's config script sets through the
files it `source`s (config_common.sh), which extract_mlperf.py does not
follow: USE_DIST_OPTIMIZER (zero_stage 1, Megatron's distributed
optimizer) and FP8_PARAMS / FP8_PARAM_GATHER (the `fp8_params` column:
Transformer Engine's fp8 primary weights, one byte per parameter). Reads the mirrored
mlcommons/training_results_v* repositories (git, at the commit each row
names) and rewrites runs.csv in place, noting each filled field.

    python3 sourced_configs.py /work/.mirror
"""
import csv
import os
import re
import subprocess
import sys

mirror = sys.argv[1] if len(sys.argv) > 1 else "/work/.mirror"


def show(repo, commit, path):
    git = os.path.join(mirror, "mlcommons+" + repo, "repo")
    try:
        return subprocess.run(["git", "-C", git, "show", f"{commit}:{path}"],
                              capture_output=True, text=True,
                              check=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


def environment(repo, commit, path, seen=None):
    """The exports of `path` and of the files it sources, in order."""
    seen = seen or set()
    if path in seen:
        return {}
    seen.add(path)
    text = show(repo, commit, path)
    if text is None:
        return {}
    env = {}
    here = os.path.dirname(path)
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"source\s+\$\(dirname \$\{BASH_SOURCE\[0\]\}\)/(\S+)",
                     line)
        if m:
            env.update(environment(repo, commit, os.path.join(here, m.group(1)),
                                   seen))
            continue
        # export NAME=value, or export NAME="${NAME:=default}"
        m = re.match(r'export\s+(\w+)="?\$\{\w+:?=([^}]*)\}"?', line) or \
            re.match(r'export\s+(\w+)="?([^"\s]*)"?', line)
        if m:
            env[m.group(1)] = m.group(2)
    return env


rows = list(csv.DictReader(open("runs.csv")))
fields = list(rows[0].keys())
if "fp8_params" not in fields:
    fields.append("fp8_params")
for row in rows:
    where = row["source_url_or_path"]
    m = re.match(r"github.com/mlcommons/(training_results_v[\d.]+)@([0-9a-f]+):",
                 where)
    config = re.search(r"(\S+/config_\S+\.sh)", where)
    if not m or not config:
        continue
    env = environment(m.group(1), m.group(2), config.group(1).rstrip(";"))
    filled = []
    if not row["zero_stage"] and env.get("USE_DIST_OPTIMIZER", "").lower() in (
            "true", "1"):
        row["zero_stage"] = "1"
        filled.append("zero_stage=1 from USE_DIST_OPTIMIZER=True in a sourced "
                      "config (sourced_configs.py)")
    fp8_weights = any(env.get(k, "").lower() in ("true", "1")
                      for k in ("FP8_PARAMS", "FP8_PARAM_GATHER"))
    if not row.get("fp8_params"):
        row["fp8_params"] = "1" if fp8_weights else ("0" if env else "")
        if fp8_weights:
            filled.append("fp8_params=1 from FP8_PARAMS/FP8_PARAM_GATHER "
                          "(sourced_configs.py)")
    if filled:
        row["notes"] += "; " + "; ".join(filled)
        print(row["source"], ":", ", ".join(filled))
with open("runs.csv", "w", newline="") as f:
    writer = csv.DictWriter(f, fieldnames=fields)
    writer.writeheader()
    writer.writerows(rows)
