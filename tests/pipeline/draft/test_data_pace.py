"""data_pace: a batch starts only when its own prompts' pass and a share of an average batch's answering
fit before the data deadline."""

from __future__ import annotations

from pathlib import Path

import torch

from specdec.pipeline.draft import feature_data
from specdec.pipeline.draft.data_pace import BatchPace, prompt_cells, too_late


def test_without_prefill_timings_a_batch_needs_a_quarter_of_an_average_batch() -> None:
    pace = BatchPace()
    for _ in range(4):
        pace.add(seconds=100.0, prefill_s=None, prompt_cells=None)  # shards of an older run
    assert not too_late(now=100.0, deadline=130.0, pace=pace)
    assert too_late(now=110.0, deadline=130.0, pace=pace)  # 20 s left: cut after its prompts
    assert too_late(now=140.0, deadline=130.0, pace=pace)
    assert not too_late(now=0.0, deadline=1.0, pace=BatchPace())  # nothing measured yet


def test_long_prompts_need_their_own_pass_before_the_deadline() -> None:
    pace = BatchPace()
    pace.add(seconds=100.0, prefill_s=20.0, prompt_cells=128 * 100)  # 80 s answering
    short = [[1] * 50] * 128
    recycled = [[1] * 20] * 127 + [[1] * 384]  # rows pad to the longest
    assert prompt_cells(recycled) == 128 * 384
    assert pace.prefill_estimate(short) == 10.0
    assert abs(pace.prefill_estimate(recycled) - 76.8) < 1e-9
    assert not too_late(now=0.0, deadline=90.0, pace=pace, prompts=short)  # 10 + 20 s
    assert too_late(now=0.0, deadline=90.0, pace=pace, prompts=recycled)  # 76.8 + 20 s


def test_shard_sidecars_carry_the_timings_and_older_ones_count_as_answering(tmp_path: Path) -> None:
    row = feature_data.Row(ids=torch.arange(4), prompt_len=2, features=torch.zeros(3, 8, dtype=torch.float16),
                           labels=torch.arange(3))
    feature_data.save_shard(tmp_path / "shard_0000.pt", [row], 50.0, {"prefill_s": 10.0, "prompt_cells": 400})
    feature_data.save_shard(tmp_path / "shard_0001.pt", [row], 30.0)
    pace = BatchPace()
    pace.add_record(feature_data.read_sidecar(tmp_path / "shard_0000.pt"))
    pace.add_record(feature_data.read_sidecar(tmp_path / "shard_0001.pt"))
    assert (pace.batches, pace.prefill_s, pace.prompt_cells, pace.answer_s) == (2, 10.0, 400, 70.0)
