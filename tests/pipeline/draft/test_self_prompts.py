"""self_prompts: the user turn's start from the chat template, sampled requests that are seeded and leave
the global random state alone, held-out topics dropped; PromptSource mixes them in and resumes without
writing requests for batches already on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from support.placement import unplaced_tensors_on_meta
from transformers import AutoModelForCausalLM, AutoTokenizer

from specdec.pipeline.draft import feature_data, prompt_source, self_prompts
from specdec.pipeline.draft.pruning import SUPPORTED

TEMPLATE = "<sys>be brief{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}<assistant>"


@pytest.fixture(scope="module")
def model(target: Path) -> object:
    return AutoModelForCausalLM.from_pretrained(str(target), dtype=torch.float32).eval()


@pytest.fixture
def chat_tokenizer(target: Path) -> object:
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    tokenizer.chat_template = TEMPLATE
    return tokenizer


def test_the_user_turn_starts_where_the_template_puts_the_message(chat_tokenizer) -> None:  # type: ignore[no-untyped-def]
    start = self_prompts.user_turn_start(chat_tokenizer)
    assert start == chat_tokenizer.encode("<sys>be brief<user>", add_special_tokens=False)
    chat_tokenizer.chat_template = "{{ raise_exception('system turns only') }}"
    assert self_prompts.user_turn_start(chat_tokenizer) is None


def test_clean_keeps_distinct_allowed_requests_in_order() -> None:
    texts = ["  How do I start a vegetable garden? ", "ok", "Write a haiku about rain.",
             "How do I start a vegetable garden?", "Explain what a hash map is."]
    assert self_prompts.clean(texts) == ["How do I start a vegetable garden?", "Explain what a hash map is."]


def test_requests_are_seeded_and_leave_the_global_random_state(model, chat_tokenizer) -> None:  # type: ignore[no-untyped-def]
    start = self_prompts.user_turn_start(chat_tokenizer)
    assert start is not None
    torch.manual_seed(123)
    before = torch.get_rng_state()
    first = self_prompts.write_requests(model, chat_tokenizer, start, 6, seed=4, stop_ids={0})
    assert torch.equal(torch.get_rng_state(), before)
    assert first == self_prompts.write_requests(model, chat_tokenizer, start, 6, seed=4, stop_ids={0})
    assert first != self_prompts.write_requests(model, chat_tokenizer, start, 6, seed=5, stop_ids={0})
    assert 0 < len(first) <= 6 and all(t == t.strip() and len(t) >= 12 for t in first)
    with unplaced_tensors_on_meta():  # every tensor placed: what lets a GPU write them (device.py)
        assert first == self_prompts.write_requests(model, chat_tokenizer, start, 6, seed=4, stop_ids={0})


@pytest.mark.parametrize("arch", SUPPORTED)
def test_every_supported_architecture_writes_requests(arch: str, chat_tokenizer) -> None:  # type: ignore[no-untyped-def]
    from support.tiny_models import make_model

    start = self_prompts.user_turn_start(chat_tokenizer)
    assert start is not None
    model = make_model(arch, len(chat_tokenizer), layers=2, hidden=64, seed=1)
    written = self_prompts.write_requests(model, chat_tokenizer, start, 4, seed=0, stop_ids={0})
    assert written == self_prompts.write_requests(model, chat_tokenizer, start, 4, seed=0, stop_ids={0})
    assert written and all(isinstance(t, str) and len(t) >= 12 for t in written)


class _Writer:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    def __call__(self, seed: int, count: int) -> list[str]:
        self.calls.append((seed, count))
        return [f"request number {seed} {i} please" for i in range(count)]


def test_a_share_of_batches_asks_the_targets_own_requests(chat_tokenizer) -> None:  # type: ignore[no-untyped-def]
    settings = feature_data.DataSettings(batch=3, recycle_every=4, self_share=0.5, seed=1)
    writer = _Writer()
    source = prompt_source.PromptSource(chat_tokenizer, settings, None, writer=writer)
    chosen = [i for i in range(40) if source.self_written(i)]
    assert 10 < len(chosen) < 30 and not any(i % 4 == 3 for i in chosen)  # recycled batches stay recycled
    index = chosen[0]
    prompts = source.batch(index)
    rendered = chat_tokenizer.decode(prompts[0])
    assert rendered.startswith("<sys>be brief<user>request number") and rendered.endswith("<assistant>")
    assert writer.calls == [(settings.seed * 1_000_033 + index, 3)]
    assert source.batch(index, needed=False) == [] and len(writer.calls) == 1  # answers on disk: nothing written
    never = prompt_source.PromptSource(chat_tokenizer, feature_data.DataSettings(self_share=0.0), None, writer=writer)
    assert not any(never.self_written(i) for i in range(40))
    plain = prompt_source.PromptSource(chat_tokenizer, settings, [1, 2, 3] * 30, writer=writer)  # the user's text
    assert plain.writer is None


def test_a_resumed_run_repeats_the_first_runs_data_without_writing_again(  # type: ignore[no-untyped-def]
        model, chat_tokenizer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, build_corpus) -> None:
    settings = feature_data.DataSettings(batch=2, max_new=4, self_share=1.0, seed=3)
    written: list[int] = []
    original = self_prompts.write_requests

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        written.append(kwargs["seed"])
        return original(*args, **kwargs)

    monkeypatch.setattr(self_prompts, "write_requests", counting)

    def build(work: Path, batches: int) -> feature_data.Corpus:
        return build_corpus(model, chat_tokenizer, work, settings, batches)  # type: ignore[no-any-return]

    whole = build(tmp_path / "whole", 3)
    assert len(written) == 3 and whole.sources == {"self-written": 3}  # batches 0-2, none recycled (every 4th is)
    written.clear()
    build(tmp_path / "cut", 2)
    resumed = build(tmp_path / "cut", 3)
    assert len(written) == 3  # two in the first run, only the missing third when resumed
    assert resumed.sources == whole.sources
    assert [r.ids.tolist() for r in resumed.train + resumed.heldout] == \
        [r.ids.tolist() for r in whole.train + whole.heldout]
    start = chat_tokenizer.encode("<sys>be brief<user>", add_special_tokens=False)
    assert all(r.ids[:len(start)].tolist() == start for r in whole.train + whole.heldout)
