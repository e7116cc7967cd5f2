"""Property test: random edits of a real bundle's manifest (paths, hashes, types, sizes, keys) and random
bytes in a prompts file, run through the commands that read and write them. Whatever the edit, a command either
succeeds or prints one line with an exit code the README documents; it never prints a traceback, never writes
outside its output and never changes a byte of its input. Seeded, so a failure repeats; well under a minute."""

from __future__ import annotations

import copy
import json
import os
import random
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.hostile import snapshot
from typer.testing import CliRunner

from specdec.cli.app import app

runner = CliRunner()
SEED = int(os.environ.get("SPECDEC_FUZZ_SEED", "45"))  # another seed explores further: SPECDEC_FUZZ_SEED=7 pytest ...
CASES = 160
DOCUMENTED = {2, 3, 4, 5, 6, 7, 8, 9, 10}  # README's exit codes (0: the edit did no harm)
HOSTILE_PATHS = ["../x.onnx", "../../etc/passwd", "/etc/passwd", "", ".", "..", "a/../../b", "./target.onnx",
                 "target.onnx/", "tokenizer//tokenizer.json", "a\\b", "a\x00b", "x" * 300, "\udcff.onnx",
                 "draft.onnx", "target.onnx", "shared.data", "manifest.json", "tokenizer"]
HOSTILE_VALUES: list[Any] = [None, True, 0, -1, 2**63, 1.5, float("nan"), "", "0" * 64, "zz", [], {}, [1, "a"],
                             {"a": 1}, *HOSTILE_PATHS[:6]]


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in the JSON tree, as a path of keys and indices."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _nodes(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _nodes(item, (*path, index))
    return found


def _parent(data: Any, path: tuple[Any, ...]) -> Any:
    for key in path[:-1]:
        data = data[key]
    return data


def _mutate(manifest: dict[str, Any], rng: random.Random) -> str:
    """One random edit in place; returns what it did (for the failure message)."""
    kind = rng.choice(["value", "value", "file key", "file hash", "file size", "graph file", "delete", "add key"])
    files = manifest.get("files")
    entries = sorted(rel for rel, entry in files.items() if isinstance(entry, dict)) if isinstance(files, dict) else []
    graphs = manifest.get("graphs")
    roles = sorted(r for r, spec in graphs.items() if isinstance(spec, dict)) if isinstance(graphs, dict) else []
    if kind == "file key" and entries:
        old, new = rng.choice(entries), rng.choice(HOSTILE_PATHS)
        files[new] = files.pop(old)
        return f"files key {old!r} -> {new!r}"
    if kind == "file hash" and entries:
        rel = rng.choice(entries)
        files[rel]["sha256"] = rng.choice(["", "0" * 64, f"{rng.getrandbits(256):064x}", 7])
        return f"sha256 of {rel!r}"
    if kind == "file size" and entries:
        rel = rng.choice(entries)
        files[rel]["size"] = rng.choice([-1, 0, 1, 2**40, "12", None])
        return f"size of {rel!r}"
    if kind == "graph file" and roles:
        role = rng.choice(roles)
        graphs[role]["file"] = value = rng.choice(HOSTILE_PATHS)
        return f"graphs.{role}.file -> {value!r}"
    paths = [p for p in _nodes(manifest) if p]
    if not paths:
        return "nothing left to edit"
    path = rng.choice(paths)
    parent = _parent(manifest, path)
    if kind == "delete":
        del parent[path[-1]]
        return f"deleted {path}"
    if kind == "add key" and isinstance(parent, dict):
        parent["unexpected_" + str(rng.getrandbits(16))] = 1
        return f"unknown key beside {path}"
    parent[path[-1]] = value = copy.deepcopy(rng.choice(HOSTILE_VALUES))
    return f"{path} -> {value!r}"


def _check(result: Any, what: str) -> None:
    assert "Traceback" not in result.output, (what, result.output)
    if result.exit_code == 0:
        return
    lines = [line for line in result.output.splitlines() if line.strip() and " elapsed " not in line]
    assert result.exit_code in DOCUMENTED, (what, result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("error: "), (what, result.output)


@pytest.fixture
def base(bundle_factory, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    shutil.copytree(bundle_factory("llama").path, tmp_path / "bundle")
    return tmp_path / "bundle"


def _run_case(root: Path, argv: list[str], what: str, setup: Callable[[], None]) -> int:
    setup()
    out = root / "out"
    before = snapshot(root)
    result = runner.invoke(app, argv)
    _check(result, what)
    after = snapshot(root)
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    written = {key for key in after if key == "out" or key.startswith("out/")}
    assert {k: v for k, v in after.items() if k not in written} == before, (what, "changed outside the output")
    return int(result.exit_code)


def test_random_manifest_edits(base: Path) -> None:
    rng = random.Random(SEED)
    original = json.loads((base / "manifest.json").read_text())
    codes: Counter[int] = Counter()
    for case in range(CASES):
        manifest = copy.deepcopy(original)
        what = "; ".join(_mutate(manifest, rng) for _ in range(rng.choice([1, 1, 2, 3])))
        text = json.dumps(manifest)

        def write(text: str = text) -> None:
            (base / "manifest.json").write_text(text)

        argv = {0: ["surgery", str(base), "-o", str(base.parent / "out")],
                3: ["generate", str(base), "--prompt", "hi", "-n", "2"]}.get(case % 6, ["inspect", str(base)])
        codes[_run_case(base.parent, argv, f"case {case}: {what}", write)] += 1
    assert codes[0] and codes[3], codes  # some edits are harmless, most break the bundle (exit 3)


def test_random_bytes_in_prompt_files(base: Path) -> None:
    rng = random.Random(SEED)
    lines = [json.dumps({"id": "a", "text": "def add"}), json.dumps({"id": "b", "input_ids": [5, 6, 7]}),
             json.dumps({"id": "c", "text": "the quick brown fox", "scenario": "chat"})]
    valid = ("\n".join(lines) + "\n").encode()
    prompts = base.parent / "prompts.jsonl"
    codes: Counter[int] = Counter()
    for case in range(CASES // 2):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 4)):
            position = rng.randrange(len(data))
            edit = rng.choice(["replace", "insert", "cut"])
            if edit == "replace":
                data[position] = rng.randrange(256)
            elif edit == "insert":
                data[position:position] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
            else:
                del data[position:position + rng.randint(1, 8)]

        def write(data: bytes = bytes(data)) -> None:
            prompts.write_bytes(data)

        argv = ["generate", str(base), "--prompts", str(prompts), "-o", str(base.parent / "out"), "-n", "2"]
        codes[_run_case(base.parent, argv, f"case {case}: {bytes(data)!r}", write)] += 1
    assert codes[0] and codes[2], codes  # some edits leave valid prompts, most are bad input (exit 2)
