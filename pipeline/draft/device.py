"""Where a feature draft's answers, training and evaluation run: a CUDA GPU when torch sees one, else the CPU.

The target's answers are most of a feature draft's budget, and a GPU makes them one to two orders of
magnitude faster than a 2-core CPU, so `auto` (the default) takes it. Everything the stages keep
between steps (the answers' shards, the draft's checkpoint and files) stays on the CPU: a run made on
a GPU resumes on one, and its outputs read anywhere. torch is imported inside the functions: the CLI
imports this module to parse `--torch-device`.
"""

from __future__ import annotations

import enum
from typing import Any

from specdec.pipeline.errors import InputError, setting


class DraftDevice(enum.StrEnum):
    auto = "auto"  # cuda when torch sees a CUDA GPU, else cpu
    cpu = "cpu"
    cuda = "cuda"


def resolve(choice: DraftDevice | None) -> Any:
    """The torch.device `choice` names; `cuda` where torch sees none is an InputError."""
    import torch

    choice = choice or DraftDevice.auto
    available = torch.cuda.is_available()
    if choice is DraftDevice.cuda and not available:
        build = f"a build with CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
        raise InputError(f"{setting('torch_device')} cuda: torch {torch.__version__} ({build}) sees no CUDA GPU",
                         f"install a CUDA build of torch on a machine with an NVIDIA GPU, or pass "
                         f"{setting('torch_device')} cpu")
    if choice is DraftDevice.cpu or not available:
        return torch.device("cpu")
    return torch.device("cuda", torch.cuda.current_device())


def model_device(model: Any) -> Any:
    """The torch.device `model`'s weights are on (where its inputs must be made)."""
    return next(model.parameters()).device


def synchronize(device: Any) -> None:
    """Wait for the work queued on `device` (CUDA runs asynchronously): before a clock reading."""
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def describe(device: Any) -> str:
    """'cpu', or 'cuda:0 (NVIDIA H100 80GB HBM3)': what the report records."""
    import torch

    if device.type != "cuda":
        return str(device.type)
    return f"{device} ({torch.cuda.get_device_name(device)})"
