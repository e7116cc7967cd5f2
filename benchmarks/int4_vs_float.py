"""Plain-decoding tokens/s of the INT4 bundle vs the float bundle (demo pair), in one run.

Also reports speculative tokens/s and mean accepted length of both, and checks that each
bundle's speculative greedy output equals its own plain greedy output.

    .venv/bin/python benchmarks/int4_vs_float.py [--method awq --tokens 64 --prompts 8]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from common import CACHE, cached, demo_bundle, prompts

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.quantize.config import QuantizeConfig
from specdec.pipeline.quantize.stage import quantize_bundle
from specdec.pipeline.records.decode import DecodeConfig


def measure(path: Path, ids: list[list[int]], tokens: int) -> dict[str, Any]:
    engine = Engine(path)
    engine.generate(ids[0], DecodeConfig(max_new_tokens=8, speculative=False))
    engine.generate(ids[0], DecodeConfig(max_new_tokens=8))
    result: dict[str, Any] = {}
    outputs: dict[str, list[list[int]]] = {}
    for speculative in (False, True):
        replies = [engine.generate(p, DecodeConfig(max_new_tokens=tokens, speculative=speculative)) for p in ids]
        name = "speculative" if speculative else "plain"
        outputs[name] = [r.output_ids for r in replies]
        result[f"{name}_tokens_per_s"] = round(sum(len(r.output_ids) for r in replies) /
                                               sum(r.total_ns / 1e9 for r in replies), 1)
        if speculative:
            result["mean_accepted_len"] = round(statistics.fmean(r.mean_accepted_len for r in replies), 3)
    result["lossless"] = outputs["plain"] == outputs["speculative"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default="awq")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=8)
    args = parser.parse_args()
    exported = demo_bundle()
    out = CACHE / f"demo-int4-{args.method}"
    quantized = cached(out, lambda: quantize_bundle(QuantizeConfig.from_text(output=out, format="nbits",
                                                                             method=args.method), exported))
    codec = TextCodec(exported.tokenizer_dir)
    ids = [codec.encode(t) for t in prompts(args.prompts)]
    floating = measure(exported.path, ids, args.tokens)
    int4 = measure(quantized.path, ids, args.tokens)
    size = {name: sum(e.size for rel, e in b.manifest.files.items() if rel.endswith(".onnx") or ".onnx." in rel)
            for name, b in (("float", exported), ("int4", quantized))}
    print(json.dumps({"float": floating, "int4": int4,
                      "plain_speedup_int4_vs_float": round(int4["plain_tokens_per_s"] /
                                                           floating["plain_tokens_per_s"], 3),
                      "graph_bytes": size, "size_ratio": round(size["int4"] / size["float"], 3)}, indent=1))


if __name__ == "__main__":
    main()
