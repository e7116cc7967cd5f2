"""The plan table names a choice's confidence gate, and only where it has one; the record round-trips it."""

from __future__ import annotations

from rich.console import Console

from specdec.cli.render import plan_table
from specdec.pipeline.records.codec import from_dict, to_dict
from specdec.pipeline.records.plan import CostFit, DevicePlan, PlanChoice


def _plan(choice: PlanChoice, *others: PlanChoice) -> DevicePlan:
    return DevicePlan(device="local/x86/x86_64/threads=2", created="2026-12-06", threads=2, exact_layout=True,
                      choice=choice, plain_step_ms=8.5, verify_ms=[(1, 8.5), (2, 9.0)],
                      verify_fit=CostFit(8.0, 0.5, 0.01), context=64, acceptance={}, candidates=[choice, *others])


def _text(plan: DevicePlan) -> str:
    console = Console(width=200, record=True)
    console.print(plan_table(plan))
    return console.export_text()


def test_the_gate_shows_where_a_choice_has_one() -> None:
    gated = PlanChoice("model+lookup", 2, 1, 1, 1.45, 12.7, 1.25, [2, 4], draft_min_prob=0.2)
    lookup = PlanChoice("lookup", 4, 3, 1, 1.07, 9.4, 1.24, [1, 3])
    text = _text(_plan(gated, lookup))
    assert "model+lookup 2-4, gate 0.2" in text and "lookup 1-3 " in text and "lookup 1-3, gate" not in text
    record = to_dict(_plan(gated))
    assert record["choice"]["draft_min_prob"] == 0.2 and "draft_min_prob" not in to_dict(_plan(lookup))["choice"]
    assert from_dict(DevicePlan, record, "plan").choice == gated
    assert _plan(gated).decode_settings()["draft_min_prob"] == 0.2
