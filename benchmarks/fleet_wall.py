"""A fleet's wall time against its devices' own: the same fleet side by side (all at once) and one at a time.

`specdec bench --fleet` runs each device's session in a worker of its own; the fleet should take
about as long as its slowest device, not as long as all of them together. This runs the same
fleet twice, `--jobs N` (side by side) and `--jobs 1` (one after another), and prints the fleet's
wall time next to its devices' sessions (longest, sum) for both; with `--rounds 2` the order
alternates (side by side first, then one at a time first), so neither profits from warm caches alone.

Real devices: `--fleet fleet.yaml`. Without one, `--standins N` starts N stand-in phones on
loopback (tests/standin: adbd-protocol servers reached through the real adb binary, with a private
adb server; this machine's Python runs the device runner), so it needs the repository checkout.

    .venv/bin/python benchmarks/fleet_wall.py [--bundle B] [--standins 3 | --fleet fleet.yaml] [--tokens 12]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from common import demo_bundle

from specdec.pipeline.bench.fleet import FleetConfig, run_fleet
from specdec.pipeline.bench.stage import BenchConfig
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.fleet import FleetEntry, load_fleet
from specdec.pipeline.settings.profiles import Transport

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


@contextlib.contextmanager
def standins(count: int, workdir: Path) -> Iterator[list[FleetEntry]]:
    """`count` stand-in phones connected to a private adb server that this process's adb calls use."""
    from standin.adb_env import AdbServer
    from standin.adbd import StandinDevice

    saved = {key: os.environ.get(key) for key in ("ANDROID_ADB_SERVER_PORT", "HOME", "TMPDIR", "ANDROID_SERIAL")}
    with AdbServer(workdir=workdir / "adb") as server, contextlib.ExitStack() as stack:
        os.environ.pop("ANDROID_SERIAL", None)
        os.environ.update({key: server.env[key] for key in ("ANDROID_ADB_SERVER_PORT", "HOME", "TMPDIR")})
        try:
            devices = [stack.enter_context(StandinDevice(workdir / f"phone{i}", python=sys.executable,
                                                         model=f"Standin {i}",
                                                         thermal_zones={"cpu0": 36000}))
                       for i in range(count)]
            for device in devices:
                server.connect(device)
            yield [FleetEntry(serial=device.serial, label=f"phone{i}") for i, device in enumerate(devices)]
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value


def measure(bundle: Bundle, devices: list[FleetEntry], jobs: int, out: Path, tokens: int,
            prompts: int) -> dict[str, Any]:
    bench = BenchConfig(output=out, device=Transport.adb, limit=prompts, decode=DecodeOptions(max_new_tokens=tokens),
                        cooldown=False,
                        tune=False)
    results = run_fleet(bench, FleetConfig(tuple(devices), jobs), bundle).results
    summary = results.summary
    return {"jobs": jobs, "wall_s": summary.wall_s, "device_wall_s": [row.wall_s for row in results.devices],
            "device_wall_s_max": summary.device_wall_s_max,
            "device_wall_s_sum": summary.device_wall_s_sum,
            "wall_over_sum": round(summary.wall_s / summary.device_wall_s_sum, 3),
            "wall_over_max": round(summary.wall_s / summary.device_wall_s_max, 3),
            "statuses": {status.value: n for status, n in summary.statuses.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundle", type=Path, help="bundle to bench (default: the demo pair, exported)")
    parser.add_argument("--fleet", type=Path, help="fleet file of real devices (default: --standins)")
    parser.add_argument("--standins", type=int, default=3, help="stand-in phones when there is no --fleet")
    parser.add_argument("--tokens", type=int, default=12, help="tokens per reply")
    parser.add_argument("--prompts", type=int, default=2, help="prompts per device")
    parser.add_argument("--rounds", type=int, default=1, help="pairs of runs, the order alternating")
    args = parser.parse_args()
    bundle = Bundle.load(args.bundle) if args.bundle else demo_bundle()
    with tempfile.TemporaryDirectory(prefix="fleet-wall-") as scratch, contextlib.ExitStack() as stack:
        work = Path(scratch)
        devices = (list(load_fleet(args.fleet).devices) if args.fleet
                   else stack.enter_context(standins(args.standins, work)))
        rows: list[dict[str, Any]] = []
        for index in range(args.rounds):
            order = (len(devices), 1) if index % 2 == 0 else (1, len(devices))
            for jobs in order:
                rows.append(measure(bundle, devices, jobs, work / f"run{len(rows)}", args.tokens, args.prompts))
    side_by_side = [row["wall_s"] for row in rows if row["jobs"] > 1]
    one_by_one = [row["wall_s"] for row in rows if row["jobs"] == 1]
    print(json.dumps({"devices": len(devices), "runs": rows,
                      "side_by_side_over_one_at_a_time": round(sum(side_by_side) / sum(one_by_one), 3)}, indent=1))


if __name__ == "__main__":
    main()
