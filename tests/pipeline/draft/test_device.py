"""device: `auto` takes a CUDA GPU when torch sees one, `cuda` without one is a one-line error, and
every tensor the feature draft's data, training and evaluation make is placed explicitly (on the
model's device, or the CPU on purpose), which is what lets them run on a GPU.

The placement test runs the stages with torch's default device set to `meta`
(support/placement.py): CI has no GPU."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from support.placement import unplaced_tensors_on_meta
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.pipeline.draft import feature_data, feature_eval, feature_train
from specdec.pipeline.draft.device import DraftDevice, resolve
from specdec.pipeline.draft.feature_model import FeatureDraft
from specdec.pipeline.errors import InputError
from specdec.pipeline.progress import SilentProgress


def test_auto_and_cpu_take_the_cpu_without_a_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve(DraftDevice.auto) == torch.device("cpu")
    assert resolve(None) == torch.device("cpu")
    assert resolve(DraftDevice.cpu) == torch.device("cpu")


def test_auto_takes_the_gpu_torch_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert resolve(DraftDevice.auto) == torch.device("cuda", 0)
    assert resolve(DraftDevice.cpu) == torch.device("cpu")


def test_cuda_without_a_gpu_names_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(InputError) as caught:
        resolve(DraftDevice.cuda)
    assert "sees no CUDA GPU" in caught.value.problem and "cpu" in caught.value.fix


@pytest.fixture(scope="module")
def model(target: Path) -> Any:
    return AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()


def test_data_training_and_evaluation_place_every_tensor(model: Any, target: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    prompts = [tokenizer.encode(t) for t in ("the quick brown fox", "def add(a, b):", "a tree")]
    expected = feature_data.generate(model, prompts, max_new=6, eos={-1}, feature_layer=3, pad=0)
    with unplaced_tensors_on_meta():
        rows = feature_data.generate(model, prompts, max_new=6, eos={-1}, feature_layer=3, pad=0)
    for row, reference in zip(rows, expected, strict=True):
        assert row.ids.device.type == "cpu" and torch.equal(row.ids, reference.ids)
        assert torch.equal(row.labels, reference.labels) and torch.equal(row.features, reference.features)
    draft = FeatureDraft.from_target(model, layers=1, seed=0, input_norms=True)
    feature_train.init_for_training(draft, 0)
    settings = feature_train.TrainSettings(steps=2, depth=2, feature_noise=0.1, tokens_per_batch=64, warmup=1)
    with unplaced_tensors_on_meta():
        state = feature_train.train(draft, rows, settings, clock=lambda: 0.0, deadline=None,
                                    progress=SilentProgress())
        report = feature_eval.evaluate(draft, rows, depth=3)
    assert state.step == 2 and report["positions"] > 0
    assert all(p.device.type == "cpu" for p in draft.parameters())

