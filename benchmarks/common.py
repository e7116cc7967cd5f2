"""Shared helpers of the benchmark scripts: cached bundles of the demo pair and timing loops."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specdec.pipeline.bundle.store import MANIFEST_NAME, Bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.generate.stage import GenerateConfig, Generator, generate_settings
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import load_device

CACHE = Path(__file__).resolve().parent / "results" / "cache"


def cached(path: Path, build: Callable[[], Bundle]) -> Bundle:
    """Reuse a bundle built by an earlier run of any benchmark (delete results/cache to rebuild)."""
    if (path / MANIFEST_NAME).is_file():
        return Bundle.load(path)
    return build()


def planned_engine(path: Path, threads: int, max_new_tokens: int) -> tuple[Engine, DecodeConfig]:
    """The bundle's engine and the decode settings `specdec generate` resolves on this machine (the
    bundle's plan for it, its requirements): where the scripts that time decoding start."""
    bundle = Bundle.load(path)
    engine = Generator(bundle, threads=threads).engine
    request = GenerateConfig(threads=threads, decode=DecodeOptions(max_new_tokens=max_new_tokens))
    return engine, generate_settings(request, bundle, load_device("local-cpu"), None).config


def demo_bundle() -> Bundle:
    out = CACHE / "demo-export"
    return cached(out, lambda: export_bundle(ExportConfig(target="demo-tiny", output=out)))


def prompts(count: int = 8) -> list[str]:
    from specdec.pipeline.inputs.prompts import FALLBACK, default_prompts_file, load_prompts

    path = default_prompts_file()
    texts = [p.text or "" for p in load_prompts(path)] if path else [text for _, text in FALLBACK]
    return texts[:count]


# The wide target (benchmarks/realistic.py --hidden): the demo's function at phone-class width.
WIDE = {"hidden": 1024, "layers": 16, "intermediate": 3072}


def realistic_pair(draft: str = "demo", wide: bool = False) -> tuple[Path, Path]:
    """The compute-realistic target (benchmarks/realistic.py; `wide`: hidden 1024) and a draft, as checkpoints."""
    from realistic import write_pair

    name = "realistic" + ("-wide" if wide else "") + ("" if draft == "demo" else f"-{draft}")
    if wide:
        return write_pair(CACHE / name, WIDE["layers"], WIDE["intermediate"], draft, hidden=WIDE["hidden"])
    return write_pair(CACHE / name, draft=draft)


def realistic_bundle(draft: str = "demo") -> Bundle:
    """The compute-realistic pair exported (cached)."""
    target, draft_dir = realistic_pair(draft)
    out = CACHE / ("realistic-export" if draft == "demo" else f"realistic-{draft}-export")
    return cached(out, lambda: export_bundle(ExportConfig(target=str(target), draft=str(draft_dir), output=out)))
