"""Every compile flavour × output format benches on the local device: what the payload carries is what the
runtime opens (a compiled bundle ships only its runtime files), and speculation stays lossless."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.pipeline.bench import BenchConfig, run_bench
from specdec.pipeline.settings.decode_options import DecodeOptions

# The onnx cases are the bench fixtures' own bundles; the others are compiled as small as they can be.
SETTINGS = {"cpu": {"max_context": 128},
            "npu": {"buckets": (4,), "draft_buckets": (1, 4), "max_context": 64, "prefill_chunk": 16,
                    "context_buckets": (64,)}}
ONNX_SETTINGS = {"cpu": SETTINGS["cpu"],
                 "npu": {"buckets": (4, 8, 16), "draft_buckets": (1, 4), "max_context": 128, "prefill_chunk": 16,
                         "context_buckets": (64,)}}


@pytest.mark.slow
@pytest.mark.parametrize("output_format", ["onnx", "ort", "both"])
@pytest.mark.parametrize("flavour", ["cpu", "npu"])
def test_every_flavour_and_format_benches(compiled_factory, prompts_file: Path, tmp_path: Path,  # type: ignore[no-untyped-def]
                                          flavour: str, output_format: str) -> None:
    settings = ONNX_SETTINGS[flavour] if output_format == "onnx" else SETTINGS[flavour]
    bundle = compiled_factory(flavour, output_format, **settings)
    shipped = bundle.runner_files()
    assert all(f.endswith(".ort") for f in shipped if f.endswith((".onnx", ".ort"))) == (output_format != "onnx")
    outcome = run_bench(BenchConfig(output=tmp_path / "out", prompts=prompts_file, limit=1, tune=False,
                                    cooldown=False, controllers=(), decode=DecodeOptions(max_new_tokens=4)), bundle)
    results = outcome.results
    assert not results.partial and results.lossless.checked and results.lossless.equal
    assert results.figures.tokens_per_s is not None and results.figures.plain_tokens_per_s is not None
