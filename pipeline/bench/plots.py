"""PNG plots of a bench run: stage latency breakdown, accepted lengths, power and temperature."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specdec.pipeline.devices.sensor_log import SensorLog
from specdec.pipeline.engine.stats import STAGES
from specdec.pipeline.records.fleet import DeviceStatus, FleetRow
from specdec.pipeline.records.results import Details, Memory


def _figure(width: float, height: float) -> Any:
    """A figure outside pyplot: pyplot's registry of open figures is global state, and a fleet draws each
    device's plots in its own thread (matplotlib's advice for threads and servers: use Figure directly)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height))


def _save(figure: Any, path: Path) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=110)  # the file's suffix picks the Agg canvas: no backend, no window
    return path


def latency_breakdown(details: Details, path: Path) -> Path:
    stages = [details.stage_latency_ms.get(s) for s in STAGES]
    figure = _figure(7, 3.6)
    axis = figure.subplots()
    means = [p.mean if p else 0.0 for p in stages]
    p90 = [p.p90 if p else 0.0 for p in stages]
    axis.barh(STAGES, means, color="#4c72b0", label="mean")
    axis.scatter(p90, STAGES, color="#dd8452", zorder=3, label="p90")
    plain = details.plain_step_ms.mean if details.plain_step_ms else None
    if plain:
        axis.axvline(plain, color="#55a868", linestyle="--", label=f"plain step {plain:.2f} ms")
    axis.set_xlabel("ms per speculative round")
    axis.set_title("Latency per stage")
    axis.legend(loc="lower right", fontsize=8)
    return _save(figure, path)


def accepted_histogram(details: Details, path: Path) -> Path:
    histogram = details.accepted_len_histogram
    figure = _figure(6, 3.4)
    axis = figure.subplots()
    axis.bar([int(k) for k in histogram], list(histogram.values()), color="#4c72b0")
    axis.set_xlabel("tokens emitted per round (accepted drafts + 1)")
    axis.set_ylabel("rounds")
    axis.set_title("Accepted length")
    return _save(figure, path)


def power_and_temperature(sensors: SensorLog, path: Path) -> Path | None:
    times = [s.t_s for s in sensors.samples]
    power = [s.power_mw if s.power_mw is not None else s.rapl_power_mw for s in sensors.samples]
    zones = sorted({zone for s in sensors.samples for zone in s.temps_c})
    if not times or (all(p is None for p in power) and not zones):
        return None
    figure = _figure(7, 3.6)
    axis = figure.subplots()
    if any(p is not None for p in power):
        axis.plot([t for t, p in zip(times, power, strict=True) if p is not None], [p for p in power if p is not None],
                  color="#c44e52", label="power (mW)")
        axis.set_ylabel("mW")
    else:
        axis.text(0.5, 0.5, "power unavailable", transform=axis.transAxes, ha="center")
    axis.set_xlabel("seconds")
    if zones:
        twin = axis.twinx()
        for zone in zones[:6]:
            twin.plot(times, [s.temps_c.get(zone) for s in sensors.samples], linewidth=1, label=zone)
        twin.set_ylabel("°C")
        twin.legend(loc="upper right", fontsize=7)
    axis.set_title("Power and temperature")
    return _save(figure, path)


def memory_by_length(memory: Memory, path: Path) -> Path:
    """KV bytes held and peak RSS of each reply against the context it reached, per mode."""
    figure = _figure(7, 3.6)
    axis = figure.subplots()
    twin = axis.twinx()
    for mode, colour in (("plain", "#4c72b0"), ("speculative", "#dd8452")):
        replies = sorted((r for r in memory.replies if r.mode == mode), key=lambda r: r.tokens)
        if not replies:
            continue
        tokens = [r.tokens for r in replies]
        axis.plot(tokens, [r.kv_bytes / 2**20 for r in replies], marker="o", color=colour,
                  label=f"KV held, {mode}")
        axis.plot(tokens, [r.kv_live_bytes / 2**20 for r in replies], marker=".", linestyle=":", color=colour,
                  label=f"KV in use, {mode}")
        peaks = [(r.tokens, r.peak_rss_kb / 1024) for r in replies if r.peak_rss_kb is not None]
        if peaks:
            twin.plot(*zip(*peaks, strict=True), marker="s", linestyle="--", color=colour, alpha=0.6,
                      label=f"peak RSS, {mode}")
    axis.set_xlabel("context tokens at the end of the reply (prompt + reply)")
    axis.set_ylabel("KV MiB")
    twin.set_ylabel("peak RSS MiB")
    axis.set_title(f"Memory against reply length ({memory.kv_policy})")
    axis.legend(loc="upper left", fontsize=7)
    twin.legend(loc="lower right", fontsize=7)
    return _save(figure, path)


def fleet_comparison(rows: list[FleetRow], path: Path) -> Path:
    """Plain and speculative tokens/s per device (bars), and the speedup measured next to the predicted one."""
    figure = _figure(max(6.0, 1.2 * len(rows) + 3), 4.2)
    axis = figure.subplots()
    twin = axis.twinx()
    places = list(range(len(rows)))
    figures = [r.results.figures if r.results is not None else None for r in rows]
    plain = [f.plain_tokens_per_s if f and f.plain_tokens_per_s is not None else 0.0 for f in figures]
    speculative = [f.tokens_per_s if f and f.tokens_per_s is not None else 0.0 for f in figures]
    axis.bar([x - 0.2 for x in places], plain, width=0.4, color="#4c72b0", label="plain tok/s")
    axis.bar([x + 0.2 for x in places], speculative, width=0.4, color="#dd8452", label="speculative tok/s")
    for name, colour, marker in (("speedup", "#55a868", "o"), ("predicted_speedup", "#c44e52", "x")):
        points = [(x, f.get(name)) for x, f in zip(places, figures, strict=True) if f and f.get(name) is not None]
        if points:
            twin.scatter(*zip(*points, strict=True), color=colour, marker=marker, zorder=3,
                         label="speedup measured" if name == "speedup" else "speedup predicted")
    twin.axhline(1.0, color="#888888", linewidth=0.8, linestyle=":")
    twin.set_ylabel("speedup (×)")
    twin.set_ylim(bottom=0)
    axis.set_xticks(places, [r.label if r.status is DeviceStatus.complete else f"{r.label}\n({r.status.value})"
                             for r in rows], fontsize=8)
    axis.set_ylabel("tokens/s")
    axis.set_title("Devices compared")
    axis.legend(loc="upper left", fontsize=7)
    twin.legend(loc="upper right", fontsize=7)
    return _save(figure, path)
