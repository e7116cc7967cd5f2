"""What a bench run sends to the device (`run.json`) and what it writes (`results.json`).

`results.json` is `BenchResults` through `codec.to_dict` (the CLI table, summary.md and the CI gates
render the record itself); a later run's `--baseline` reads its figures back through `read_figures`,
and anything else that reads the file whole does it through `codec.from_dict(BenchResults, ...)`.

Schema history:
- `specdec.bench/1`: the first layout (a JSON object built by hand).
- `specdec.bench/2`: the same figures, now written from these records. `config.decode` is the
  full decode configuration (adds top_k, top_p, speculative) and `config.sources` says which
  settings layer supplied each value (options, plan, scenario, profile, defaults, buckets);
  empty latency tables are null instead of {}; `device` adds `extra` (probe notes).
  `figures` did not change, so a `specdec.bench/1` file still serves as a `--baseline`.
- `specdec.bench/3`: drafters. `config.decode` adds `drafter`, `lookup_max_ngram`
  and `lookup_min_ngram`; `figures` adds `model_acceptance` and `lookup_acceptance` (accepted /
  proposed tree nodes of each source); `details` adds `by_source` (per source: nodes proposed,
  accepted, and rounds it proposed in) and `stage_latency_ms` a `Lookup` stage. Older files
  still serve as a `--baseline` (their figures lack the new ones).
- `specdec.bench/4`: memory. `figures` adds `plain_peak_memory_mb` (`peak_memory_mb` is now the
  speculative replies' peak where the runner could reset the peak between replies), `weights_mb`,
  `kv_bytes_per_token` and `kv_mb_end`; results add `memory` (per reply: tokens, peak RSS, KV
  bytes held and live; the KV policy).
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field, fields
from typing import Any

from specdec.pipeline.records.codec import OMIT_DEFAULT, RecordError, from_dict, json_key, to_dict
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.records.device import CooldownResult, DeviceInfo, ThermalSnapshot
from specdec.pipeline.records.plan import DevicePlan, PlanChoice, TuneRequest

RESULTS_SCHEMA = "specdec.bench/4"
# Earlier schemas whose `figures` are still readable (for --baseline).
FIGURES_COMPATIBLE = ("specdec.bench/1", "specdec.bench/2", "specdec.bench/3", RESULTS_SCHEMA)


# ---- host -> device ----------------------------------------------------------------------------

@dataclass
class RunSpec:
    """`run.json`: everything the device runner needs besides the bundle and the runtime."""

    decode: DecodeConfig
    prompts: list[list[int]]
    repeats: int = 1
    threads: int = 0
    controllers: dict[str, Any] = field(default_factory=dict)  # runtime.controllers.build_chain's spec
    bundle: str = "bundle"  # the bundle copy, relative to run.json
    tune: TuneRequest | None = None  # measure and plan the tree first (records/plan.py)
    # the target's weight format to decode with (records.manifest.Manifest.with_format); None: the bundle's own
    weight_format: str | None = field(default=None, metadata=OMIT_DEFAULT)


# ---- results.json ------------------------------------------------------------------------------

@dataclass
class BundleRef:
    path: str
    stages: list[str]
    fingerprint: str
    compiled: bool
    quantized: bool
    custom_ops: bool


@dataclass
class RunSettings:
    decode: DecodeConfig
    sources: dict[str, str]  # decode setting -> the layer that supplied it (see pipeline/settings/resolve.py)
    prompts: int
    repeats: int
    prompt_ids: list[str]
    controllers: list[str]
    # the logits processors every reply ran (engine/processors/: "ban (mask)", "json_schema", ...)
    processors: list[str] = field(default_factory=list, metadata=OMIT_DEFAULT)


@dataclass
class Figures:
    """The headline numbers; None where this run could not measure one (`unavailable` says why)."""

    speedup: float | None = None
    tokens_per_s: float | None = None
    plain_tokens_per_s: float | None = None
    latency_gain_ms: float | None = None
    reply_ms: float | None = None
    mean_accepted_len: float | None = None
    acceptance_rate: float | None = None
    model_acceptance: float | None = None  # accepted / proposed tree nodes the draft model proposed
    lookup_acceptance: float | None = None  # the same for prompt lookup's nodes
    predicted_speedup: float | None = None  # the plan's cost model where a plan ran, else the chain formula
    analytic_speedup: float | None = None  # S = (1 - a^(g+1)) / ((1 - a)(1 + g r)): assumes verify costs one step
    cost_ratio_r: float | None = None
    fixed_call_ms: float | None = None
    per_node_ms: float | None = None
    mean_tree_depth: float | None = None
    mean_tree_size: float | None = None
    ttft_ms: float | None = None
    verify_p50_ms: float | None = None
    peak_memory_mb: float | None = None  # peak RSS of the decoding process over the speculative replies
    plain_peak_memory_mb: float | None = None  # and over the plain ones
    weights_mb: float | None = None  # the graph files the runtime opens (weights and graph)
    kv_bytes_per_token: float | None = None  # target + draft, one key and one value row per layer
    kv_mb_end: float | None = None  # KV memory held at the end of the longest reply
    energy_per_token_mj: float | None = None
    plain_energy_per_token_mj: float | None = None
    mean_power_mw: float | None = None
    peak_temp_c: float | None = None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    def get(self, name: str) -> float | None:
        if name not in self.names():
            raise KeyError(name)
        value: float | None = getattr(self, name)
        return value


@dataclass
class Percentiles:
    mean: float
    p50: float
    p90: float
    p99: float
    n: int


@dataclass
class ModeCounts:
    plain: int = 0
    speculative: int = 0


@dataclass
class ModeValues:
    plain: float | None = None
    speculative: float | None = None


@dataclass
class ModePercentiles:
    plain: Percentiles | None = None
    speculative: Percentiles | None = None


@dataclass
class RoundCounts:
    speculative: int
    plain: int
    fallback: int  # rounds of a speculative reply that a controller decoded plainly


@dataclass
class SourceStats:
    """One drafting source over the speculative rounds (a node both proposed counts for both)."""

    proposed: int  # tree nodes verified, root excluded
    accepted: int
    rounds: int  # rounds in which it proposed at least one node
    acceptance: float | None  # accepted / proposed


@dataclass
class Padding:
    rows_padded: int
    rows_computed: int
    waste: float


@dataclass
class Details:
    tokens: ModeCounts
    decode_seconds: ModeValues
    reply_ms: ModeValues
    ttft_ms: ModePercentiles
    stage_latency_ms: dict[str, Percentiles | None]  # per trace stage, over speculative rounds
    plain_step_ms: Percentiles | None
    accepted_len_histogram: dict[int, int]  # tokens emitted per round -> rounds
    by_source: dict[str, SourceStats]  # "model", "lookup"
    rounds: RoundCounts
    energy_per_token_mj: ModeValues
    padding: dict[str, Padding]  # compiled bundles: rows computed for nothing, per role


@dataclass
class ReplyMemory:
    mode: str
    tokens: int  # prompt + reply: the slots the reply's context reached
    peak_rss_kb: int | None  # the process's peak during the reply (since the start where not reset)
    kv_bytes: int  # KV memory held by the runners at the end of the reply (allocated buffers)
    kv_live_bytes: int  # of which committed rows in use


@dataclass
class Memory:
    """What the decoding process held: weights, KV cache, resident memory, per reply."""

    kv_policy: str  # e.g. "full float32", "window S=4 W=256 float32"
    weights_bytes: int | None  # the bundle files the runner opens (graphs and their weights)
    kv_bytes_per_token: int | None
    peak_reset: bool  # each reply's peak is its own (the kernel let the runner reset VmHWM)
    replies: list[ReplyMemory] = field(default_factory=list)
    # what the bench pushed to the device: runtime.zip, run.json, the manifest and those bundle files
    payload_bytes: int | None = field(default=None, metadata=OMIT_DEFAULT)


@dataclass
class Mismatch:
    prompt: int
    repeat: int


@dataclass
class Lossless:
    checked: bool
    pairs: int
    equal: bool
    mismatches: list[Mismatch]
    note: str | None


class Recommendation(str, enum.Enum):
    on = "on"
    off = "off"
    unknown = "unknown"


@dataclass
class ScenarioVerdict:
    gain_ms: float | None
    recommendation: Recommendation


@dataclass
class EnableRule:
    threshold_ms: float
    gain_ms: float | None
    recommendation: Recommendation
    per_scenario: dict[str, ScenarioVerdict]


@dataclass
class ThermalEvent:
    """A threshold crossing of the hottest zone (normal / throttle / disable)."""

    name: str
    from_state: str = field(metadata=json_key("from"))
    to: str
    temp_c: float
    zone: str
    ts_ns: int


@dataclass
class Thermal:
    events: list[ThermalEvent]
    cooldown: CooldownResult | None
    before: ThermalSnapshot | None
    after: ThermalSnapshot | None


@dataclass
class SensorSummary:
    samples: int
    interval_ms: int | None
    available: dict[str, bool]
    current_unit: str | None
    current_unit_source: str
    voltage_unit: str | None
    voltage_unit_source: str
    discharge_sign: str | None
    discharge_sign_source: str
    timestamp_resolution: str
    charging: bool
    usb_powered: bool


@dataclass
class ControllerSummary:
    counts: dict[str, int]  # "controller:action" -> times


@dataclass(frozen=True)
class GateResult:
    gate: str
    passed: bool
    message: str


@dataclass
class PlanTerm:
    """One term of the cost model: what the plan predicted and what the run measured."""

    name: str
    predicted: float
    measured: float | None

    @property
    def ratio(self) -> float | None:
        return self.measured / self.predicted if self.measured is not None and self.predicted else None


@dataclass
class PlanReport:
    """The tree plan the speculative runs used, its prediction next to the measurement (cost model, §8)."""

    source: str  # "bundle" (a plan `specdec tune` stored) or "tuned on the device" (this run)
    device: str
    choice: PlanChoice
    # For this run's replies, end to end like `measured_speedup`: the plan's decode speedup applied
    # to the plain replies' decoding time, their prefill (the same graph in both modes) as measured.
    predicted_speedup: float
    measured_speedup: float | None
    terms: list[PlanTerm]
    explanation: str  # the biggest term of the difference, in plain words
    tuned: DevicePlan | None = None  # the plan this run measured (store it with `specdec tune`)
    decode_predicted_speedup: float | None = None  # the plan's, tokens after the first only
    decode_measured_speedup: float | None = None


@dataclass(kw_only=True)
class BenchResults:
    schema: str = RESULTS_SCHEMA
    tool_version: str
    created: str
    bundle: BundleRef
    device: DeviceInfo
    profile: str
    scenario: str | None
    config: RunSettings
    partial: bool
    partial_reason: str | None
    figures: Figures
    details: Details
    lossless: Lossless
    unavailable: dict[str, str]  # figure -> why it could not be measured
    enable_rule: EnableRule
    thermal: Thermal
    sensors: SensorSummary | None
    controllers: ControllerSummary
    warnings: list[str]
    gates: list[GateResult] = field(default_factory=list)
    runtime: dict[str, Any] = field(default_factory=dict)  # what ran the runner: device Python or portable runtime
    plan: PlanReport | None = field(default=None, metadata=OMIT_DEFAULT)
    memory: Memory | None = None

    def __post_init__(self) -> None:
        if self.schema != RESULTS_SCHEMA:
            raise RecordError("schema", f"this is {self.schema}, this specdec reads {RESULTS_SCHEMA}")

    def to_json(self) -> str:
        return json.dumps(to_dict(self), indent=1) + "\n"


def read_figures(text: str) -> Figures:
    """Only the figures of a results.json of this or an earlier compatible schema (a --baseline)."""
    data = _json_object(text)
    schema = data.get("schema")
    if schema not in FIGURES_COMPATIBLE:
        raise RecordError("schema", f"'{schema}' is not one of {', '.join(FIGURES_COMPATIBLE)}")
    return from_dict(Figures, data.get("figures"), "figures")


def _json_object(text: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise RecordError("", f"not JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(data, dict):
        raise RecordError("", "not a JSON object")
    return data
