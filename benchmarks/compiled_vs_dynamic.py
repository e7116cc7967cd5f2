"""Per-round latency of the compiled bundle (static buckets, KV buffer, IO binding) vs the dynamic one.

Same prompts, one process, greedy; outputs checked identical.

    .venv/bin/python benchmarks/compiled_vs_dynamic.py [--tokens 64 --prompts 8 --max-context 512]
"""

from __future__ import annotations

import argparse
import json
import statistics

from common import CACHE, cached, demo_bundle, prompts

from specdec.pipeline.compile import CompileConfig, OutputFormat, compile_bundle
from specdec.pipeline.generate import Generator
from specdec.pipeline.prompts import PromptItem
from specdec.pipeline.runtime.config import DecodeConfig
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle


def measure(path, texts, tokens, speculative):  # type: ignore[no-untyped-def]
    generator = Generator(path)
    config = DecodeConfig(max_new_tokens=tokens, speculative=speculative)
    generator.run(PromptItem("warm", text=texts[0]), config)
    rounds, outputs, total = [], [], 0.0
    for i, text in enumerate(texts):
        reply, _ = generator.run(PromptItem(str(i), text=text), config)
        rounds += reply.rounds
        outputs.append(reply.output_ids)
        total += reply.total_ns / 1e9
    ms = [r.total_ns / 1e6 for r in rounds]
    return outputs, {"round_ms_p50": round(statistics.median(ms), 3), "round_ms_mean": round(statistics.fmean(ms), 3),
                     "tokens_per_s": round(sum(len(o) for o in outputs) / total, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-context", type=int, default=512)
    args = parser.parse_args()
    surgery_out = CACHE / "demo-surgery"
    surgered = cached(surgery_out, lambda: surgery_bundle(SurgeryConfig(output=surgery_out), demo_bundle()))
    compiled_out = CACHE / f"demo-compiled-{args.max_context}"
    compiled = cached(compiled_out, lambda: compile_bundle(
        CompileConfig(output=compiled_out, max_context=args.max_context, format=OutputFormat.onnx), surgered))
    texts = prompts(args.prompts)
    report = {}
    for speculative in (False, True):
        mode = "speculative" if speculative else "plain"
        dynamic_out, dynamic = measure(surgered.path, texts, args.tokens, speculative)
        static_out, static = measure(compiled.path, texts, args.tokens, speculative)
        assert dynamic_out == static_out, "compile changed the output"
        report[mode] = {"dynamic": dynamic, "compiled": static,
                        "round_time_ratio": round(static["round_ms_mean"] / dynamic["round_ms_mean"], 3)}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
