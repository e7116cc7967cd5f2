"""Consoles, logging and the single error mapper of the CLI."""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.progress import Progress as RichProgressBar

from specdec.pipeline.bundle.locks import release_outputs
from specdec.pipeline.bundle.write_errors import is_write_error, stray_write_error, written_path
from specdec.pipeline.errors import InputError, Interrupted, SpecdecError, swallowed_interrupts

out = Console()
err = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def debug_enabled() -> bool:
    return os.environ.get("SPECDEC_DEBUG", "") not in ("", "0")


def refresh_width() -> None:
    """Honour COLUMNS per invocation: rich reads it only when a Console is created."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit():
        out.width = err.width = int(columns)


def tolerant_streams() -> None:
    """Text stdout cannot encode (an ASCII-only terminal, PYTHONIOENCODING=ascii) is written as escapes
    (`\\xe9`), as Python already does on stderr, instead of failing the command half-way through a reply."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None and getattr(stream, "errors", None) == "strict":
            reconfigure(errors="backslashreplace")


# One style for every message to people, whether a command prints it or library code logs it:
# `warning: ...` and `note: ...` on stderr, errors as `error: ...` (the mapper below).
def warn(text: str) -> None:
    err.print(f"[yellow]warning[/]: {escape(text)}", highlight=False, soft_wrap=True)


def note(text: str) -> None:
    err.print(f"[cyan]note[/]: {escape(text)}", highlight=False, soft_wrap=True)


