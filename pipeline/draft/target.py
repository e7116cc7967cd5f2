"""The target a draft is made from: located (a checkpoint directory, a GGUF file, a built-in) and loaded."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from specdec.pipeline.checkpoints.gguf import forget_quantization
from specdec.pipeline.checkpoints.locate import locate
from specdec.pipeline.checkpoints.source import CheckpointSource
from specdec.pipeline.errors import InputError
from specdec.pipeline.inputs.weights import check_coverage, check_weight_files, transformers_quiet


def resolve_target(spec: str) -> CheckpointSource:
    """The target: a Hugging Face checkpoint directory, a GGUF file (or a directory holding one), or a built-in."""
    source = locate(spec, "target")
    if not source.is_gguf and not Path(source.location).is_dir():
        raise InputError(f"target '{spec}' is not a local checkpoint", "pass a local checkpoint directory or GGUF file")
    return source


def load_target(source: CheckpointSource, check: Callable[[Any], None]) -> tuple[Any, Any, Any]:
    """The target's config, tokenizer and float32 model (a GGUF file dequantized); `check` sees the config
    before the tokenizer and the weights are read, and a checkpoint whose weights do not cover it fails."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    source.gguf_facts("target")  # an unreadable GGUF file fails here, in one line
    where, select = source.location, source.load_kwargs()
    try:
        target_config = AutoConfig.from_pretrained(where, **select)
        check(target_config)
        tokenizer = AutoTokenizer.from_pretrained(where, **select)
        if not source.is_gguf:
            check_weight_files(where, "target")
        # with output_loading_info, from_pretrained returns (model, loading report): typed as the model alone
        with transformers_quiet():
            loaded: Any = AutoModelForCausalLM.from_pretrained(where, **select, dtype=torch.float32,
                                                               attn_implementation="sdpa", output_loading_info=True)
        model, loading = loaded
    except (OSError, ValueError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise InputError(f"cannot load target '{source.path}': {reason}",
                         "pass a local checkpoint directory or GGUF file") from exc
    if source.is_gguf:
        forget_quantization(model)
    else:
        check_coverage(where, "target", loading)
    model.train(False)
    return target_config, tokenizer, model
