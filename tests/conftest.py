"""Session-wide fixtures: tiny checkpoint pairs and exported bundles, built once per run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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
    from specdec.pipeline.bundle.store import Bundle
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


@pytest.fixture(scope="session")
def feature_factory(tmp_path_factory, pair_factory):  # type: ignore[no-untyped-def]
    """feature_factory(arch, vocab_step=1, copy_target=False, layers=1, **pair kwargs): the pair's target
    with a feature draft (tiny_models.make_feature_draft), exported once per argument set."""
    from support.tiny_models import make_feature_draft

    from specdec.pipeline.bundle.store import Bundle
    from specdec.pipeline.export import ExportConfig, export_bundle

    cache: dict[tuple[object, ...], Bundle] = {}

    def factory(arch: str = "llama", *, vocab_step: int = 1, copy_target: bool = False, layers: int = 1,
                input_norms: bool = False, **kwargs: object) -> Bundle:
        key = (arch, vocab_step, copy_target, layers, input_norms, *sorted(kwargs.items()))
        if key not in cache:
            target, _ = pair_factory(arch, **kwargs)
            root = tmp_path_factory.mktemp(f"feature-{arch}")
            draft = make_feature_draft(target, root / "draft", layers=layers, vocab_step=vocab_step,
                                       copy_target=copy_target, input_norms=input_norms)
            cache[key] = export_bundle(ExportConfig(target=str(target), draft=str(draft), output=root / "bundle"))
        return cache[key]

    return factory


@pytest.fixture(scope="session")
def feature_stages(feature_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    """feature_stages(stages): the agreeing feature draft (its target's own layers, a confident target,
    every second id as its vocabulary) after `stages`, a tuple of "surgery", "w8a8" or "nbits"
    (quantize) and "cpu" (compile --target cpu, max context 128), each prefix built once."""
    from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
    from specdec.pipeline.quantize import quantize_bundle
    from specdec.pipeline.quantize.config import QuantizeConfig
    from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

    cache: dict[tuple[str, ...], Any] = {}

    def factory(stages: tuple[str, ...]) -> Any:
        if stages not in cache:
            if not stages:
                cache[stages] = feature_factory(copy_target=True, head_scale=30.0, vocab_step=2)
            else:
                source = factory(stages[:-1])
                out = tmp_path_factory.mktemp(f"feature-{'-'.join(stages)}") / "b"
                step = stages[-1]
                if step == "surgery":
                    cache[stages] = surgery_bundle(SurgeryConfig(output=out), source)
                elif step in ("w8a8", "nbits"):
                    cache[stages] = quantize_bundle(QuantizeConfig.from_text(output=out, format=step), source)
                else:
                    cache[stages] = compile_bundle(CompileConfig(output=out, target=GraphFlavour(step),
                                                                 format=OutputFormat.onnx, max_context=128), source)
        return cache[stages]

    return factory


@pytest.fixture(scope="session")
def surgered_bundle(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    """The tiny llama pair, exported and surgered: what the compiled fixtures are compiled from."""
    from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

    return surgery_bundle(SurgeryConfig(output=tmp_path_factory.mktemp("surgered") / "b"), bundle_factory("llama"))


@pytest.fixture(scope="session")
def compiled_factory(surgered_bundle, tmp_path_factory):  # type: ignore[no-untyped-def]
    """compiled_factory(flavour, format, **settings): the surgered pair compiled once per argument set."""
    from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle

    cache: dict[tuple[object, ...], Any] = {}

    def factory(flavour: str, output_format: str, **settings: Any) -> Any:
        key = (flavour, output_format, *sorted(settings.items()))
        if key not in cache:
            out = tmp_path_factory.mktemp(f"compiled-{flavour}-{output_format}") / "b"
            cache[key] = compile_bundle(CompileConfig(output=out, target=GraphFlavour(flavour),
                                                      format=OutputFormat(output_format), **settings), surgered_bundle)
        return cache[key]

    return factory


@pytest.fixture(scope="session")
def bench_bundle(compiled_factory):  # type: ignore[no-untyped-def]
    """Exported -> surgered -> compiled (npu flavour: static buckets) tiny llama pair."""
    return compiled_factory("npu", "onnx", buckets=(4, 8, 16), draft_buckets=(1, 4), max_context=128,
                            prefill_chunk=16, context_buckets=(64,))


@pytest.fixture(scope="session")
def bench_bundle_cpu(compiled_factory):  # type: ignore[no-untyped-def]
    """Exported -> surgered -> compiled (cpu flavour: fused graphs, KV in place): what `specdec pipeline` makes."""
    return compiled_factory("cpu", "onnx", max_context=128)


@pytest.fixture
def prompts_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text('{"id": "a", "input_ids": [5, 6, 7]}\n{"id": "b", "input_ids": [9, 10, 11, 12]}\n'
                    '{"id": "c", "text": "the quick brown"}\n')
    return path


@pytest.fixture(scope="session")
def portable_runtime(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """The portable arm64 runtime archive, built once per test run into a private cache.

    Returns (archive, xdg_cache_home): with XDG_CACHE_HOME set to the second, specdec finds the
    archive. Needs the package sources (apt: deb.debian.org, pip: its index); without them the
    tests that need it skip, with the one-line error as the reason.
    """
    from specdec.pipeline.errors import RuntimeBuildError
    from specdec.pipeline.portable.archive import BuildConfig, build_runtime

    xdg = tmp_path_factory.mktemp("xdg-cache")
    try:
        archive = build_runtime(BuildConfig(cache_dir=xdg / "specdec" / "runtime"))
    except RuntimeBuildError as exc:
        if "cannot reach" in exc.problem or "not installed" in exc.problem or "needs" in exc.problem:
            pytest.skip(f"cannot build the portable runtime here: {exc.one_line()}")
        raise
    return archive, xdg


@pytest.fixture
def readonly_dir(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A directory on a read-only filesystem (a 1 MB tmpfs mounted ro); needs root, else skipped."""
    import os
    import subprocess

    if os.geteuid() != 0:
        pytest.skip("mounting a read-only tmpfs needs root (CI runs the tests as root)")
    mount = tmp_path / "readonly"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(mount)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a read-only tmpfs here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True, check=False)
