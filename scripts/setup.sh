#!/usr/bin/env bash
# Create .venv (if missing) and install ctrlrnn into it with what it needs.
# Sourced by scripts/run and scripts/test. Installs torch==2.13.0 (the CPU build) only when the
# environment has no torch yet, so an existing GPU build is never replaced.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${CTRLRNN_VENV:-$root/.venv}"
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating virtual environment $venv"
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
pip_q=(-q --disable-pip-version-check)
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  echo "[setup] installing torch==2.13.0"
  "$py" -m pip install "${pip_q[@]}" "torch==2.13.0"
fi
extras="${1:-}"
stamp="$venv/.ctrlrnn-installed$extras"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "[setup] installing ctrlrnn${extras} (editable)"
  "$py" -m pip install "${pip_q[@]}" -e "$root$extras"
  touch "$stamp"
fi
echo "[setup] building the compiled CPU kernels (cached after the first time)"
CTRLRNN_REQUIRE_COMPILED=1 "$py" -m ctrlrnn build
