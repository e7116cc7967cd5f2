"""KV cache policies side by side: the full cache vs `window` (sinks + last W), in one run.

The bundle (the demo pair by default, surgered) is compiled at the same max context for the cpu
flavour with `--kv-cache full`, `--kv-cache window --kv-sinks S --kv-window W`, `--kv-dtype int8`
and `--kv-dtype float16`, and for the npu flavour with the same window (its ring of slots). Then,
in this one process, for each prompt:

- under the window policy, on both flavours, plain and speculative greedy decoding of `--tokens`
  new tokens (past the context: 4x a 512-slot context by default), compared token for token, with
  tokens/s, the KV bytes the runners hold at the end and the process's peak RSS per reply
  (engine/memory.py); and the two flavours' plain replies compared;
- the per-step cost of the cpu policies: plain decoding of the same reply inside the context (the
  full cache's limit), ms per token, rotating which goes first;
- int8 and float16 KV rows (full cache): speculative against plain inside the context, their
  per-step cost and bytes next to the float cache's;
- the quality reports from compile (greedy mismatch rate against the full cache and perplexity
  delta, teacher-forced on calibration text).

    .venv/bin/python benchmarks/kv_cache.py [--max-context 512 --sinks 4 --window 256 --tokens 2048]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from common import CACHE, cached, demo_bundle, prompts

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.graph import SessionOptions
from specdec.pipeline.engine.memory import peak_rss_kb, reset_peak
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.records.kv_policy import KVCache, KVDtype
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle


def _compiled(source: Bundle, name: str, max_context: int, kv_cache: KVCache | None = None,
              sinks: int | None = None, window: int | None = None, dtype: KVDtype | None = None,
              flavour: GraphFlavour = GraphFlavour.cpu) -> Bundle:
    out = CACHE / f"kv-{name}-{max_context}"
    config = CompileConfig(output=out, target=flavour, max_context=max_context, format=OutputFormat.onnx,
                           kv_cache=kv_cache, kv_sinks=sinks, kv_window=window, kv_dtype=dtype)
    return cached(out, lambda: compile_bundle(config, source))


def _engine(bundle: Bundle, threads: int) -> Engine:
    engine = Engine(bundle.path, SessionOptions(threads=threads))
    engine.eos = set()  # decode the whole length: the point is replies past the context
    return engine


def _reply(engine: Engine, prompt: list[int], config: DecodeConfig) -> dict[str, Any]:
    reset_peak()
    start = time.perf_counter()
    reply = engine.generate(prompt, config)
    seconds = time.perf_counter() - start
    runners = [engine.target] + ([engine.drafter.runner] if engine.drafter else [])
    return {"ids": reply.output_ids, "tokens": len(reply.output_ids), "tokens_per_s": len(reply.output_ids) / seconds,
            "stop": reply.stop_reason, "kv_bytes": sum(r.kv_bytes for r in runners),
            "peak_rss_mb": (peak_rss_kb() or 0) / 1024, "mean_accepted_len": reply.mean_accepted_len}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, help="an uncompiled bundle (default: the demo pair, surgered)")
    parser.add_argument("--max-context", type=int, default=512)
    parser.add_argument("--sinks", type=int, default=4)
    parser.add_argument("--window", type=int, default=256)
    parser.add_argument("--tokens", type=int, default=2048, help="new tokens per window-policy reply")
    parser.add_argument("--step-tokens", type=int, default=400, help="new tokens per reply of the step-cost runs")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.bundle is not None:
        source = Bundle.load(args.bundle)
    else:
        exported = demo_bundle()
        out = CACHE / "demo-surgery"
        source = cached(out, lambda: surgery_bundle(SurgeryConfig(output=out), exported))
    full = _compiled(source, "full", args.max_context)
    window = _compiled(source, f"window-s{args.sinks}-w{args.window}", args.max_context, KVCache.window,
                       args.sinks, args.window)
    int8 = _compiled(source, "int8", args.max_context, dtype=KVDtype.int8)
    half = _compiled(source, "float16", args.max_context, dtype=KVDtype.float16)
    ring = _compiled(source, f"npu-window-s{args.sinks}-w{args.window}", args.max_context, KVCache.window,
                     args.sinks, args.window, flavour=GraphFlavour.npu)
    codec = TextCodec(source.path / source.manifest.tokenizer.dir)
    texts = [codec.encode(text)[: args.max_context // 4] for text in prompts(args.prompts)]
    engines = {"full": _engine(full, args.threads), "window": _engine(window, args.threads),
               "int8": _engine(int8, args.threads), "float16": _engine(half, args.threads),
               "npu_window": _engine(ring, args.threads)}
    report: dict[str, Any] = {"bundle": str(source.path), "max_context": args.max_context, "sinks": args.sinks,
                              "window": args.window, "tokens": args.tokens,
                              "kv_quality": {name: dump(bundle.manifest.reports)["compile"]["kv_quality"]
                                             for name, bundle in (("window", window), ("int8", int8),
                                                                  ("float16", half), ("npu_window", ring))}}
    for name in ("window", "npu_window"):
        long_replies = []
        for prompt in texts:
            plain = _reply(engines[name], prompt, DecodeConfig(max_new_tokens=args.tokens, speculative=False))
            spec = _reply(engines[name], prompt, DecodeConfig(max_new_tokens=args.tokens))
            ids = plain.pop("ids")
            long_replies.append({"prompt_tokens": len(prompt), "equal": ids == spec.pop("ids"),
                                 "plain": plain, "speculative": spec, "ids": ids})
        report[f"{name}_past_context"] = long_replies
    report["flavours_agree"] = [a.pop("ids") == b.pop("ids") for a, b in zip(report["window_past_context"],
                                                                              report["npu_window_past_context"],
                                                                              strict=True)]
    for name in ("int8", "float16"):  # rows in another dtype, inside the context: speculative against plain
        equal = []
        for prompt in texts:
            config = DecodeConfig(max_new_tokens=args.step_tokens, speculative=False)
            plain_ids = engines[name].generate(prompt, config).output_ids
            spec_ids = engines[name].generate(prompt, DecodeConfig(max_new_tokens=args.step_tokens)).output_ids
            equal.append(plain_ids == spec_ids)
        report[f"{name}_speculative_equals_plain"] = equal
    names = ("full", "window", "int8", "float16")
    steps: dict[str, list[float]] = {name: [] for name in names}
    held: dict[str, int] = {}
    for index, prompt in enumerate(texts * 2):
        order = names[index % len(names):] + names[: index % len(names)]  # rotate who goes first
        for name in order:
            config = DecodeConfig(max_new_tokens=args.step_tokens, speculative=False)
            reply = _reply(engines[name], prompt, config)
            steps[name].append(1000 / reply["tokens_per_s"])
            held[name] = reply["kv_bytes"]
    report["plain_ms_per_token"] = {name: sum(v) / len(v) for name, v in steps.items()}
    report["kv_bytes_held"] = held
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
