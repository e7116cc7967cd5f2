"""Per-token cost of constrained decoding: banned phrases, a JSON schema, a regex, on any bundle.

For each constraint the same prompts are decoded plainly and speculatively (greedy); the script
reports tokens/s, the logits processors' time per emitted token (the `Logits_Process` stage),
their share of the decoding time, the mean accepted length and whether speculative output equals
plain output. The ban list is built per prompt from the unconstrained greedy reply (its three
longest words), so the ban actually bites. A counterfactual case, "ban mask, draft unconstrained",
lets only the target apply the ban: what the draft applying the same processor buys in acceptance.

    .venv/bin/python benchmarks/constrained.py BUNDLE [--prompts 12] [--tokens 48] [--threads 2]

BUNDLE defaults to an export of the built-in demo pair (made once under benchmarks/results/cache).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.graph import SessionOptions
from specdec.pipeline.engine.stats import PROCESS, Reply
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.records.decode import BanPolicy, DecodeConfig
from specdec.pipeline.records.manifest import MANIFEST_NAME

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "pipeline" / "demo" / "eval_prompts.jsonl"
CACHE = ROOT / "benchmarks" / "results" / "cache" / "constrained-demo"
SCHEMA = {"type": "object", "additionalProperties": False, "required": ["name", "size", "kind"],
          "properties": {"name": {"type": "string", "maxLength": 16},
                         "size": {"type": "integer", "minimum": 0, "maximum": 999},
                         "kind": {"enum": ["class", "function", "module"]}}}
REGEX = r"(def|class) [a-z_]{1,16}\((self)?\):"


def demo_bundle() -> Path:
    if not (CACHE / MANIFEST_NAME).is_file():  # the one manifest reader names the file (test_layering)
        from specdec.pipeline.export import ExportConfig, export_bundle

        export_bundle(ExportConfig(target="demo-tiny", output=CACHE))
    return CACHE


def ban_list(engine: Engine, codec: TextCodec, ids: list[int], tokens: int) -> tuple[str, ...]:
    text = codec.decode(engine.generate(ids, DecodeConfig(max_new_tokens=tokens, speculative=False)).output_ids)
    words = sorted({w for w in text.split() if len(w) >= 4}, key=len, reverse=True)[:3]
    return tuple(words) or (text[:4] or "the",)


@contextlib.contextmanager
def draft_unconstrained(engine: Engine) -> Iterator[None]:
    """The counterfactual: the draft model proposes as if there were no constraints."""
    drafter = engine.drafter
    if drafter is None:
        yield
        return
    original = drafter.constrain
    drafter.constrain = lambda constraints: original(None)  # type: ignore[method-assign]
    try:
        yield
    finally:
        drafter.constrain = original  # type: ignore[method-assign]


def measure(engine: Engine, prompts: list[list[int]], configs: list[DecodeConfig]) -> dict[str, Any]:
    """Plain and speculative replies of every prompt with its config; totals and the exactness check."""
    totals: dict[str, dict[str, float]] = {}
    equal = True
    for mode in ("plain", "speculative"):
        replies: list[Reply] = []
        start = time.perf_counter()
        for ids, config in zip(prompts, configs, strict=True):
            replies.append(engine.generate(ids, dataclasses.replace(config, speculative=mode == "speculative")))
        elapsed = time.perf_counter() - start
        tokens = sum(len(r.output_ids) for r in replies)
        process_ms = sum(s.stage_ns(PROCESS) for r in replies for s in r.rounds) / 1e6
        spec_rounds = [s for r in replies for s in r.speculative_rounds]
        totals[mode] = {
            "tokens_per_s": round(tokens / elapsed, 1),
            "process_ms_per_token": round(process_ms / max(tokens, 1), 4),
            "process_share": round(process_ms / 1e3 / elapsed, 4),
            "mean_accepted_len": round(sum(s.accepted_len for s in spec_rounds) / len(spec_rounds), 3)
            if spec_rounds else 0.0,
            "tokens": tokens,
        }
        if mode == "plain":
            plain_ids = [r.output_ids for r in replies]
        else:
            equal = plain_ids == [r.output_ids for r in replies]
    return {**totals, "speculative_equals_plain": equal}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path, nargs="?", help="bundle (default: the demo pair, exported once)")
    parser.add_argument("--prompts", type=int, default=12)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    engine = Engine(args.bundle or demo_bundle(), SessionOptions(threads=args.threads))
    codec = TextCodec(engine.info.tokenizer_dir)
    lines = PROMPTS.read_text().splitlines()[: args.prompts]
    prompts = [codec.encode(json.loads(line)["text"]) for line in lines]
    base = DecodeConfig(max_new_tokens=args.tokens)
    bans = [ban_list(engine, codec, ids, args.tokens) for ids in prompts]
    cases = {
        "none": [base] * len(prompts),
        "ban mask": [dataclasses.replace(base, ban=b) for b in bans],
        "ban refuse": [dataclasses.replace(base, ban=b, ban_policy=BanPolicy.refuse) for b in bans],
        "json_schema": [dataclasses.replace(base, json_schema=json.dumps(SCHEMA))] * len(prompts),
        "regex": [dataclasses.replace(base, regex=REGEX)] * len(prompts),
    }
    for ids, config in zip(prompts, cases["json_schema"], strict=True):  # warm-up: compile and first calls
        engine.generate(ids, dataclasses.replace(config, max_new_tokens=4))
    report = {name: measure(engine, prompts, configs) for name, configs in cases.items()}
    with draft_unconstrained(engine):
        report["ban mask, draft unconstrained"] = measure(engine, prompts, cases["ban mask"])
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
