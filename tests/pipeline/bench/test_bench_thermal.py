"""Thermal degrade over the adb stand-in: transitions in results.json and the trace, output lossless."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.profiles import Transport

pytestmark = pytest.mark.adb

HOT_PROFILE = """\
description: a phone whose thermal limits sit below its current temperature
transport: adb
runtime: {python: python3, threads: 1}
sensors: {interval_ms: 100, current_unit: uA, voltage_unit: uV, discharge_sign: negative}
thermal: {start_temp_c: 90, cooldown_timeout_s: 0, throttle_c: 45, disable_c: 60, recover_c: 40}
power: {budget_w: 50}
"""


def test_thermal_transitions_are_recorded(adb_environ, make_standin, bench_bundle, prompts_file,  # type: ignore[no-untyped-def]
                                          tmp_path: Path) -> None:
    profile = tmp_path / "hot.yaml"
    profile.write_text(HOT_PROFILE)
    device = make_standin(python=sys.executable, thermal_zones={"cpu0": 52000, "battery": 30000})
    replies: list[dict[str, object]] = []
    # 18 measured replies: the host sees events within ~0.5 s, so changes land mid-run

    def heat(event: dict[str, object]) -> None:
        if event.get("type") != "reply":
            return
        replies.append(event)
        if len(replies) == 2:
            device.set_temperature("cpu0", 65000)  # above disable: plain decoding
        if len(replies) == 8:
            device.set_temperature("cpu0", 35000)  # below recover: full speculation again

    config = BenchConfig(output=tmp_path / "out", device=Transport.adb, serial=device.serial, profile=str(profile),
                         prompts=prompts_file, limit=3, repeats=3, max_new_tokens=64, python="python3",
                         controllers=("thermal", "fallback"))
    outcome = run_bench(config, bench_bundle, on_event=heat)
    results = json.loads((outcome.output / "results.json").read_text())
    counts = results["controllers"]["counts"]
    assert counts.get("thermal:degraded", 0) >= 1 and counts.get("thermal:off", 0) >= 1
    assert counts.get("thermal:normal", 0) >= 1
    assert results["lossless"]["equal"]
    assert results["details"]["rounds"]["fallback"] > 0  # rounds decoded plainly while too hot
    host_seen = [e["to"] for e in results["thermal"]["events"]]
    assert "off" in " ".join(host_seen) or "disable" in host_seen  # the sampler saw it too
    trace = json.loads((outcome.output / "trace.json").read_text())
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i" and e["name"] == "thermal"]
    assert {e["args"]["action"] for e in instants} >= {"degraded", "off", "normal"}
    assert "thermal:off" in (outcome.output / "summary.md").read_text()
