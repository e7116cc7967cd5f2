"""The recipe: pinned inputs per ABI and the digest that names them."""

from __future__ import annotations

import pytest

from specdec.pipeline.errors import InputError
from specdec.pipeline.portable import recipe


def test_abi_registry() -> None:
    spec = recipe.abi_spec("arm64-v8a")
    assert (spec.deb_arch, spec.loader, spec.wheel_platform, spec.python_abi) == (
        "arm64", "ld-linux-aarch64.so.1", "manylinux_2_28_aarch64", "cp311")
    with pytest.raises(InputError, match="no portable runtime for ABI 'x86'.*arm64-v8a"):
        recipe.abi_spec("x86")


def test_pins_match_the_host_onnxruntime() -> None:
    # The bundles are exported and checked with the host's onnxruntime: the phone runs the same one.
    import onnxruntime

    assert f"onnxruntime=={onnxruntime.__version__}" in recipe.WHEELS
    assert all("==" in pin for pin in recipe.WHEELS)
    assert recipe.PYTHON == "3.11" and "python3.11-minimal" in recipe.DEBS


def test_digest_names_the_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = recipe.abi_spec("arm64-v8a")
    first = recipe.recipe_digest(spec, bytecode=True)
    assert first == recipe.recipe_digest(spec, bytecode=True)
    assert first != recipe.recipe_digest(spec, bytecode=False)
    monkeypatch.setattr(recipe, "WHEELS", ("numpy==2.4.6", "onnxruntime==1.31.0"))
    assert recipe.recipe_digest(spec, bytecode=True) != first


def test_device_files_are_shipped_with_the_package() -> None:
    files = recipe.device_files()
    assert "@LOADER@" in files["specdec-run"] and "def main" in files["boot.py"]
