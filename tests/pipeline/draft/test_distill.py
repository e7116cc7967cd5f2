"""The corpus the target writes: both kinds of rows cut short by the budget's chunk sizes, and the teacher's
top log-probabilities kept from generating them equal a teacher-forced pass over the rows; the sparse loss."""

from __future__ import annotations

import pytest
import torch
from support.tiny_models import make_model

from specdec.pipeline.draft import distill
from specdec.pipeline.progress import SilentProgress


def _assert_tops_of(tops: distill.TeacherTops, logits: torch.Tensor) -> None:
    """`tops` are the top-64 log-probabilities of `logits` (float16 rounding aside)."""
    logp = torch.log_softmax(logits, dim=-1)
    assert tops.logp.shape == (*logits.shape[:-1], 64)
    assert torch.allclose(tops.logp.float(), logp.gather(-1, tops.ids.long()), atol=2e-2)
    # the kept ids are the most likely: nothing outside them beats the last one kept (ties aside)
    floor = tops.logp.float()[..., -1:]
    outside = logp.scatter(-1, tops.ids.long(), float("-inf"))
    assert bool((outside <= floor + 2e-2).all())


def test_logits_kept_from_generation_equal_a_teacher_forced_pass() -> None:
    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    prefix = torch.randint(0, 96, (3, 5), generator=torch.Generator().manual_seed(0))
    for generator in (torch.Generator().manual_seed(2), None):
        rows, tops = distill.continue_rows_tops(model, prefix, 7, generator)
        assert rows.shape == (3, 12) and tops is not None and tops.logp.shape == (3, 11, 64)
        with torch.no_grad():
            forced = model(input_ids=rows[:, :-1]).logits
        _assert_tops_of(tops, forced)


def test_corpus_cut_by_its_chunk_sizes_keeps_both_kinds_and_aligned_teacher_logits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    monkeypatch.setattr(distill, "GENERATION_BATCH", 16)
    corpus = distill.build_corpus(model, samples=64, seq=16, seed=0, start_token=1, calib=None,
                                  progress=SilentProgress(), chunk_rows=lambda done: 0 if done else 16)
    # one chunk of 16 rows, then the budget's share is spent: 14 train rows of each kind, 2 held out of each
    assert corpus.train.shape == (28, 17) and len(corpus.heldout) == 2 and len(corpus.policy) == 2
    assert corpus.teacher is not None and len(corpus.teacher) == 28
    with torch.no_grad():
        forced = model(input_ids=corpus.train[:, :-1]).logits
    _assert_tops_of(corpus.teacher, forced)