class _MessageHandler(logging.Handler):
    """Log records in the commands' style: `warning: ...` for warnings, plain lines for --verbose steps."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
        except Exception:  # logging's own contract: a bad record must not break the program
            self.handleError(record)
            return
        if record.levelno >= logging.ERROR:
            err.print(f"[bold red]error[/]: {escape(message)}", highlight=False, soft_wrap=True)
        elif record.levelno >= logging.WARNING:
            warn(message)
        else:
            err.print(escape(message), style="dim", highlight=False, soft_wrap=True)


def setup_logging(verbose: bool) -> None:
    # Third-party libraries (torch.onnx, onnx_ir, ...) log a lot at INFO; only specdec's own
    # messages follow --verbose, theirs appear with SPECDEC_DEBUG=1.
    logging.basicConfig(
        level=logging.DEBUG if debug_enabled() else logging.WARNING,
        format="%(message)s",
        handlers=[_MessageHandler()],
        force=True,
    )
    own = logging.DEBUG if debug_enabled() else logging.INFO if verbose else logging.WARNING
    logging.getLogger("specdec").setLevel(own)
    if not debug_enabled():
        # torch.onnx warns about optional torchvision ops on every export; not actionable here.
        logging.getLogger("torch.onnx").setLevel(logging.ERROR)
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def command_flags(command: Callable[..., Any]) -> dict[str, str]:
    """Parameter name -> long flag of a Typer command function (`max_new_tokens` -> `--max-new-tokens`).

    Parameters are named like the config fields they fill (cli/options.py), so this maps the setting
    names library errors use to the flags the user typed."""
    flags: dict[str, str] = {}
    for name, info in command_options(command).items():
        decls = [d.split("/")[0] for d in (info.param_decls or ()) if d.startswith("--")]
        flags[name] = decls[0] if decls else "--" + name.replace("_", "-")
    return flags


def command_options(command: Callable[..., Any]) -> dict[str, typer.models.OptionInfo]:
    """Parameter name -> its Typer option as Typer reads it, whether declared as the default or in an
    `Annotated` type (cli/options.py): flags in `param_decls`, the default in `default`."""
    params = typer.utils.get_params_from_function(command)
    return {name: meta.default for name, meta in params.items() if isinstance(meta.default, typer.models.OptionInfo)}


def error_line(exc: SpecdecError, flags: Mapping[str, str] | None = None) -> str:
    """The error's one line, with the settings it names written as the command's flags.

    Library code names settings by config key (what a pipeline YAML says, see pipeline/errors.py);
    a user of a command typed flags, so `max_new_tokens must be at least 1` becomes
    `--max-new-tokens must be at least 1`. Keys the command has no flag for stay keys.
    """
    table = flags or {}
    return exc.one_line(table.get)


def _as_specdec_error(exc: BaseException) -> SpecdecError | None:
    """SpecdecError as is; an OSError about writing a file (read-only filesystem, no space, permission
    denied) as the bad input it is: outputs are opened through pipeline/bundle/staging.py, which names the
    path and the fix, and this catches what slips past it (a cache, a log) the same way."""
    if isinstance(exc, SpecdecError):
        return exc
    if isinstance(exc, MemoryError):  # numpy, or onnxruntime's std::bad_alloc as pybind11 maps it
        return SpecdecError("out of memory", "free memory (other processes), or ask for less: quantize "
                            "--calib-samples/--calib-seq-len, compile fewer buckets, bench fewer --threads")
    if isinstance(exc, OSError) and is_write_error(exc) and (name := written_path(exc)) is not None:
        return stray_write_error(exc, name)
    if isinstance(exc, OSError) and is_write_error(exc):
        return InputError(f"cannot write: {exc.strerror}", "free space or choose a writable output")
    return None


# Signals that stop a command: Ctrl-C, `kill`/`timeout`/a CI runner's cancel, a closed terminal.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _interruptible() -> Iterator[list[KeyboardInterrupt]]:
    """SIGTERM and SIGHUP stop the command the way Ctrl-C does: they raise `Interrupted`, which unwinds
    through every staged output and device session (their cleanup runs), instead of killing the process
    with its hidden partial files in place.

    A signal that lands while Python runs a finaliser (`__del__`, a weakref callback) is "ignored" there:
    Python prints its traceback and carries on. Those are collected instead (the yielded list) and end
    the command once it returns, with no traceback."""
    if threading.current_thread() is not threading.main_thread():  # signal.signal works in the main thread only
        yield []
        return

    def stop(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    saved = {sig: signal.signal(sig, stop) for sig in STOP_SIGNALS}
    try:
        with swallowed_interrupts() as swallowed:
            yield swallowed
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def ignore_stop_signals() -> None:
    """The command's outcome is decided and printed: a signal while the interpreter shuts down must not
    add a traceback after it (or turn a success into a failure)."""
    if threading.current_thread() is threading.main_thread():
        for sig in STOP_SIGNALS:
            signal.signal(sig, signal.SIG_IGN)


def _not_utf8(value: object) -> str | None:
    """`value` (an argument) as printable text if it holds bytes that are not UTF-8, else None."""
    items = value if isinstance(value, list | tuple) else [value]
    for item in items:
        text = os.fspath(item) if isinstance(item, os.PathLike) else item
        if isinstance(text, str) and any("\udc80" <= ch <= "\udcff" for ch in text):
            return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return None


def check_arguments(arguments: Mapping[str, Any], flags: Mapping[str, str]) -> None:
    """Arguments must be UTF-8: a path or text with other bytes (`$'\\xff'`) reaches onnxruntime and the
    tokenizer, which take UTF-8 only, so it is refused here in one line rather than failing half-way."""
    for name, value in arguments.items():
        shown = _not_utf8(value)
        if shown is not None:
            what = flags.get(name, name.upper())
            raise InputError(f"{what} '{shown}' is not valid UTF-8",
                             "rename the file or directory (or re-type the text) in UTF-8")


def guarded(command: F) -> F:
    """Map SpecdecError (and OSErrors of writes, running out of memory) to one line on stderr and its exit
    code; Ctrl-C, SIGTERM and SIGHUP to exit 128 + the signal's number, after the same cleanup."""

    flags = command_flags(command)

    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with _interruptible() as swallowed:
                check_arguments(kwargs, flags)
                result = command(*args, **kwargs)
            if swallowed:
                raise swallowed[0]
            return result
        except (SpecdecError, OSError, MemoryError) as caught:
            exc = _as_specdec_error(caught)
            if exc is None:
                raise
            if debug_enabled():
                err.print(traceback.format_exc(), markup=False, highlight=False)
            err.print(f"[bold red]error:[/] {escape(error_line(exc, flags))}", highlight=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt as caught:
            signum = caught.signum if isinstance(caught, Interrupted) else signal.SIGINT
            err.print(f"[yellow]interrupted[/] ({signal.Signals(signum).name}): nothing half-written was left",
                      highlight=False)
            raise typer.Exit(128 + signum) from None
        finally:
            release_outputs()

    return wrapper  # type: ignore[return-value]


class _RichTask:
    def __init__(self, bar: RichProgressBar, task_id: Any) -> None:
        self.bar = bar
        self.task_id = task_id

    def advance(self, steps: int = 1) -> None:
        self.bar.advance(self.task_id, steps)

    def describe(self, description: str) -> None:
        self.bar.update(self.task_id, description=description)


# Without a terminal (a log file, a pipe, CI) a bar is invisible: a plain line at least this often.
PLAIN_INTERVAL_S = 30.0


def format_duration(seconds: float) -> str:
    """12s, 3m05s, 1h02m: short enough for a log line."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


class _PlainTask:
    """A task reported as plain lines: one when it starts, one every `interval` seconds while it runs
    (from a timer thread, so a long call that never advances still shows it is alive), one at the end."""

    def __init__(self, stage: str, description: str, total: int | None, interval: float,
                 clock: Callable[[], float]) -> None:
        self.stage = stage
        self.description = description
        self.total = total
        self.completed = 0
        self.clock = clock
        self.started = clock()
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="specdec-progress", daemon=True)

    def advance(self, steps: int = 1) -> None:
        self.completed += steps

    def describe(self, description: str) -> None:
        self.description = description

    def line(self) -> str:
        """`stage: what k/n elapsed 1m20s eta 4m10s` (k/n and eta where the task has a total)."""
        elapsed = self.clock() - self.started
        parts = [f"{self.stage}: {self.description}" if self.stage else self.description]
        if self.total:
            parts.append(f"{min(self.completed, self.total)}/{self.total}")
        parts.append(f"elapsed {format_duration(elapsed)}")
        if self.total and 0 < self.completed < self.total:
            parts.append(f"eta {format_duration(elapsed / self.completed * (self.total - self.completed))}")
        return " ".join(parts)

    def _beat(self) -> None:
        while not self._stop.wait(self.interval):
            _plain(self.line())

    def __enter__(self) -> _PlainTask:
        _plain(self.line())
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _plain(text: str) -> None:
    err.print(escape(text), highlight=False, soft_wrap=True)


class RichProgress:
    """`specdec.pipeline.progress.Progress` on stderr: a rich bar on a terminal, plain lines otherwise.

    `stage` names the command in the plain lines (`quantize: target: awq on 112 layers 5/112 ...`).
    Tasks opened while another runs (calibration inside a graph's quantization) share one bar:
    rich draws one live display per console.
    """

    def __init__(self, enabled: bool = True, stage: str = "", interval: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.enabled = enabled
        self.stage = stage
        self.interval = PLAIN_INTERVAL_S if interval is None else interval
        self.clock = clock
        self._bar: RichProgressBar | None = None

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[_RichTask | _PlainTask]:
        if not self.enabled:
            with RichProgressBar(console=err, disable=True) as bar:
                yield _RichTask(bar, bar.add_task(description, total=total))
            return
        if not err.is_terminal:
            plain = _PlainTask(self.stage, description, total, self.interval, self.clock)
            with plain:
                yield plain
            err.print(f"[green]✓[/] {escape(description)} ({format_duration(self.clock() - plain.started)})",
                      highlight=False)
            return
        if self._bar is not None:  # nested: a row of the running bar
            bar = self._bar
            task_id = bar.add_task(description, total=total)
            try:
                yield _RichTask(bar, task_id)
            finally:
                bar.remove_task(task_id)
            return
        bar = RichProgressBar(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                              TimeElapsedColumn(), TimeRemainingColumn(), console=err, transient=True)
        self._bar = bar
        try:
            with bar:
                yield _RichTask(bar, bar.add_task(description, total=total))
        finally:
            self._bar = None
        err.print(f"[green]✓[/] {escape(description)}")
