#!/usr/bin/env bash
# The test command of the README and of CI: set up .venv, then lint, type-check and test.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh" dev
VENV="${SPECDEC_VENV:-$ROOT/.venv}"
# adb and the stand-in phone's Android userland (mksh + toybox) and arm64 emulator (qemu-user);
# the keyring lets apt check the Debian packages the portable runtime is built from.
missing=()
command -v adb >/dev/null 2>&1 || missing+=(adb)
command -v mksh >/dev/null 2>&1 || missing+=(mksh)
command -v toybox >/dev/null 2>&1 || missing+=(toybox)
command -v qemu-aarch64 >/dev/null 2>&1 || missing+=(qemu-user)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || missing+=(debian-archive-keyring)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    (apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}") >/dev/null \
      || echo "warning: could not install ${missing[*]}; the tests that need them will be skipped"
  else
    echo "warning: ${missing[*]} not found (apt-get install ${missing[*]}); the tests that need them will be skipped"
  fi
fi
cd "$ROOT"
"$VENV/bin/ruff" check .
"$VENV/bin/mypy"
# Two workers (pytest-xdist), each module on one worker so its fixtures are built once: the suite is
# mostly single-threaded work (subprocess CLIs, the emulated phone, small graphs), 1.5x faster on
# CI's 2 cores. SPECDEC_TEST_WORKERS=0 runs it in one process; arguments go to pytest after these.
"$VENV/bin/pytest" -q -n "${SPECDEC_TEST_WORKERS:-2}" --dist loadfile "$@"
