"""GGUF files (llama.cpp's format): what the file says about itself, read with the `gguf` package.

transformers' GGUF loader (`from_pretrained(folder, gguf_file=name)`) does the real work: it maps
the file's metadata to a config, builds a fast tokenizer (with the chat template) from the file's
vocabulary, and dequantizes every tensor to float. This module only reads what that loader does
not report: the architecture name before any config is built (so an unknown one fails in one line
before transformers raises), the file's quantization type and the GGML type of each tensor, which
the bundle's manifest records.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.errors import InputError

SUFFIX = ".gguf"


@dataclass(frozen=True)
class GGUFFacts:
    """A GGUF file's architecture (`general.architecture`), its file type (`general.file_type` as the
    gguf package names it, e.g. MOSTLY_Q4_1; None where the file does not say) and its tensors per GGML type."""

    architecture: str
    file_type: str | None
    tensor_types: dict[str, int]


def read_facts(path: Path, role: str) -> GGUFFacts:
    """The file's facts; an unreadable or truncated file is one InputError naming it."""
    from gguf import GGUFReader, LlamaFileType

    try:
        reader = GGUFReader(str(path))
        architecture = _string_field(reader, "general.architecture")
        file_type_id = _int_field(reader, "general.file_type")
        types = collections.Counter(tensor.tensor_type.name for tensor in reader.tensors)
    # GGUFReader parses untrusted bytes with numpy views: a short or corrupt file surfaces as whatever
    # numpy or struct raises at the offset it ran out (ValueError, IndexError, KeyError, OSError...)
    except Exception as exc:
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise InputError(f"cannot read {role} GGUF file '{path}': {reason}",
                         "the file is truncated or not a GGUF file; download or convert it again") from exc
    if architecture is None:
        raise InputError(f"{role} GGUF file '{path}' does not name its architecture (no general.architecture)",
                         "convert the checkpoint again with llama.cpp's convert_hf_to_gguf.py")
    try:
        file_type = LlamaFileType(file_type_id).name if file_type_id is not None else None
    except ValueError:
        file_type = f"unknown ({file_type_id})"
    return GGUFFacts(architecture, file_type, dict(sorted(types.items(), key=lambda item: (-item[1], item[0]))))


def _field_value(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    return None if field is None else field.contents()


def _string_field(reader: Any, key: str) -> str | None:
    value = _field_value(reader, key)
    return value if isinstance(value, str) else None


def _int_field(reader: Any, key: str) -> int | None:
    value = _field_value(reader, key)
    return int(value) if isinstance(value, int) else None


def forget_quantization(model: Any) -> Any:
    """The loaded model as the plain float model it is.

    transformers dequantizes every GGUF tensor on load, so the module computes with ordinary float
    weights, yet it keeps `config.quantization_config` (quant_method gguf) and an `hf_quantizer`;
    `save_pretrained` refuses such a model, and a config saved with the record would send the
    next loader looking for a GGUF file. The draft maker saves configs derived from the target's.
    """
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    return model
