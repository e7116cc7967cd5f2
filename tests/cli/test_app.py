"""The CLI surface: help, version, the error mapper."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec import __version__
from specdec.cli.app import app

runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and __version__ in result.output


def test_help_lists_every_command_with_one_line() -> None:
    result = runner.invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    for command in ("export", "inspect", "generate"):
        assert re.search(rf"│ {command}\s+\S", result.output), command


def test_error_is_one_line_with_fix_and_exit_code(tmp_path: Path) -> None:
    result = runner.invoke(app, ["inspect", str(tmp_path / "missing")], env={"COLUMNS": "80"})
    assert result.exit_code == 3
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: bundle") and "specdec export" in lines[0]
    assert "Traceback" not in result.output


def test_debug_env_shows_traceback(tmp_path: Path) -> None:
    result = runner.invoke(app, ["inspect", str(tmp_path / "missing")], env={"SPECDEC_DEBUG": "1"})
    assert result.exit_code == 3 and "Traceback" in result.output


@pytest.mark.parametrize("argv,code,needle", [
    (["export", "/nonexistent/dir", "--draft", "/nonexistent/d", "-o", "OUT"], 2, "does not exist"),
    (["generate", "BUNDLE"], 2, "exactly one of --prompt"),
])
def test_bad_invocations(tmp_path: Path, argv: list[str], code: int, needle: str) -> None:
    argv = [a.replace("OUT", str(tmp_path / "out")).replace("BUNDLE", str(tmp_path)) for a in argv]
    result = runner.invoke(app, argv)
    assert result.exit_code == code and needle in result.output
    assert not (tmp_path / "out").exists()


def test_a_stray_write_error_is_still_one_line() -> None:
    """Outputs go through pipeline/bundle/staging.py; an OSError of a write that slips past it maps the same way."""
    import errno

    import typer

    from specdec.cli.console import guarded

    def full_disk() -> None:
        raise OSError(errno.ENOSPC, "No space left on device", "/data/out/x.bin")

    def bug() -> None:
        raise OSError(errno.EBADF, "Bad file descriptor")

    single = typer.Typer()
    single.command()(guarded(full_disk))
    result = runner.invoke(single, [])
    assert result.exit_code == 2 and result.output.strip() == (
        "error: output '/data/out/x.bin' cannot be written: no space left on the device — free space or choose "
        "output on another disk")
    other = typer.Typer()
    other.command()(guarded(bug))
    assert isinstance(runner.invoke(other, []).exception, OSError)  # not a write error: a bug, with its traceback
