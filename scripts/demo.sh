#!/usr/bin/env bash
# The main job of the README: set up .venv and run the built-in demo pair end to end on this machine.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh"
VENV="${SPECDEC_VENV:-$ROOT/.venv}"
OUT="${SPECDEC_OUT:-$ROOT/specdec-out}"
"$VENV/bin/specdec" export demo -o "$OUT/export" --force
"$VENV/bin/specdec" generate "$OUT/export" --prompt "def fibonacci(n):" -n 48 --stats
