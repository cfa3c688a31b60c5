"""Prints the layout.json facts layout-json.test checks."""
import json
import sys

d = json.load(open(sys.argv[1]))
t = d["tensors"]
print(d["schema"], d["mesh"], len(t), "variables")
w = t["onnx::MatMul_283"]
print("onnx::MatMul_283", w["shape"], w["role"] + ":", " ".join(
    f"{c['rank']} {c['offsets']}+{c['sizes']}" + (" replica" if c["replica"] else "")
    for c in w["chunks"]))
m = t["exp_avg:onnx::MatMul_283"]
print("exp_avg:onnx::MatMul_283 flat:", " ".join(
    f"{c['rank']} {c['flat']['index']}/{c['flat']['parts']}" for c in m["chunks"]))
q = t["onnx::MatMul_278"]
print("onnx::MatMul_278 blocks:", " ".join(
    f"{c['rank']} {c['dims'][1]['block']}:{c['dims'][1]['index']}/{c['dims'][1]['parts']}"
    for c in q["chunks"][:2]),
    "no offsets" if all("offsets" not in c for c in q["chunks"]) else "offsets")
