"""Bytes copied out of onnxruntime and host time per round, before vs after graph surgery (demo pair).

Before surgery the target returns [n, vocab] logits every round and the host runs
BlockSparseVerify in numpy; after it, the op runs in the graph and only the accepted path
leaves. Same prompts, same engine code, one process.

    .venv/bin/python benchmarks/surgery_bytes.py [--tokens 64 --prompts 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
from typing import Any

from common import CACHE, cached, demo_bundle, prompts

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.engine.stats import ACCEPT, DRAFT, PRUNE, VERIFY, RoundStats
from specdec.pipeline.generate.stage import Generator
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle


def measure(bundle: Bundle, texts: list[str], tokens: int) -> tuple[list[list[int]], dict[str, Any]]:
    generator = Generator(bundle)
    config = DecodeConfig(max_new_tokens=tokens)
    ids = [generator.codec.encode(text) for text in texts]
    generator.run(ids[0], config)  # warm-up
    rounds: list[RoundStats] = []
    outputs: list[list[int]] = []
    for prompt in ids:
        reply, _ = generator.run(prompt, config)
        rounds += reply.speculative_rounds
        outputs.append(reply.output_ids)
    host = [(r.stage_ns(PRUNE) + r.stage_ns(ACCEPT)) / 1e6 for r in rounds]
    return outputs, {
        "rounds": len(rounds),
        "bytes_out_per_round": round(statistics.fmean(r.bytes_out for r in rounds)),
        "host_ms_per_round": round(statistics.fmean(host), 3),
        "draft_ms_per_round": round(statistics.fmean(r.stage_ns(DRAFT) / 1e6 for r in rounds), 3),
        "verify_ms_per_round": round(statistics.fmean(r.stage_ns(VERIFY) / 1e6 for r in rounds), 3),
        "round_ms": round(statistics.fmean(r.total_ns / 1e6 for r in rounds), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=8)
    args = parser.parse_args()
    exported = demo_bundle()
    out = CACHE / "demo-surgery"
    surgered = cached(out, lambda: surgery_bundle(SurgeryConfig(output=out), exported))
    texts = prompts(args.prompts)
    before_out, before = measure(exported, texts, args.tokens)
    after_out, after = measure(surgered, texts, args.tokens)
    assert before_out == after_out, "surgery changed the output"
    print(json.dumps({"before_surgery": before, "after_surgery": after,
                      "bytes_ratio": round(after["bytes_out_per_round"] / before["bytes_out_per_round"], 3),
                      "host_time_ratio": round(after["host_ms_per_round"] / before["host_ms_per_round"], 3)}, indent=1))


if __name__ == "__main__":
    main()
