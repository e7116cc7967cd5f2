"""Where a reply's time goes: prefill, then per round the stages the engine clocks, plain and speculative.

peers.py and step_profile.py give tokens/s and per-token time; this splits a speculative round
into the slices `specdec bench` traces (draft forward, pruning and tree building, target verify,
accept, KV commit, prompt lookup) and what is left (host glue), next to plain decoding of the same
bundle, with the settings `specdec generate` resolves (the bundle's plan for this machine).

    .venv/bin/python benchmarks/round_profile.py BUNDLE [--threads 2] [--prompts 8] [--tokens 64] [--repeats 2]

e.g. benchmarks/results/cache/peers-realistic/tuned-cpu-int4-fb4-t2 (built by peers.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections import Counter
from pathlib import Path

from common import planned_engine
from common import prompts as prompt_texts

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.stats import STAGES
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.records.decode import DecodeConfig


def profile(engine: Engine, prompts: list[list[int]], config: DecodeConfig, label: str) -> None:
    stage_ns: Counter[str] = Counter()
    rounds = tokens = wall_ns = prefill_ns = produced = 0
    start = time.perf_counter()
    for prompt in prompts:
        reply = engine.generate(prompt, config)
        produced += len(reply.output_ids)
        prefill_ns += reply.prefill_ns
        for stats in reply.rounds:
            rounds += 1
            tokens += stats.accepted_len
            wall_ns += stats.wall_ns
            for stage in STAGES:
                stage_ns[stage] += stats.stage_ns(stage)
    elapsed = time.perf_counter() - start
    print(f"{label}: {produced / elapsed:.1f} tok/s; prefill {prefill_ns / 1e6:.0f} of "
          f"{elapsed * 1e3:.0f} ms; {rounds} rounds, {tokens / max(rounds, 1):.2f} tokens/round")
    per_round = max(rounds, 1) * 1e3  # ns -> us per round
    slices = " ".join(f"{stage}={ns / per_round:.0f}" for stage, ns in stage_ns.items() if ns)
    host = (wall_ns - sum(stage_ns.values())) / per_round
    print(f"  per round (us): wall {wall_ns / per_round:.0f}; {slices}; rest (host) {host:.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    engine, speculative = planned_engine(args.bundle, args.threads, args.tokens)
    engine.eos = set()  # exactly --tokens per reply, as peers.py
    plain = dataclasses.replace(speculative, speculative=False)
    print(f"plan: speculative {speculative.speculative}, drafter {speculative.drafter.value}, "
          f"budget {speculative.tree_budget}, depth {speculative.depth}, width {speculative.width}, "
          f"exact layout {speculative.exact_layout}")
    codec = TextCodec(args.bundle / "tokenizer")
    room = engine.max_context - args.tokens - 1  # keep the end of prompts the context cannot hold, as bench does
    prompts = [codec.encode(text)[-room:] for text in prompt_texts(args.prompts)]
    engine.generate(prompts[0], speculative)  # warm-up: first calls allocate and pick kernels
    engine.generate(prompts[0], plain)
    for repeat in range(args.repeats):  # alternate so drift hits both alike
        for label, config in (("plain", plain), ("speculative", speculative))[:: 1 if repeat % 2 == 0 else -1]:
            profile(engine, prompts, config, f"[{repeat + 1}/{args.repeats}] {label}")


if __name__ == "__main__":
    main()
