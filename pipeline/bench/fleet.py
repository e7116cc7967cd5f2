"""`specdec bench --fleet`: one bench over many devices side by side, and one report.

A fleet run is N single-device runs (`run_bench` over adb, unchanged: tuning first where the bundle
has no plan for the device, sensors, cleanup, partial results) in worker threads, at most `jobs`
at once, plus a merge step that writes `fleet.json` (every device's results and the fleet's
summary), `fleet.md` (one row per device) and `fleet.png` beside one results directory per
device. A device's failure is its row, not the run's end: lost mid-run, unusable, an unexpected
error or a failed gate marks its row, and the exit code (errors.FleetFailure) says which of
these happened.

Threads rather than processes: a session spends its time waiting for adb and the device, and
threads share the portable runtime's build and the bench's inputs. Ctrl-C (or SIGTERM, SIGHUP)
reaches the main thread: it sets the sessions' stop signal (ondevice/session.py), every session
stops at its next device command and cleans up its device, and the partial output is removed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import logging
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from specdec import __version__
from specdec.pipeline.bench import gates
from specdec.pipeline.bench.fleet_report import write_fleet
from specdec.pipeline.bench.outputs import bundle_ref
from specdec.pipeline.bench.stage import BenchConfig, BenchOutcome, run_bench
from specdec.pipeline.bundle.store import Bundle, StagedDirectory
from specdec.pipeline.errors import (
    FLEET_EXIT_BASE,
    DeviceLostError,
    FleetFailure,
    InputError,
    SpecdecError,
    setting,
    swallowed_interrupts,
)
from specdec.pipeline.inputs.prompts import load_bench_prompts
from specdec.pipeline.inputs.text import TextCodec
from specdec.pipeline.ondevice.session import SessionGroup
from specdec.pipeline.progress import Progress
from specdec.pipeline.records.codec import RecordError, to_dict
from specdec.pipeline.records.fleet import DeviceStatus, FleetResults, FleetRow, FleetSummary, is_fleet, read_fleet
from specdec.pipeline.records.results import Figures, GateResult
from specdec.pipeline.settings import profiles
from specdec.pipeline.settings.fleet import FleetEntry
from specdec.pipeline.settings.profiles import Transport

log = logging.getLogger(__name__)

FleetEventSink = Callable[[str, dict[str, Any]], None]  # (device label, runner event), from worker threads

_FAILURE_OF_STATUS = {DeviceStatus.lost: FleetFailure.lost, DeviceStatus.partial: FleetFailure.lost,
                      DeviceStatus.unusable: FleetFailure.unusable, DeviceStatus.error: FleetFailure.error}


@dataclass(frozen=True)
class FleetConfig:
    devices: tuple[FleetEntry, ...]
    jobs: int | None = None  # devices measured at once; None: all of them

    def __post_init__(self) -> None:
        if not self.devices:
            raise InputError("the fleet has no devices", "pass --fleet FILE or -s SERIAL (repeatable)")
        if self.jobs is not None and self.jobs < 1:
            raise InputError(f"{setting('jobs')} must be at least 1", "use 1 or more")

    @property
    def workers(self) -> int:
        return min(self.jobs or len(self.devices), len(self.devices))


@dataclass
class FleetOutcome:
    results: FleetResults
    output: Path
    outcomes: dict[str, BenchOutcome] = field(default_factory=dict)  # label -> the devices that measured

    @property
    def failures(self) -> FleetFailure:
        failures = FleetFailure(0)
        for name in self.results.summary.failures:
            failures |= FleetFailure[name]
        return failures


@dataclass(frozen=True)
class FleetBaseline:
    """`--baseline` of a fleet run: an earlier fleet.json (each device against its own row, the fleet's medians
    against the earlier medians) or one results.json every device is compared with."""

    path: Path
    per_device: dict[str, gates.Baseline]
    shared: gates.Baseline | None = None
    median: Figures | None = None

    def of(self, label: str) -> gates.Baseline | None:
        return self.per_device.get(label, self.shared)


def load_fleet_baseline(path: Path) -> FleetBaseline:
    """Read a baseline before any device work, so a wrong file fails at once (exit 2)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        data = None  # gates.load_baseline says what is wrong with it
    if not isinstance(data, dict) or not is_fleet(data):
        return FleetBaseline(path, {}, shared=gates.load_baseline(path))
    try:
        earlier = read_fleet(path.read_text(encoding="utf-8"))
    except RecordError as exc:
        raise InputError(f"{setting('baseline')} '{path}' is not a fleet.json this specdec reads ({exc})",
                         "pass the fleet.json of an earlier `specdec bench --fleet`, or one results.json") from None
    per_device = {row.label: gates.Baseline(path, row.results.figures, gates.run_setup(to_dict(row.results)))
                  for row in earlier.devices if row.results is not None and row.status is DeviceStatus.complete}
    return FleetBaseline(path, per_device, median=earlier.summary.median)


