from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

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


BuildCorpus = Callable[[Any, Any, Path, Any, int], Any]


@pytest.fixture
def build_corpus() -> BuildCorpus:
    """feature_data.build into `work` for `batches` batches, with no deadline (a resumed run reuses `work`)."""
    from specdec.pipeline.draft import feature_data
    from specdec.pipeline.draft.clock import Clock, ClockKind
    from specdec.pipeline.progress import SilentProgress

    def build(model: Any, tokenizer: Any, work: Path, settings: Any, batches: int) -> Any:
        work.mkdir(exist_ok=True)
        return feature_data.build(model, tokenizer, work, settings, feature_layer=3, clock=Clock(ClockKind.wall),
                                  deadline=float("inf"), user_text=None, progress=SilentProgress(),
                                  max_batches=batches)

    return build
