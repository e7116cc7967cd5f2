"""Hostile bundles: a bundle is data a user may have received from someone else, so its manifest may
direct no read or write outside its directory (the path policy of docs/bundles.md, checked when the manifest
is read) and a graph entry that is not what it claims is named before it runs. Every case: one line, exit 3,
no output, input bytes unchanged, and the file outside the bundle untouched."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.hostile import BUNDLE, edit_manifest, one_line, rehash, snapshot
from typer.testing import CliRunner

from specdec.cli.app import app

runner = CliRunner()


@pytest.fixture
def hostile(bundle_factory, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """A copy of the exported tiny pair, and beside it a file the bundle must never reach."""
    shutil.copytree(bundle_factory("llama").path, tmp_path / "bundle")
    shutil.copyfile(tmp_path / "bundle" / "target.onnx", tmp_path / "secret.onnx")
    return tmp_path / "bundle"


def _commands(bundle: Path) -> list[list[str]]:
    out = str(bundle.parent / "out")
    return [["inspect", str(bundle)], ["generate", str(bundle), "--prompt", "hi", "-n", "2"],
            ["surgery", str(bundle), "-o", out], ["compile", str(bundle), "-o", out, "--target", "cpu"]]


def _rename_entry(old: str, new: str) -> Callable[[dict[str, Any]], None]:
    def change(manifest: dict[str, Any]) -> None:
        manifest["files"][new] = manifest["files"].pop(old)
        for spec in manifest["graphs"].values():
            if spec["file"] == old:
                spec["file"] = new
    return change


ESCAPES: dict[str, tuple[Callable[[Path], None], str]] = {
    "dot-dot": (lambda b: edit_manifest(b, _rename_entry("target.onnx", "../secret.onnx")),
                "manifest entry files '../secret.onnx' climbs out of the bundle ('..')"),
    "absolute": (lambda b: edit_manifest(b, _rename_entry("target.onnx", str(b.parent / "secret.onnx"))),
                 "secret.onnx' is absolute"),
    "not normal": (lambda b: edit_manifest(b, _rename_entry("target.onnx", "./target.onnx")),
                   "'./target.onnx' is not in normal form (write it 'target.onnx')"),
    "inner dot-dot": (lambda b: edit_manifest(b, _rename_entry("target.onnx", "tokenizer/../target.onnx")),
                      "climbs out of the bundle"),
    "graph entry only": (lambda b: edit_manifest(b, lambda m: m["graphs"]["target"].__setitem__("file", "../x")),
                         "manifest entry graphs.target.file '../x' climbs out of the bundle"),
    "tokenizer dir": (lambda b: edit_manifest(b, lambda m: m["tokenizer"].__setitem__("dir", "/etc")),
                      "manifest entry tokenizer.dir '/etc' is absolute"),
    "backslash": (lambda b: edit_manifest(b, _rename_entry("target.onnx", "..\\secret.onnx")),
                  "contains a backslash"),
    "symlink out": (lambda b: ((b / "target.onnx").unlink(), (b / "target.onnx").symlink_to("../secret.onnx")),
                    "manifest entry files 'target.onnx' leads outside the bundle through a symlink"),
    "manifest symlink out": (lambda b: (shutil.move(b / "manifest.json", b.parent / "m.json"),
                                        (b / "manifest.json").symlink_to(b.parent / "m.json")),
                             "manifest.json is a symlink that leads outside the bundle"),
}


@pytest.mark.parametrize("case", ESCAPES)
def test_no_manifest_path_leaves_the_bundle(hostile: Path, case: str) -> None:
    make, needle = ESCAPES[case]
    make(hostile)
    before = snapshot(hostile.parent)
    for argv in _commands(hostile):
        line = one_line(runner.invoke(app, argv), BUNDLE)
        assert needle in line and "re-create the bundle" in line, (argv, line)
        assert snapshot(hostile.parent) == before, argv  # nothing read into an output, nothing written


def test_a_symlink_inside_the_bundle_is_fine(hostile: Path) -> None:
    (hostile / "graphs").mkdir()
    shutil.move(hostile / "draft.onnx", hostile / "graphs" / "draft.onnx")
    (hostile / "draft.onnx").symlink_to("graphs/draft.onnx")
    rehash(hostile, "graphs/draft.onnx")
    result = runner.invoke(app, ["generate", str(hostile), "--prompt", "hi", "-n", "3"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("version", [0, -1, True, "5"])
def test_schema_versions_that_do_not_exist(hostile: Path, version: object) -> None:
    edit_manifest(hostile, lambda m: m.__setitem__("schema_version", version))
    line = one_line(runner.invoke(app, ["inspect", str(hostile)]), BUNDLE)
    assert "schema_version" in line


def test_a_graph_entry_that_is_not_an_onnx_graph(hostile: Path) -> None:
    (hostile / "target.onnx").write_bytes(b"not a graph\n" * 20)
    rehash(hostile, "target.onnx")
    before = snapshot(hostile.parent)
    for argv in _commands(hostile)[1:]:
        line = one_line(runner.invoke(app, argv), BUNDLE)
        assert "target.onnx" in line and ("not an ONNX graph" in line or "Protobuf parsing failed" in line), line
    assert snapshot(hostile.parent) == before


def test_target_and_draft_swapped(hostile: Path) -> None:
    def swap(manifest: dict[str, Any]) -> None:
        graphs = manifest["graphs"]
        graphs["target"]["file"], graphs["draft"]["file"] = graphs["draft"]["file"], graphs["target"]["file"]
    edit_manifest(hostile, swap)
    before = snapshot(hostile.parent)
    for argv in _commands(hostile)[1:]:
        line = one_line(runner.invoke(app, argv), BUNDLE)
        assert "is not the graph the manifest's" in line and "swapped" in line, (argv, line)
    assert snapshot(hostile.parent) == before


def test_external_data_outside_the_bundle(hostile: Path) -> None:
    """A graph's own external-data locations obey the same policy: surgery copies them."""
    import onnx

    graph = onnx.load(str(hostile / "draft.onnx"), load_external_data=False)
    tensor = next(t for t in graph.graph.initializer if t.external_data)
    for entry in tensor.external_data:
        if entry.key == "location":
            entry.value = "../secret.onnx"
    onnx.save(graph, str(hostile / "draft.onnx"))
    rehash(hostile, "draft.onnx")
    before = snapshot(hostile.parent)
    line = one_line(runner.invoke(app, ["surgery", str(hostile), "-o", str(hostile.parent / "out")]), BUNDLE)
    assert "external data '../secret.onnx'" in line and "climbs out of the bundle" in line, line
    assert snapshot(hostile.parent) == before
    assert sorted(p.name for p in hostile.parent.iterdir()) == ["bundle", "secret.onnx"]
