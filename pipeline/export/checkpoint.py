"""Load checkpoints for export: Hugging Face directories, hub ids, GGUF files, or a built-in model.

Where a checkpoint comes from is `pipeline/checkpoints/` (`locate`); this module loads it with
transformers and checks that specdec can export it. A GGUF file goes through transformers' GGUF
loader, which dequantizes every tensor to float: the exported graph computes the function the
file's quantized weights encode (docs/export.md, "GGUF files").
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.checkpoints.gguf import GGUFFacts, forget_quantization
from specdec.pipeline.checkpoints.locate import locate
from specdec.pipeline.checkpoints.source import CheckpointSource
from specdec.pipeline.errors import InputError, UnsupportedModelError
from specdec.pipeline.export.architectures import Architecture, lookup, supported
from specdec.pipeline.inputs.weights import check_coverage, check_weight_files, transformers_quiet

log = logging.getLogger(__name__)

_CAUSAL_LM_SUFFIXES = ("ForCausalLM", "LMHeadModel")
# GGUF architecture names that transformers loads as another model_type (its load_gguf_checkpoint:
# a Gemma 3 GGUF holds the text backbone only)
_GGUF_MODEL_TYPES = {"gemma3": "gemma3_text"}
# Files a tokenizer is loaded from (one suffices): fast, slow (SentencePiece, BPE vocab) tokenizers.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def gguf_architectures() -> list[str]:
    """GGUF `general.architecture` names both transformers' GGUF loader and specdec's registry know."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    registered = set(supported())
    return sorted(name for name in GGUF_SUPPORTED_ARCHITECTURES if _GGUF_MODEL_TYPES.get(name, name) in registered)


@dataclass
class Checkpoint:
    source: CheckpointSource
    config: Any
    architecture: Architecture
    model: Any
    tokenizer: Any
    gguf: GGUFFacts | None = None  # what the GGUF file says about itself, for a GGUF source

    @property
    def tokenizer_size(self) -> int:
        return len(self.tokenizer)


def _from_pretrained(loader: Any, source: CheckpointSource, role: str, **kwargs: Any) -> Any:
    try:
        return loader.from_pretrained(source.location, **source.load_kwargs(), **kwargs)
    except (OSError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(
            f"cannot load {role} '{source.path}': {reason}",
            "pass a local checkpoint directory or GGUF file (no model hub is reachable offline)",
        ) from exc


def check_gguf(source: CheckpointSource, role: str) -> GGUFFacts | None:
    """Read a GGUF source's facts and refuse an architecture before transformers parses the file."""
    facts = source.gguf_facts(role)
    if facts is not None and facts.architecture not in gguf_architectures():
        raise UnsupportedModelError(f"{role} GGUF file '{source.path}' holds a '{facts.architecture}' model, "
                                    "which specdec cannot export",
                                    f"GGUF architectures specdec exports: {', '.join(gguf_architectures())}")
    return facts


def _declared_model_type(source: CheckpointSource) -> str | None:
    """The `model_type` a local checkpoint's config.json declares (None: a hub id, a GGUF file, or none declared)."""
    if source.is_gguf:
        return None
    try:
        declared = json.loads((Path(source.location) / "config.json").read_bytes()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return None  # transformers' own loader says what is wrong with the file
    return declared if isinstance(declared, str) else None


def load_config(source: CheckpointSource, role: str) -> tuple[Any, Architecture]:
    from transformers import AutoConfig
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    model_type = _declared_model_type(source)
    if model_type is not None and model_type not in CONFIG_MAPPING:
        # transformers cannot even read the config: an unsupported model (exit 4), not a bad path
        raise UnsupportedModelError(f"{role} '{source.path}' is a '{model_type}' model, which neither transformers nor "
                                    "specdec knows", f"export a supported architecture ({', '.join(supported())})")
    config = _from_pretrained(AutoConfig, source, role)
    architecture = lookup(getattr(config, "model_type", "unknown"))
    declared = list(getattr(config, "architectures", None) or [])
    if declared and not any(name.endswith(_CAUSAL_LM_SUFFIXES) for name in declared):
        raise UnsupportedModelError(
            f"{role} '{source.path}' is a {declared[0]}, not a causal language model",
            "export the *ForCausalLM checkpoint of the model",
        )
    return config, architecture


def load_tokenizer(source: CheckpointSource, role: str) -> Any:
    from transformers import AutoTokenizer

    path = Path(source.location)
    if not source.is_gguf and path.is_dir() and not any((path / name).is_file() for name in _TOKENIZER_FILES):
        raise InputError(f"{role} '{source.path}' has no tokenizer files ({', '.join(_TOKENIZER_FILES[:2])})",
                         "copy the model's tokenizer files (tokenizer.json, tokenizer_config.json) into the directory")
    tokenizer = _from_pretrained(AutoTokenizer, source, role)
    if not getattr(tokenizer, "is_fast", False):
        raise InputError(
            f"{role} '{source.path}' has only a slow tokenizer",
            "save a fast tokenizer (tokenizer.json) with the checkpoint; the runtime reads tokenizer.json",
        )
    return tokenizer


def load_model(source: CheckpointSource, role: str, config: Any, dtype: str) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    if not source.is_gguf:
        check_weight_files(source.location, role)
    config._attn_implementation = "eager"  # the tree mask is an additive float mask (docs/design.md §2)
    try:
        # with output_loading_info, from_pretrained returns (model, loading report)
        with transformers_quiet():
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
        raise InputError(f"cannot read the weights of {role} '{source.path}': {reason}",
                         "check that config.json and the weight files belong to one model") from None
    if source.is_gguf:
        forget_quantization(model)
    else:
        check_coverage(source.location, role, loading)
    return model.eval()


def generation_eos(source: CheckpointSource) -> Any:
    """EOS ids from generation_config.json, which may list more than the tokenizer's one (a GGUF file
    has none: its tokenizer's eos is the file's)."""
    from transformers import GenerationConfig

    if source.is_gguf:
        return None
    try:
        return GenerationConfig.from_pretrained(source.location).eos_token_id
    except (OSError, ValueError):
        return None


def load_checkpoint(spec: str, role: str, dtype: str, *, with_model: bool = True) -> Checkpoint:
    source = locate(spec, role)
    facts = check_gguf(source, role)
    config, architecture = load_config(source, role)
    tokenizer = load_tokenizer(source, role)
    model = load_model(source, role, config, dtype) if with_model else None
    return Checkpoint(source=source, config=config, architecture=architecture, model=model, tokenizer=tokenizer,
                      gguf=facts)
