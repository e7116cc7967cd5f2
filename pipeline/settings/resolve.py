"""The one resolver of decode settings, shared by `specdec generate`, `bench` and `tune`.

`run_settings` is the entry point: a run's options, the bundle's manifest and the device the run
is on give the settings it decodes with, the same way in every command.

Settings come in layers, each a partial mapping from setting name to value; for every setting
the first layer that gives a value wins:

    options (CLI flags or pipeline YAML) > bundle requirements > device plan > scenario > device profile
    > defaults

then the result is fitted to the bundle: a tree may not exceed the largest target bucket of a
compiled bundle, so a larger tree budget is clamped with a note, and a bundle without a draft
graph drafts with prompt lookup unless the user asked for the draft model (then it is an error).
The same rules hold for generate and bench.
The resolver records which layer supplied each value (`ResolvedSettings.sources`), and results.json
and `generate --stats` show it.

The setting names are the fields of `records.decode.DecodeConfig` and of its `PruneParams`
(flattened), and of `settings.decode_options.DecodeOptions`, which every config that decodes
embeds: a field added there (with its default, and to DecodeOptions) is a setting here, with no
change to the precedence logic. A new source of settings is a new `SettingsLayer` in `decode_layers`, in its place.
The built-in defaults are DecodeConfig's own: they live there and nowhere else.

Controller selection (`--controllers`) and the controllers' targets from profile and scenario
are resolved here too, for both commands.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specdec.pipeline.engine.controllers import NAMES as CONTROLLER_NAMES
from specdec.pipeline.errors import BundleError, InputError, setting
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind, PruneParams
from specdec.pipeline.records.manifest import BucketTable, Manifest
from specdec.pipeline.records.plan import DevicePlan
from specdec.pipeline.records.quantization import Quantization
from specdec.pipeline.settings.decode_options import DECODE_KEYS, PRUNE_KEYS, SETTING_KEYS, DecodeOptions
from specdec.pipeline.settings.profiles import DeviceProfile, ScenarioProfile

log = logging.getLogger(__name__)

DEFAULTS = "defaults"
BUCKETS = "buckets"
BUNDLE = "bundle"
OPTIONS = "options"


@dataclass(frozen=True)
class SettingsLayer:
    """One source of settings: `values` maps setting names to values; None means "no opinion"."""

    source: str  # shown to the user: "options", "plan", "scenario code", "profile local-cpu", ...
    values: Mapping[str, Any]

    def __post_init__(self) -> None:
        unknown = sorted(set(self.values) - set(SETTING_KEYS))
        if unknown:  # a programming error: layers are built in code, not from user input
            raise ValueError(f"layer '{self.source}' sets unknown decode settings {unknown}")


@dataclass(frozen=True)
class ResolvedSettings:
    config: DecodeConfig
    sources: dict[str, str]  # setting -> source of the layer that supplied it
    notes: list[str] = field(default_factory=list)  # adjustments the user should hear about
    # the plain step time of the tuned plan whose drafter and tree the run follows (the fallback
    # controller judges speculation against it); None unless all of them come from the plan
    plan_plain_step_ms: float | None = None
    plan: DevicePlan | None = None  # the bundle's plan for the run's device (run_settings), followed or not

    @property
    def weight_format(self) -> str | None:
        """The target's weight format the run decodes with: its plan's choice (None: the bundle's own)."""
        return self.plan.weight_format if self.plan is not None else None

    def describe(self, keys: Sequence[str] = ("drafter", "tree_budget", "depth", "width", "beta_base", "max_k",
                                              "draft_min_prob")) -> str:
        """`drafter model (defaults), tree_budget 16 (profile local-cpu), depth 7 (scenario code), ...` for people.

        Speculation turned off and the exact layout are named first when a layer chose them.
        """
        values = {**dataclasses.asdict(self.config.prune), **dataclasses.asdict(self.config)}
        if not self.config.speculative:
            keys = ("speculative",)
        if self.config.exact_layout:
            keys = ("exact_layout", *keys)
        if not self.config.draft_min_prob:  # the gate is named only where it is on
            keys = tuple(key for key in keys if key != "draft_min_prob")

        def text(value: Any) -> str:
            return f"{value:g}" if isinstance(value, float) else str(getattr(value, "value", value))

        return ", ".join(f"{key} {text(values[key])} ({self.sources[key]})" for key in keys)


class PlanSettings(Protocol):
    """A tuned plan for the device of the run (records.plan.DevicePlan)."""

    @property
    def plain_step_ms(self) -> float: ...

    def decode_settings(self) -> dict[str, Any]: ...


# ---- the layers ------------------------------------------------------------------------------

def plan_layer(plan: PlanSettings | None) -> SettingsLayer | None:
    return SettingsLayer("plan", plan.decode_settings()) if plan is not None else None


def bundle_requirements(quantization: Quantization | None) -> dict[str, Any]:
    """Settings the bundle itself requires to keep its lossless promise.

    Int8 activation compute (MatMulNBits accuracy level 4) quantizes each row of a call on its own,
    so the last-bit differences between a token verified in a tree and the same token decoded
    alone become different int8 codes and different tokens: such a target decodes in the exact
    layout (chains, no single-row calls), where every row is computed identically. The w8a8 format
    quantizes rows too: its matmuls are row-invariant by construction, but attention is not
    (GroupQueryAttention's single-row path and a tree's masked siblings move last bits, measured
    by engine/invariance.py), and a moved bit can cross an activation rounding step. (A fused
    w8a8 target pads its attention in the graph, so its plain steps need no pad row:
    Engine.root_rows.) A mixed target (a format per layer class) with any w8a8 layer is such a
    target too.
    """
    int8 = quantization is not None and quantization.int8_activations("target")
    return {"exact_layout": True} if int8 else {}


def requirements_layer(requirements: Mapping[str, Any] | None) -> SettingsLayer | None:
    return SettingsLayer(BUNDLE, requirements) if requirements else None


def scenario_layer(scenario: ScenarioProfile | None) -> SettingsLayer | None:
    if scenario is None:
        return None
    return SettingsLayer(f"scenario {scenario.name}", {
        "entropy_low": scenario.entropy_low, "entropy_high": scenario.entropy_high, "beta_base": scenario.beta_base,
        "rho_min": scenario.rho_min, "rho_max": scenario.rho_max, "depth": scenario.depth, "width": scenario.width,
        "drafter": scenario.drafter, "lookup_max_ngram": scenario.lookup_max_ngram,
        "lookup_min_ngram": scenario.lookup_min_ngram, **scenario.compliance.settings()})


def profile_layer(profile: DeviceProfile) -> SettingsLayer:
    tree = profile.tree
    return SettingsLayer(f"profile {profile.name}", {"tree_budget": tree.budget, "depth": tree.depth,
                                                     "width": tree.width, "max_k": tree.max_k, "drafter": tree.drafter,
                                                     **profile.compliance.settings()})


def defaults_layer() -> SettingsLayer:
    defaults = DecodeConfig()
    return SettingsLayer(DEFAULTS, {**{k: getattr(defaults, k) for k in DECODE_KEYS},
                            **{k: getattr(defaults.prune, k) for k in PRUNE_KEYS}})


def decode_layers(options: Mapping[str, Any], *, profile: DeviceProfile, scenario: ScenarioProfile | None = None,
                  plan: PlanSettings | None = None,
                  requirements: Mapping[str, Any] | None = None) -> list[SettingsLayer]:
    """The layers in precedence order, highest first."""
    layers = [SettingsLayer(OPTIONS, options), requirements_layer(requirements), plan_layer(plan),
              scenario_layer(scenario), profile_layer(profile), defaults_layer()]
    return [layer for layer in layers if layer is not None]


# ---- resolving -------------------------------------------------------------------------------

def merge(layers: Sequence[SettingsLayer]) -> tuple[dict[str, Any], dict[str, str]]:
    """For every setting, the value of the first layer that has one, and that layer's source."""
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for layer in layers:
        for key, value in layer.values.items():
            if value is not None and key not in values:
                values[key] = value
                sources[key] = layer.source
    for layer in reversed(layers):  # None is a value too where no layer has another (e.g. mode: auto)
        for key in layer.values:
            if key not in values:
                values[key] = None
                sources[key] = layer.source
    missing = sorted(set(SETTING_KEYS) - set(values))
    if missing:
        raise ValueError(f"no layer supplies {missing}; end the layers with defaults_layer()")
    return values, sources


def fit_to_buckets(values: dict[str, Any], sources: dict[str, str], buckets: BucketTable | None) -> list[str]:
    """Clamp the tree budget to the largest compiled target bucket (a tree must fit one call)."""
    if buckets is None:
        return []
    largest = buckets.largest("target")
    budget = int(values["tree_budget"])
    if largest < 1 or budget <= largest:
        return []
    note = (f"tree_budget {budget} ({sources['tree_budget']}) exceeds the largest compiled bucket; "
            f"using {largest}")
    log.info("%s", note)  # callers surface the note: bench in results.json, generate on stderr
    values["tree_budget"] = largest
    sources["tree_budget"] = f"{BUCKETS} (clamped from {budget}, {sources['tree_budget']})"
    return [note]


def fit_to_drafts(values: dict[str, Any], sources: dict[str, str], has_draft: bool) -> list[str]:
    """A bundle without a draft graph drafts with lookup; asking for the draft model there is an error."""
    try:
        drafter = DrafterKind(values["drafter"])
    except ValueError:
        return []  # DecodeConfig names the bad value
    if has_draft or not values["speculative"] or not drafter.needs_model:
        return []
    if sources["drafter"] == OPTIONS:
        raise BundleError(f"this bundle has no draft graph, so {setting('drafter')} {drafter.value} cannot run",
                          f"pass {setting('drafter')} lookup (or --no-speculation), or export with --draft")
    note = f"drafter {drafter.value} ({sources['drafter']}) needs a draft graph this bundle lacks; using lookup"
    log.info("%s", note)
    said = sources["drafter"]
    values["drafter"] = DrafterKind.lookup
    sources["drafter"] = f"{BUNDLE} (no draft graph; {said} said {drafter.value})"
    # the built-in default names the draft model because most bundles have one; for a bundle without
    # one, lookup is the default (docs/export.md), not an override worth a warning
    return [] if said == DEFAULTS else [note]


def resolve(layers: Sequence[SettingsLayer], buckets: BucketTable | None = None,
            has_draft: bool = True) -> ResolvedSettings:
    """Merge `layers` (highest precedence first), fit to the bundle, validate into a DecodeConfig."""
    values, sources = merge(layers)
    notes = fit_to_buckets(values, sources, buckets) + fit_to_drafts(values, sources, has_draft)
    prune = PruneParams(**{k: values[k] for k in PRUNE_KEYS})
    config = DecodeConfig(**{k: values[k] for k in DECODE_KEYS if k != "prune"}, prune=prune)
    return ResolvedSettings(config, sources, notes)


PLANNED_KEYS = ("drafter", "tree_budget", "depth", "width")  # what a plan chooses for the rounds


def resolve_decode(options: Mapping[str, Any], *, profile: DeviceProfile, scenario: ScenarioProfile | None = None,
                   plan: PlanSettings | None = None, buckets: BucketTable | None = None,
                   requirements: Mapping[str, Any] | None = None, has_draft: bool = True) -> ResolvedSettings:
    """Decode settings for one run: options > bundle > plan > scenario > profile > defaults, fitted to the
    bundle (its buckets, and whether it has a draft graph).

    `options` holds what the user set (CLI flags or pipeline YAML) by DecodeConfig/PruneParams
    field name, None for "not set". InputError (naming the setting) when the result is invalid.
    """
    resolved = resolve(decode_layers(options, profile=profile, scenario=scenario, plan=plan,
                                     requirements=requirements), buckets, has_draft)
    if plan is None or any(resolved.sources.get(key) != "plan" for key in PLANNED_KEYS):
        return resolved  # a flag, the scenario or the profile chose the rounds: the plan's costs do not apply
    return dataclasses.replace(resolved, plan_plain_step_ms=plan.plain_step_ms)


def run_settings(options: DecodeOptions, manifest: Manifest, *, profile: DeviceProfile,
                 scenario: ScenarioProfile | None = None, device: str | None = None) -> ResolvedSettings:
    """The settings a run of `generate`, `bench` or `tune` decodes with: `options` (what the run's config
    embeds) over the bundle's requirements, its plan for `device` (a `records.plan.device_key`;
    None: no plan applies, e.g. before the device is known), the scenario and the profile, fitted
    to the bundle's buckets and drafts. A plan made for another drafter than a fixed `drafter` is
    not used (its tree was chosen for that drafter)."""
    drafter = options.drafter  # DecodeConfig names a bad value below
    plan = (manifest.plan.for_device(device, getattr(drafter, "value", drafter))
            if manifest.plan is not None and device is not None else None)
    # the target the plan chose (a bundle may carry it in several weight formats) sets the requirements
    manifest = manifest.with_format(plan.weight_format if plan is not None else None)
    resolved = resolve_decode(options.values(), profile=profile, scenario=scenario, plan=plan,
                              buckets=manifest.buckets,
                              requirements=bundle_requirements(manifest.quantization),
                              has_draft="draft" in manifest.graphs)
    return dataclasses.replace(resolved, plan=plan)


# ---- adaptive controllers --------------------------------------------------------------------

DEFAULT_CONTROLLERS = ("fallback", "thermal", "power")  # safety nets on by default; tuning ones are opt-in


def run_threads(threads: int | None, profile: DeviceProfile) -> int:
    """The run's onnxruntime threads: the option, else the profile's runtime.threads (0: all cores)."""
    chosen = profile.runtime.threads if threads is None else threads
    if chosen < 0:
        raise InputError(f"{setting('threads')} {chosen} is negative", "pass 0 (all cores) or a number of threads")
    return chosen


def parse_controllers(text: str | None) -> tuple[str, ...]:
    """'all', 'none', or a comma list of controller names (None: the default set)."""
    if text is None:
        return DEFAULT_CONTROLLERS
    if text.strip() in ("", "none"):
        return ()
    if text.strip() == "all":
        return CONTROLLER_NAMES
    return check_controllers(tuple(part.strip() for part in text.split(",") if part.strip()))


def check_controllers(names: Sequence[str]) -> tuple[str, ...]:
    unknown = [n for n in names if n not in CONTROLLER_NAMES]
    if unknown:
        raise InputError(f"unknown controller(s) {', '.join(unknown)}",
                         f"use all, none or a list of: {', '.join(CONTROLLER_NAMES)}")
    return tuple(names)


def controller_spec(names: tuple[str, ...], profile: DeviceProfile, scenario: ScenarioProfile | None,
                    settings: ResolvedSettings) -> dict[str, Any]:
    """What `runtime.controllers.build_chain` needs: targets from the scenario, limits from the profile,
    the run's beta_base and the plain step time of the tuned plan the run follows."""
    targets = scenario.controller.model_dump() if scenario else {}
    return {"enabled": list(names), "targets": targets, "beta_base": settings.config.prune.beta_base,
            "max_width": profile.tree.max_width, "thermal": profile.thermal.model_dump(),
            "power": {"budget_w": profile.power.budget_w}, "plan_plain_step_ms": settings.plan_plain_step_ms}

