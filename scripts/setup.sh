#!/usr/bin/env bash
# Create .venv (if missing) and install ctrlrnn into it with what it needs.
# Sourced by scripts/run and scripts/test. Installs torch==2.13.0 (the CPU build) only when the
# environment has no torch yet, so an existing GPU build is never replaced. Each step prints
# how long it took; pip shows the torch download, the kernel build a clock per extension.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${CTRLRNN_VENV:-$root/.venv}"
setup_start=$SECONDS
step_start=$SECONDS
step_done() { echo "[setup] ... done in $((SECONDS - step_start)) s"; step_start=$SECONDS; }
if [ ! -x "$venv/bin/python" ]; then
  echo "[setup] creating virtual environment $venv"
  python3 -m venv "$venv"
  step_done
fi
py="$venv/bin/python"
if ! "$py" -c "import torch" >/dev/null 2>&1; then
  echo "[setup] installing torch==2.13.0 (the largest download of the set-up)"
  "$py" -m pip install --disable-pip-version-check --progress-bar on "torch==2.13.0"
  step_done
fi
extras="${1:-}"
stamp="$venv/.ctrlrnn-installed$extras"
if [ ! -f "$stamp" ] || [ "$root/pyproject.toml" -nt "$stamp" ]; then
  echo "[setup] installing ctrlrnn${extras} (editable) and its dependencies"
  "$py" -m pip install -q --disable-pip-version-check -e "$root$extras"
  touch "$stamp"
  step_done
fi
echo "[setup] the compiled CPU kernels (compiled once, a few minutes; then cached)"
CTRLRNN_REQUIRE_COMPILED=1 "$py" -m ctrlrnn build
step_done
echo "[setup] ready in $((SECONDS - setup_start)) s; the ctrlrnn command is $venv/bin/ctrlrnn" \
  "(or: source $venv/bin/activate)"
