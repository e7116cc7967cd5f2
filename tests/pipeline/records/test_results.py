"""results.json is written from BenchResults and read back into it; older baselines still give figures."""

from __future__ import annotations

import json

import pytest

from specdec.pipeline.records.codec import RecordError
from specdec.pipeline.records.results import RESULTS_SCHEMA, Figures, read_figures


def test_a_baseline_that_is_no_results_file_is_refused() -> None:
    with pytest.raises(RecordError, match="'specdec.bench/0' is not one of"):
        read_figures(json.dumps({"schema": "specdec.bench/0", "figures": {}}))
    with pytest.raises(RecordError, match="not JSON"):
        read_figures("{")


def test_a_version_1_file_still_serves_as_a_baseline() -> None:
    figures = {name: None for name in Figures.names()} | {"speedup": 1.2, "tokens_per_s": 80}
    old = read_figures(json.dumps({"schema": "specdec.bench/1", "figures": figures, "whatever": {}}))
    assert old.get("speedup") == 1.2 and old.get("tokens_per_s") == 80.0 and RESULTS_SCHEMA == "specdec.bench/4"
    with pytest.raises(RecordError, match="figures.speed"):
        read_figures(json.dumps({"schema": RESULTS_SCHEMA, "figures": {"speed": 1.0}}))
    with pytest.raises(KeyError):
        old.get("speed")
