"""The corpus the target writes: both kinds of rows cut short by the budget's chunk sizes, and the logits kept
from generating them equal a teacher-forced pass over the rows."""

from __future__ import annotations

import pytest
import torch
from support.tiny_models import make_model

from specdec.pipeline.draft import distill
from specdec.pipeline.progress import SilentProgress


def test_logits_kept_from_generation_equal_a_teacher_forced_pass() -> None:
    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    prefix = torch.randint(0, 96, (3, 5), generator=torch.Generator().manual_seed(0))
    for generator in (torch.Generator().manual_seed(2), None):
        rows, logits = distill.continue_rows_logits(model, prefix, 7, generator)
        assert rows.shape == (3, 12) and logits is not None and logits.shape == (3, 11, 96)
        with torch.no_grad():
            forced = model(input_ids=rows[:, :-1]).logits
        assert torch.allclose(logits.float(), forced, atol=2e-3)


def test_corpus_cut_by_its_chunk_sizes_keeps_both_kinds_and_aligned_teacher_logits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    monkeypatch.setattr(distill, "GENERATION_BATCH", 16)
    corpus = distill.build_corpus(model, samples=64, seq=16, seed=0, start_token=1, vocab=96, calib=None,
                                  progress=SilentProgress(), chunk_rows=lambda done: 0 if done else 16)
    # one chunk of 16 rows, then the budget's share is spent: 14 train rows of each kind, 2 held out of each
    assert corpus.train.shape == (28, 17) and len(corpus.heldout) == 2 and len(corpus.policy) == 2
    assert corpus.teacher is not None and corpus.teacher.shape == (28, 16, 96)
    with torch.no_grad():
        forced = model(input_ids=corpus.train[:, :-1]).logits
    assert torch.allclose(corpus.teacher.float(), forced, atol=2e-3)


def test_user_text_rows_get_their_teacher_logits_in_the_text_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --calib the user's windows are labelled while the corpus is written (the budget counts them
    there), chunk by chunk, aligned with the rows they train: the training step computes no target pass."""
    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    monkeypatch.setattr(distill, "GENERATION_BATCH", 8)
    calib = torch.randint(0, 96, (400,), generator=torch.Generator().manual_seed(3)).tolist()
    corpus = distill.build_corpus(model, samples=16, seq=16, seed=0, start_token=1, vocab=96, calib=calib,
                                  progress=SilentProgress())
    assert corpus.train.shape == (42, 17)  # 14 train rows of each kind: sampled, greedy, user text
    assert corpus.teacher is not None and corpus.teacher.shape == (42, 16, 96)
    with torch.no_grad():
        forced = model(input_ids=corpus.train[:, :-1]).logits
    assert torch.allclose(corpus.teacher.float(), forced, atol=2e-3)
    teacher = distill.Teacher(model, corpus.train, 96, corpus.teacher)
    assert teacher.cache is not None and torch.equal(teacher.cache, corpus.teacher)  # nothing left to compute


def test_chunks_follow_the_sizes_asked_for() -> None:
    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    asked: list[int] = []

    def sizes(done: int) -> int:
        asked.append(done)
        return {0: 3, 3: 5}.get(done, 0)

    corpus = distill.build_corpus(model, samples=64, seq=16, seed=0, start_token=1, vocab=96, calib=None,
                                  progress=SilentProgress(), chunk_rows=sizes)
    assert asked == [0, 3, 8]  # 3 rows, then 5, then the share is spent
    assert len(corpus.train) + len(corpus.heldout) + len(corpus.policy) == 2 * 8


def test_a_spent_budget_times_one_step_not_three() -> None:
    import copy
    import time

    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    corpus = distill.build_corpus(model, samples=16, seq=16, seed=0, start_token=1, vocab=96, calib=None,
                                  progress=SilentProgress())
    settings = distill.TrainSettings(steps=None, minutes=1.0, batch=2, lr=1e-3, seed=0, checkpoint_minutes=0)
    saved: list[dict[str, object]] = []
    for param in model.parameters():
        param.requires_grad_(False)
    result = distill.train(model, copy.deepcopy(model), corpus, settings, deadline=time.time() - 1, resume=None,
                           save=saved.append, progress=SilentProgress())
    assert result["steps"] == 1 and saved[0]["total"] == 1  # the count fixed (and stored for resume) is one
