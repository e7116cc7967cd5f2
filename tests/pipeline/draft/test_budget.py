"""`--minutes` sizes the first text chunk and the importance probe from the target's step time:
the sizing on its own (an injected step cost, no clock), and `make_draft` with a tiny budget."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from specdec.pipeline.draft import DraftConfig, budget, make_draft, pruning
from specdec.pipeline.draft.pruning import Geometry

# Qwen2.5-0.5B's shape (a target `specdec draft` is sized for)
QWEN_05B = Geometry(layers=24, heads=14, kv_heads=2, head_dim=64, hidden=896, intermediate=4864, vocab=151936)
# about what the 0.5B shape's 8-row chunk of 128 tokens implies on the loaded 2-core VM (3m10s)
SLOW = budget.StepCost(fixed_s=0.6, token_s=0.05)


def test_the_first_chunk_takes_the_most_rows_that_fit_its_share() -> None:
    whole = budget.first_chunk(SLOW, 1e6, rows=64, seq=128)
    assert (whole.rows, whole.tokens, whole.fits) == (64, 128, True)
    cut = budget.first_chunk(SLOW, 150, rows=64, seq=128)
    assert cut.fits and budget.TEXT_FLOOR_ROWS <= cut.rows < 64 and cut.tokens == 128
    assert cut.seconds <= 150 < budget.chunk_seconds(SLOW, cut.rows + 1, 128)


def test_rows_shorten_when_the_floor_of_rows_does_not_fit() -> None:
    floor_rows = budget.chunk_seconds(SLOW, budget.TEXT_FLOOR_ROWS, 128)
    short = budget.first_chunk(SLOW, floor_rows - 1, rows=64, seq=128)
    assert short.fits and short.rows == budget.TEXT_FLOOR_ROWS and short.tokens < 128
    assert short.seconds <= floor_rows - 1
    none = budget.first_chunk(SLOW, 0.1, rows=64, seq=128)
    assert (none.rows, none.tokens, none.fits) == (budget.TEXT_FLOOR_ROWS, budget.TEXT_FLOOR_SEQ, False)


def test_later_chunks_stop_when_the_share_is_spent() -> None:
    assert budget.next_chunk(SLOW, 1e6, rows=64, seq=128) == 64
    assert 0 < budget.next_chunk(SLOW, 150, rows=64, seq=128) < 64
    assert budget.next_chunk(SLOW, 100, rows=64, seq=128) == 0


def test_probe_forwards_count_the_sweep_by_flops() -> None:
    forwards = budget.probe_forwards(QWEN_05B)
    # more than a half-forward per layer (the head runs after every dropped layer), under a full one
    assert 1 + budget.TAYLOR_FORWARDS + 24 / 2 < forwards < 1 + budget.TAYLOR_FORWARDS + 24


def test_the_probe_shrinks_to_its_share_down_to_the_floor() -> None:
    full = budget.probe(SLOW, QWEN_05B, 1e6, available_rows=100, seq=128, batch=4)
    assert (full.rows, full.tokens, full.fits) == (budget.PROBE_ROWS, budget.PROBE_TOKENS, True)
    share = 80.0  # 15 % of a 9-minute budget
    small = budget.probe(SLOW, QWEN_05B, share, available_rows=100, seq=128, batch=4)
    assert small.fits and small.seconds <= share and small.rows * small.tokens < full.rows * full.tokens
    assert small.rows >= budget.PROBE_FLOOR_ROWS and small.tokens >= budget.PROBE_FLOOR_TOKENS
    floor = budget.probe(SLOW, QWEN_05B, 1.0, available_rows=100, seq=128, batch=4)
    assert (floor.rows, floor.tokens, floor.fits) == (budget.PROBE_FLOOR_ROWS, budget.PROBE_FLOOR_TOKENS, False)
    few = budget.probe(SLOW, QWEN_05B, 1e6, available_rows=3, seq=40, batch=4)
    assert (few.rows, few.tokens) == (3, 40)  # never more rows or tokens than the corpus holds


def test_a_measured_step_cost_is_positive() -> None:
    from support.tiny_models import make_model

    cost = budget.measure(make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval(), 1)
    assert cost.fixed_s > 0 and cost.token_s >= 0


def test_a_tiny_budget_plans_a_smaller_chunk_and_probe_and_reports_them(
        target: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, ...]] = []
    measure = pruning.measure

    def recording(model: Any, batches: list[torch.Tensor], shape: Geometry) -> pruning.Importance:
        seen.extend(tuple(b.shape) for b in batches)
        return measure(model, batches, shape)

    monkeypatch.setattr(pruning, "measure", recording)
    # a slow target (injected: no clock decides the plan's sizes), 12 seconds of budget
    cost = budget.StepCost(fixed_s=0.01, token_s=0.004)
    config = DraftConfig(target=str(target), output=tmp_path / "d", layers=2, minutes=0.2, samples=64, seq=32,
                         batch=4, threads=1, checkpoint_minutes=0)
    report = make_draft(config, step_cost=cost).report["budget"]
    assert report["seconds"] == 12.0
    text, probe = report["phases"]["text"], report["phases"]["importance"]
    first = text["first_chunk"]
    assert first["fits"] and first["seconds"] <= first["share_s"] <= text["share_s"] == 4.8
    assert first["rows"] < 64  # the default first chunk is 64 rows
    assert first["seconds"] == round(budget.chunk_seconds(cost, first["rows"], first["tokens"]), 1)
    assert probe["fits"] and probe["seconds"] <= probe["share_s"] == 1.8
    assert probe["rows"] * probe["tokens"] < budget.PROBE_ROWS * 32  # the default probe: 8 rows of the 32 tokens
    # the probe ran at the size planned
    assert sum(s[0] for s in seen) == probe["rows"] and {s[1] for s in seen} == {probe["tokens"] + 1}
    # distillation gets what the earlier phases left of the budget, less the margin for the evaluation and save
    assert text["spent_s"] + probe["spent_s"] + report["phases"]["distillation"]["share_s"] <= 12.0 * 0.95 + 0.2
    assert all(phase["spent_s"] is not None for phase in report["phases"].values())


def test_user_text_costs_the_chunk_a_teacher_pass_so_fewer_rows_fit() -> None:
    plain = budget.first_chunk(SLOW, 150, rows=64, seq=128)
    with_text = budget.first_chunk(SLOW, 150, rows=64, seq=128, user_text=True)
    assert with_text.rows < plain.rows
    assert budget.chunk_seconds(SLOW, 8, 128, user_text=True) == pytest.approx(
        budget.chunk_seconds(SLOW, 8, 128) + SLOW.forward(8 * 128))
