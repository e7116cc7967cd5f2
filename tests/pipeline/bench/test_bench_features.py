"""bench and tune on a compiled feature-draft bundle (the local device): lossless, deep acceptance,
the draft's cost measured as for a model draft."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.records.decode import DrafterKind
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.tune import TuneConfig, tune_bundle


@pytest.fixture(scope="module")
def compiled(feature_stages):  # type: ignore[no-untyped-def]
    return feature_stages(("surgery", "cpu"))


def test_bench_a_feature_bundle(compiled, prompts_file: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    outcome = run_bench(BenchConfig(output=tmp_path / "r", prompts=prompts_file, repeats=1, tune=False,
                                    decode=DecodeOptions(max_new_tokens=20, drafter=DrafterKind.model)), compiled)
    results = json.loads((outcome.output / "results.json").read_text())
    assert results["lossless"]["checked"] and results["lossless"]["equal"]
    figures = results["figures"]
    assert figures["mean_accepted_len"] > 1.5
    assert figures["cost_ratio_r"] is not None and figures["cost_ratio_r"] > 0
    assert "Draft_Generate" in results["details"]["stage_latency_ms"]


def test_tune_plans_a_feature_bundle(compiled, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle, plan = tune_bundle(TuneConfig(output=tmp_path / "tuned", decode=DecodeOptions(max_new_tokens=12)), compiled)
    stored = Bundle.load(bundle.path).manifest
    assert stored.plan is not None and stored.draft is not None and stored.draft.is_feature
    assert plan.calibration_rounds > 0 and plan.verify_ms
    assert "draft_vocab.npy" in stored.files  # carried on with the bundle
