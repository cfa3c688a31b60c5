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
config.substitutions.append(("%models", os.path.join(config.dtc_src_root,
                                                     "test", "models")))
