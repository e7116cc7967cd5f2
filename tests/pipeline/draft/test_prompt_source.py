"""prompt_source: the user's requests first, in their order, then the built-in ones; a resumed run
asks what the first run asked."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer

from specdec.pipeline.draft import feature_data, prompt_source


def test_the_users_requests_are_asked_first_then_the_built_in_ones(target: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(target))
    settings = feature_data.DataSettings(batch=2, recycle_every=0, seed=4)
    yours = [[5, 6, 7], [8], [9, 10]]
    source = prompt_source.PromptSource(tokenizer, settings, None, requests=yours)
    asked = [source.batch(i) for i in range(4)]
    assert asked[:2] == [[[8], [5, 6, 7]], [[9, 10]]]  # in the file's order, a batch shortest first
    built_in = prompt_source.PromptSource(tokenizer, settings, None)
    assert asked[2:] == [built_in.batch(0), built_in.batch(1)] and source.last_kind != "your prompts"
    resumed = prompt_source.PromptSource(tokenizer, settings, None, requests=yours)
    assert [resumed.batch(i, needed=False) for i in range(4)] == asked
