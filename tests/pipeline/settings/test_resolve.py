"""The one resolver of decode settings: options > plan > scenario > profile > defaults, fitted to buckets."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from specdec.pipeline.errors import BundleError, InputError
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind, VerifyMode
from specdec.pipeline.records.manifest import BucketTable, BucketVariant, OutputFormat
from specdec.pipeline.settings.profiles import ScenarioProfile, load_device, load_scenario
from specdec.pipeline.settings.resolve import (
    SETTING_KEYS,
    SettingsLayer,
    check_controllers,
    merge,
    parse_controllers,
    resolve_decode,
)


@dataclass
class FixedPlan:
    chosen: dict[str, Any]
    plain_step_ms: float = 2.0

    def decode_settings(self) -> dict[str, Any]:
        return dict(self.chosen)


def _buckets(*sizes: int) -> BucketTable:
    return BucketTable(max_context=64, prefill_chunk=max(sizes), format=OutputFormat.onnx, profile="local-cpu",
                       graphs={"target": [BucketVariant(q, f"b/t{q}.onnx", None, [], []) for q in sizes]})


def test_every_layer_in_its_place() -> None:
    profile, scenario = load_device("snapdragon-8gen3"), load_scenario("code")
    alone = resolve_decode({}, profile=profile)
    assert (alone.config.tree_budget, alone.config.depth, alone.config.width) == (24, 6, 4)
    assert alone.sources["tree_budget"] == "profile snapdragon-8gen3" and alone.sources["top_p"] == "defaults"
    assert alone.config.mode is None and alone.sources["mode"] == "defaults"  # None is the default: auto
    with_scenario = resolve_decode({}, profile=profile, scenario=scenario)
    assert (with_scenario.config.depth, with_scenario.config.width) == (scenario.depth, scenario.width)
    assert with_scenario.config.prune.beta_base == scenario.beta_base
    assert with_scenario.sources["depth"] == "scenario code" and with_scenario.sources["tree_budget"] == "profile " \
        "snapdragon-8gen3"
    plan = FixedPlan({"tree_budget": 12, "depth": 3})
    planned = resolve_decode({"depth": None}, profile=profile, scenario=scenario, plan=plan)
    assert (planned.config.tree_budget, planned.config.depth, planned.config.width) == (12, 3, scenario.width)
    assert planned.sources["depth"] == "plan"
    chosen = resolve_decode({"depth": 2, "temperature": 0.5, "mode": VerifyMode.rrs}, profile=profile, plan=plan)
    assert chosen.config.depth == 2 and chosen.sources["depth"] == "options"
    assert chosen.config.effective_mode is VerifyMode.rrs and not chosen.notes


def test_the_tree_budget_is_clamped_to_the_largest_bucket() -> None:
    resolved = resolve_decode({"tree_budget": 40}, profile=load_device("local-cpu"), buckets=_buckets(1, 8, 16))
    assert resolved.config.tree_budget == 16
    assert resolved.sources["tree_budget"] == "buckets (clamped from 40, options)"
    assert resolved.notes == ["tree_budget 40 (options) exceeds the largest compiled bucket; using 16"]
    fits = resolve_decode({}, profile=load_device("local-cpu"), buckets=_buckets(1, 16))
    assert fits.config.tree_budget == 16 and not fits.notes


def test_drafter_and_lookup_lengths_come_in_layers() -> None:
    profile = load_device("local-cpu").model_copy(update={"tree": load_device("local-cpu").tree.model_copy(
        update={"drafter": DrafterKind.model_lookup})})
    scenario = ScenarioProfile(name="rag", lookup_max_ngram=5)
    resolved = resolve_decode({"lookup_min_ngram": 2}, profile=profile, scenario=scenario)
    config = resolved.config
    assert (config.drafter, config.lookup_max_ngram, config.lookup_min_ngram) == (DrafterKind.model_lookup, 5, 2)
    assert resolved.sources["drafter"] == "profile local-cpu" and resolved.sources["lookup_max_ngram"] == "scenario rag"
    assert "drafter model+lookup (profile local-cpu)" in resolved.describe()
    with pytest.raises(InputError, match="lookup_min_ngram <= lookup_max_ngram"):
        resolve_decode({"lookup_min_ngram": 4, "lookup_max_ngram": 2}, profile=profile)
    with pytest.raises(InputError, match="unknown drafter 'ngram'"):
        resolve_decode({"drafter": "ngram"}, profile=profile)


def test_a_bundle_without_a_draft_graph_drafts_with_lookup() -> None:
    profile = load_device("local-cpu")
    fitted = resolve_decode({}, profile=profile, has_draft=False)
    assert fitted.config.drafter is DrafterKind.lookup
    assert fitted.sources["drafter"] == "bundle (no draft graph; defaults said model)"
    assert fitted.notes == []  # lookup is such a bundle's default, not an override to warn about
    asked = resolve_decode({}, profile=profile, scenario=ScenarioProfile(name="rag", drafter=DrafterKind.model),
                           has_draft=False)
    assert asked.config.drafter is DrafterKind.lookup
    assert asked.notes == ["drafter model (scenario rag) needs a draft graph this bundle lacks; using lookup"]
    with pytest.raises(BundleError, match="no draft graph, so drafter model cannot run — pass drafter lookup"):
        resolve_decode({"drafter": "model"}, profile=profile, has_draft=False)
    plain = resolve_decode({"drafter": "model+lookup", "speculative": False}, profile=profile, has_draft=False)
    assert plain.config.drafter is DrafterKind.model_lookup and not plain.notes  # nothing drafts anyway


def test_invalid_results_name_the_setting() -> None:
    with pytest.raises(InputError, match="max_new_tokens must be at least 1"):
        resolve_decode({"max_new_tokens": 0}, profile=load_device("local-cpu"))
    with pytest.raises(ValueError, match="unknown decode settings"):
        SettingsLayer("options", {"tree_size": 3})  # layers are built in code: a typo is a bug


def test_merge_takes_the_first_value() -> None:
    values, sources = merge([SettingsLayer("a", {"depth": None, "width": 2}),
                             SettingsLayer("b", {"depth": 5, "width": 9}),
                             SettingsLayer("defaults", {k: 1 for k in SETTING_KEYS})])
    assert (values["depth"], sources["depth"], values["width"], sources["width"]) == (5, "b", 2, "a")
    assert set(SETTING_KEYS) >= {"tree_budget", "depth", "width", "max_k", "beta_base", "mode"}
    assert DecodeConfig().tree_budget == load_device("local-cpu").tree.budget


def test_controller_names() -> None:
    assert parse_controllers(None) == ("fallback", "thermal", "power")
    assert parse_controllers("none") == () and "beta" in parse_controllers("all")
    with pytest.raises(InputError, match="unknown controller"):
        check_controllers(("beta", "turbo"))


def test_the_fallback_judges_by_the_plan_only_in_the_plans_own_rounds() -> None:
    profile = load_device("local-cpu")
    plan = FixedPlan({"drafter": "lookup", "tree_budget": 6, "depth": 5, "width": 1}, plain_step_ms=1.3)
    followed = resolve_decode({}, profile=profile, plan=plan)
    assert followed.plan_plain_step_ms == 1.3
    overridden = resolve_decode({"depth": 2}, profile=profile, plan=plan)  # not the plan's tree any more
    assert overridden.plan_plain_step_ms is None
    assert resolve_decode({}, profile=profile).plan_plain_step_ms is None


def test_the_confidence_gate_is_named_only_where_it_is_on() -> None:
    assert "draft_min_prob" not in resolve_decode({}, profile=load_device("local-cpu")).describe()
    gated = resolve_decode({"draft_min_prob": 0.3}, profile=load_device("local-cpu"))
    assert gated.config.draft_min_prob == 0.3 and "draft_min_prob 0.3 (options)" in gated.describe()
