"""The runtime archive: contents, size, reproducibility, the cache, `specdec runtime build|info`."""

from __future__ import annotations

import hashlib
import json
import os
import tarfile
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.portable import assemble, elf, recipe
from specdec.pipeline.portable.archive import BuildConfig, RuntimeArchive, build_runtime, list_cached, write_archive
from specdec.pipeline.portable.fetch import Sources

DEAD = Sources(apt_mirror="http://127.0.0.1:9/debian", apt_security_mirror=None, pip_index_url="http://127.0.0.1:9/s")
MAX_BYTES = 90 * 1000 * 1000


@pytest.fixture(scope="module")
def unpacked(portable_runtime: tuple[RuntimeArchive, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    archive, _ = portable_runtime
    root = tmp_path_factory.mktemp("runtime-tree")
    with tarfile.open(archive.path) as tar:
        tar.extractall(root, filter="data")
    return root


def test_archive_size_and_metadata(portable_runtime: tuple[RuntimeArchive, Path]) -> None:
    archive, _ = portable_runtime
    assert archive.size <= MAX_BYTES, f"{archive.size / 1e6:.1f} MB compressed"
    assert archive.sha256 == hashlib.sha256(archive.path.read_bytes()).hexdigest()
    assert archive.path.name == f"{archive.id}.tar.gz" and archive.current()
    assert archive.python.startswith("3.11.") and (archive.numpy, archive.onnxruntime) == ("2.4.6", "1.32.0")
    assert {"_ssl", "_sqlite3", "readline"} <= set(archive.dropped_extensions)


def test_tree_is_pruned(unpacked: Path) -> None:
    names = {p.relative_to(unpacked).as_posix() for p in unpacked.rglob("*")}
    stdlib = f"lib/python{recipe.PYTHON}"
    for pruned in ("tkinter", "idlelib", "ensurepip", "lib2to3", "test", "turtledemo", "pydoc_data"):
        assert f"{stdlib}/{pruned}" not in names
    assert not [n for n in names if "/tests/" in n or n.endswith((".h", ".a", ".pyi"))]
    assert not [n for n in names if n.startswith(f"{stdlib}/site-packages/onnxruntime/transformers")]
    assert f"{stdlib}/site-packages/onnxruntime/capi/libonnxruntime.so.1.32.0" not in names
    assert not [n for n in names if n.startswith("usr/") or "/share/doc/" in n]
    assert "share/licenses/debian/libc6/copyright" in names


def test_tree_is_self_contained(unpacked: Path) -> None:
    elves = [p for p in unpacked.rglob("*") if p.is_file() and elf.is_elf(p)]
    shipped = {p.name for p in elves}
    for path in elves:
        missing = set(elf.read_dynamic(path).needed) - shipped
        assert not missing, f"{path.relative_to(unpacked)} needs {missing}"
    assert (unpacked / "lib" / recipe.ABIS[recipe.DEFAULT_ABI].loader).is_file()
    assert not [p for p in unpacked.rglob("*") if p.is_symlink()]


def test_manifest_launcher_and_bytecode(unpacked: Path) -> None:
    lines = (unpacked / assemble.MANIFEST).read_text().splitlines()
    for line in lines[:: max(1, len(lines) // 50)]:  # a sample: hashing all of it is the device's job
        digest, rel = line.split("  ", 1)
        assert hashlib.sha256((unpacked / rel).read_bytes()).hexdigest() == digest
    assert len(lines) == sum(1 for p in unpacked.rglob("*") if p.is_file()) - 1
    launcher = (unpacked / assemble.LAUNCHER).read_text()
    assert "ld-linux-aarch64.so.1" in launcher and "@LOADER@" not in launcher
    assert os.access(unpacked / assemble.LAUNCHER, os.X_OK)
    meta = json.loads((unpacked / assemble.METADATA).read_text())
    if meta["bytecode"]:
        assert (unpacked / f"lib/python{recipe.PYTHON}/__pycache__/os.cpython-311.pyc").is_file()


def test_cached_archive_is_reused_offline(portable_runtime: tuple[RuntimeArchive, Path]) -> None:
    archive, xdg = portable_runtime
    started = time.monotonic()
    again = build_runtime(BuildConfig(cache_dir=xdg / "specdec" / "runtime", sources=DEAD))
    assert again == archive and time.monotonic() - started < 5
    assert [a.id for a in list_cached(xdg / "specdec" / "runtime")] == [archive.id]


def test_rebuild_gives_the_same_archive(portable_runtime: tuple[RuntimeArchive, Path]) -> None:
    # Content-addressed: the same inputs (downloads cached by the first build) give the same bytes.
    archive, xdg = portable_runtime
    again = build_runtime(BuildConfig(cache_dir=xdg / "specdec" / "runtime", force=True))
    assert again.sha256 == archive.sha256 and again.path == archive.path


def test_cli_info_and_cached_build(portable_runtime: tuple[RuntimeArchive, Path], monkeypatch: pytest.MonkeyPatch,
                                   tmp_path: Path) -> None:
    archive, xdg = portable_runtime
    monkeypatch.setenv("XDG_CACHE_HOME", str(xdg))
    monkeypatch.setenv("COLUMNS", "250")
    runner = CliRunner()
    shown = runner.invoke(app, ["runtime", "info"])
    assert shown.exit_code == 0 and archive.id in shown.output and "current" in shown.output
    data = json.loads(runner.invoke(app, ["runtime", "info", "--json"]).output)
    assert [(d["id"], d["size"]) for d in data] == [(archive.id, archive.size)]
    built = runner.invoke(app, ["runtime", "build", "--json", "--apt-mirror", "http://127.0.0.1:9/debian"])
    assert built.exit_code == 0 and json.loads(built.output)["sha256"] == archive.sha256  # cached: no network
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    empty = runner.invoke(app, ["runtime", "info"])
    assert empty.exit_code == 0 and "specdec runtime build" in empty.output


def test_archives_are_reproducible(tmp_path: Path) -> None:
    for name, mtime in (("a", 1_000_000), ("b", 2_000_000)):
        tree = tmp_path / name / "tree"
        (tree / "bin").mkdir(parents=True)
        (tree / "bin" / "tool").write_text("#!/bin/sh\n")
        (tree / "bin" / "tool").chmod(0o755)
        (tree / "data.txt").write_text("x" * 1000)
        for path in tree.rglob("*"):
            os.utime(path, (mtime, mtime))
        write_archive(tree, tmp_path / name / "out.tar.gz")
    first, second = ((tmp_path / n / "out.tar.gz").read_bytes() for n in "ab")
    assert first == second
    with tarfile.open(tmp_path / "a" / "out.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/tool"].mode == 0o755 and members["data.txt"].mode == 0o644
    assert {m.uid for m in members.values()} == {0}
