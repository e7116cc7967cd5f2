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
