"""Draft model vs prompt lookup vs both, on the demo pair and the compute-realistic target, in one run.

For each bundle, plain decoding and the three drafters (`--drafter model | lookup | model+lookup`)
decode the same prompts greedily, interleaved per prompt with the order rotating, in one process,
each drafter twice: with the fixed tree (`--tree-budget/--depth/--width`, the defaults 16/6/4)
and with the tree `specdec tune` plans for that drafter on this machine (held-out calibration
prompts); a last row, `auto`, is what the planner picks across drafters (what `bench` runs).
Reported per drafter: tokens/s, the speedup over plain decoding measured in the same run, mean
accepted length per speculative round, acceptance by source (accepted / proposed tree nodes of the
draft model and of prompt lookup), the host time of prompt lookup per round (the `Lookup` slices),
and whether every output equals plain decoding's (lossless).

Bundles: the demo pair (`specdec export demo`) and the compute-realistic target grown from it
(benchmarks/realistic.py, exported once, about 2 minutes) with the demo draft, both cached in
benchmarks/results/cache; `--bundle PATH` adds any other bundle (compiled ones too).

    .venv/bin/python benchmarks/drafters.py [--tokens 64 --prompts 8 --repeats 1 --skip-realistic]
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from common import demo_bundle, prompts, realistic_bundle

from specdec.pipeline.engine.drafter import DRAFTER_NAMES
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.graph import SessionOptions
from specdec.pipeline.engine.stats import LOOKUP, SOURCES, Reply
from specdec.pipeline.engine.tune.measure import TuneSettings, apply_choice, tune
from specdec.pipeline.inputs.prompts import CALIBRATION_PROMPTS
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind

PLAIN = "plain"


@dataclass
class Tally:
    seconds: float = 0.0
    tokens: int = 0
    rounds: int = 0
    lookup_ns: int = 0
    accepted_len: list[float] = field(default_factory=list)
    proposed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    accepted: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    outputs: list[list[int]] = field(default_factory=list)

    def add(self, reply: Reply) -> None:
        self.seconds += reply.total_ns / 1e9
        self.tokens += len(reply.output_ids)
        self.rounds += len(reply.rounds)
        self.lookup_ns += sum(r.stage_ns(LOOKUP) for r in reply.rounds)
        if reply.speculative_rounds:
            self.accepted_len.append(reply.mean_accepted_len)
        for source, counts in reply.by_source().items():
            self.proposed[source] += counts["proposed"]
            self.accepted[source] += counts["accepted"]
        self.outputs.append(reply.output_ids)


def tuned_configs(engine: Engine, calibration: list[list[int]], drafters: list[str],
                  base: DecodeConfig) -> dict[str, DecodeConfig]:
    """`{drafter} tuned` per drafter and `auto`: the planner's trees on this machine."""
    configs = {}
    for drafter in [*drafters, "auto"]:
        only = tuple(DrafterKind) if drafter == "auto" else (DrafterKind(drafter),)
        plan = tune(engine, calibration, base, TuneSettings(drafters=only)).plan
        c = plan.choice
        print(f"plan {drafter}: {c.drafter} budget {c.budget} depth {c.depth} width {c.width} "
              f"n-grams {c.lookup_ngrams} predicted {c.predicted_speedup}x", flush=True)
        configs[drafter if drafter == "auto" else f"{drafter} tuned"] = apply_choice(base, c)
    return configs


