#!/usr/bin/env bash
# Install the peers benchmarks/peers.py compares against (optional; the benchmark says what is missing):
# onnxruntime-genai into .venv (the `peers` extra), and optimum-onnx into its own .venv-optimum,
# because optimum-onnx pins transformers < 4.58 while specdec needs transformers 5.
# Then: .venv/bin/python benchmarks/peers.py --optimum-python .venv-optimum/bin/python
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh" dev
VENV="${SPECDEC_VENV:-$ROOT/.venv}"
"$VENV/bin/pip" install --quiet -e "$ROOT[dev,peers]"
OPT="${SPECDEC_OPTIMUM_VENV:-$ROOT/.venv-optimum}"
if [ ! -x "$OPT/bin/python" ]; then
  "${PYTHON:-python3}" -m venv "$OPT"
  "$OPT/bin/pip" install --quiet --upgrade pip
fi
# torch first: a looser requirement with no torch installed pulls a multi-GB CUDA build
"$OPT/bin/pip" install --quiet "torch==2.13.0"
"$OPT/bin/pip" install --quiet "optimum-onnx[onnxruntime]"
echo "peers ready: onnxruntime-genai in $VENV, optimum-onnx in $OPT"
