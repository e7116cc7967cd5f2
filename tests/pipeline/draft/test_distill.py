"""The corpus the target writes: both kinds of rows cut short by a deadline, and the logits kept
from generating them equal a teacher-forced pass over the rows."""

from __future__ import annotations

import time

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


def test_corpus_cut_by_its_deadline_keeps_both_kinds_and_aligned_teacher_logits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    monkeypatch.setattr(distill, "GENERATION_BATCH", 16)
    corpus = distill.build_corpus(model, samples=64, seq=16, seed=0, start_token=1, vocab=96, calib=None,
                                  progress=SilentProgress(), deadline=time.time() - 1)
    # one chunk of 16 rows past the deadline: 14 train rows of each kind, 2 held out of each
    assert corpus.train.shape == (28, 17) and len(corpus.heldout) == 2 and len(corpus.policy) == 2
    assert corpus.teacher is not None and corpus.teacher.shape == (28, 16, 96)
    with torch.no_grad():
        forced = model(input_ids=corpus.train[:, :-1]).logits
    assert torch.allclose(corpus.teacher.float(), forced, atol=2e-3)
