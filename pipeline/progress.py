"""Progress reporting without a UI dependency.

Library code reports long work through a `Progress`; the CLI passes one backed by rich, tests
and the device runner use the silent default. Keeps rich out of library modules.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol


class Task(Protocol):
    def advance(self, steps: int = 1) -> None: ...

    def describe(self, description: str) -> None: ...


class Progress(Protocol):
    def task(self, description: str, total: int | None = None) -> AbstractContextManager[Task]: ...


class _SilentTask:
    def advance(self, steps: int = 1) -> None:
        return None

    def describe(self, description: str) -> None:
        return None


class SilentProgress:
    """The default: report nothing."""

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[Task]:
        yield _SilentTask()