def test_user_text_rows_get_their_teacher_logits_in_the_text_phase(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --calib the user's windows are labelled while the corpus is written (the budget counts them
    there), chunk by chunk, aligned with the rows they train: the training step computes no target pass."""
    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    monkeypatch.setattr(distill, "GENERATION_BATCH", 8)
    calib = torch.randint(0, 96, (400,), generator=torch.Generator().manual_seed(3)).tolist()
    corpus = distill.build_corpus(model, samples=16, seq=16, seed=0, start_token=1, calib=calib,
                                  progress=SilentProgress())
    assert corpus.train.shape == (42, 17)  # 14 train rows of each kind: sampled, greedy, user text
    assert corpus.teacher is not None and len(corpus.teacher) == 42
    with torch.no_grad():
        forced = model(input_ids=corpus.train[:, :-1]).logits
    _assert_tops_of(corpus.teacher, forced)
    def no_pass(**_: object) -> None:
        raise AssertionError("the teacher ran the target again")

    teacher = distill.Teacher(no_pass, corpus.train, corpus.teacher)
    assert torch.equal(teacher.tops.ids, corpus.teacher.ids) and torch.equal(teacher.tops.logp, corpus.teacher.logp)


def test_chunks_follow_the_sizes_asked_for() -> None:
    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    asked: list[int] = []

    def sizes(done: int) -> int:
        asked.append(done)
        return {0: 3, 3: 5}.get(done, 0)

    corpus = distill.build_corpus(model, samples=64, seq=16, seed=0, start_token=1, calib=None,
                                  progress=SilentProgress(), chunk_rows=sizes)
    assert asked == [0, 3, 8]  # 3 rows, then 5, then the share is spent
    assert len(corpus.train) + len(corpus.heldout) + len(corpus.policy) == 2 * 8


def test_a_spent_budget_times_one_step_not_three() -> None:
    import copy
    import time

    model = make_model("llama", vocab=96, layers=2, hidden=64, seed=1).eval()
    corpus = distill.build_corpus(model, samples=16, seq=16, seed=0, start_token=1, calib=None,
                                  progress=SilentProgress())
    settings = distill.TrainSettings(steps=None, minutes=1.0, batch=2, lr=1e-3, seed=0, checkpoint_minutes=0)
    saved: list[dict[str, object]] = []
    for param in model.parameters():
        param.requires_grad_(False)
    result = distill.train(model, copy.deepcopy(model), corpus, settings, deadline=time.time() - 1, resume=None,
                           save=saved.append, progress=SilentProgress())
    assert result["steps"] == 1 and saved[0]["total"] == 1  # the count fixed (and stored for resume) is one


def test_the_sparse_loss_is_zero_only_at_the_teachers_distribution() -> None:
    generator = torch.Generator().manual_seed(0)
    target = torch.randn(2, 3, 96, generator=generator) * 3
    tops = distill.TeacherTops.of(target)
    assert float(distill._kl_loss(target, tops)) == pytest.approx(0.0, abs=2e-3)
    other = target + torch.randn(2, 3, 96, generator=generator)
    assert float(distill._kl_loss(other, tops)) > 0.05
    # the draft learns the tail as one bucket: moving mass among tail tokens changes nothing
    tail = torch.ones(96, dtype=torch.bool)
    tail[tops.ids[0, 0].long()] = False
    shuffled = target.clone()
    shuffled[0, 0, tail] = target[0, 0, tail].flip(0)
    assert float(distill._kl_loss(shuffled, tops)) == pytest.approx(float(distill._kl_loss(target, tops)), abs=2e-3)


def test_a_checkpoint_with_whole_teacher_logits_resumes_as_tops() -> None:
    logits = torch.randn(4, 5, 96, generator=torch.Generator().manual_seed(1)).half()
    rows = torch.zeros(4, 6, dtype=torch.long)
    state = {"train": rows, "heldout": rows, "policy": rows, "context": 3, "teacher": logits}
    corpus = distill.Corpus.from_state(state)
    assert corpus.teacher is not None
    _assert_tops_of(corpus.teacher, logits.float())
    again = distill.Corpus.from_state(corpus.state())
    assert again.teacher is not None and torch.equal(again.teacher.ids, corpus.teacher.ids)


@pytest.mark.parametrize(("busy", "threads"), [(0.0, 4), (0.27, 4), (1.6, 2), (2.4, 2), (3.9, 1), (9.0, 1)])
def test_default_threads_are_the_cores_left_idle(monkeypatch, busy: float, threads: int) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(distill.os, "cpu_count", lambda: 4)
    monkeypatch.setattr(distill, "busy_cores", lambda: busy)
    monkeypatch.setattr(distill.os, "getloadavg", lambda: (4.0, 4.0, 4.0))  # a job that has ended, still in the mean
    assert distill.default_threads() == threads
    monkeypatch.setattr(distill, "busy_cores", lambda: None)  # no /proc/stat: the load average
    monkeypatch.setattr(distill.os, "getloadavg", lambda: (busy, busy, busy))
    assert distill.default_threads() == threads


def test_busy_cores_are_read_from_the_kernels_tick_counts(monkeypatch, tmp_path) -> None:  # type: ignore[no-untyped-def]
    assert distill.busy_cores(window_s=0.05) is not None  # this machine's own (Linux)
    stat = tmp_path / "stat"
    # user nice system idle iowait irq softirq steal: 300 of 400 ticks busy between the two reads
    reads = iter(["cpu  100 0 0 900 0 0 0 0 0 0\ncpu0 1 2 3\n", "cpu  350 0 40 990 10 0 10 0 0 0\ncpu0 1 2 3\n"])
    monkeypatch.setattr(distill.time, "sleep", lambda s: stat.write_text(next(reads)))
    monkeypatch.setattr(distill.os, "cpu_count", lambda: 4)
    stat.write_text(next(reads))
    assert distill.busy_cores(stat=stat) == pytest.approx(4 * 300 / 400)
    assert distill.busy_cores(stat=tmp_path / "none") is None
