"""One error hierarchy for every stage.

Each error carries the problem and the fix separately so the CLI can print them on one line,
and an exit code so CI jobs can tell failure classes apart.

Library code names a setting by its config key, marked with `setting()`:
`f"{setting('max_new_tokens')} must be at least 1"`. It reads as the key (`max_new_tokens must
be at least 1`, what a pipeline YAML says) everywhere except in the CLI's error mapper
(cli/console.py), which shows the flag of the command that ran (`--max-new-tokens`).
"""

from __future__ import annotations

import contextlib
import enum
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

_MARK = "\x1f"  # ASCII unit separator: never typed by a user, invisible if it ever leaked
_SETTING = re.compile(f"{_MARK}([A-Za-z0-9_.]+){_MARK}")

FlagFor = Callable[[str], str | None]  # config key -> a flag, or None to keep the key


def setting(key: str) -> str:
    """A config key inside an error's text (see the module docstring)."""
    return f"{_MARK}{key}{_MARK}"


def render(text: str, flag_for: FlagFor | None = None) -> str:
    """`text` with its marked settings written as flags (where `flag_for` knows one) or as keys."""
    return _SETTING.sub(lambda m: (flag_for(m.group(1)) if flag_for else None) or m.group(1), text)


class Interrupted(KeyboardInterrupt):
    """SIGINT (Ctrl-C), SIGTERM or SIGHUP arrived: it unwinds like Ctrl-C, so every staged output and
    device work dir is cleaned up, and the process exits 128 + the signal's number (130, 143, 129)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def swallowed_interrupts() -> Iterator[list[KeyboardInterrupt]]:
    """Collect, in the yielded list, the KeyboardInterrupts Python swallows: a signal that lands while
    the main thread runs a finaliser (`__del__`, a weakref callback) is "ignored" there (Python prints
    its traceback and carries on). Other unraisable exceptions go to the hook that was in place."""
    swallowed: list[KeyboardInterrupt] = []
    previous_hook = sys.unraisablehook

    def unraisable(hook_args: Any) -> None:
        if isinstance(hook_args.exc_value, KeyboardInterrupt):
            swallowed.append(hook_args.exc_value)
        else:
            previous_hook(hook_args)

    sys.unraisablehook = unraisable
    try:
        yield swallowed
    finally:
        sys.unraisablehook = previous_hook


class SpecdecError(Exception):
    """Base of every error specdec raises on purpose."""

    exit_code = 1

    def __init__(self, problem: str, fix: str | None = None) -> None:
        super().__init__(problem)
        self.raw_problem = problem  # with setting() marks: pass these on when re-raising
        self.raw_fix = fix

    @property
    def problem(self) -> str:
        return render(self.raw_problem)

    @property
    def fix(self) -> str | None:
        return None if self.raw_fix is None else render(self.raw_fix)

    @property
    def keys(self) -> tuple[str, ...]:
        """The config keys the texts name."""
        return tuple(_SETTING.findall(self.raw_problem + (self.raw_fix or "")))

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self, flag_for: FlagFor | None = None) -> str:
        text = self.raw_problem.rstrip(". ")
        if self.raw_fix:
            text = f"{text} — {self.raw_fix}"
        return " ".join(render(text, flag_for).split())


class InputError(SpecdecError):
    """A path, option or file given by the user cannot be used."""

    exit_code = 2


class BundleError(SpecdecError):
    """A bundle is missing, corrupt, of the wrong kind or from a newer schema."""

    exit_code = 3


class CompatibilityError(SpecdecError):
    """Draft and target cannot be paired (tokenizer or vocabulary mismatch)."""

    exit_code = 4


class UnsupportedModelError(SpecdecError):
    """The checkpoint is not a causal LM of a registered architecture."""

    exit_code = 4


class ExportError(SpecdecError):
    """torch.onnx.export failed."""

    exit_code = 5


class RuntimeBuildError(SpecdecError):
    """The portable device runtime cannot be built (package source unreachable, bad package)."""

    exit_code = 5


class ValidationError(SpecdecError):
    """A stage's output differs numerically from its input beyond tolerance."""

    exit_code = 6


class GenerationError(SpecdecError):
    """Decoding cannot proceed (context exhausted, bad prompt, ...)."""

    exit_code = 7


class DeviceError(SpecdecError):
    """A device cannot be reached or used."""

    exit_code = 8


class DeviceLostError(DeviceError):
    """The device disappeared while a run was in progress."""

    exit_code = 9


class GateFailedError(SpecdecError):
    """A CI gate of `specdec bench` failed."""

    exit_code = 10


class FleetFailure(enum.IntFlag):
    """What went wrong in a fleet run (`specdec bench --fleet`); more than one can happen at once.

    Its exit code is FLEET_EXIT_BASE plus the sum of the classes that happened (17-31), so it never
    collides with a single run's codes above (1-10) or with Ctrl-C's 130; docs/devices.md has the table.
    """

    lost = 1  # a device stopped mid-run (went away, or its runner hit the timeout): its row has partial results
    unusable = 2  # a device could not run the bench (unreachable, not ready, no runtime, the runner failed)
    gate = 4  # a CI gate failed, on a device or on the fleet
    error = 8  # an unexpected error on a device (a bug in specdec: its row names it)


FLEET_EXIT_BASE = 16


class FleetError(SpecdecError):
    """Some devices of a fleet run failed or failed a gate; the report holds every device's row."""

    exit_code = FLEET_EXIT_BASE

    def __init__(self, problem: str, fix: str | None, failures: FleetFailure) -> None:
        super().__init__(problem, fix)
        self.failures = failures
        self.exit_code = FLEET_EXIT_BASE + int(failures)
