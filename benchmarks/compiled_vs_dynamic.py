"""Per-round latency of the compiled flavours vs the dynamic bundle, plain and speculative, in one run.

Bundles of the demo pair, all from the same surgered bundle: dynamic (the export's graphs, the
KV cache grows per call), npu (static variants per query bucket × context bucket over a fixed KV
buffer of `--max-context` slots), npu with one context bucket (every variant spans the whole
buffer: the npu flavour before context buckets) and cpu (fused contrib ops, KV in place).
Prompts of `--prompt-tokens` tokens (the demo prompts joined and cut), greedy decoding. Each
bundle's speculative output must equal its plain output; whether a flavour's tokens equal the
dynamic bundle's is reported. The target: npu per-round time <= 1.15x dynamic.

    .venv/bin/python benchmarks/compiled_vs_dynamic.py [--tokens 64 --prompts 8 --prompt-tokens 100 \
        --max-context 512 --context-buckets 128,256,512 --json results/compiled_vs_dynamic.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from common import CACHE, cached, demo_bundle, prompts

from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle


def long_prompts(codec: TextCodec, count: int, length: int) -> list[list[int]]:
    """`count` prompts of exactly `length` tokens: prompt i, then the next ones, until long enough."""
    texts = prompts(max(count, 8))
    out = []
    for i in range(count):
        ids: list[int] = []
        for j in range(len(texts)):
            ids += codec.encode(texts[(i + j) % len(texts)] + "\n")
            if len(ids) >= length:
                break
        out.append(ids[:length])
    return out


def measure(engines: dict[str, Engine], ids: list[list[int]], tokens: int, speculative: bool
            ) -> tuple[dict[str, list[list[int]]], dict[str, dict[str, Any]]]:
    """Every engine on every prompt, interleaved prompt by prompt, so load drifting on a shared
    machine falls on all flavours alike."""
    config = DecodeConfig(max_new_tokens=tokens, speculative=speculative)
    for engine in engines.values():
        engine.generate(ids[0], config)  # warm: sessions of the buckets this reply shape uses
    rounds: dict[str, list[float]] = {name: [] for name in engines}
    outputs: dict[str, list[list[int]]] = {name: [] for name in engines}
    seconds = dict.fromkeys(engines, 0.0)
    waste = dict.fromkeys(engines, 0)
    for prompt in ids:
        for name, engine in engines.items():
            before = getattr(engine.target, "padding_waste", 0)
            reply = engine.generate(prompt, config)
            waste[name] += getattr(engine.target, "padding_waste", 0) - before
            rounds[name] += [r.total_ns / 1e6 for r in reply.rounds]
            outputs[name].append(reply.output_ids)
            seconds[name] += reply.total_ns / 1e9
    rows = {}
    for name, ms in rounds.items():
        rows[name] = {"round_ms_p50": round(statistics.median(ms), 3), "round_ms_mean": round(statistics.fmean(ms), 3),
                      "tokens_per_s": round(sum(len(o) for o in outputs[name]) / seconds[name], 2),
                      "rounds": len(ms), "target_padded_rows": waste[name]}
    return outputs, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=100)
    parser.add_argument("--max-context", type=int, default=512)
    parser.add_argument("--context-buckets", default="128,256,512")
    # the profile's query buckets (8,24,48,96) plus the default tree budget of 16, so a tree fits
    # a bucket without padding; pass the profile's own to see what padding 16 -> 24 rows costs
    parser.add_argument("--buckets", default="8,16,24,48,96", help="npu target query buckets")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args()
    contexts = tuple(int(c) for c in args.context_buckets.split(","))
    buckets = tuple(int(b) for b in args.buckets.split(","))
    surgery_out = CACHE / "demo-surgery"
    surgered = cached(surgery_out, lambda: surgery_bundle(SurgeryConfig(output=surgery_out), demo_bundle()))
    npu = {"target": GraphFlavour.npu, "format": OutputFormat.onnx, "max_context": args.max_context,
           "buckets": buckets}
    configs: dict[str, dict[str, Any]] = {
        "npu": {**npu, "context_buckets": contexts},
        "npu_one_context": {**npu, "context_buckets": (args.max_context,)},
        "cpu": {"target": GraphFlavour.cpu, "format": OutputFormat.onnx, "max_context": args.max_context},
    }
    paths = {"dynamic": surgered.path}
    for name, options in configs.items():
        tag = "-".join(str(c) for c in options.get("context_buckets", ())) + "-q" + "-".join(map(str, buckets))
        out = CACHE / (f"demo-{name}-{args.max_context}-{tag}" if name != "cpu" else f"demo-cpu-{args.max_context}")
        config = CompileConfig(output=out, **options)
        paths[name] = cached(out, lambda config=config: compile_bundle(config, surgered)).path  # type: ignore[misc]
    engines = {name: Engine(path) for name, path in paths.items()}
    ids = long_prompts(TextCodec(engines["dynamic"].info.tokenizer_dir), args.prompts, args.prompt_tokens)
    report: dict[str, Any] = {"prompt_tokens": args.prompt_tokens, "new_tokens": args.tokens,
                              "max_context": args.max_context, "context_buckets": list(contexts),
                              "buckets": list(buckets)}
    outputs: dict[str, dict[str, list[list[int]]]] = {name: {} for name in engines}
    for speculative in (False, True):
        mode = "speculative" if speculative else "plain"
        replies, rows = measure(engines, ids, args.tokens, speculative)
        for name, replied in replies.items():
            outputs[name][mode] = replied
        base = rows["dynamic"]["round_ms_mean"]
        for row in rows.values():
            row["round_time_vs_dynamic"] = round(row["round_ms_mean"] / base, 3)
        report[mode] = rows
    for name, modes in outputs.items():
        assert modes["plain"] == modes["speculative"], f"{name}: speculative output differs from plain"
        report.setdefault("same_tokens_as_dynamic", {})[name] = modes["plain"] == outputs["dynamic"]["plain"]
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")


if __name__ == "__main__":
    main()
