"""Bench fixtures: the adb stand-in re-exported (the compiled bundles and prompts are in tests/conftest.py)."""

from __future__ import annotations

from standin.conftest import adb_env, adb_environ, make_standin, standin_device  # noqa: F401
