"""The planned tree against a grid of fixed trees, measured in one run on this machine.

`specdec tune` measures the cost curve and the acceptance and picks a tree; this script checks the
pick by brute force: it decodes the same prompts with every fixed tree of a grid (budgets 2…32 ×
depths 1…8, frontier width from the plan) and with plain decoding, and reports the planned tree's
tokens/s as a fraction of the grid's best, plus predicted vs measured speedup for the plan.

    .venv/bin/python benchmarks/tree_planner.py [--bundle PATH | --target realistic|demo] [--threads 2]

With no --bundle the realistic (or demo) pair is exported, surgered and compiled to the cpu flavour.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

from common import CACHE, cached, demo_bundle, prompts, realistic_bundle

from specdec.pipeline.bench.tune import TuneConfig, tune_bundle
from specdec.pipeline.bundle import Bundle
from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.runtime.config import DecodeConfig
from specdec.pipeline.runtime.engine import Engine
from specdec.pipeline.runtime.graph import SessionOptions
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle
from specdec.pipeline.text import TextCodec

BUDGETS = (2, 3, 4, 6, 8, 12, 16, 24, 32)
DEPTHS = (1, 2, 3, 4, 6, 8)


def cpu_bundle(name: str, source: Bundle) -> Bundle:
    surgered = cached(CACHE / f"{name}-surgery", lambda: surgery_bundle(SurgeryConfig(output=CACHE / f"{name}-surgery"),
                                                                        source))
    out = CACHE / f"{name}-cpu"
    return cached(out, lambda: compile_bundle(CompileConfig(output=out, target=GraphFlavour.cpu,
                                                            format=OutputFormat.onnx), surgered))


def tokens_per_s(engine: Engine, ids: list[list[int]], config: DecodeConfig, repeats: int) -> tuple[float, list[Any]]:
    engine.generate(ids[0], config)
    rates, outputs = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = [engine.generate(p, config).output_ids for p in ids]
        rates.append(sum(len(o) for o in outputs) / (time.perf_counter() - start))
    return statistics.median(rates), outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, default=None)
    parser.add_argument("--target", choices=("realistic", "demo"), default="realistic")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "tree_planner.json")
    args = parser.parse_args()
    source = Bundle.load(args.bundle) if args.bundle else cpu_bundle(
        args.target, realistic_bundle() if args.target == "realistic" else demo_bundle())
    _, plan = tune_bundle(TuneConfig(output=CACHE / f"tree-planner-tuned-t{args.threads}", threads=args.threads,
                                         force=True), source)
    engine = Engine(source.path, SessionOptions(threads=args.threads))
    engine.eos = set()  # every run decodes the same number of tokens
    codec = TextCodec(engine.info.tokenizer_dir)
    ids = [codec.encode(text) for text in prompts(args.prompts)]
    plain, plain_out = tokens_per_s(engine, ids, DecodeConfig(max_new_tokens=args.tokens, speculative=False,
                                                              exact_layout=plan.exact_layout), args.repeats)
    width = max(plan.choice.width, 1)
    grid: dict[str, float] = {}
    for budget in BUDGETS:
        for depth in DEPTHS:
            if depth >= budget or (plan.exact_layout and budget != depth + 1):
                continue  # a tree of depth d needs d + 1 nodes; the exact layout runs chains only
            config = DecodeConfig(max_new_tokens=args.tokens, tree_budget=budget, depth=depth, width=width,
                                  exact_layout=plan.exact_layout)
            rate, outputs = tokens_per_s(engine, ids, config, args.repeats)
            assert outputs == plain_out, f"lossless check failed for {budget}/{depth}"
            grid[f"{budget}/{depth}"] = rate
            print(f"budget {budget:2d} depth {depth}: {rate:7.1f} tok/s (x{rate / plain:.2f})", flush=True)
    choice = plan.choice
    if choice.speculative:
        planned_config = DecodeConfig(max_new_tokens=args.tokens, tree_budget=choice.budget, depth=choice.depth,
                                      width=choice.width, exact_layout=plan.exact_layout)
        planned, _ = tokens_per_s(engine, ids, planned_config, args.repeats)
    else:
        planned = plain
    best_key = max(grid, key=grid.__getitem__)
    best = max(grid[best_key], plain)
    summary = {"plain_tok_s": plain, "planned": {"budget": choice.budget, "depth": choice.depth, "width": choice.width,
                                                 "tok_s": planned, "predicted_speedup": choice.predicted_speedup,
                                                 "measured_speedup": planned / plain},
               "grid_best": {"tree": best_key, "tok_s": grid[best_key], "speedup": grid[best_key] / plain},
               "planned_vs_best": planned / best, "grid": grid, "threads": args.threads, "bundle": str(source.path)}
    print(json.dumps({k: v for k, v in summary.items() if k != "grid"}, indent=1))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
