"""The draft's confidence gate, measured: plain, lookup, the draft's chains and model+lookup, with and without a gate.

One interleaved run over chat requests (the demo's prompt file through the bundle's chat template,
by default its requests 9-16: bench's default takes the first 8, tune the last ones): each pass
decodes every configuration once, in alternating order, and its speed is divided by the same
pass's plain speed, since a shared VM's speed drifts between passes. Reports the median and the
range of those ratios, tokens / verified rows / draft calls a round, and outputs against plain.

    .venv/bin/python benchmarks/draft_gate.py BUNDLE [--gate 0.3] [--depth 4] [--passes 7] [--first 8 --count 8]

BUNDLE: a compiled bundle with a draft graph (e.g. real_peers.py's `specdec` w8a8 bundle of the
SmolLM2 feature draft, under benchmarks/results/cache/real-peers/).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path
from typing import Any

from common import planned_engine

from specdec.pipeline.inputs.prompts import default_chat_requests, load_prompts, prompt_tokens
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind


def configurations(base: DecodeConfig, gate: float, depth: int) -> list[tuple[str, DecodeConfig]]:
    chain: dict[str, Any] = {"drafter": DrafterKind.model, "depth": depth, "width": 1, "tree_budget": depth + 1}
    mixed: dict[str, Any] = {"drafter": DrafterKind.model_lookup, "depth": depth, "width": 1,
                             "tree_budget": max(base.tree_budget, depth + 1)}
    return [("plain", dataclasses.replace(base, speculative=False)), ("the bundle's plan", base),
            (f"chain of {depth}", dataclasses.replace(base, **chain, draft_min_prob=0.0)),
            (f"chain of {depth}, gate {gate:g}", dataclasses.replace(base, **chain, draft_min_prob=gate)),
            (f"chain of {depth} + lookup", dataclasses.replace(base, **mixed, draft_min_prob=0.0)),
            (f"chain of {depth} + lookup, gate {gate:g}", dataclasses.replace(base, **mixed, draft_min_prob=gate))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--gate", type=float, default=0.3)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--passes", type=int, default=7)
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts-file", type=Path, default=None,
                        help="JSONL prompts (default: the demo's chat requests)")
    parser.add_argument("--first", type=int, default=8, help="index of the first prompt used")
    parser.add_argument("--count", type=int, default=8)
    args = parser.parse_args()
    engine, base = planned_engine(args.bundle, args.threads, args.tokens)
    source = args.prompts_file or default_chat_requests()
    if source is None:
        parser.error("no prompts file: pass --prompts-file")
    codec = TextCodec(args.bundle / "tokenizer")
    items = load_prompts(source)[args.first:args.first + args.count]
    prompts = [prompt_tokens(item, codec, chat=True) for item in items]
    configs = configurations(base, args.gate, args.depth)
    for _, config in configs:  # warm-up: first calls allocate and pick kernels
        engine.generate(prompts[0], config)
    rates: dict[str, list[float]] = {label: [] for label, _ in configs}
    shape: dict[str, tuple[float, float, float]] = {}
    outputs: dict[str, list[list[int]]] = {}
    for number in range(args.passes):
        for label, config in configs[:: 1 if number % 2 == 0 else -1]:
            produced = rounds = tokens = rows = calls = 0
            replies = []
            began = time.perf_counter()
            for prompt in prompts:
                reply = engine.generate(prompt, config)
                replies.append(reply.output_ids)
                produced += len(reply.output_ids)
                rounds += len(reply.rounds)
                tokens += sum(r.accepted_len for r in reply.rounds)
                rows += sum(r.tree_size for r in reply.rounds)
                calls += sum(r.draft_calls for r in reply.rounds)
            rates[label].append(produced / (time.perf_counter() - began))
            shape[label] = (tokens / rounds, rows / rounds, calls / rounds)
            outputs.setdefault(label, replies)
            print(f"[{number + 1}/{args.passes}] {label}: {rates[label][-1]:.1f} tok/s", flush=True)
    plain = rates["plain"]
    print(f"\n{len(prompts)} prompts x {args.tokens} tokens, {args.threads} threads, {args.passes} passes; plan: "
          f"{json.dumps({k: getattr(base, k) for k in ('drafter', 'tree_budget', 'depth', 'width')}, default=str)}")
    print("| decoding | tok/s (median) | x plain (median of per-pass ratios; range) | tokens a round | rows a round "
          "| draft calls a round | = plain |\n|---|---|---|---|---|---|---|")
    for label, _ in configs:
        ratios = [rate / base_rate for rate, base_rate in zip(rates[label], plain, strict=True)]
        per_round_tokens, per_round_rows, per_round_calls = shape[label]
        same = sum(a == b for a, b in zip(outputs[label], outputs["plain"], strict=True))
        print(f"| {label} | {statistics.median(rates[label]):.1f} | {statistics.median(ratios):.2f} "
              f"({min(ratios):.2f}-{max(ratios):.2f}) | {per_round_tokens:.2f} | {per_round_rows:.2f} | "
              f"{per_round_calls:.2f} | "
              f"{same}/{len(prompts)} |")


if __name__ == "__main__":
    main()
