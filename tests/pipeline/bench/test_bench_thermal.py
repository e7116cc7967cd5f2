"""Thermal degrade over the adb stand-in: transitions in results.json and the trace, output lossless."""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path

import pytest

from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import Transport

pytestmark = pytest.mark.adb

HOT_PROFILE = """\
description: a phone whose thermal limits sit below its current temperature
transport: adb
runtime: {python: python3, threads: 1}
sensors: {interval_ms: 100, current_unit: uA, voltage_unit: uV, discharge_sign: negative}
thermal: {start_temp_c: 90, cooldown_timeout_s: 0, throttle_c: 45, disable_c: 60, recover_c: 40}
power: {budget_w: 50}
"""


class HeatSchedule(threading.Thread):
    """Changes the stand-in's temperature as the runner finishes replies.

    It watches the runner's event file in the stand-in's sandbox directly (this machine's file
    system), so a change lands within milliseconds instead of the host's adb polling interval.
    """

    def __init__(self, device, steps: dict[int, int]) -> None:  # type: ignore[no-untyped-def]
        super().__init__(daemon=True)
        self.device, self.steps, self.done = device, dict(steps), threading.Event()

    def run(self) -> None:
        while self.steps and not self.done.is_set():
            replies = 0
            for events in self.device.root.glob("data/local/tmp/specdec/*/events.jsonl"):
                replies = events.read_text().count('"type":"reply"')
            for count in sorted(self.steps):
                if replies >= count:
                    self.device.set_temperature("cpu0", self.steps.pop(count))
            time.sleep(0.002)


def test_thermal_transitions_are_recorded(adb_environ, make_standin, bench_bundle, prompts_file,  # type: ignore[no-untyped-def]
                                          tmp_path: Path) -> None:
    profile = tmp_path / "hot.yaml"
    profile.write_text(HOT_PROFILE)
    device = make_standin(python=sys.executable, thermal_zones={"cpu0": 52000, "battery": 30000})
    # 36 measured replies: too hot to speculate after 2, cool again after 14. The controller reads the
    # sensor at most every 0.1 s and a plain reply of this tiny pair takes ~6 ms on a fast CPU, so each
    # temperature has to last a dozen replies to be read (18 replies of 64 tokens were too few)
    heat = HeatSchedule(device, {2: 65000, 14: 35000})
    heat.start()
    config = BenchConfig(output=tmp_path / "out", device=Transport.adb, serial=device.serial, profile=str(profile),
                         prompts=prompts_file, limit=3, repeats=6, python="python3",
                         controllers=("thermal", "fallback"), tune=False, decode=DecodeOptions(max_new_tokens=96))
    try:
        outcome = run_bench(config, bench_bundle)
    finally:
        heat.done.set()
    results = json.loads((outcome.output / "results.json").read_text())
    counts = results["controllers"]["counts"]
    assert counts.get("thermal:degraded", 0) >= 1 and counts.get("thermal:off", 0) >= 1
    assert counts.get("thermal:normal", 0) >= 1
    assert results["lossless"]["equal"]
    assert results["details"]["rounds"]["fallback"] > 0  # rounds decoded plainly while too hot
    trace = json.loads((outcome.output / "trace.json").read_text())
    instants = [e for e in trace["traceEvents"] if e["ph"] == "i" and e["name"] == "thermal"]
    assert {e["args"]["action"] for e in instants} >= {"degraded", "off", "normal"}
    assert "thermal:off" in (outcome.output / "summary.md").read_text()
