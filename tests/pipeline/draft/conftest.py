from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    """Tiny models on one thread: identical numbers under any load, and far faster on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama target checkpoint (4 layers, width 64)."""
    from support.tiny_models import make_model, make_tokenizer, save

    tokenizer = make_tokenizer()
    return save(make_model("llama", len(tokenizer), layers=4, hidden=64, seed=5), tokenizer,
                tmp_path_factory.mktemp("draft-target") / "target")
