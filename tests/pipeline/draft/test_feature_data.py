"""feature_data: batched greedy answers equal Hugging Face's one-prompt greedy generate, features and
labels line up with the target's own forward, shards resume, prompts are deterministic."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.pipeline.draft import feature_data
from specdec.pipeline.draft.clock import Clock, ClockKind
from specdec.pipeline.progress import SilentProgress


@pytest.fixture(scope="module")
def model(target: Path) -> object:
    return AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()


def _prompts(target: Path) -> list[list[int]]:
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    texts = ["the quick brown fox", "def add(a, b):", "a tree of drafts shares its prefix and more words here", "the"]
    return [tokenizer.encode(t) for t in texts]


def test_batched_answers_are_the_targets_greedy_text_with_its_features_and_labels(model, target: Path) -> None:  # type: ignore[no-untyped-def]
    prompts = _prompts(target)
    layer = 2
    rows = feature_data.generate(model, prompts, max_new=9, eos={0}, feature_layer=layer, pad=0)
    assert len(rows) == len(prompts)
    for row, prompt in zip(rows, prompts, strict=True):
        reference = model.generate(torch.tensor([prompt]), max_new_tokens=9, do_sample=False, eos_token_id=0,
                                   pad_token_id=0)[0]
        assert torch.equal(row.ids, reference[:len(row.ids)]) and row.prompt_len == len(prompt)
        captured: list[torch.Tensor] = []
        hook = model.model.layers[layer].register_forward_hook(
            lambda module, args, output, into=captured: into.append(output[0] if isinstance(output, tuple) else output))
        with torch.no_grad():
            logits = model(row.ids[None, :-1]).logits[0]
        hook.remove()
        assert torch.equal(row.labels, logits.argmax(-1))  # prompt positions too
        assert row.features.dtype == torch.float16 and row.features.shape == (len(row.ids) - 1, 64)
        torch.testing.assert_close(row.features.float(), captured[0][0], rtol=2e-3, atol=2e-3)


def test_a_stop_request_cuts_every_live_row(model, target: Path) -> None:  # type: ignore[no-untyped-def]
    calls = []
    rows = feature_data.generate(model, _prompts(target), max_new=20, eos={0}, feature_layer=1, pad=0,
                                 stop=lambda: calls.append(1) is None and len(calls) > 3)
    assert all(len(r.ids) - r.prompt_len <= 4 for r in rows)


def test_the_prompts_pass_is_reported_once_before_the_first_answer_step(model, target: Path) -> None:  # type: ignore[no-untyped-def]
    events: list[str] = []
    feature_data.generate(model, _prompts(target), max_new=5, eos={0}, feature_layer=1, pad=0,
                          stop=lambda: events.append("step") is None and False,
                          on_prefilled=lambda: events.append("prefilled"))
    assert events[0] == "prefilled" and events.count("prefilled") == 1 and "step" in events


def test_shards_resume_and_the_prompts_repeat(model, target: Path, tmp_path: Path, build_corpus) -> None:  # type: ignore[no-untyped-def]
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    settings = feature_data.DataSettings(batch=4, max_new=6, seed=2)

    def build(work: Path, batches: int) -> feature_data.Corpus:
        return build_corpus(model, tokenizer, work, settings, batches)  # type: ignore[no-any-return]

    whole = build(tmp_path / "whole", 3)
    build(tmp_path / "cut", 2)
    resumed = build(tmp_path / "cut", 3)  # reads the two shards, makes the third
    assert resumed.batches == whole.batches == 3 and len(list((tmp_path / "cut").glob("shard_*.pt"))) == 3
    assert [r.ids.tolist() for r in resumed.train + resumed.heldout] == \
        [r.ids.tolist() for r in whole.train + whole.heldout]
    assert resumed.heldout  # a tiny run still holds one answer out


def test_a_past_deadline_still_makes_the_first_batch(model, target: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    corpus = feature_data.build(model, tokenizer, tmp_path, feature_data.DataSettings(batch=2, max_new=30),
                                feature_layer=3, clock=Clock(ClockKind.wall), deadline=0.0, user_text=None,
                                progress=SilentProgress())
    assert corpus.batches == 1 and all(len(r.ids) - r.prompt_len == 1 for r in corpus.train + corpus.heldout)


def test_the_faster_dtype_is_one_of_the_two() -> None:
    assert feature_data.fastest_dtype(64, 128, rows=8, repeats=1) in (torch.float32, torch.bfloat16)


def test_greedy_picks_argmaxs_first_index_among_ties() -> None:
    logits = (torch.randn(3, 5, 700) * 3).to(torch.bfloat16)  # bfloat16 rows tie often
    logits[0, 0, [7, 300, 650]] = 100.0
    assert torch.equal(feature_data.greedy(logits), logits.argmax(-1))
    assert int(feature_data.greedy(logits)[0, 0]) == 7
