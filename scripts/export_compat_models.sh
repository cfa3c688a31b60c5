#!/usr/bin/env bash
# Regenerates test/models/compat/ (the exporter compatibility matrix) with
# the newest PyPI releases of torch, transformers, onnx, onnxscript,
# onnxruntime and numpy, installed into their own venv at .venv-export/.
#
#     scripts/export_compat_models.sh                 # every row
#     scripts/export_compat_models.sh gpt2 llama      # a subset (see --help)
#
# Arguments are passed through to scripts/export_compat_models.py, then the
# row names to scripts/compat_oracle.py (the rows' PyTorch references). The venv
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
"$venv/bin/python" scripts/export_compat_models.py "$@"
# The exported rows' PyTorch references (scripts/compat_oracle.py: what
# test/compat/oracle_row.sh compares dtc's two training steps with), for
# the same rows; not for --list or --import-only, which export nothing.
names=()
for arg in "$@"; do
    case "$arg" in
        --list|--import-only|-h|--help) exit 0 ;;
        -*) ;;
        *) names+=("$arg") ;;
    esac
done
exec "$venv/bin/python" scripts/compat_oracle.py "${names[@]}"
