"""Load Hugging Face checkpoints (local directories, hub ids, or the built-in demo: inputs/checkpoint.py
resolves the argument)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import InputError, UnsupportedModelError
from specdec.pipeline.export.architectures import Architecture, lookup
from specdec.pipeline.graphs.files import sha256_file
from specdec.pipeline.inputs.checkpoint import resolve_checkpoint

log = logging.getLogger(__name__)

_CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")


@dataclass
class Checkpoint:
    source: str
    config: Any
    architecture: Architecture
    model: Any
    tokenizer: Any

    @property
    def tokenizer_size(self) -> int:
        return len(self.tokenizer)


def _from_pretrained(loader: Any, source: str, role: str, **kwargs: Any) -> Any:
    try:
        return loader.from_pretrained(source, **kwargs)
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(
            f"cannot load {role} '{source}': {reason}",
            "pass a local checkpoint directory (no model hub is reachable offline)",
        ) from exc


def load_config(source: str, role: str) -> tuple[Any, Architecture]:
    from transformers import AutoConfig

    config = _from_pretrained(AutoConfig, source, role)
    architecture = lookup(getattr(config, "model_type", "unknown"))
    declared = list(getattr(config, "architectures", None) or [])
    if declared and not any(name.endswith(_CAUSAL_LM_SUFFIXES) for name in declared):
        raise UnsupportedModelError(
            f"{role} '{source}' is a {declared[0]}, not a causal language model",
            "export the *ForCausalLM checkpoint of the model",
        )
    return config, architecture


def load_tokenizer(source: str, role: str) -> Any:
    from transformers import AutoTokenizer

    tokenizer = _from_pretrained(AutoTokenizer, source, role)
    if not getattr(tokenizer, "is_fast", False):
        raise InputError(
            f"{role} '{source}' has only a slow tokenizer",
            "save a fast tokenizer (tokenizer.json) with the checkpoint; the runtime reads tokenizer.json",
        )
    return tokenizer


def load_model(source: str, role: str, config: Any, dtype: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    config._attn_implementation = "eager"  # the tree mask is an additive float mask (docs/design.md §2)
    model = _from_pretrained(
        AutoModelForCausalLM,
        source,
        role,
        config=config,
        dtype=getattr(torch, dtype),
        attn_implementation="eager",
    )
    return model.eval()


def generation_eos(source: str) -> Any:
    """EOS ids from generation_config.json, which may list more than the tokenizer's one."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(source).eos_token_id
    except (OSError, ValueError):
        return None


def source_digests(source: str) -> dict[str, str]:
    """sha256 of each file of a local checkpoint, for the bundle's lineage."""
    path = Path(source)
    if not path.is_dir():
        return {"hub_id": source}
    return {file.name: sha256_file(file) for file in sorted(path.iterdir()) if file.is_file()}


def load_checkpoint(spec: str, role: str, dtype: str, *, with_model: bool = True) -> Checkpoint:
    source = resolve_checkpoint(spec, role)
    config, architecture = load_config(source, role)
    tokenizer = load_tokenizer(source, role)
    model = load_model(source, role, config, dtype) if with_model else None
    return Checkpoint(source=source, config=config, architecture=architecture, model=model, tokenizer=tokenizer)