@dataclass
class _Done:
    """One device's session as the worker saw it."""

    entry: FleetEntry
    profile: str
    wall_s: float = 0.0
    outcome: BenchOutcome | None = None
    status: DeviceStatus = DeviceStatus.complete
    reason: str | None = None


def device_configs(bench: BenchConfig, fleet: FleetConfig, directory: Path) -> dict[str, BenchConfig]:
    """Each device's own bench config: its address, its profile, its results directory inside `directory`."""
    configs = {}
    for entry in fleet.devices:
        configs[entry.name] = dataclasses.replace(
            bench, output=directory / entry.name, serial=entry.serial, adb_host=entry.host, adb_port=entry.port,
            profile=entry.profile or bench.profile, baseline=None, force=False)
    return configs


def run_fleet(bench: BenchConfig, fleet: FleetConfig, bundle: Bundle, on_event: FleetEventSink | None = None,
              progress: Progress | None = None) -> FleetOutcome:
    """Bench `bundle` on every device of `fleet` with `bench`'s settings, side by side; write one report into
    `bench.output`. Each device's address and profile come from its entry (`bench.profile` where it names
    none); `bench.serial`, `adb_host` and `adb_port` are not used."""
    if bench.device is not Transport.adb:
        raise InputError("a fleet runs on adb devices", f"add {setting('device')} adb")
    # What the user gave is checked before any device work: each device's profile, the scenario, the
    # prompts, the baseline, and the output directory.
    configs = device_configs(bench, fleet, bench.output)
    for name, config in configs.items():
        try:
            config.target.load_profile()
        except InputError as exc:
            raise InputError(f"device {name}: {exc.raw_problem}", exc.raw_fix) from None
    if bench.scenario:
        profiles.load_scenario(bench.scenario)
    load_bench_prompts(bench.prompts, TextCodec(bundle.tokenizer_dir), bench.limit, bench.chat)
    baseline = load_fleet_baseline(bench.baseline) if bench.baseline is not None else None
    warnings = [f"no baseline for device {name} in {baseline.path}: its regression gates are skipped"
                for name in configs if baseline is not None and baseline.of(name) is None]
    with StagedDirectory(bench.output, force=bench.force, sources=(bundle.path,)) as staged:
        configs = device_configs(bench, fleet, staged.dir)
        group = SessionGroup(progress=progress)
        started = time.monotonic()
        done = _run_all(fleet, configs, bundle, group, baseline, on_event)
        wall_s = time.monotonic() - started
        results = merge(bench, fleet, bundle, done, wall_s, baseline, warnings)
        write_fleet(staged.dir, results)
        staged.commit()
    outcomes = {d.entry.name: d.outcome for d in done if d.outcome is not None}
    return FleetOutcome(results, bench.output, outcomes)


def _run_all(fleet: FleetConfig, configs: dict[str, BenchConfig], bundle: Bundle, group: SessionGroup,
             baseline: FleetBaseline | None, on_event: FleetEventSink | None) -> list[_Done]:
    with _signals_as_interrupt() as swallowed, ThreadPoolExecutor(fleet.workers,
                                                                  thread_name_prefix="specdec-fleet") as pool:
        futures: list[Future[_Done]] = [
            pool.submit(_bench_one, entry, configs[entry.name], bundle, group,
                        baseline.of(entry.name) if baseline else None, on_event)
            for entry in fleet.devices]
        try:
            pending = set(futures)
            while pending:  # in slices: a signal reaches a thread blocked on a lock only between them
                _, pending = wait(pending, timeout=0.5)
                if swallowed:
                    raise swallowed[0]
        except KeyboardInterrupt:
            group.stop.set()
            for future in futures:
                future.cancel()  # those not started yet
            log.warning("stopping: every device cleans up its work dir first")
            wait(futures)
            raise
        return [future.result() for future in futures]


def _bench_one(entry: FleetEntry, config: BenchConfig, bundle: Bundle, group: SessionGroup,
               baseline: gates.Baseline | None, on_event: FleetEventSink | None) -> _Done:
    done = _Done(entry, config.profile_name)
    label = entry.name
    sink = (lambda event: on_event(label, event)) if on_event is not None else None
    started = time.monotonic()
    try:
        done.outcome = run_bench(config, bundle, on_event=sink, group=group, baseline=baseline)
        results = done.outcome.results
        if results.partial:
            lost = done.outcome.run is not None and done.outcome.run.lost
            done.status = DeviceStatus.lost if lost else DeviceStatus.partial
            done.reason = results.partial_reason
    except DeviceLostError as exc:
        done.status, done.reason = DeviceStatus.lost, exc.one_line()
    except SpecdecError as exc:
        done.status, done.reason = DeviceStatus.unusable, exc.one_line()
    except Exception as exc:  # a bug met on one device must not lose the others' results
        log.exception("%s: unexpected error", label)
        done.status, done.reason = DeviceStatus.error, f"{type(exc).__name__}: {exc}"
    done.wall_s = time.monotonic() - started
    if done.reason:
        log.info("%s: %s: %s", label, done.status.value, done.reason)
    if on_event is not None:
        on_event(label, {"type": "fleet_device", "status": done.status.value, "reason": done.reason,
                         "wall_s": done.wall_s})
    return done


