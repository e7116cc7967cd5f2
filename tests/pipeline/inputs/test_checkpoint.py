"""The one resolver of TARGET/DRAFT arguments: the demo, local checkpoints, hub ids only where a command
can load one."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.pipeline.errors import InputError
from specdec.pipeline.inputs.checkpoint import demo_dir, resolve_checkpoint


def test_demo_local_and_hub(tmp_path: Path) -> None:
    assert resolve_checkpoint("demo", "draft") == str(demo_dir("draft"))
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"")
    assert resolve_checkpoint(str(checkpoint), "target", local=True) == str(checkpoint)
    assert resolve_checkpoint("org/model", "target") == "org/model"
    with pytest.raises(InputError, match="target checkpoint 'org/model' does not exist"):
        resolve_checkpoint("org/model", "target", local=True)  # draft loads with torch from a directory


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p.write_text("x"), "is a file, not a checkpoint directory"),
    (lambda p: p.mkdir(), r"is not a Hugging Face checkpoint \(no config.json\)"),
    (lambda p: (p.mkdir(), (p / "config.json").write_text("{}")), "has a config.json but no weights"),
    (lambda p: None, "does not exist"),
])
def test_bad_checkpoints_are_one_line(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad"
    make(path)
    for local in (False, True):
        with pytest.raises(InputError, match=message):
            resolve_checkpoint(str(path), "target", local=local)
