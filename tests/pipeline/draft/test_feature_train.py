"""feature_train: the rows line up with feature_model's alignment, training learns, a budget fixes the
step count, and a resumed run ends with the weights of an uninterrupted one."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.pipeline.draft import feature_data, feature_train
from specdec.pipeline.draft.feature_model import FeatureDraft
from specdec.pipeline.progress import SilentProgress


@pytest.fixture(scope="module")
def model(target: Path) -> Any:
    """The tiny target made confident (a random one is near uniform, its head too flat to fit)."""
    model = AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(20)
    return model


@pytest.fixture(scope="module")
def rows(model: Any, target: Path) -> list[feature_data.Row]:
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    texts = ["the quick brown fox", "def add(a, b):", "a tree of drafts", "the target accepts", "speculative"]
    return feature_data.generate(model, [tokenizer.encode(t) for t in texts], max_new=12, eos={-1},
                                 feature_layer=3, pad=0)


def _draft(model: Any, vocab: torch.Tensor | None = None) -> FeatureDraft:
    draft = FeatureDraft.from_target(model, layers=1, draft_vocab=vocab, seed=0, input_norms=True)
    feature_train.init_for_training(draft, 0)
    return draft


class _Ticks:
    """A clock that advances one second each time it is read."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_rows_follow_the_alignment(rows: list[feature_data.Row]) -> None:
    vocab = torch.arange(0, 320, 2)
    settings = feature_train.TrainSettings(prompt_weight=0.25)
    batch = feature_train.collate(rows, [0, 1], feature_train.vocab_index(vocab, 320), settings)
    row = rows[1]
    n = len(row.labels)
    assert torch.equal(batch.input_ids[1, :n], row.ids[:n])
    assert torch.equal(batch.features_in[1, 0], torch.zeros(64))  # row t reads f_{t-1}: zeros at t = 0
    assert torch.equal(batch.features_in[1, 1:n], row.features[:n - 1].float())
    assert torch.equal(batch.features_out[1, :n], row.features.float())
    expected = torch.where(row.labels % 2 == 0, row.labels // 2, torch.full_like(row.labels, -1))
    assert torch.equal(batch.labels[1, :n], expected)
    weights = batch.weights[1, :n]
    assert weights[:row.prompt_len - 1].eq(0.25).all() and weights[row.prompt_len - 1:].eq(1).all()
    assert batch.weights[1, n:].eq(0).all()  # padding


def test_training_fits_the_targets_rows(model: Any, rows: list[feature_data.Row]) -> None:
    draft = _draft(model)
    settings = feature_train.TrainSettings(steps=60, warmup=5, lr=3e-3, tokens_per_batch=256)
    head = draft.lm_head.weight.detach()
    vocab_map = feature_train.vocab_index(draft.vocab, 320)
    batch = feature_train.collate(rows, range(len(rows)), vocab_map, settings)
    before = feature_train.losses(draft, head, batch, settings)[1]
    state = feature_train.train(draft, rows, settings, clock=_Ticks(), deadline=None, progress=SilentProgress())
    after = feature_train.losses(draft, head, batch, settings)[1]
    # the soft targets of a near-uniform tiny target cannot fall much; its greedy tokens can be learnt
    assert state.step == 60 and after["ce1"] < 0.5 * before["ce1"] and after["acc1"] > before["acc1"] + 0.3
    assert draft.lm_head.weight.equal(head) and not draft.training  # the head stays the target's


def test_a_budget_fixes_the_step_count(model: Any, rows: list[feature_data.Row]) -> None:
    clock = _Ticks()
    state = feature_train.train(_draft(model), rows, feature_train.TrainSettings(tokens_per_batch=128), clock=clock,
                                deadline=100.0, progress=SilentProgress())
    assert state.total is not None and state.step == state.total
    assert 60 <= clock.now <= 100 * (1 + feature_train.OVERRUN) + 5


def test_depth_two_trains_the_chain(model: Any, rows: list[feature_data.Row]) -> None:
    settings = feature_train.TrainSettings(depth=2, steps=2, tokens_per_batch=256)
    draft = _draft(model)
    batch = feature_train.collate(rows, [0, 1], feature_train.vocab_index(draft.vocab, 320), settings)
    loss, stats = feature_train.losses(draft, draft.lm_head.weight.detach(), batch, settings)
    assert {"ce1", "ce2", "acc2", "feat2"} <= set(stats) and loss.requires_grad


class _StopAt:
    """Progress whose training task raises KeyboardInterrupt after `at` steps."""

    def __init__(self, at: int) -> None:
        self.at = at

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[Any]:
        limit = self.at

        class Task:
            done = 0

            def advance(self, steps: int = 1) -> None:
                self.done += steps
                if self.done > limit:
                    raise KeyboardInterrupt

            def describe(self, text: str) -> None:
                return None

        yield Task()


@pytest.mark.parametrize("noise", [0.0, 0.1])
def test_resume_ends_with_the_uninterrupted_weights(model: Any, rows: list[feature_data.Row], noise: float) -> None:
    settings = feature_train.TrainSettings(steps=8, tokens_per_batch=128, warmup=2, feature_noise=noise)
    whole = _draft(model)
    feature_train.train(whole, rows, settings, clock=_Ticks(), deadline=None, progress=SilentProgress())
    saved: list[dict[str, Any]] = []
    cut = _draft(model)
    with pytest.raises(KeyboardInterrupt):
        feature_train.train(cut, rows, settings, clock=_Ticks(), deadline=None, progress=_StopAt(5),
                            checkpoint=lambda state: saved.append(torch.load(_roundtrip(state), weights_only=False)),
                            checkpoint_s=0.0)
    resumed = _draft(model)
    feature_train.train(resumed, rows, settings, clock=_Ticks(), deadline=None, progress=SilentProgress(),
                        resume=saved[-1])
    for (name, mine), theirs in zip(resumed.state_dict().items(), whole.state_dict().values(), strict=True):
        assert torch.equal(mine, theirs), name


def test_feature_noise_scales_with_each_feature_and_repeats_per_step() -> None:
    features = torch.randn(2, 3, 64) * torch.tensor([1.0, 100.0])[:, None, None]
    first = feature_train.noisy(features, 0.1, seed=0, step=4)
    assert torch.equal(first, feature_train.noisy(features, 0.1, seed=0, step=4))
    assert not torch.equal(first, feature_train.noisy(features, 0.1, seed=0, step=5))
    relative = (first - features).std(dim=(1, 2)) / features.abs().mean(dim=(1, 2))
    assert torch.allclose(relative, torch.full((2,), 0.1), rtol=0.3)


def _roundtrip(state: dict[str, Any]) -> Any:
    import io

    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


class _Slowing:
    """A clock that advances 1 s a reading, then `factor` s once `after` readings were taken."""

    def __init__(self, after: int, factor: float) -> None:
        self.now, self.reads, self.after, self.factor = 0.0, 0, after, factor

    def __call__(self) -> float:
        self.reads += 1
        self.now += 1.0 if self.reads <= self.after else self.factor
        return self.now


def test_a_machine_that_slows_down_shrinks_the_schedule_to_end_annealed(model: Any,
                                                                         rows: list[feature_data.Row]) -> None:
    clock = _Slowing(after=20, factor=3.0)
    state = feature_train.train(_draft(model), rows, feature_train.TrainSettings(tokens_per_batch=128), clock=clock,
                                deadline=200.0, progress=SilentProgress())
    # planned at 1 s a step (~190 steps), then 3 s a step: the cosine still runs to its end, inside the budget
    assert state.total is not None and state.step == state.total < 120
    assert clock.now <= 200 * (1 + feature_train.OVERRUN) + 5


def test_a_machine_that_speeds_up_trains_until_its_deadline(model: Any, rows: list[feature_data.Row]) -> None:
    clock = _Slowing(after=20, factor=0.5)
    state = feature_train.train(_draft(model), rows, feature_train.TrainSettings(tokens_per_batch=128), clock=clock,
                                deadline=200.0, progress=SilentProgress())
    # planned at 1 s a step (~190 steps), then 0.5 s a step: ~370 steps, ending near the deadline, not at 100 s
    assert state.total is not None and state.step == state.total > 300
    assert 200 * (1 - 2 * feature_train.REPLAN_SLACK) <= clock.now <= 200 * (1 + feature_train.OVERRUN)


def test_a_steady_pace_keeps_the_plan() -> None:
    state = feature_train.TrainState(step=50, total=100, seconds=50.0)
    pace, total = feature_train._replan((0, 0.0), 50.0, 100.0, state)
    assert total == 100 and pace == (50, 50.0)
    state = feature_train.TrainState(step=50, total=100, seconds=75.0)  # 1.5 s a step: 50 steps left need 75 s
    assert feature_train._replan((0, 0.0), 75.0, 100.0, state)[1] == 50 + int(25 / 1.5)
    state = feature_train.TrainState(step=50, total=100, seconds=51.0)  # within the slack: kept
    assert feature_train._replan((0, 0.0), 51.0, 100.0, state)[1] == 100


def test_a_machine_that_speeds_up_grows_the_schedule_to_use_its_budget() -> None:
    state = feature_train.TrainState(step=50, total=100, seconds=25.0)  # 0.5 s a step: 50 steps left need 25 s
    assert feature_train._replan((0, 0.0), 25.0, 100.0, state)[1] == 50 + int(75 / 0.5)
