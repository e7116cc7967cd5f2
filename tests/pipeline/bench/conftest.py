"""Bench fixtures: a compiled tiny bundle, prompts, and the adb stand-in re-exported."""

from __future__ import annotations

from pathlib import Path

import pytest
from standin.conftest import adb_env, adb_environ, make_standin, standin_device  # noqa: F401

from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle


@pytest.fixture(scope="session")
def bench_bundle(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Exported -> surgered -> compiled (npu flavour: static buckets) tiny llama pair."""
    root = tmp_path_factory.mktemp("bench-bundle")
    surgered = surgery_bundle(SurgeryConfig(output=root / "surgered"), bundle_factory("llama"))
    return compile_bundle(CompileConfig(output=root / "compiled", target=GraphFlavour.npu, buckets=(4, 8, 16),
                                        draft_buckets=(1, 4), max_context=128, prefill_chunk=16, context_buckets=(64,),
                                        format=OutputFormat.onnx), surgered)


@pytest.fixture(scope="session")
def bench_bundle_cpu(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Exported -> surgered -> compiled (cpu flavour: fused graphs, KV in place): what `specdec pipeline` makes."""
    root = tmp_path_factory.mktemp("bench-bundle-cpu")
    surgered = surgery_bundle(SurgeryConfig(output=root / "surgered"), bundle_factory("llama"))
    return compile_bundle(CompileConfig(output=root / "compiled", target=GraphFlavour.cpu, max_context=128,
                                        format=OutputFormat.onnx), surgered)


@pytest.fixture
def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"id": "a", "input_ids": [5, 6, 7]}\n{"id": "b", "input_ids": [9, 10, 11, 12]}\n'
                    '{"id": "c", "text": "the quick brown"}\n')
    return path
