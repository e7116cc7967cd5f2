"""Where plain decoding spends its time: prefill and per-step cost, specdec next to onnxruntime-genai.

peers.py gives tokens/s over whole replies; this splits them. For each model it decodes the same
prompts greedily (a warm-up first) and reports the mean prefill (prompt + first token) and the
mean time per later token, in one process per model, all in one run:

- onnxruntime-genai's builder output (`append_tokens` is its prefill);
- a specdec bundle plainly, in its default layout (the exact layout pads every step to two rows
  for int8-compute bundles) and, with `--one-row`, with one-row steps too.

    .venv/bin/python benchmarks/step_profile.py GENAI_DIR BUNDLE [BUNDLE ...] [--one-row] [--threads 2]

e.g. with the models peers.py cached: benchmarks/results/cache/peers-realistic/genai-int4
benchmarks/results/cache/peers-realistic/cpu-int4 --one-row
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def _prompts(tokenizer_dir: Path, count: int) -> list[list[int]]:
    from specdec.pipeline.inputs.prompts import default_prompts_file, load_prompts
    from specdec.pipeline.inputs.text import TextCodec

    codec = TextCodec(tokenizer_dir)
    path = default_prompts_file()
    assert path is not None
    return [codec.encode(p.text or "") for p in load_prompts(path)[:count]]


def _genai(model: str, prompts: list[list[int]], tokens: int) -> list[tuple[float, float]]:
    import numpy as np
    import onnxruntime_genai as og

    loaded = og.Model(og.Config(model))

    def one(prompt: list[int]) -> tuple[float, float]:
        params = og.GeneratorParams(loaded)
        params.set_search_options(max_length=len(prompt) + tokens, min_length=len(prompt) + tokens, do_sample=False)
        generator = og.Generator(loaded, params)
        start = time.perf_counter()
        generator.append_tokens(np.array([prompt], np.int32))
        generator.generate_next_token()
        first = time.perf_counter()
        for _ in range(tokens - 1):
            generator.generate_next_token()
        return first - start, (time.perf_counter() - first) / (tokens - 1)

    one(prompts[0])
    return [one(p) for p in prompts]


def _specdec(bundle: str, prompts: list[list[int]], tokens: int, threads: int, one_row: bool
             ) -> list[tuple[float, float]]:
    from specdec.pipeline.bundle.store import Bundle
    from specdec.pipeline.generate.stage import GenerateConfig, Generator, generate_settings
    from specdec.pipeline.settings.decode_options import DecodeOptions
    from specdec.pipeline.settings.profiles import load_device

    loaded = Bundle.load(bundle)
    engine = Generator(loaded, threads=threads).engine
    engine.eos = set()  # every reply decodes `tokens` tokens
    request = GenerateConfig(threads=threads, decode=DecodeOptions(max_new_tokens=tokens, speculative=False,
                                                                   exact_layout=False if one_row else None))
    config = generate_settings(request, loaded, load_device("local-cpu"), None).config

    def one(prompt: list[int]) -> tuple[float, float]:
        reply = engine.generate(prompt, config)
        return reply.ttft_ns / 1e9, (reply.total_ns - reply.ttft_ns) / 1e9 / (tokens - 1)

    one(prompts[0])
    return [one(p) for p in prompts]


def worker(job: dict[str, Any]) -> list[tuple[float, float]]:
    if job["kind"] == "genai":
        return _genai(job["model"], job["prompts"], job["tokens"])
    return _specdec(job["model"], job["prompts"], job["tokens"], job["threads"], job["one_row"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("genai", type=Path, help="onnxruntime-genai model folder (its builder's output)")
    parser.add_argument("bundles", type=Path, nargs="+", help="specdec bundles of the same checkpoint")
    parser.add_argument("--one-row", action="store_true", help="also decode each bundle with one-row steps")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    from specdec.pipeline.bundle.store import Bundle

    ids = _prompts(Bundle.load(args.bundles[0]).tokenizer_dir, args.prompts)
    jobs: list[tuple[str, dict[str, Any]]] = [("onnxruntime-genai", {"kind": "genai", "model": str(args.genai)})]
    for bundle in args.bundles:
        jobs.append((f"specdec {bundle.name}", {"kind": "specdec", "model": str(bundle), "one_row": False}))
        if args.one_row:
            jobs.append((f"specdec {bundle.name}, one-row steps", {"kind": "specdec", "model": str(bundle),
                                                                   "one_row": True}))
    print("| model | prefill + first token ms | ms per later token | tok/s |\n|---|---|---|---|")
    for name, job in jobs:
        job.update({"prompts": ids, "tokens": args.tokens, "threads": args.threads})
        # a fresh process per model: no thread pool or allocator state carries over
        result = subprocess.run([sys.executable, __file__, "--worker", json.dumps(job)], capture_output=True,
                                text=True, check=False)
        if result.returncode != 0:
            print(f"| {name} | failed: {(result.stderr or result.stdout).strip().splitlines()[-1:]} | | |")
            continue
        timings = json.loads(result.stdout.strip().splitlines()[-1])
        first = sum(t[0] for t in timings) / len(timings)
        step = sum(t[1] for t in timings) / len(timings)
        rate = args.tokens * len(timings) / sum(t[0] + t[1] * (args.tokens - 1) for t in timings)
        print(f"| {name} | {first * 1e3:.1f} | {step * 1e3:.2f} | {rate:.1f} |", flush=True)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        print(json.dumps(worker(json.loads(sys.argv[2]))))
    else:
        main()
