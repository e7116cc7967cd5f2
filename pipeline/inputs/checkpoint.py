"""Where a TARGET/DRAFT argument points: the one resolver of checkpoint arguments (export, draft, pipeline).

`demo` is the built-in pair shipped as package data; a local directory must hold a Hugging Face
checkpoint (config.json and weights); anything else that looks like `org/name` is a hub id, which
only commands that load through `from_pretrained` accept (`local=True` refuses it).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from specdec.pipeline.errors import InputError

DEMO_NAME = "demo"
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin", "model*.bin")


def demo_dir(role: str) -> Path:
    """Directory of the built-in demo target or draft shipped as package data."""
    path = Path(str(resources.files("specdec.pipeline.demo") / role))
    if not (path / "config.json").is_file():
        raise InputError(
            f"the built-in demo {role} is missing from this installation ({path})",
            "reinstall specdec, or train it with `python scripts/train_demo.py`",
        )
    return path


def resolve_checkpoint(spec: str, role: str, *, local: bool = False) -> str:
    """Map a user's TARGET/DRAFT argument to something `from_pretrained` accepts: the demo's or a local
    checkpoint directory, or a hub id (`local`: a directory only)."""
    if spec == DEMO_NAME:
        return str(demo_dir(role))
    path = Path(spec).expanduser()
    if path.exists():
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
    if local or not looks_like_hub_id:
        raise InputError(f"{role} checkpoint '{spec}' does not exist", "pass a local checkpoint directory")
    return spec