@contextlib.contextmanager
def _signals_as_interrupt() -> Iterator[list[KeyboardInterrupt]]:
    """SIGTERM (a cancelled CI job) and SIGHUP (a closed terminal) stop the fleet as Ctrl-C does.

    A Ctrl-C that lands while the main thread runs a finaliser (the sessions' threads leave garbage
    the main thread collects) is swallowed by Python and would let the fleet run to its end; those
    are collected instead (the yielded list) for the wait loop to raise."""
    if threading.current_thread() is not threading.main_thread():
        yield []  # only the main thread can take signals; there the caller's handlers stay in charge
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        with swallowed_interrupts() as swallowed:
            yield swallowed
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def merge(bench: BenchConfig, fleet: FleetConfig, bundle: Bundle, done: list[_Done], wall_s: float,
          baseline: FleetBaseline | None, warnings: list[str]) -> FleetResults:
    """The fleet's record: one row per device, the fleet's gates and summary, the exit code."""
    rows = [FleetRow(label=d.entry.name, serial=d.entry.serial, server=d.entry.server, profile=d.profile,
                     status=d.status, reason=d.reason, wall_s=round(d.wall_s, 3),
                     results_dir=d.entry.name if d.outcome is not None else None,
                     results=d.outcome.results if d.outcome is not None else None) for d in done]
    median = median_figures(rows)
    fleet_gates = assertion_gates(list(bench.asserts), rows)
    if baseline is not None and baseline.median is not None:
        fleet_gates += gates.compare_figures(baseline.median, median, bench.max_regression_pct,
                                             prefix="fleet regression:median ")
    failures = failure_classes(rows, fleet_gates)
    walls = [row.wall_s for row in rows]
    summary = FleetSummary(
        devices=len(rows), statuses={s: n for s in DeviceStatus if (n := sum(r.status is s for r in rows))},
        jobs=fleet.workers, wall_s=round(wall_s, 3), device_wall_s_max=max(walls),
        device_wall_s_sum=round(sum(walls), 3),
        median=median, failures=[f.name for f in FleetFailure if f in failures and f.name],
        exit_code=FLEET_EXIT_BASE + int(failures) if failures else 0)
    return FleetResults(tool_version=__version__, created=_dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
                        bundle=bundle_ref(bundle), devices=rows, gates=fleet_gates, summary=summary,
                        warnings=warnings)


def median_figures(rows: list[FleetRow]) -> Figures:
    """Each figure's median over the complete devices that measured it (partial runs would skew it)."""
    measured = [r.results.figures for r in rows if r.status is DeviceStatus.complete and r.results is not None]
    values: dict[str, float | None] = {}
    for name in Figures.names():
        found = [v for f in measured if (v := f.get(name)) is not None]
        values[name] = statistics.median(found) if found else None
    return Figures(**values)


def assertion_gates(assertions: list[str], rows: list[FleetRow]) -> list[GateResult]:
    """Each `--assert` on the fleet: it holds when it held on every complete device (a device that stopped
    mid-run is a failure of its own class, whatever its partial figures say)."""
    complete = [r for r in rows if r.status is DeviceStatus.complete]
    others = [r.label for r in rows if r.status is not DeviceStatus.complete]
    outcomes = []
    for text in assertions:
        name = "lossless" if gates.parse_assertion(text) is None else text
        failing = [r.label for r in complete if any(g.gate == name for g in r.failed_gates)]
        passed = bool(complete) and not failing
        message = f"held on {len(complete) - len(failing)} of {len(complete)} complete devices"
        message += f"; failed on {', '.join(failing)}" if failing else ""
        message += f"; not complete: {', '.join(others)}" if others else ""
        outcomes.append(GateResult(f"fleet:{name}", passed, message))
    return outcomes


def failure_classes(rows: list[FleetRow], fleet_gates: list[GateResult]) -> FleetFailure:
    failures = FleetFailure(0)
    for row in rows:
        failures |= _FAILURE_OF_STATUS.get(row.status, FleetFailure(0))
        if row.status is DeviceStatus.complete and row.failed_gates:
            failures |= FleetFailure.gate
    if any(not gate.passed for gate in fleet_gates):
        failures |= FleetFailure.gate
    return failures
