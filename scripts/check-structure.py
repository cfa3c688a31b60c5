#!/usr/bin/env python3
"""Structural rules of the code base (issue 62), checked on the sources:

  layering       no #include runs from a lower layer to a higher one (the
                 ranks below: the runtime's support library at the bottom,
                 the command-line tools at the top);
  pass-managers  every PassManager runs a registered pipeline: passes are
                 added to a pass manager only in the pipeline builders
                 (passes/Pipelines.cpp, the training step's in
                 passes/training/TrainingStep.cpp, and dtc-opt's
                 registrations), and each `PassManager x(...)` built
                 elsewhere is handed to a build...Pipeline(x, ...) builder
                 before it runs; no pass runs a PassManager of its own (in
                 passes/ only buildTrainingStep, the driver's entry point,
                 builds one).

Usage: scripts/check-structure.py [layering|pass-managers ...]  (default:
both); prints each violation and exits 1 if there is one.
"""

import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = ("runtime", "dialects", "passes", "frontends", "compiler", "tools")
SUFFIXES = (".cpp", ".h", ".cu", ".cuh", ".td")

# Higher may include lower, never the reverse; equal ranks do not include
# each other. An area is a top-level directory, or runtime/<x> and
# compiler/<x> (the compiler's own top-level files are the driver).
RANKS = {
    "runtime/support": 0,
    "runtime/proto": 0,
    "runtime/core": 1,
    "runtime/checkpoint": 2,
    "runtime/cpu": 2,
    "runtime/cuda": 2,
    "runtime/mpi": 2,
    "compiler/support": 2,
    "dialects": 3,
    "passes": 4,
    "frontends": 4,
    "compiler/costmodel": 5,
    "compiler/ckpt": 5,
    "compiler/run": 5,
    "compiler/planner": 6,
    "compiler/inspect": 7,
    "compiler": 8,
    "compiler/calibrate": 9,
    "tools": 10,
}

# The PassManagers passes/ may build: buildTrainingStep's.
PASS_MANAGERS_IN_PASSES = {"passes/training/TrainingStep.cpp": 1}

PIPELINE_BUILDERS = {
    "passes/Pipelines.cpp",
    "passes/training/TrainingStep.cpp",
    "passes/training/TrainingPasses.cpp",
}


def sources():
    for top in SOURCES:
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix in SUFFIXES and path.is_file():
                yield path


def area(relative):
    parts = pathlib.PurePosixPath(relative).parts
    if parts[0] in ("runtime", "compiler") and len(parts) > 2:
        return parts[0] + "/" + parts[1]
    return parts[0]


def check_layering():
    problems = []
    include = re.compile(r'^\s*#include "([^"]+)"', re.M)
    for path in sources():
        relative = path.relative_to(ROOT).as_posix()
        here = area(relative)
        if here not in RANKS:
            problems.append(f"{relative}: area '{here}' has no layer rank")
            continue
        for target in include.findall(path.read_text(errors="ignore")):
            if target.split("/")[0] not in SOURCES:
                continue
            there = area(target)
            if there == here:
                continue
            if there not in RANKS:
                problems.append(f"{relative}: includes {target} of an area "
                                f"'{there}' with no layer rank")
            elif RANKS[there] >= RANKS[here]:
                problems.append(f"{relative}: includes {target} ({there}, "
                                f"layer {RANKS[there]}) from {here}, layer "
                                f"{RANKS[here]}")
    return problems


def strip_comments(text):
    return re.sub(r"//[^\n]*", "", text)


def check_pass_managers():
    problems = []
    adds = re.compile(r"\b(addPass|addNestedPass|nest<)")
    built = re.compile(r"\bPassManager\s+(\w+)\s*[({]")
    for path in sources():
        relative = path.relative_to(ROOT).as_posix()
        code = strip_comments(path.read_text(errors="ignore"))
        if relative not in PIPELINE_BUILDERS and not relative.startswith(
                "tools/"):
            for match in adds.finditer(code):
                line = code.count("\n", 0, match.start()) + 1
                problems.append(f"{relative}:{line}: adds passes outside a "
                                f"registered pipeline builder")
        managers = built.findall(code)
        if relative.startswith("passes/") and len(managers) > \
                PASS_MANAGERS_IN_PASSES.get(relative, 0):
            problems.append(f"{relative}: builds {len(managers)} "
                            f"PassManager(s); a pass runs inside the "
                            f"driver's, never one of its own")
        for match in built.finditer(code):
            name = match.group(1)
            rest = code[match.end():]
            run = re.search(r"\b%s\.run\(" % re.escape(name), rest)
            scope = rest[:run.start()] if run else rest
            if not re.search(r"\bbuild\w*Pipeline\(\s*%s\b" % re.escape(name),
                             scope):
                line = code.count("\n", 0, match.start()) + 1
                problems.append(f"{relative}:{line}: PassManager '{name}' "
                                f"runs without a registered pipeline "
                                f"builder")
    return problems


CHECKS = {"layering": check_layering, "pass-managers": check_pass_managers}


def main(argv):
    names = argv[1:] or list(CHECKS)
    failed = False
    for name in names:
        if name not in CHECKS:
            print(f"unknown check '{name}'; one of {', '.join(CHECKS)}")
            return 2
        problems = CHECKS[name]()
        print(f"{name}: {len(problems)} violation(s)")
        for problem in problems:
            print("  " + problem)
        failed = failed or bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
