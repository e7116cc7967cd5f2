"""A Hugging Face checkpoint's weight files, checked where `export` and `draft` read them: each file whole
(a truncated download is named), and the weights covering the config exactly (transformers fills a
tensor the files lack with random values, and drops one the config has no place for, with a log line
only: exported or distilled, that is a wrong model with exit 0)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import InputError

WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "model*.bin")


def check_weight_files(source: str | Path, role: str) -> None:
    """Every safetensors file of a local checkpoint is whole: safetensors reads the header (not the tensors)
    and checks that the tensors it lists cover the file exactly."""
    from safetensors import safe_open

    path = Path(source)
    for file in sorted(path.glob("*.safetensors")) if path.is_dir() else []:
        try:
            with safe_open(str(file), "pt"):
                pass
        except Exception as exc:  # safetensors' SafetensorError derives from Exception only
            reason = " ".join(str(exc).split()) or type(exc).__name__
            raise InputError(f"{role} weight file '{file}' is damaged or incomplete ({reason})",
                             "download or copy the file again") from None


def check_coverage(source: str | Path, role: str, loading: dict[str, Any]) -> None:
    """`loading`: what `from_pretrained(..., output_loading_info=True)` reports; InputError unless every
    tensor of the config came from the files and every tensor of the files has a place in the config."""
    problems = [(what, sorted(loading.get(key) or [])) for key, what in
                (("missing_keys", "missing from the weights"), ("unexpected_keys", "not in the config"),
                 ("mismatched_keys", "of another shape than the config's"))]
    found = [f"{len(keys)} tensors {what} ({', '.join(str(k) for k in keys[:3])}{', ...' if len(keys) > 3 else ''})"
             for what, keys in problems if keys]
    if found:
        files = ", ".join(sorted(p.name for pattern in WEIGHT_PATTERNS for p in Path(source).glob(pattern)))
        raise InputError(f"the weights of {role} '{source}' ({files or 'weight files'}) do not match its "
                         f"config.json: {'; '.join(found)}", "use the config.json that came with these weights")


@contextmanager
def transformers_quiet() -> Iterator[None]:
    """transformers' warnings off while it loads what specdec checks itself: its loading report prints the
    tensors a checkpoint lacks as a table, and check_coverage makes that report the command's one line.
    The level is set here, not left to TRANSFORMERS_VERBOSITY (read once, when transformers is first
    imported), and with CI=1 in the environment transformers also hands its records to the root logger."""
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity(logging.ERROR)
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
