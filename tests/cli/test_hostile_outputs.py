"""Hostile outputs: no output may equal, contain or lie inside an input; --force replaces only what specdec
wrote; one writer at a time; SIGTERM/SIGHUP clean up like Ctrl-C and a killed writer's leftovers are swept;
a write the OS refuses (a file-size limit) is one line naming the path. The staging rules themselves are
tested in tests/pipeline/bundle/test_staging.py; here they are run through the commands."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.hostile import BAD_INPUT, one_line, snapshot
from typer.testing import CliRunner

from specdec.cli.app import app

runner = CliRunner()
CLI = [sys.executable, "-c", "import sys; sys.argv[0] = 'specdec'; from specdec.cli.app import main; main()"]


@pytest.fixture
def workspace(bundle_factory, pair_factory, tmp_path: Path) -> Path:  # type: ignore[no-untyped-def]
    """A bundle, a checkpoint pair (the draft as `specdec draft` leaves it) and a prompts file, all inputs."""
    shutil.copytree(bundle_factory("llama").path, tmp_path / "bundle")
    target, draft = pair_factory("llama")
    shutil.copytree(target, tmp_path / "target")
    shutil.copytree(draft, tmp_path / "draft")
    files = [*sorted(p.name for p in (tmp_path / "draft").iterdir()), "draft_report.json"]
    (tmp_path / "draft" / "draft_report.json").write_text(json.dumps({"schema": "specdec.draft/1", "files": files}))
    (tmp_path / "prompts.jsonl").write_text('{"id": "a", "text": "def add"}\n{"id": "b", "input_ids": [5, 6, 7]}\n')
    return tmp_path


def test_no_output_touches_an_input(workspace: Path) -> None:
    w = {name: str(workspace / name) for name in ("bundle", "target", "draft", "prompts.jsonl")}
    generate = ["generate", w["bundle"], "--prompts", w["prompts.jsonl"], "-n", "2"]
    cases = [
        ([*generate, "-o", f"{w['bundle']}/target.onnx", "--force"], "lies inside the input"),
        ([*generate, "-o", f"{w['bundle']}/manifest.json", "--force"], "lies inside the input"),
        ([*generate, "-o", f"{w['bundle']}/replies.jsonl"], "lies inside the input"),
        ([*generate, "-o", w["prompts.jsonl"], "--force"], "is the input"),
        (["export", w["target"], "--draft", w["draft"], "-o", w["draft"], "--force"], "is the input"),
        (["export", w["target"], "-o", f"{w['target']}/bundle"], "lies inside the input"),
        (["surgery", w["bundle"], "-o", str(workspace), "--force"], "contains the input"),
        (["tune", w["bundle"], "-o", f"{w['bundle']}/tuned"], "lies inside the input"),
        (["bench", w["bundle"], "-o", str(workspace / "results"), "--prompts", str(workspace / "results" / "p.jsonl")],
         "contains the input"),
    ]
    (workspace / "results").mkdir()
    shutil.copyfile(workspace / "prompts.jsonl", workspace / "results" / "p.jsonl")
    before = snapshot(workspace)
    for argv, how in cases:
        line = one_line(runner.invoke(app, argv), BAD_INPUT)
        assert how in line and "inputs are never modified" in line, (argv, line)
        assert snapshot(workspace) == before, argv


def test_force_replaces_only_what_specdec_wrote(workspace: Path) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("mine\n")
    line = one_line(runner.invoke(app, ["generate", str(workspace / "bundle"), "--prompts",
                                        str(workspace / "prompts.jsonl"), "-o", str(notes), "--force"]), BAD_INPUT)
    assert "is not a file specdec wrote" in line and notes.read_text() == "mine\n"
    replies = workspace / "replies.jsonl"
    argv = ["generate", str(workspace / "bundle"), "--prompts", str(workspace / "prompts.jsonl"), "-o", str(replies),
            "-n", "2"]
    assert runner.invoke(app, argv).exit_code == 0
    forced = runner.invoke(app, [*argv, "--force"])  # its own replies: replaced
    assert forced.exit_code == 0, forced.output
    assert [json.loads(line)["id"] for line in replies.read_text().splitlines()] == ["a", "b"]


def test_a_second_writer_fails_at_once(workspace: Path) -> None:
    out = workspace / "out"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from specdec.pipeline.bundle.locks import hold_output\n"
        f"with hold_output(Path({str(out)!r})):\n"
        "    print('held', flush=True); sys.stdin.read()")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        started = time.monotonic()
        line = one_line(runner.invoke(app, ["surgery", str(workspace / "bundle"), "-o", str(out)]), BAD_INPUT)
        assert f"is being written by another specdec process (pid {holder.pid})" in line
        assert time.monotonic() - started < 30  # before any work, not after it
    finally:
        holder.communicate("")
    assert not out.exists() and not list(workspace.glob(".out*"))


def _wait_for(predicate: object, process: subprocess.Popen[bytes], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():  # type: ignore[operator]
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_stop_signals_clean_up_like_ctrl_c(workspace: Path, signum: int) -> None:
    """CI runners and `timeout` send SIGTERM, a closed terminal SIGHUP: partials removed, exit 128 + n."""
    many = workspace / "many.jsonl"
    many.write_text("".join(json.dumps({"id": str(i), "text": "the quick brown fox"}) + "\n" for i in range(60)))
    out = workspace / "replies.jsonl"
    before = snapshot(workspace)
    process = subprocess.Popen([*CLI, "generate", str(workspace / "bundle"), "--prompts", str(many), "-o", str(out),
                                "-n", "64"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ,
                                                                                              "COLUMNS": "200"})
    _wait_for(lambda: list(workspace.glob(".replies.jsonl.*.partial")), process)
    process.send_signal(signum)
    _, stderr = process.communicate(timeout=120)
    lines = [line for line in stderr.decode().splitlines() if line.strip() and not line.startswith("generate:")]
    assert process.returncode == 128 + signum, stderr.decode()
    assert "Traceback" not in stderr.decode()
    assert lines == [f"interrupted ({signal.Signals(signum).name}): nothing half-written was left"], lines
    assert snapshot(workspace) == before  # no output, no partial, no lock file


@pytest.mark.slow
def test_a_killed_writers_leftovers_are_swept(workspace: Path) -> None:
    many = workspace / "many.jsonl"
    many.write_text("".join(json.dumps({"id": str(i), "text": "the quick brown fox"}) + "\n" for i in range(60)))
    out = workspace / "replies.jsonl"
    argv = ["generate", str(workspace / "bundle"), "--prompts", str(many), "-o", str(out), "-n", "4"]
    process = subprocess.Popen([*CLI, *argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for(lambda: list(workspace.glob(".replies.jsonl.*.partial")), process)
    process.kill()  # nothing can clean up after SIGKILL
    process.wait()
    assert list(workspace.glob(".replies.jsonl.*.partial"))
    result = runner.invoke(app, argv)  # the lock file it left holds nothing: the next writer goes ahead
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in workspace.iterdir() if p.name.startswith(".")) == []
    assert len(out.read_text().splitlines()) == 60


def _file_size_limit() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (200_000, 200_000))


@pytest.mark.slow
@pytest.mark.parametrize("command", ["surgery", "bench"])
def test_a_file_size_limit_is_one_line(workspace: Path, bench_bundle_cpu, command: str) -> None:  # type: ignore[no-untyped-def]
    """`ulimit -f`: the OS refuses the write (EFBIG; Python ignores SIGXFSZ): exit 2 naming the path."""
    out = workspace / "out"
    argv = {"surgery": ["surgery", str(workspace / "bundle"), "-o", str(out)],
            "bench": ["bench", str(bench_bundle_cpu.path), "-o", str(out), "-n", "4", "--limit", "1", "--no-tune",
                      "--prompts", str(workspace / "prompts.jsonl")]}[command]
    before = snapshot(workspace)
    done = subprocess.run([*CLI, *argv], capture_output=True, text=True, preexec_fn=_file_size_limit,
                          env={**os.environ, "COLUMNS": "300"}, check=False)
    lines = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode == BAD_INPUT and "Traceback" not in done.stderr, done.stderr
    assert len(lines) == 1 and "would exceed the size limit (ulimit -f" in lines[0], done.stderr
    assert snapshot(workspace) == before


def test_an_interrupt_swallowed_by_a_finaliser_still_stops_the_command() -> None:
    """Python prints a KeyboardInterrupt raised inside `__del__` as 'Exception ignored' with its traceback and
    carries on: the command ends as interrupted instead, in one line."""
    import typer

    from specdec.cli.console import guarded
    from specdec.pipeline.errors import Interrupted

    class Finalised:
        def __del__(self) -> None:
            raise Interrupted(signal.SIGTERM)

    def work() -> None:
        Finalised()  # collected at once: its interrupt goes to sys.unraisablehook

    single = typer.Typer()
    single.command()(guarded(work))
    result = runner.invoke(single, [])
    assert result.exit_code == 143 and "Traceback" not in result.output and "Exception ignored" not in result.output
    assert result.output.strip() == "interrupted (SIGTERM): nothing half-written was left"


def test_no_signal_after_the_outcome_adds_a_traceback() -> None:
    code = ("import os, signal; from specdec.cli.console import ignore_stop_signals; ignore_stop_signals()\n"
            "for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): os.kill(os.getpid(), sig)\n"
            "print('wrote out')")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stdout, done.stderr) == (0, "wrote out\n", "")


def test_the_runtime_cache_follows_the_same_rules(tmp_path: Path) -> None:
    """`runtime build`: the cache may not overlap a local package source, and one build writes a cache at a time."""
    cache = tmp_path / "cache"
    (cache / "mirror").mkdir(parents=True)
    line = one_line(runner.invoke(app, ["runtime", "build", "--cache-dir", str(cache), "--apt-mirror",
                                        f"file://{cache / 'mirror'}"]), BAD_INPUT)
    assert f"output '{cache}' contains the input '{cache / 'mirror'}'" in line, line
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys; from pathlib import Path; from specdec.pipeline.bundle.locks import hold_output\n"
        f"with hold_output(Path({str(cache)!r})):\n"
        "    print('held', flush=True); sys.stdin.read()")], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        line = one_line(runner.invoke(app, ["runtime", "build", "--cache-dir", str(cache), "--apt-mirror",
                                            "http://127.0.0.1:9/debian"]), BAD_INPUT)
        assert f"is being written by another specdec process (pid {holder.pid})" in line, line
    finally:
        holder.communicate("")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]
