"""Fixed speculation settings vs adaptive control over a mixed prompt set, in one run (demo pair).

Reports tokens/s, mean accepted length and how often each controller acted; greedy outputs are
checked identical to plain decoding in both configurations.

    .venv/bin/python benchmarks/adaptive_vs_fixed.py [--tokens 64 --prompts 16 --bundle B]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import Any

from common import demo_bundle, prompts

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.engine.controllers import build_chain
from specdec.pipeline.generate.stage import Generator
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.settings.profiles import load_scenario


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--bundle", type=Path, help="bundle to run (default: the demo pair, exported once)")
    args = parser.parse_args()
    bundle = Bundle.load(args.bundle) if args.bundle else demo_bundle()
    generator = Generator(bundle)
    engine, codec = generator.engine, generator.codec
    ids = [codec.encode(t) for t in prompts(args.prompts)]
    scenario = load_scenario("chat")
    spec = {"enabled": ["beta", "width", "fallback"], "targets": scenario.controller.model_dump(),
            "beta_base": scenario.beta_base, "max_width": 16}
    config = DecodeConfig(max_new_tokens=args.tokens)
    engine.generate(ids[0], config)  # warm-up
    report: dict[str, Any] = {}
    plain = [engine.generate(p, DecodeConfig(max_new_tokens=args.tokens, speculative=False)) for p in ids]
    report["plain"] = {"tokens_per_s": round(sum(len(r.output_ids) for r in plain) /
                                             sum(r.total_ns / 1e9 for r in plain), 2)}
    for name in ("fixed", "adaptive"):
        chain = build_chain(spec) if name == "adaptive" else None
        replies = [engine.generate(p, config, controller=chain) for p in ids]
        assert [r.output_ids for r in replies] == [r.output_ids for r in plain], "not lossless"
        actions = Counter(f"{e['controller']}:{e['action']}" for r in replies for rd in r.rounds for e in rd.events)
        report[name] = {
            "tokens_per_s": round(sum(len(r.output_ids) for r in replies) / sum(r.total_ns / 1e9 for r in replies), 2),
            "mean_accepted_len": round(statistics.fmean(r.mean_accepted_len for r in replies if r.speculative_rounds),
                                       3),
            "controller_actions": dict(actions),
        }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
