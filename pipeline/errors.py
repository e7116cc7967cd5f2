"""One error hierarchy for every stage.

Each error carries the problem and the fix separately so the CLI can print them on one line,
and an exit code so CI jobs can tell failure classes apart.
"""

from __future__ import annotations


class SpecdecError(Exception):
    """Base of every error specdec raises on purpose."""

    exit_code = 1

    def __init__(self, problem: str, fix: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix

    def __str__(self) -> str:
        return self.one_line()

    def one_line(self) -> str:
        text = self.problem.rstrip(". ")
        if self.fix:
            text = f"{text} — {self.fix}"
        return " ".join(text.split())


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
