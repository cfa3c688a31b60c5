#!/usr/bin/env bash
# Regenerates test/models/compat/ (the exporter compatibility matrix) with
# the newest PyPI releases of torch, transformers, onnx, onnxscript,
# onnxruntime and numpy, installed into their own venv at .venv-export/.
#
#     scripts/export_compat_models.sh                 # every row
#     scripts/export_compat_models.sh gpt2 llama      # a subset (see --help)
#
# Arguments are passed through to scripts/export_compat_models.py. The venv
# is created once (from /usr/bin/python3, not the python3 first on PATH) and
# upgraded to the newest releases on every run; set DTC_EXPORT_NO_UPGRADE=1
# to reuse it as it is.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv-export"
packages=(torch transformers onnx onnxscript onnxruntime numpy)

if [[ ! -x "$venv/bin/python" ]]; then
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --upgrade pip
    "$venv/bin/python" -m pip install "${packages[@]}"
elif [[ "${DTC_EXPORT_NO_UPGRADE:-0}" != 1 ]]; then
    "$venv/bin/python" -m pip install --upgrade "${packages[@]}"
fi

cd "$root"
exec "$venv/bin/python" scripts/export_compat_models.py "$@"
