#!/usr/bin/env bash
# The README's main job: set up .venv, then run the built-in demo pair through
# export -> surgery -> quantize -> compile -> bench on this machine (`specdec pipeline`).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh"
VENV="${SPECDEC_VENV:-$ROOT/.venv}"
"$VENV/bin/specdec" pipeline --out "${SPECDEC_OUT:-$ROOT/specdec-out}" "$@"
