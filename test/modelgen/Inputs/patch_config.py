"""Writes CONFIG with KEY set to the raw JSON text VALUE (numbers JSON
allows but Python's json would not write, such as 1e400):
patch_config.py CONFIG OUT KEY=VALUE"""
import json
import sys

config, out, assignment = sys.argv[1:4]
key, value = assignment.split("=", 1)
data = json.load(open(config))
data[key] = "@@PATCHED@@"
open(out, "w").write(json.dumps(data).replace('"@@PATCHED@@"', value))
