#!/usr/bin/env python3
"""Checks that a loadable module can bind in the executable that opens it.

Usage: plugin_symbols.py EXECUTABLE MODULE [FORBIDDEN_LIBRARY_PREFIX...]

Every undefined dynamic symbol of MODULE must be defined by EXECUTABLE's
exported symbols, or by a shared library EXECUTABLE or MODULE depends on:
otherwise opening the module (lazily bound) fails at the first call, on the
machine that has the hardware. The executable must not itself depend on a
library whose name starts with one of FORBIDDEN_LIBRARY_PREFIX.
"""
import subprocess
import sys

# Provided by the loader or weak hooks, never by a library.
LOADER = {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable",
          "__gmon_start__", "__tls_get_addr"}


def needed(path):
    libs = {}
    for line in subprocess.run(["ldd", path], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        parts = line.split()
        if "=>" in parts and len(parts) > 2 and parts[2].startswith("/"):
            libs[parts[0]] = parts[2]
    return libs


def symbols(path, defined):
    flag = "--defined-only" if defined else "--undefined-only"
    out = subprocess.run(["nm", "-D", flag, path], capture_output=True,
                         text=True, check=True).stdout
    names = set()
    for line in out.splitlines():
        parts = line.split()
        if parts:
            names.add(parts[-1].split("@")[0])
    return names


def main():
    exe, module, forbidden = sys.argv[1], sys.argv[2], sys.argv[3:]
    exe_libs = needed(exe)
    for name in exe_libs:
        for prefix in forbidden:
            if name.startswith(prefix):
                sys.exit(f"{exe} links {name}")
    print(f"{exe.rsplit('/', 1)[-1]} links none of {' '.join(forbidden)}")
    defined = symbols(exe, True)
    for lib in set(exe_libs.values()) | set(needed(module).values()):
        defined |= symbols(lib, True)
    wanted = symbols(module, False) - LOADER
    missing = sorted(wanted - defined)
    if missing:
        sys.exit(f"{len(missing)} symbols of {module} are defined nowhere, "
                 f"e.g. {missing[:5]}")
    print(f"all {len(wanted)} symbols the module needs are defined")


if __name__ == "__main__":
    main()
