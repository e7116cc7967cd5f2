"""The shipped prompt file: what `bench --limit N` measures and what tune calibrates on span every scenario."""

from __future__ import annotations

from specdec.pipeline.chain.stage import PIPELINE_DEFAULTS
from specdec.pipeline.inputs.prompts import CALIBRATION_PROMPTS, default_prompts_file, load_prompts


def test_measured_and_calibration_prompts_of_the_default_file_span_every_scenario() -> None:
    path = default_prompts_file()
    assert path is not None
    prompts = load_prompts(path)
    scenarios = {p.scenario for p in prompts}
    assert scenarios == {"code", "chat", "creative", "knowledge"}
    limit = PIPELINE_DEFAULTS["bench"]["limit"]
    # grouped by scenario, --limit 8 measured code and chat while tune calibrated on knowledge documents only
    assert {p.scenario for p in prompts[:limit]} == scenarios
    assert {p.scenario for p in prompts[-CALIBRATION_PROMPTS:]} == scenarios
    assert not {p.id for p in prompts[:limit]} & {p.id for p in prompts[-CALIBRATION_PROMPTS:]}


def test_one_rule_fits_prompts_for_bench_and_generate() -> None:
    """A reply keeps its room, but never pushes the prompt under half the context."""
    from specdec.pipeline.inputs.prompts import BenchPrompt, fit_prompts, prompt_room

    assert prompt_room(128, 16) == 111 and prompt_room(128, 64) == 63 and prompt_room(128, 500) == 63
    prompts = [BenchPrompt("short", [1, 2, 3]), BenchPrompt("long", list(range(200)))]
    fitted, notes = fit_prompts(prompts, 128, 16)
    assert fitted[0].ids == [1, 2, 3] and fitted[1].ids == list(range(89, 200))
    assert notes == ["1 prompt(s) longer than 111 tokens were cut to their last 111 (long)"]
    assert fit_prompts(prompts[:1], 128, 16)[1] == []
