"""The one place that opens outputs: overwrite rules, writability, OS errors as one line, nothing left behind."""

from __future__ import annotations

import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.pipeline.bundle.locks import hold_output, lock_path
from specdec.pipeline.bundle.staging import StagedDirectory, StagedFile, check_output_dir, writable_directory
from specdec.pipeline.errors import InputError
from specdec.pipeline.records.manifest import FileEntry, GraphSpec, Manifest, TokenizerSpec


def _bundle_dir(path: Path, *extra: str) -> Path:
    path.mkdir(parents=True)
    (path / "target.onnx").write_bytes(b"graph")
    graph = GraphSpec(file="target.onnx", architecture="llama", source="x", dtype="float32", num_layers=1,
                      num_kv_heads=1, head_dim=4, vocab_size=8, max_position_embeddings=32, inputs=[], outputs=[])
    manifest = Manifest(graphs={"target": graph}, tokenizer=TokenizerSpec(vocab_size=8, eos_token_ids=[0]),
                        files={"target.onnx": FileEntry(sha256="0" * 64, size=5)})
    (path / "manifest.json").write_text(manifest.to_json())
    for name in extra:
        (path / name).write_text("mine")
    return path


def test_force_replaces_a_bundle(tmp_path: Path) -> None:
    out = _bundle_dir(tmp_path / "out")
    with StagedDirectory(out, force=True) as staged:
        (staged.dir / "new.onnx").write_bytes(b"new")
        staged.commit()
    assert sorted(p.name for p in out.iterdir()) == ["new.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_force_replaces_a_bench_results_directory(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    out.mkdir()
    (out / "results.json").write_text(json.dumps({"schema": "specdec.bench/2"}))
    for name in ("summary.md", "trace.json", "events.jsonl", "accepted_length.png"):
        (out / name).write_text("x")
    check_output_dir(out, force=True)
    with StagedDirectory(out, force=True) as staged:
        (staged.dir / "results.json").write_text(json.dumps({"schema": "specdec.bench/4"}))
        staged.commit()
    assert sorted(p.name for p in out.iterdir()) == ["results.json"]  # the old run is gone, not merged
    assert json.loads((out / "results.json").read_text()) == {"schema": "specdec.bench/4"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bench"]  # no staging left behind


@pytest.mark.parametrize("make,needle", [
    (lambda d: (d.mkdir(), (d / "thesis.tex").write_text("years of work")),
     "is not a specdec bundle or bench results directory (thesis.tex)"),
    (lambda d: _bundle_dir(d, "notes.txt"),
     "is a specdec bundle but also holds files specdec did not write (notes.txt)"),
])
def test_force_never_deletes_files_specdec_did_not_write(tmp_path: Path, make, needle: str) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "out"
    make(out)
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(InputError, match="--force replaces only what specdec wrote") as caught:
        StagedDirectory(out, force=True)
    assert needle in caught.value.one_line()
    assert sorted(p.name for p in out.iterdir()) == before


def test_force_on_an_empty_directory_is_fine(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    check_output_dir(tmp_path / "out", force=True)
    with StagedDirectory(tmp_path / "out", force=True) as staged:
        (staged.dir / "new.onnx").write_bytes(b"new")
        staged.commit()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["new.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_path_through_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match=r"cannot be created: '.*file' is a file, not a directory"):
        StagedDirectory(tmp_path / "file" / "sub" / "out")
    with pytest.raises(InputError, match="exists and is not a directory"):
        StagedDirectory(tmp_path / "file", force=True)


def test_missing_parents_are_made_and_removed_again_on_failure(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), StagedDirectory(tmp_path / "a" / "b" / "out") as staged:
        (staged.dir / "half").write_text("x")
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("code,needle", [(errno.ENOSPC, "no space left"), (errno.EDQUOT, "quota")])
def test_a_full_disk_mid_write_is_one_line_and_leaves_nothing(tmp_path: Path, code: int, needle: str) -> None:
    with pytest.raises(InputError, match=needle) as caught, StagedDirectory(tmp_path / "out") as staged:
        (staged.dir / "part").write_text("x")
        raise OSError(code, "disk full")  # what a write on a full disk raises
    assert caught.value.exit_code == 2 and f"output '{tmp_path / 'out'}'" in caught.value.one_line()
    assert list(tmp_path.iterdir()) == []


REPLY = json.dumps({"id": "a", "input_ids": [1], "output_ids": [2], "text": "x", "stats": {}}) + "\n"


def test_staged_file_rules(tmp_path: Path) -> None:
    out = tmp_path / "replies.jsonl"
    out.write_text(REPLY)
    with pytest.raises(InputError, match="already exists.*--force"):
        StagedFile(out)
    with pytest.raises(InputError, match="is a directory"):
        StagedFile(tmp_path)
    with pytest.raises(RuntimeError), StagedFile(out, force=True) as staged:
        staged.write("half")
        raise RuntimeError
    assert out.read_text() == REPLY and sorted(p.name for p in tmp_path.iterdir()) == ["replies.jsonl"]
    with StagedFile(out, force=True) as staged:
        staged.write(REPLY * 2)
        staged.commit()
    assert out.read_text() == REPLY * 2 and sorted(p.name for p in tmp_path.iterdir()) == ["replies.jsonl"]


@pytest.mark.parametrize("content", ["my notes\n", '{"id": "a"}\n', REPLY + "not json\n", "\udcff"])
def test_force_replaces_only_a_file_specdec_wrote(tmp_path: Path, content: str) -> None:
    out = tmp_path / "replies.jsonl"
    out.write_bytes(content.encode("utf-8", "surrogateescape"))
    before = out.read_bytes()
    with pytest.raises(InputError, match="is not a file specdec wrote .*--force replaces only what specdec wrote"):
        StagedFile(out, force=True)
    assert out.read_bytes() == before
    (tmp_path / "empty.jsonl").touch()  # nothing to lose
    StagedFile(tmp_path / "empty.jsonl", force=True)


def test_an_output_never_touches_an_input(tmp_path: Path) -> None:
    bundle = _bundle_dir(tmp_path / "bundle")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(REPLY)  # a replies file is a valid prompts file: --force would take it, were it not an input
    link = tmp_path / "link.jsonl"
    link.symlink_to(prompts)
    cases = [(lambda: StagedFile(bundle / "target.onnx", force=True, sources=(bundle, prompts)), "lies inside"),
             (lambda: StagedFile(bundle / "new.jsonl", sources=(bundle,)), "lies inside"),
             (lambda: StagedFile(prompts, force=True, sources=(bundle, prompts)), "is the input"),
             (lambda: StagedFile(link, force=True, sources=(prompts,)), "is the input"),
             (lambda: StagedDirectory(bundle, force=True, sources=(bundle,)), "is the input"),
             (lambda: StagedDirectory(tmp_path, force=True, sources=(None, bundle)), "contains the input"),
             (lambda: StagedDirectory(bundle / "sub", sources=(prompts, bundle)), "lies inside")]
    for opening, how in cases:
        with pytest.raises(InputError, match=f"{how} .*inputs are never modified") as caught:
            opening()
        assert caught.value.exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle", "link.jsonl", "prompts.jsonl"]


def test_a_second_writer_fails_at_once(tmp_path: Path) -> None:
    """The lock is the OS's (flock): another process holding it makes a writer fail before any work, naming
    its pid; a lock file left by a writer that died holds nothing and is taken over."""
    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from specdec.pipeline.bundle.staging import StagedDirectory\n"
        f"with StagedDirectory(Path({str(out)!r})) as staged:\n"
        "    print('held', flush=True); sys.stdin.read()")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        for opening in (lambda: StagedDirectory(out), lambda: StagedFile(out)):
            busy = rf"is being written by another specdec process \(pid {holder.pid}\)"
            with pytest.raises(InputError, match=busy), opening():
                pytest.fail("a second writer got the output")
    finally:
        holder.communicate("")
    assert holder.returncode == 0 and sorted(p.name for p in tmp_path.iterdir()) == []  # no lock file left
    lock_path(out).write_text("12345\n")  # a dead writer's lock file: nobody holds it
    with StagedDirectory(out) as staged:
        staged.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_one_process_may_hold_an_output_while_it_stages_it(tmp_path: Path) -> None:
    out = tmp_path / "deep" / "out"
    with hold_output(out):
        assert lock_path(out).is_file()
        with StagedDirectory(out) as staged:
            staged.commit()
        assert lock_path(out).is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["out"]


def test_stale_leftovers_of_a_killed_writer_are_swept(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stale = [tmp_path / ".out.k2j4_x9a.partial", tmp_path / ".out.old-4242"]
    for path in stale:
        path.mkdir()
        (path / "big.onnx").write_bytes(b"x" * 100)
    (tmp_path / ".out.lk.partial").mkdir()  # not a name staging makes: kept
    (tmp_path / ".out.abcdefgh.partial.mine").write_text("kept")
    (tmp_path / ".outer.abcdefgh.partial").mkdir()  # another output's: kept
    with StagedDirectory(out) as staged:
        staged.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        ".out.abcdefgh.partial.mine", ".out.lk.partial", ".outer.abcdefgh.partial", "out"]


def test_read_only_filesystem(readonly_dir: Path) -> None:
    for opening in (lambda: StagedDirectory(readonly_dir / "out"), lambda: StagedFile(readonly_dir / "r.jsonl"),
                    lambda: StagedDirectory(readonly_dir / "deeper" / "out"),
                    lambda: writable_directory(readonly_dir / "cache", key="cache_dir")):
        with pytest.raises(InputError, match="is on a read-only filesystem") as caught:
            opening()
        assert caught.value.exit_code == 2 and len(caught.value.one_line().splitlines()) == 1
    assert list(readonly_dir.iterdir()) == []
