"""`CheckpointSource`: what transformers' `from_pretrained` reads, a directory or hub id or a GGUF file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specdec.pipeline.checkpoints import gguf
from specdec.pipeline.graphs.files import sha256_file


@dataclass(frozen=True)
class CheckpointSource:
    """A Hugging Face checkpoint directory or hub id (`location`), or a GGUF file (`location` is its
    directory and `gguf_file` its name: how `from_pretrained` takes one)."""

    location: str
    gguf_file: str | None = None

    @property
    def is_gguf(self) -> bool:
        return self.gguf_file is not None

    @property
    def path(self) -> str:
        """What the bundle records as the source: the GGUF file itself, or the directory or hub id."""
        return str(Path(self.location) / self.gguf_file) if self.gguf_file is not None else self.location

    def load_kwargs(self) -> dict[str, Any]:
        """The `from_pretrained` keyword arguments that select the file."""
        return {"gguf_file": self.gguf_file} if self.gguf_file is not None else {}

    def files(self) -> list[Path]:
        """The local files the checkpoint is read from ([] for a hub id)."""
        if self.gguf_file is not None:
            return [Path(self.path)]
        root = Path(self.location)
        return sorted(file for file in root.iterdir() if file.is_file()) if root.is_dir() else []

    def digests(self) -> dict[str, str]:
        """sha256 of each file, for the bundle's lineage (a hub id stands for itself)."""
        if not Path(self.location).is_dir():
            return {"hub_id": self.location}
        return {file.name: sha256_file(file) for file in self.files()}

    def gguf_facts(self, role: str) -> gguf.GGUFFacts | None:
        return gguf.read_facts(Path(self.path), role) if self.gguf_file is not None else None


def from_gguf_file(path: Path) -> CheckpointSource:
    return CheckpointSource(str(path.parent), path.name)
