# -*- Python -*-
# lit configuration for dtc: FileCheck tests of every pass and of the dialect.

import os

import lit.formats
from lit.llvm import llvm_config

config.name = "dtc"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.excludes = ["CMakeLists.txt", "README.md", "lit.cfg.py",
                   "lit.site.cfg.py", "unit", "models", "Inputs"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.dtc_obj_root, "test")

llvm_config.use_default_substitutions()
# FileCheck, not, count and split-file come from LLVM's tools directory;
# dtc's own tools from the build's bin directory.
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(
    ["dtc-opt", "dtc"], [config.dtc_tools_dir])
# Python is the project's own interpreter (DTC_PYTHON, the venv that
# scripts/setup.sh makes), never the python3 first on the host's PATH: RUN
# lines name it %python, and its directory leads PATH so that scripts started
# by their `#!/usr/bin/env python3` line get it too.
# use_default_substitutions() set %python to lit's own interpreter: replace it.
config.substitutions = [s for s in config.substitutions if s[0] != "%python"]
config.substitutions.append(("%python", '"%s"' % config.python_executable))
llvm_config.with_environment(
    "PATH", os.path.dirname(config.python_executable), append_path=True)
config.substitutions.append(("%models", os.path.join(config.dtc_src_root,
                                                     "test", "models")))

# tmpfs-mount: this process may mount a small tmpfs (root in a container
# usually may), so tests can fill a disk on purpose
# (test/cli/ckpt-disk-full.test). Elsewhere they are UNSUPPORTED, never
# passing.
def _can_mount_tmpfs():
    import shutil
    import subprocess
    import tempfile
    if not shutil.which("mount") or not shutil.which("umount"):
        return False
    where = tempfile.mkdtemp(prefix="dtc-lit-tmpfs-")
    try:
        quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     timeout=10)
        if subprocess.call(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs",
                            where], **quiet) != 0:
            return False
        return subprocess.call(["umount", where], **quiet) == 0
    except (OSError, subprocess.SubprocessError):
        return False
    finally:
        try:
            os.rmdir(where)
        except OSError:
            pass


if _can_mount_tmpfs():
    config.available_features.add("tmpfs-mount")

# A dtc built with its CUDA backend module (runtime/cuda/CudaPlugin.h).
config.dtc_cuda_plugin = os.path.join(config.dtc_obj_root, "lib",
                                      "dtc-cuda.so")
if os.path.exists(config.dtc_cuda_plugin):
    config.available_features.add("cuda-build")
config.substitutions.append(("%dtc_cuda_plugin", config.dtc_cuda_plugin))
config.substitutions.append(("%dtc_obj_root", config.dtc_obj_root))

# A CUDA device on this machine: tests of what happens without one say
# `UNSUPPORTED: gpu` (the GPU path is run by scripts/gpu-check.sh).
if os.path.exists("/dev/nvidia0"):
    config.available_features.add("gpu")
