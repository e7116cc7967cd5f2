"""`locate`: a user's TARGET/DRAFT argument -> the `CheckpointSource` transformers' `from_pretrained` reads."""

from __future__ import annotations

from pathlib import Path

from specdec.pipeline.checkpoints import builtin, gguf
from specdec.pipeline.checkpoints.source import CheckpointSource, from_gguf_file
from specdec.pipeline.errors import InputError

_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "model*.bin")


def locate(spec: str, role: str) -> CheckpointSource:
    """Map a TARGET/DRAFT argument to a source: a built-in name (`demo`, `demo-tiny`), a `.gguf` file or a
    directory holding exactly one, a Hugging Face checkpoint directory, or a hub id."""
    model = builtin.lookup(spec)
    if model is not None:
        return model.source(role)
    path = Path(spec).expanduser()
    if path.exists():
        if not path.is_dir():
            if path.suffix.lower() == gguf.SUFFIX:
                return from_gguf_file(path)
            raise InputError(f"{role} '{spec}' is a file, not a checkpoint directory or a {gguf.SUFFIX} file",
                             "pass the checkpoint's directory, or a GGUF file")
        if (path / "config.json").is_file():
            if not any(any(path.glob(pattern)) for pattern in _WEIGHT_PATTERNS):
                raise InputError(
                    f"{role} '{spec}' has a config.json but no weights (*.safetensors or pytorch_model.bin)",
                    "copy the weight files into the directory",
                )
            return CheckpointSource(str(path))
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix.lower() == gguf.SUFFIX)
        if len(files) == 1:
            return from_gguf_file(files[0])
        if files:
            raise InputError(f"{role} '{spec}' holds {len(files)} GGUF files ({', '.join(f.name for f in files[:4])}"
                             f"{', ...' if len(files) > 4 else ''})", "pass the one to export: DIR/NAME.gguf")
        raise InputError(
            f"{role} '{spec}' is not a Hugging Face checkpoint (no config.json) and holds no {gguf.SUFFIX} file",
            f"pass a directory written by `save_pretrained`, a GGUF file, or one of: {', '.join(builtin.names())}",
        )
    looks_like_hub_id = spec.count("/") == 1 and not spec.startswith((".", "/", "~"))
    if not looks_like_hub_id:
        raise InputError(f"{role} checkpoint '{spec}' does not exist",
                         "pass a local checkpoint directory or GGUF file")
    return CheckpointSource(spec)
