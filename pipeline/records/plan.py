"""The manifest's `plan` section: tuned decoding plans, one per device they were measured on.

`specdec tune` (and `specdec bench` on a device the bundle has no plan for) measures the device's
cost curve and the bundle's acceptance on it and chooses the tree (pipeline/engine/tune/planner.py).
A `DevicePlan` records what was measured and chosen; `TunePlan` holds one per device key, so a
bundle tuned on two phones carries both. The settings resolver (pipeline/settings/resolve.py) uses the
entry of the device a run is on, below explicit options and above scenario and profile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specdec.pipeline.records.codec import OMIT_DEFAULT


@dataclass
class PlanChoice:
    """A tree shape and what the cost model predicts for it (budget 1: plain decoding).

    The planner (engine/tune/planner.py) emits it on the device and the manifest stores it as it is."""

    drafter: str
    budget: int  # nodes verified per round, root included; 1 = plain decoding
    depth: int
    width: int
    expected_tokens: float  # per round
    round_ms: float
    predicted_speedup: float
    # prompt lookup's (min, max) suffix lengths, for drafters that use it
    lookup_ngrams: list[int] | None = field(default=None, metadata=OMIT_DEFAULT)
    # the draft's confidence gate (DecodeConfig.draft_min_prob); 0 (off) is left out of the record
    draft_min_prob: float = field(default=0.0, metadata=OMIT_DEFAULT)

    @property
    def speculative(self) -> bool:
        return self.budget > 1


@dataclass
class CostFit:
    """A least-squares line through the measured verify costs, and its worst relative residual."""

    intercept_ms: float
    ms_per_node: float
    max_residual: float


@dataclass
class DevicePlan:
    device: str  # device_key(): transport/model/abi/threads
    created: str
    threads: int
    exact_layout: bool  # the plan's trees are chains and plain steps padded (bitwise exact)
    choice: PlanChoice
    plain_step_ms: float
    verify_ms: list[tuple[int, float]]  # (tree nodes, ms) as measured
    verify_fit: CostFit
    context: int  # tokens in the cache while verify costs were measured
    # by calibration ("model/w4", "lookup(1-3)/w2"): depth -> P(k-th ranked child accepted)
    acceptance: dict[str, dict[int, list[float]]]
    candidates: list[PlanChoice] = field(default_factory=list)
    calibration_rounds: int = 0
    tune_seconds: float = 0.0
    # the choice's decode speedup measured against plain decoding on the calibration prompts
    # (tuning keeps a tree only if it measured faster); None: not confirmed, or plain decoding
    confirmed_speedup: float | None = None
    notes: list[str] = field(default_factory=list)  # what tuning decided beyond the model (candidates not kept)
    # the KV cache policy the costs were measured under ("window S=4 W=256 float32"): a policy is
    # part of the compiled target, so a plan's costs hold for that policy only
    kv_policy: str | None = field(default=None, metadata=OMIT_DEFAULT)
    # the target's weight format the plan decodes with, where the bundle carries more than one
    # (`tune` measured each and chose this one); None: the bundle's own format
    weight_format: str | None = field(default=None, metadata=OMIT_DEFAULT)
    # the other formats' plans in brief, as tune compared them ("w8a8: 41.2 tok/s predicted, ...")
    formats_compared: list[str] = field(default_factory=list, metadata=OMIT_DEFAULT)

    @property
    def predicted_tokens_per_s(self) -> float:
        """Decoding tokens per second the plan predicts (its speedup over its own measured plain step)."""
        return self.choice.predicted_speedup * 1000.0 / self.plain_step_ms if self.plain_step_ms > 0 else 0.0

    def decode_settings(self) -> dict[str, Any]:
        """The decode settings this plan chose, by DecodeConfig field name."""
        choice = self.choice
        if not choice.speculative:
            return {"speculative": False}
        settings: dict[str, Any] = {"drafter": choice.drafter, "tree_budget": choice.budget, "depth": choice.depth,
                                    "width": choice.width, "exact_layout": self.exact_layout,
                                    "draft_min_prob": choice.draft_min_prob}
        if choice.lookup_ngrams:
            settings["lookup_min_ngram"], settings["lookup_max_ngram"] = choice.lookup_ngrams
        return settings


@dataclass
class TunePlan:
    devices: list[DevicePlan] = field(default_factory=list)

    def for_device(self, key: str, drafter: str | None = None) -> DevicePlan | None:
        """The plan measured on device `key`; None when there is none, or when the run fixed a
        `drafter` other than the plan's (its tree was chosen for another drafter, or it chose plain
        decoding over drafters the user did not ask for: the asked one is tuned on its own)."""
        plan = next((plan for plan in self.devices if plan.device == key), None)
        if plan is not None and drafter is not None and plan.choice.drafter != drafter:
            return None
        return plan

    def with_plan(self, plan: DevicePlan) -> TunePlan:
        """A copy holding `plan` instead of any earlier plan for the same device."""
        return TunePlan([p for p in self.devices if p.device != plan.device] + [plan])


@dataclass
class TuneRequest:
    """`run.json`'s tune section: what the device runner measures before (or instead of) a bench."""

    prompts: list[list[int]]
    device: str  # the key the plan is stored under (device_key, computed by the host)
    widths: list[int] = field(default_factory=lambda: [1, 2, 4])
    # drafters to calibrate (DrafterKind values); empty: every drafter the bundle can run
    drafters: list[str] = field(default_factory=list, metadata=OMIT_DEFAULT)
    # prompt lookup's (min, max) suffix lengths to calibrate; empty: the run's own
    lookup_ngrams: list[list[int]] = field(default_factory=list, metadata=OMIT_DEFAULT)
    max_budget: int = 32
    max_depth: int = 6
    max_new_tokens: int = 48
    repeats: int = 7
    budgets: list[int] | None = None  # tree sizes the bundle can run (static buckets); None: any
    pinned: list[str] = field(default_factory=list)  # settings the user fixed (tree, drafter): the plan leaves them
    only: bool = False  # `specdec tune`: measure and plan, no bench


def device_key(transport: str, model: str, abi: str | None, threads: int) -> str:
    """What a plan is valid for: the same kind of device, running with the same thread count."""
    return f"{transport}/{model}/{abi or 'unknown-abi'}/threads={threads}"
