"""apt under a private state dir, pip for the target platform; one-line errors for dead sources."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.errors import RuntimeBuildError
from specdec.pipeline.portable import fetch, recipe
from specdec.pipeline.portable.archive import BuildConfig, build_runtime
from specdec.pipeline.portable.fetch import Sources

ABI = recipe.ABIS[recipe.DEFAULT_ABI]
DEAD = "http://127.0.0.1:9"  # the discard port: nothing listens, connections are refused at once


def _needs_apt() -> None:
    if fetch.missing_tools():
        pytest.skip("apt-get / dpkg-deb not installed")


def test_apt_state_is_private(tmp_path: Path) -> None:
    options = fetch.apt_options(tmp_path, ABI)
    values = dict(arg.split("=", 1) for arg in options[1::2])
    assert values["APT::Architecture"] == values["APT::Architectures"] == "arm64"
    for key in ("Dir::State::Lists", "Dir::State::Status", "Dir::Cache", "Dir::Etc::SourceList",
                "Dir::Etc::SourceParts", "Dir::Etc::Preferences", "Dir::Etc::PreferencesParts"):
        assert values[key].startswith(str(tmp_path)), key
    text = fetch._sources_list(Sources(apt_mirror="http://mirror/debian", apt_security_mirror=None), ABI)
    assert text == "".join(f"deb [arch=arm64 signed-by={recipe.DEBIAN_KEYRING}] http://mirror/debian {suite} main\n"
                           for suite in recipe.DEBIAN_SUITES)


def test_unreachable_apt_mirror_is_one_line(tmp_path: Path) -> None:
    _needs_apt()
    with pytest.raises(RuntimeBuildError) as info:
        fetch.fetch_debs(tmp_path / "state", tmp_path / "debs", ABI,
                         Sources(apt_mirror=f"{DEAD}/debian", apt_security_mirror=None))
    line = info.value.one_line()
    assert line.startswith(f"runtime build, step 'apt update': cannot reach {DEAD}/debian")
    assert "--apt-mirror" in line and "\n" not in line and info.value.exit_code == 5


def test_unreachable_pip_index_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Only the dead index: no pip.conf, no local wheel folders of this machine.
    monkeypatch.setenv("PIP_CONFIG_FILE", "/dev/null")
    for key in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_NO_INDEX"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(RuntimeBuildError) as info:
        fetch.fetch_wheels(tmp_path / "wheels", ABI, Sources(pip_index_url=f"{DEAD}/simple"))
    line = info.value.one_line()
    assert line.startswith(f"runtime build, step 'pip download': cannot reach {DEAD}/simple")
    assert "--index-url" in line and "\n" not in line


def test_cli_build_with_dead_mirror(tmp_path: Path) -> None:
    _needs_apt()
    result = CliRunner().invoke(app, ["runtime", "build", "--apt-mirror", f"{DEAD}/debian", "--apt-security-mirror",
                                      "none", "--cache-dir", str(tmp_path / "cache")])
    assert result.exit_code == 5
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "step 'apt update': cannot reach" in errors[0]
    assert not list((tmp_path / "cache").glob("*/*.tar.gz"))


def test_wheels_in_the_cache_need_no_network(tmp_path: Path) -> None:
    assert fetch.cached_wheels(tmp_path, ABI) is None
    for name in ("numpy-2.4.6-cp311-cp311-manylinux_2_27_aarch64.manylinux_2_28_aarch64.whl",
                 "onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_aarch64.whl",
                 "onnxruntime-1.32.0-cp311-cp311-manylinux_2_28_x86_64.whl",
                 "pyahocorasick-2.3.1-cp311-cp311-manylinux2014_aarch64.manylinux_2_17_aarch64.whl"):
        (tmp_path / name).touch()
    assert fetch.cached_wheels(tmp_path, ABI) is None  # llguidance missing
    (tmp_path / "llguidance-1.6.1-cp39-abi3-manylinux_2_28_aarch64.whl").touch()  # stable ABI: any CPython
    found = fetch.cached_wheels(tmp_path, ABI)
    assert found is not None
    assert [p.name.split("-")[0] for p in found] == ["numpy", "onnxruntime", "pyahocorasick", "llguidance"]
    assert all("aarch64" in p.name for p in found)
    # offline: a dead index is never asked
    assert fetch.fetch_wheels(tmp_path, ABI, Sources(pip_index_url=f"{DEAD}/simple")) == found


def test_deb_versions_from_file_names(tmp_path: Path) -> None:
    (tmp_path / "zlib1g_1%3a1.2.13.dfsg-1_arm64.deb").touch()
    deb = fetch._newest(tmp_path, "zlib1g", ABI)
    assert (deb.package, deb.version) == ("zlib1g", "1:1.2.13.dfsg-1")
    with pytest.raises(RuntimeBuildError, match="libc6 was not downloaded"):
        fetch._newest(tmp_path, "libc6", ABI)


def test_missing_apt_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None if name == "apt-get" else real(name, *a, **k))
    with pytest.raises(RuntimeBuildError, match="needs apt-get.*Debian or Ubuntu"):
        build_runtime(BuildConfig(cache_dir=tmp_path, force=True))
