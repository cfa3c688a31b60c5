"""Loads two safetensors files with Python's `safetensors` package (the
reader users have) and compares them tensor by tensor.

usage: compare_safetensors.py A B TOL
prints the tensor count, the worst absolute difference and whether it is
within TOL; fails if the names, shapes or dtypes differ.
"""
import sys

from safetensors.numpy import load_file

a, b, tol = load_file(sys.argv[1]), load_file(sys.argv[2]), float(sys.argv[3])
assert sorted(a) == sorted(b), "names differ: %s vs %s" % (sorted(a), sorted(b))
worst, where = 0.0, None
for name in sorted(a):
    assert a[name].shape == b[name].shape, "%s: shapes differ" % name
    assert a[name].dtype == b[name].dtype, "%s: dtypes differ" % name
    diff = float(abs(a[name].astype("float64") - b[name]).max()) \
        if a[name].size else 0.0
    if diff >= worst:
        worst, where = diff, name
print("%d tensors; worst absolute difference %.2e in %s" %
      (len(a), worst, where))
print("within %g: %s" % (tol, "yes" if worst <= tol else "NO"))
