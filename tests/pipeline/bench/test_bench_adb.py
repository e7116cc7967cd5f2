"""`specdec bench --device adb` against the stand-in Android device, through the real adb binary."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from standin.adbd import reap_jobs
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.cli.options import config_from
from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.errors import DeviceError, InputError
from specdec.pipeline.records.codec import dump
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import RuntimeKind, Transport

pytestmark = pytest.mark.adb
runner = CliRunner()


def _config(out: Path, serial: str | None, prompts: Path, **overrides: object) -> BenchConfig:
    base: dict[str, object] = {"output": out, "device": Transport.adb, "serial": serial, "prompts": prompts,
                               "max_new_tokens": 12, "limit": 2, "python": "python3", "cooldown": False,
                               "tune": False}
    return config_from(BenchConfig, {**base, **overrides})


def test_full_bench_over_adb(adb_environ, make_standin, bench_bundle, prompts_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    cool = {"cpu0": 36000, "gpu": 34000, "battery": 30000}  # below the profile's 40 °C start temperature
    device = make_standin(python=sys.executable, model="Pixel Standin", thermal_zones=cool)
    outcome = run_bench(_config(tmp_path / "out", device.serial, prompts_file, cooldown=True), bench_bundle)
    results = dump(outcome.results)
    assert not results["partial"] and results["lossless"]["equal"]
    assert results["device"]["model"] == "Pixel Standin" and results["device"]["transport"] == "adb"
    f = results["figures"]
    assert f["speedup"] and f["mean_accepted_len"] >= 1
    # the stand-in battery: -450 mA at 3.9 V while discharging -> 1755 mW
    assert f["mean_power_mw"] == pytest.approx(1755.0, rel=1e-6)
    assert f["energy_per_token_mj"] is not None and f["peak_temp_c"] is not None
    # the device process read its own peak RSS (VmHWM) per reply, and its KV bytes
    assert f["peak_memory_mb"] > 10 and f["plain_peak_memory_mb"] > 10 and f["kv_mb_end"] > 0
    assert results["memory"]["replies"] and f["weights_mb"] > 0
    assert results["sensors"]["discharge_sign"] == "negative"
    assert results["thermal"]["cooldown"]["status"] == "reached"
    assert results["thermal"]["before"]["available"]  # dumpsys thermalservice was read
    trace = json.loads((outcome.output / "trace.json").read_text())
    assert {"Draft_Generate", "Target_Verify"} <= {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert any(e["ph"] == "C" and e["name"] == "power_mw" for e in trace["traceEvents"])
    assert not list((device.root / "data/local/tmp/specdec").glob("*")), "remote work dir left behind"


def test_bench_over_adb_runs_the_fused_cpu_flavour(adb_environ, make_standin, bench_bundle_cpu, prompts_file,  # type: ignore[no-untyped-def]
                                                    tmp_path) -> None:
    device = make_standin(python=sys.executable)
    outcome = run_bench(_config(tmp_path / "out", device.serial, prompts_file), bench_bundle_cpu)
    results = dump(outcome.results)
    assert not results["partial"] and results["lossless"]["equal"]
    assert results["figures"]["mean_accepted_len"] >= 1
    assert results["figures"]["peak_memory_mb"] > 10 and results["figures"]["kv_bytes_per_token"] > 0


def test_cli_bench_over_adb(adb_environ, make_standin, bench_bundle, prompts_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    device = make_standin(python=sys.executable)
    result = runner.invoke(app, ["bench", str(bench_bundle.path), "--device", "adb", "--serial", device.serial,
                                 "--prompts", str(prompts_file), "--limit", "1", "-n", "8", "--python", "python3",
                                 "--out", str(tmp_path / "out"), "--assert", "lossless", "--no-cooldown"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "summary.md").exists()


def test_device_without_python(adb_environ, make_standin, bench_bundle, prompts_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    device = make_standin(python=None)
    with pytest.raises(DeviceError, match=r"cannot run the bench runner: missing python \(python3\)"):
        run_bench(_config(tmp_path / "out", device.serial, prompts_file, runtime=RuntimeKind.device_python),
                  bench_bundle)
    assert not (tmp_path / "out").exists()


def test_portable_runtime_is_for_adb_devices(bench_bundle, prompts_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = BenchConfig(output=tmp_path / "out", prompts=prompts_file, limit=1, cooldown=False,
                         runtime=RuntimeKind.portable, decode=DecodeOptions(max_new_tokens=4))
    with pytest.raises(InputError, match="portable runtime is for Android devices"):
        run_bench(config, bench_bundle)
    assert not (tmp_path / "out").exists()


def test_no_device_and_several_devices(adb_environ, make_standin, bench_bundle, prompts_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(DeviceError, match="no"):
        run_bench(_config(tmp_path / "out", None, prompts_file), bench_bundle)
    first, second = make_standin(), make_standin()
    with pytest.raises(DeviceError) as info:
        run_bench(_config(tmp_path / "out", None, prompts_file), bench_bundle)
    assert first.serial in str(info.value) and second.serial in str(info.value)


def test_device_lost_mid_run_keeps_partial_results(adb_environ, make_standin, bench_bundle, prompts_file,  # type: ignore[no-untyped-def]
                                                   tmp_path) -> None:
    device = make_standin(python=sys.executable)
    replies = []

    def on_event(event: dict[str, object]) -> None:
        if event.get("type") == "reply":
            replies.append(event)
            if len(replies) == 1:
                device.kill()

    try:
        outcome = run_bench(_config(tmp_path / "out", device.serial, prompts_file, max_new_tokens=24, repeats=3),
                            bench_bundle, on_event=on_event)
    finally:
        reap_jobs(device.root)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["partial"] and "device lost" in results["partial_reason"]
    assert outcome.results.details.tokens.plain + outcome.results.details.tokens.speculative > 0
    assert "Partial results" in (tmp_path / "out" / "summary.md").read_text()


def test_ctrl_c_cleans_up_the_device(adb_environ, make_standin, bench_bundle, prompts_file, tmp_path) -> None:  # type: ignore[no-untyped-def]
    device = make_standin(python=sys.executable)

    def interrupt(event: dict[str, object]) -> None:
        if event.get("type") == "reply":
            raise KeyboardInterrupt

    try:
        with pytest.raises(KeyboardInterrupt):
            run_bench(_config(tmp_path / "out", device.serial, prompts_file, max_new_tokens=24, repeats=3),
                      bench_bundle, on_event=interrupt)
    finally:
        reap_jobs(device.root)
    assert not list((device.root / "data/local/tmp/specdec").glob("*")), "remote work dir left behind"
    assert not (tmp_path / "out").exists()


def _tree(root: Path) -> set[str]:
    return {p.relative_to(root).as_posix() for p in root.rglob("*")}


def test_a_bench_leaves_nothing_on_the_device(adb_environ, make_standin, bench_bundle_cpu, prompts_file,  # type: ignore[no-untyped-def]
                                              tmp_path) -> None:
    """The device's tree after a run equals the tree before it. onnxruntime keeps telemetry state
    from its import on (`.ses` in $TMPDIR, `.cache/Microsoft/...` in $HOME): the probe and the runner run
    with it off, the runner's HOME, TMPDIR and caches in the work dir, which goes, and its parent too."""
    device = make_standin(python=sys.executable)
    writable = device.root / "data"  # what the runner can write: /data/local/tmp and the rest of /data
    before = _tree(writable)
    result = runner.invoke(app, ["bench", str(bench_bundle_cpu.path), "--device", "adb", "--serial", device.serial,
                                 "--prompts", str(prompts_file), "--limit", "1", "-n", "4", "--python", "python3",
                                 "-o", str(tmp_path / "out"), "--no-cooldown", "--no-tune"])
    assert result.exit_code == 0, result.output
    assert _tree(writable) == before, f"left on the device: {sorted(_tree(writable) - before)}"
