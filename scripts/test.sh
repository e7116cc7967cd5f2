#!/usr/bin/env bash
# The test command of the README and of CI: set up .venv, then lint, type-check and test.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh" dev
VENV="${SPECDEC_VENV:-$ROOT/.venv}"
if ! command -v adb >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq adb) >/dev/null || echo "warning: could not install adb; adb tests will be skipped"
  else
    echo "warning: adb not found (apt-get install adb); adb tests will be skipped"
  fi
fi
cd "$ROOT"
"$VENV/bin/ruff" check .
"$VENV/bin/mypy"
"$VENV/bin/pytest" -q "$@"
