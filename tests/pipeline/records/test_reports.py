"""The manifest's reports are typed records through the codec: the CLI reads fields, not string keys,
and keys another specdec version wrote survive a read and a write unchanged."""

from __future__ import annotations

from specdec.pipeline.records.codec import dump, from_dict
from specdec.pipeline.records.reports import CompileReport, Invariance, KVQuality, Reports


def test_reports_read_typed_and_write_back_the_same_json() -> None:
    data = {
        "export": {"validation": "skipped (--no-validate)", "warnings": [], "from_an_older_specdec": 1},
        "compile": {"flavour": "cpu", "max_abs_diff": {"target": 1e-6}, "notes": ["n"],
                    "invariance": {"single_row": False, "chain": True, "tree": False, "max_tree_diff": 0.5},
                    "kv_quality": {"policy": "window S=4 W=16 float32", "windows": 1, "tokens": 31,
                                   "positions_past_reach": 11, "mismatch_rate": 0.1, "mismatch_rate_past_reach": 0.2,
                                   "perplexity_full": 9.0, "perplexity_policy": 9.5, "perplexity_delta": 0.5}},
        "a_future_stage": {"whatever": [1, 2]},
    }
    reports = from_dict(Reports, data, "reports")
    assert reports.export is not None and reports.export.other == {"from_an_older_specdec": 1}
    compiled = reports.compile
    assert isinstance(compiled, CompileReport) and compiled.notes == ["n"]
    assert compiled.invariance == Invariance(single_row=False, chain=True, tree=False, max_tree_diff=0.5)
    assert isinstance(compiled.kv_quality, KVQuality) and compiled.kv_quality.mismatch_rate == 0.1
    assert reports.quantize is None and reports.other == {"a_future_stage": {"whatever": [1, 2]}}
    assert dump(reports) == data  # the file keeps its shape, unknown keys included


def test_a_compiled_bundle_reports_typed_figures(bench_bundle_cpu) -> None:  # type: ignore[no-untyped-def]
    reports = bench_bundle_cpu.manifest.reports
    assert reports.export is not None and isinstance(reports.export.validation, dict)
    assert reports.surgery is not None and reports.surgery.validated
    assert reports.compile is not None and reports.compile.flavour == "cpu"
    assert isinstance(reports.compile.invariance, Invariance) and reports.compile.invariance.chain
    assert max(reports.compile.max_abs_diff.values()) <= 1e-5
