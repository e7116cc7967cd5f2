"""Portable-runtime fixtures: a fake runtime tree for fast launcher/probe tests, the adb stand-in."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from standin.conftest import adb_env, adb_environ, make_standin, standin_device  # noqa: F401
from standin.device_fs import toybox_tools

from specdec.pipeline.portable import assemble, recipe

FakeRuntime = Callable[..., Path]

# Stands in for glibc's loader: `LOADER --library-path DIR PYTHON ARGS...` runs this machine's
# Python (which has numpy and onnxruntime) on ARGS, optionally hiding a module first.
_FAKE_LOADER = """#!/bin/sh
[ "$1" = --library-path ] || {{ echo "fake loader: bad usage $*" >&2; exit 127; }}
shift 3
exec {python} -c 'import runpy, sys
for name in "{hide}".split():
    sys.modules[name] = None
args = sys.argv[1:]
while args[0].startswith("-"):  # -I -B, flags of the real interpreter
    args.pop(0)
sys.argv = args
runpy.run_path(args[0], run_name="__main__")' "$@"
"""


def needs_toybox() -> None:
    if toybox_tools() is None:
        pytest.skip("mksh and toybox are not installed (apt-get install mksh toybox)")


@pytest.fixture
def fake_runtime(tmp_path: Path) -> FakeRuntime:
    """A runtime tree whose loader is a shell script running this machine's Python.

    `hide="onnxruntime"` makes that import fail; `loader=None` leaves the loader out (the exec
    fails like an arm64 loader on x86); `probe_model=b"..."` replaces the probe model."""

    def make(name: str = "rt", *, hide: str = "", loader: bool = True, probe_model: bytes | None = None) -> Path:
        root = tmp_path / name
        abi = recipe.ABIS[recipe.DEFAULT_ABI]
        (root / "bin").mkdir(parents=True)
        (root / "lib").mkdir()
        (root / "bin" / recipe.PYTHON_PACKAGE).write_text("not used by the fake loader\n")
        assemble.write_device_files(root, abi, {"fake": True})
        if probe_model is not None:
            (root / assemble.PROBE_MODEL).write_bytes(probe_model)
        if loader:
            script = root / "lib" / abi.loader
            script.write_text(_FAKE_LOADER.format(python=shlex.quote(sys.executable), hide=hide))
            script.chmod(0o755)
        return root

    return make


@pytest.fixture
def android_shell(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """(mksh, environment whose PATH holds only toybox applets), as on a phone."""
    import subprocess

    needs_toybox()
    tools = toybox_tools()
    assert tools is not None
    mksh, toybox = tools
    bindir = tmp_path / "system-bin"
    bindir.mkdir()
    for applet in subprocess.run([toybox], capture_output=True, text=True, check=True).stdout.split():
        (bindir / applet).symlink_to(toybox)
    (bindir / "sh").symlink_to(mksh)
    return mksh, {"PATH": str(bindir), "HOME": "/nonexistent", "TMPDIR": str(tmp_path)}
