"""Resolve and load Hugging Face checkpoints (local directories, hub ids, or the built-in demo)."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import InputError, UnsupportedModelError
from specdec.pipeline.export.architectures import Architecture, lookup, supported
from specdec.pipeline.graphs.files import sha256_file
from specdec.pipeline.inputs.weights import WEIGHT_PATTERNS, check_coverage, check_weight_files

log = logging.getLogger(__name__)

DEMO_NAME = "demo"
_CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")
# Files a tokenizer is loaded from (one suffices): fast, slow (SentencePiece, BPE vocab) tokenizers.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def demo_dir(role: str) -> Path:
    """Directory of the built-in demo target or draft shipped as package data."""
    path = Path(str(resources.files("specdec.pipeline.demo") / role))
    if not (path / "config.json").is_file():
        raise InputError(
            f"the built-in demo {role} is missing from this installation ({path})",
            "reinstall specdec, or train it with `python scripts/train_demo.py`",
        )
    return path


def resolve(spec: str, role: str) -> str:
    """Map a user's TARGET/DRAFT argument to something `from_pretrained` accepts."""
    if spec == DEMO_NAME:
        return str(demo_dir(role))
    path = Path(spec).expanduser()
    if path.exists():
        if path.is_file() and path.suffix.lower() == ".gguf":
            raise InputError(f"{role} '{spec}' is a GGUF file; export reads Hugging Face checkpoint directories",
                             "pass the directory of the Hugging Face checkpoint (config.json, *.safetensors)")
        if not path.is_dir():
            raise InputError(f"{role} '{spec}' is a file, not a checkpoint directory", "pass the directory")
        if not (path / "config.json").is_file():
            raise InputError(
                f"{role} '{spec}' is not a Hugging Face checkpoint (no config.json)",
                "pass a directory written by `save_pretrained`, or 'demo'",
            )
        if not any(any(path.glob(pattern)) for pattern in WEIGHT_PATTERNS):
            raise InputError(
                f"{role} '{spec}' has a config.json but no weights (*.safetensors or pytorch_model.bin)",
                "copy the weight files into the directory",
            )
        return str(path)
    looks_like_hub_id = spec.count("/") == 1 and not spec.startswith((".", "/", "~"))
    if not looks_like_hub_id:
        raise InputError(f"{role} checkpoint '{spec}' does not exist", "pass a local checkpoint directory")
    return spec


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


def _declared_model_type(source: str) -> str | None:
    """The `model_type` a local checkpoint's config.json declares (None: a hub id, or none declared)."""
    try:
        declared = json.loads((Path(source) / "config.json").read_bytes()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None  # transformers' own loader says what is wrong with the file
    return declared if isinstance(declared, str) else None


def load_config(source: str, role: str) -> tuple[Any, Architecture]:
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = _declared_model_type(source)
    if model_type is not None and model_type not in CONFIG_MAPPING:
        # transformers cannot even read the config: an unsupported model (exit 4), not a bad path
        raise UnsupportedModelError(f"{role} '{source}' is a '{model_type}' model, which neither transformers nor "
                                    "specdec knows", f"export a supported architecture ({', '.join(supported())})")
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

    path = Path(source)
    if path.is_dir() and not any((path / name).is_file() for name in _TOKENIZER_FILES):
        raise InputError(f"{role} '{source}' has no tokenizer files ({', '.join(_TOKENIZER_FILES[:2])})",
                         "copy the model's tokenizer files (tokenizer.json, tokenizer_config.json) into the directory")
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

    check_weight_files(source, role)
    config._attn_implementation = "eager"  # the tree mask is an additive float mask (docs/design.md §2)
    try:
        model, loading = _from_pretrained(
            AutoModelForCausalLM,
            source,
            role,
            config=config,
            dtype=getattr(torch, dtype),
            attn_implementation="eager",
            output_loading_info=True,
        )
    except RuntimeError as exc:  # torch reading a damaged .bin, a tensor whose shape is not the config's
        reason = " ".join(str(exc).split())[:300] or type(exc).__name__
        raise InputError(f"cannot read the weights of {role} '{source}': {reason}",
                         "check that config.json and the weight files belong to one model") from None
    check_coverage(source, role, loading)
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
    source = resolve(spec, role)
    config, architecture = load_config(source, role)
    tokenizer = load_tokenizer(source, role)
    model = load_model(source, role, config, dtype) if with_model else None
    return Checkpoint(source=source, config=config, architecture=architecture, model=model, tokenizer=tokenizer)
