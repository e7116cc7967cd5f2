"""Adaptive speculation (docs/design.md §5): small controllers that decide how much to draft each round.

Every controller only changes the round's plan (tree budget, width, depth, beta) or asks for a
plain step: what is accepted is decided by verification alone, so greedy output is identical
with any controller on, and sampling stays exact (uniforms are indexed by output position).
Each decision is recorded as an event with its reason, for the trace and results.json.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specdec.pipeline.engine.drafter import RoundPlan
from specdec.pipeline.engine.stats import RoundStats

Event = dict[str, Any]


class Controller:
    """Base: adjust the plan before a round, learn from its statistics after it."""

    name = "controller"

    def __init__(self) -> None:
        self.events: list[Event] = []

    def plan(self, plan: RoundPlan) -> RoundPlan | None:
        return plan

    def observe(self, stats: RoundStats) -> None:
        return None

    def emit(self, action: str, reason: str, **values: Any) -> None:
        self.events.append({"controller": self.name, "action": action, "reason": reason,
                            "ts_ns": time.time_ns(), **values})


class BetaAdaptation(Controller):
    """beta <- clip(beta (1 + eta (L_target / L_mean - 1)), beta_min, beta_max) over the last rounds."""

    name = "beta"

    def __init__(self, beta: float, target_len: float, eta: float, window: int, beta_min: float,
                 beta_max: float) -> None:
        super().__init__()
        self.beta, self.target_len, self.eta = beta, target_len, eta
        self.beta_min, self.beta_max = beta_min, beta_max
        self.recent: deque[int] = deque(maxlen=window)

    def plan(self, plan: RoundPlan) -> RoundPlan | None:
        return replace(plan, beta_base=self.beta)

    def observe(self, stats: RoundStats) -> None:
        if stats.kind != "speculative":
            return
        self.recent.append(stats.accepted_len)
        if len(self.recent) < (self.recent.maxlen or 1):
            return
        mean = sum(self.recent) / len(self.recent)
        new = min(max(self.beta * (1 + self.eta * (self.target_len / mean - 1)), self.beta_min), self.beta_max)
        if abs(new - self.beta) > 1e-9:
            self.emit("adjust", f"mean accepted length {mean:.2f} vs target {self.target_len:g}",
                      before=self.beta, after=new)
            self.beta = new


class WidthController(Controller):
    """PI(D) control of the tree width that holds the acceptance rate inside a band."""

    name = "width"

    def __init__(self, band: tuple[float, float], period: int, max_width: int, gains: tuple[float, float, float]
                 = (4.0, 1.0, 0.5)) -> None:
        super().__init__()
        self.low, self.high = band
        self.period, self.max_width = period, max_width
        self.kp, self.ki, self.kd = gains
        self.scale: float | None = None  # width multiplier relative to the default plan
        self.integral = 0.0
        self.previous = 0.0
        self.accepted = 0
        self.rejected = 0
        self.rounds = 0

    def plan(self, plan: RoundPlan) -> RoundPlan | None:
        if self.scale is None:
            return plan
        width = max(1, min(self.max_width, round(plan.width * self.scale)))
        return replace(plan, width=width, budget=max(2, round(plan.budget * width / max(plan.width, 1))))

    def observe(self, stats: RoundStats) -> None:
        if stats.kind != "speculative":
            return
        self.accepted += stats.accepted_drafts
        self.rejected += int(stats.accepted_drafts < stats.tree_depth)
        self.rounds += 1
        if self.rounds < self.period or self.accepted + self.rejected == 0:
            return
        alpha = self.accepted / (self.accepted + self.rejected)
        self.accepted = self.rejected = self.rounds = 0
        center = (self.low + self.high) / 2
        error = 0.0 if self.low <= alpha <= self.high else alpha - center
        self.integral = max(-2.0, min(2.0, self.integral + error))
        signal = self.kp * error + self.ki * self.integral + self.kd * (error - self.previous)
        self.previous = error
        before = self.scale or 1.0
        after = max(1.0 / 8, min(float(self.max_width), before * (1 + signal)))
        if abs(after - before) > 1e-6:
            self.emit("adjust", f"acceptance {alpha:.2f} outside [{self.low:g}, {self.high:g}]",
                      before=before, after=after, acceptance=alpha)
            self.scale = after


class HardFallback(Controller):
    """Decode plainly for a while when speculation stops paying, then retry.

    With a tuned plan the rule is the plan's own criterion, tokens per second: speculation pays
    while the last `window` speculative rounds delivered their tokens faster than plain steps
    would have. The plain step's time starts at the plan's and follows the plain steps the
    controller sees (the backoff's), so a device that runs slower than when it was tuned does not
    count against speculation for long. A run of rounds that accept nothing is no
    reason to stop by itself (the plan's expectation counts them). Without a plan (a fixed tree):
    after `after` rounds in a row with nothing accepted. Either way a round that proposed nothing
    (a prompt-lookup miss: the root decoded alone, at a plain step's cost) counts for nothing:
    backing off would only miss the next match.
    """

    name = "fallback"

    def __init__(self, after: int, backoff_rounds: int, plain_step_ms: float | None = None, window: int = 16) -> None:
        super().__init__()
        self.after, self.backoff_rounds = after, backoff_rounds
        self.plain_step_ms = plain_step_ms
        self.recent: deque[tuple[int, float]] = deque(maxlen=window)  # (tokens, ms) of speculative rounds
        self.misses = 0
        self.backoff = 0

    def plan(self, plan: RoundPlan) -> RoundPlan | None:
        if self.backoff > 0:
            self.backoff -= 1
            if self.backoff == 0:
                self.emit("retry", f"speculation retried after {self.backoff_rounds} plain rounds")
            return None
        return plan

    def observe(self, stats: RoundStats) -> None:
        if self.plain_step_ms is not None:
            self._observe_against_plan(stats, self.plain_step_ms)
            return
        if stats.kind != "speculative" or stats.tree_size <= 1:
            return
        self.misses = self.misses + 1 if stats.accepted_drafts == 0 else 0
        if self.misses >= self.after:
            self.emit("enter", f"{self.misses} rounds in a row accepted nothing", plain_rounds=self.backoff_rounds)
            self.misses = 0
            self.backoff = self.backoff_rounds

    def _observe_against_plan(self, stats: RoundStats, plain_ms: float) -> None:
        ms = stats.wall_ns / 1e6
        if ms <= 0:
            return
        if stats.kind != "speculative":
            self.plain_step_ms = 0.8 * plain_ms + 0.2 * ms  # track the device's pace now
            return
        if stats.tree_size <= 1:  # nothing proposed: a plain step's cost for its one token, neither win nor loss
            return
        self.recent.append((stats.accepted_len, ms))
        if len(self.recent) < (self.recent.maxlen or 1):
            return
        tokens = sum(t for t, _ in self.recent)
        spent = sum(m for _, m in self.recent)
        if spent > tokens * plain_ms:
            self.emit("enter", f"the last {len(self.recent)} rounds took {spent / tokens:.3g} ms per token, plain "
                      f"steps {plain_ms:.3g} ms", plain_rounds=self.backoff_rounds)
            self.recent.clear()
            self.backoff = self.backoff_rounds


@dataclass
class Hysteresis:
    """normal -> degraded above `degrade`, -> off above `disable`; back to normal below `recover`."""

    degrade: float
    disable: float
    recover: float
    state: str = "normal"

    def step(self, value: float) -> str:
        if value > self.disable:
            self.state = "off"
        elif value > self.degrade and self.state == "normal":
            self.state = "degraded"
        elif value < self.recover:
            self.state = "normal"
        return self.state


class SensorDegrade(Controller):
    """Halve the tree when the reading crosses `degrade`, decode plainly above `disable`."""

    def __init__(self, name: str, read: Callable[[], float | None], limits: Hysteresis, unit: str,
                 min_interval_s: float = 0.1) -> None:
        super().__init__()
        self.name, self.read, self.limits, self.unit = name, read, limits, unit
        self.min_interval_s = min_interval_s
        self.last_read = 0.0
        self.value: float | None = None

    def plan(self, plan: RoundPlan) -> RoundPlan | None:
        now = time.monotonic()
        if now - self.last_read >= self.min_interval_s:  # sensors update slowly; don't poll every round
            self.last_read = now
            value = self.read()
            if value is not None:
                self.value = value
                before = self.limits.state
                after = self.limits.step(value)
                if after != before:
                    self.emit(after, f"{self.name} {value:.1f} {self.unit}: {before} -> {after}", value=value,
                              before=before, after=after)
        if self.limits.state == "off":
            return None
        if self.limits.state == "degraded":
            width = max(1, plan.width // 2)
            return replace(plan, width=width, budget=max(2, plan.budget // 2))
        return plan


def max_temperature_reader(paths: Sequence[str]) -> Callable[[], float | None]:
    """Hottest of the given sysfs thermal zones in °C (milli-°C files, as Linux reports them)."""

    def read() -> float | None:
        values = []
        for path in paths:
            try:
                raw = float(Path(path).read_text().strip())
            except (OSError, ValueError):
                continue
            values.append(raw / 1000 if abs(raw) >= 1000 else raw)
        return max(values) if values else None

    return read


def power_reader(current_path: str, voltage_path: str, current_scale: float, voltage_scale: float,
                 discharge_negative: bool) -> Callable[[], float | None]:
    """Battery discharge power in W from current_now x voltage_now with the profile's units."""

    def read() -> float | None:
        try:
            current = float(Path(current_path).read_text().strip()) * current_scale
            voltage = float(Path(voltage_path).read_text().strip()) * voltage_scale
        except (OSError, ValueError):
            return None
        return current * voltage * (-1 if discharge_negative else 1)

    return read


@dataclass
class ControllerChain:
    """Runs every controller in order; any one asking for a plain step wins."""

    controllers: list[Controller] = field(default_factory=list)

    def plan(self, plan: RoundPlan) -> RoundPlan | None:
        current: RoundPlan | None = plan
        for controller in self.controllers:
            if current is None:
                break
            current = controller.plan(current)
        return current

    def observe(self, stats: RoundStats) -> None:
        for controller in self.controllers:
            controller.observe(stats)
        for controller in self.controllers:
            stats.events.extend(controller.events)
            controller.events.clear()

    def follow_plan(self, plain_step_ms: float | None) -> None:
        """Judge speculation as a tuned plan does, against plain steps of `plain_step_ms` (None: no plan)."""
        for controller in self.controllers:
            if isinstance(controller, HardFallback):
                controller.plain_step_ms = plain_step_ms


_CURRENT_SCALE = {"uA": 1e-6, "mA": 1e-3, "A": 1.0}
_VOLTAGE_SCALE = {"uV": 1e-6, "mV": 1e-3, "V": 1.0}
NAMES = ("beta", "width", "fallback", "thermal", "power")


def build_chain(spec: dict[str, Any], thermal_paths: Sequence[str] = (),
                battery: tuple[str, str] | None = None) -> ControllerChain | None:
    """Controllers named in `spec["enabled"]`, configured from the profile and scenario the host sent
    (and `spec["plan_plain_step_ms"]`, when decoding follows a tuned plan's tree).

    Sensor paths come separately (on the runner's command line) so a device that maps paths, like
    the test stand-in, sees them as it sees every other path of the command.
    """
    enabled = list(spec.get("enabled", []))
    unknown = sorted(set(enabled) - set(NAMES))
    if unknown:
        raise ValueError(f"unknown controllers {unknown}; known: {', '.join(NAMES)}")
    targets = spec.get("targets", {})
    chain = ControllerChain()
    for name in enabled:
        if name == "fallback":
            plain_ms = spec.get("plan_plain_step_ms")
            chain.controllers.append(HardFallback(int(targets.get("fallback_after", 2)),
                                                  int(targets.get("fallback_rounds", 8)),
                                                  float(plain_ms) if plain_ms is not None else None))
        elif name == "beta":
            chain.controllers.append(BetaAdaptation(
                float(spec.get("beta_base", 0.3)), float(targets.get("target_accept_len", 3.5)),
                float(targets.get("eta", 0.1)), int(targets.get("window", 5)), float(targets.get("beta_min", 0.1)),
                float(targets.get("beta_max", 0.6))))
        elif name == "width":
            band = targets.get("accept_band", (0.6, 0.75))
            chain.controllers.append(WidthController((float(band[0]), float(band[1])), int(spec.get("period", 4)),
                                                     int(spec.get("max_width", 16))))
        elif name == "thermal" and thermal_paths:
            limits = spec.get("thermal", {})
            chain.controllers.append(SensorDegrade(
                "thermal", max_temperature_reader(thermal_paths),
                Hysteresis(float(limits.get("throttle_c", 50)), float(limits.get("disable_c", 55)),
                           float(limits.get("recover_c", 45))), "°C"))
        elif name == "power" and battery is not None:
            power = spec.get("power", {})
            budget = float(power.get("budget_w", 4.0))
            reader = power_reader(battery[0], battery[1], _CURRENT_SCALE.get(power.get("current_unit", "uA"), 1e-6),
                                  _VOLTAGE_SCALE.get(power.get("voltage_unit", "uV"), 1e-6),
                                  bool(power.get("discharge_negative", True)))
            chain.controllers.append(SensorDegrade("power", reader, Hysteresis(budget, 1.5 * budget, 0.8 * budget),
                                                   "W"))
    return chain if chain.controllers else None
