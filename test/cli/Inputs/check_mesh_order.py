"""Checks that a bundle's program runs the mesh order its plan.json states.

Usage: check_mesh_order.py PLAN_JSON RANK0_SHOW [EXPECTED]
The program's mesh is read from `dtc plan show --rank 0` ("in mesh
pp:2,dp:4,..."); plan.json lists every axis with its size, outermost first,
and experts subdivide dp (mesh.ep). Axes of size 1 are left out of the
program. EXPECTED (optional, "dp,tp,pp"): the program's axis names.
"""
import json
import re
import sys

plan = json.load(open(sys.argv[1]))["mesh"]
show = open(sys.argv[2]).read()
match = re.search(r"in mesh (\S+);", show)
assert match, "no mesh in the rank summary"
program = [tuple(a.split(":")) for a in match[1].split(",")]
ep = plan.get("ep", {}).get("size", 1)
planned = []
for name, size in zip(plan["axes"], plan["shape"]):
    if name == "dp" and ep > 1:
        if size // ep > 1:
            planned.append(("dp", str(size // ep)))
        planned.append(("ep", str(ep)))
    elif size > 1:
        planned.append((name, str(size)))
assert program == planned, f"program mesh {program} != plan's {planned}"
if len(sys.argv) > 3:
    names = [n for n, _ in program]
    assert names == sys.argv[3].split(","), f"{names} != {sys.argv[3]}"
print("mesh order", ",".join(n for n, _ in program))
