"""First Python code of every portable-runtime process on the device (started by `specdec-run`).

    boot.py probe MODEL                  loader, import and session steps, then exit
    boot.py run RUNNER.zip MODULE ARGS   the same first two steps, then run MODULE from the zip

Each step prints one `specdec-step NAME ok|failed DETAIL` line, so the host can name the step
that failed on a phone: `loader` (no line at all: Python never started), `import` (numpy or
onnxruntime cannot load, e.g. a missing or incompatible shared library) or `session` (onnxruntime
cannot build or run a session on this CPU). Standard library only until numpy/onnxruntime load.
Python runs with -I, so neither this file's directory nor PYTHONPATH is on sys.path: the
runtime's site-packages and the runner zip are added here, by path.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path
from typing import Any

STEP = "specdec-step"
IMPORT_FAILED, SESSION_FAILED, USAGE = 3, 4, 2


def step(name: str, status: str, detail: str = "") -> None:
    text = " ".join(detail.split())[:400]
    print(f"{STEP} {name} {status} {text}".rstrip(), flush=True)


def _site_packages() -> str:
    return str(Path(sys.prefix) / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages")


def _root_cause(exc: BaseException) -> BaseException:
    """numpy wraps a failed C-extension load in a page of advice; the cause is at the bottom."""
    seen = {id(exc)}
    while (inner := exc.__cause__ or exc.__context__) is not None and id(inner) not in seen:
        seen.add(id(inner))
        exc = inner
    return exc


def _import() -> tuple[Any, Any] | None:
    sys.path.append(_site_packages())
    name = "numpy"
    try:
        import numpy

        name = "onnxruntime"
        import onnxruntime
    except Exception as exc:  # ImportError, or OSError from a shared library
        cause = _root_cause(exc)
        step("import", "failed", f"{name}: {type(cause).__name__}: {cause}")
        return None
    disable = getattr(onnxruntime, "disable_telemetry_events", None)
    if callable(disable):
        disable()
    step("import", "ok", f"numpy={numpy.__version__} onnxruntime={onnxruntime.__version__}")
    return numpy, onnxruntime


def probe(model: str, numpy: Any, onnxruntime: Any) -> int:
    """Build and run a session on the archive's tiny model (MatMul + Softmax), check its output."""
    try:
        session = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
        x = numpy.arange(8, dtype=numpy.float32).reshape(2, 4) / 8
        (y,) = session.run(None, {"x": x})
        logits = x @ numpy.eye(4, dtype=numpy.float32)[::-1]
        expected = numpy.exp(logits - logits.max(-1, keepdims=True))
        expected /= expected.sum(-1, keepdims=True)
        if not numpy.allclose(y, expected, atol=1e-5):
            raise ValueError(f"wrong result: {y.tolist()} instead of {expected.tolist()}")
    except Exception as exc:
        step("session", "failed", f"{type(exc).__name__}: {exc}")
        return SESSION_FAILED
    step("session", "ok", f"providers={','.join(session.get_providers())}")
    return 0


def main(argv: list[str]) -> int:
    step("loader", "ok", f"python={sys.version.split()[0]} machine={os.uname().machine}")
    if not argv or argv[0] not in ("probe", "run") or len(argv) < (2 if argv[0] == "probe" else 3):
        print("usage: boot.py probe MODEL | boot.py run RUNNER.zip MODULE [ARGS...]", file=sys.stderr)
        return USAGE
    modules = _import()
    if modules is None:
        return IMPORT_FAILED
    if argv[0] == "probe":
        return probe(argv[1], *modules)
    zip_path, module, *args = argv[1:]
    sys.path.insert(0, zip_path)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
