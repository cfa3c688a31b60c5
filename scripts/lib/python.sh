# Sourced by scripts/ and bench/: sets DTC_PYTHON to the project's own
# interpreter (the venv scripts/setup.sh makes), never whatever python3 is
# first on PATH. One place names the venv: $DTC_VENV, default <repo>/.venv.
dtc_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DTC_VENV="${DTC_VENV:-$dtc_root/.venv}"
DTC_PYTHON="$DTC_VENV/bin/python"
if [ ! -x "$DTC_PYTHON" ]; then
  echo "error: $DTC_PYTHON not found; run scripts/setup.sh first" >&2
  exit 1
fi
export DTC_VENV DTC_PYTHON