def measure(name: str, path: Path, texts: list[str], calib: list[str],
            args: argparse.Namespace) -> list[dict[str, object]]:
    engine = Engine(path, SessionOptions(threads=args.threads))
    has_draft = engine.drafter is not None
    drafters = [d for d in DRAFTER_NAMES if has_draft or d == "lookup"]
    codec = TextCodec(engine.info.tokenizer_dir)
    ids = [codec.encode(text) for text in texts]
    tree = {"tree_budget": args.tree_budget, "depth": args.depth, "width": args.width}
    configs = {PLAIN: DecodeConfig(max_new_tokens=args.tokens, speculative=False)}
    configs |= {d: DecodeConfig(max_new_tokens=args.tokens, drafter=d, **tree) for d in drafters}  # type: ignore[arg-type]
    if not args.no_tune:
        configs |= tuned_configs(engine, [codec.encode(text) for text in calib], drafters,
                                 DecodeConfig(max_new_tokens=args.tokens))
    for config in configs.values():  # warm-up: first calls allocate and load
        engine.generate(ids[0], config)
    tallies = {mode: Tally() for mode in configs}
    modes = list(configs)
    for repeat in range(args.repeats):
        for index, prompt in enumerate(ids):
            shift = (index + repeat) % len(modes)  # rotate who goes first
            for mode in modes[shift:] + modes[:shift]:
                tallies[mode].add(engine.generate(prompt, configs[mode]))
    plain = tallies[PLAIN]
    plain_rate = plain.tokens / plain.seconds
    rows: list[dict[str, object]] = [{"bundle": name, "drafter": PLAIN, "tokens_per_s": round(plain_rate, 2)}]
    for drafter in [m for m in modes if m != PLAIN]:
        t = tallies[drafter]
        rate = t.tokens / t.seconds
        c = configs[drafter]
        tree_text = (f"{c.tree_budget}/{c.depth}/{c.width}" if c.speculative else "plain")
        rows.append({
            "bundle": name, "drafter": drafter if c.speculative else f"{drafter} (plain)", "tree": tree_text,
            "tokens_per_s": round(rate, 2),
            "speedup": round(rate / plain_rate, 3),
            "mean_accepted_len": round(statistics.fmean(t.accepted_len), 3) if t.accepted_len else None,
            "acceptance_by_source": {s: round(t.accepted[s] / t.proposed[s], 3) if t.proposed[s] else None
                                     for s in SOURCES},
            "proposed": t.proposed, "accepted": t.accepted,
            "lookup_us_per_round": round(t.lookup_ns / t.rounds / 1e3, 1) if t.rounds else None,
            "lossless": t.outputs == plain.outputs,
        })
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=0, help="onnxruntime threads (0 = auto)")
    parser.add_argument("--tree-budget", type=int, default=DecodeConfig.tree_budget)
    parser.add_argument("--depth", type=int, default=DecodeConfig.depth)
    parser.add_argument("--width", type=int, default=DecodeConfig.width)
    parser.add_argument("--skip-realistic", action="store_true", help="the demo pair only (no 2-minute export)")
    parser.add_argument("--no-tune", action="store_true", help="fixed trees only (no per-drafter tuning)")
    parser.add_argument("--bundle", type=Path, action="append", default=[], help="another bundle to compare on")
    args = parser.parse_args()
    bundles = [("demo", demo_bundle().path)]
    if not args.skip_realistic:
        bundles.append(("realistic", realistic_bundle().path))
    bundles += [(str(path), path) for path in args.bundle]
    every = prompts(args.prompts + CALIBRATION_PROMPTS)
    texts, calib = every[:args.prompts], every[args.prompts:]  # calibration never sees a measured prompt
    rows = [row for name, path in bundles for row in measure(name, path, texts, calib, args)]
    print(json.dumps(rows, indent=1))
    print(f"\n{'bundle':<12} {'drafter':<20} {'tree':>8} {'tok/s':>8} {'speedup':>8} {'accepted':>9} {'model acc':>10} "
          f"{'lookup acc':>11} {'lookup us':>10} lossless")
    for row in rows:
        by_source = row.get("acceptance_by_source") or {}
        assert isinstance(by_source, dict)
        cells = [row.get("speedup"), row.get("mean_accepted_len"), by_source.get("model"), by_source.get("lookup"),
                 row.get("lookup_us_per_round")]
        text = [("—" if value is None else f"{value}") for value in cells]
        print(f"{str(row['bundle'])[:12]:<12} {row['drafter']!s:<20} {row.get('tree', '')!s:>8} "
              f"{row['tokens_per_s']!s:>8} {text[0]:>8} "
              f"{text[1]:>9} {text[2]:>10} {text[3]:>11} {text[4]:>10} {row.get('lossless', '')}")


if __name__ == "__main__":
    main()
