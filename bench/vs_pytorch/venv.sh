# Sourced by the benchmarks that need PyTorch (bench/vs_pytorch.sh,
# bench/threads.sh): sets $venv to the benchmark-only environment
# (.venv-bench, or $DTC_BENCH_VENV) with the newest torch, onnx and
# onnxscript, creating it on first use. The tests never need it.
venv="${DTC_BENCH_VENV:-$PWD/.venv-bench}"
if [[ ! -x "$venv/bin/python" ]]; then
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --upgrade pip
  "$venv/bin/python" -m pip install --quiet torch onnx onnxscript numpy
fi
