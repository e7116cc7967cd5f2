"""Session-wide fixtures: tiny checkpoint pairs and exported bundles, built once per run."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tiny_models import make_pair


@pytest.fixture(scope="session")
def pair_factory(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    cache: dict[tuple[object, ...], tuple[Path, Path]] = {}

    def factory(arch: str = "llama", **kwargs: object) -> tuple[Path, Path]:
        key = (arch, *sorted(kwargs.items()))
        if key not in cache:
            root = tmp_path_factory.mktemp(f"pair-{arch}")
            cache[key] = make_pair(root, arch, **kwargs)  # type: ignore[arg-type]
        return cache[key]

    return factory


@pytest.fixture(scope="session")
def bundle_factory(tmp_path_factory: pytest.TempPathFactory, pair_factory):  # type: ignore[no-untyped-def]
    from specdec.pipeline.bundle import Bundle
    from specdec.pipeline.export import ExportConfig, export_bundle

    cache: dict[tuple[object, ...], Bundle] = {}

    def factory(arch: str = "llama", **kwargs: object) -> Bundle:
        key = (arch, *sorted(kwargs.items()))
        if key not in cache:
            target, draft = pair_factory(arch, **kwargs)
            out = tmp_path_factory.mktemp(f"bundle-{arch}") / "bundle"
            cache[key] = export_bundle(ExportConfig(target=str(target), draft=str(draft), output=out))
        return cache[key]

    return factory
