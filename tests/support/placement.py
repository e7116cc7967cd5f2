"""A block whose new tensors default to the `meta` device: code that makes a tensor without naming a
device fails there against a CPU model, as it would put the tensor on the CPU and fail against a
CUDA one. How the feature draft's GPU path is tested on machines without a GPU."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def unplaced_tensors_on_meta() -> Iterator[None]:
    torch.set_default_device("meta")
    try:
        yield
    finally:
        torch.set_default_device(None)
