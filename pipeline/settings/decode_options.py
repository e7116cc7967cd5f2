"""`DecodeOptions`: the decode settings a run was given, embedded in every config that decodes.

`specdec generate`, `bench` and `tune` (GenerateConfig, BenchConfig, TuneConfig) each embed one
`decode: DecodeOptions` instead of copying DecodeConfig's fields by hand. Its fields are the
settings of the resolver (pipeline/settings/resolve.py): DecodeConfig's and PruneParams' fields
(flattened), each None for "not set" — the plan, scenario, profile or built-in default then
decides. A field this class lacks or misspells is an error at import (the check below), a
misspelt keyword a TypeError, a misspelt pipeline YAML key a RecordError naming it.

The configs embed it as `field(default_factory=DecodeOptions, metadata=records.codec.FLATTEN)`, so
a pipeline section and the CLI keep the flat names (`bench: {max_new_tokens: 32}`,
`--max-new-tokens 32`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from specdec.pipeline.records.decode import BanPolicy, DecodeConfig, DrafterKind, PruneParams, VerifyMode

PRUNE_KEYS = tuple(f.name for f in dataclasses.fields(PruneParams))
DECODE_KEYS = tuple(f.name for f in dataclasses.fields(DecodeConfig) if f.name != "prune")
SETTING_KEYS = DECODE_KEYS + PRUNE_KEYS


@dataclass(frozen=True)
class DecodeOptions:
    """What the user set (CLI flags or pipeline YAML), by setting name; None: not set."""

    max_new_tokens: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    mode: VerifyMode | None = None
    speculative: bool | None = None
    tree_budget: int | None = None
    depth: int | None = None
    width: int | None = None
    drafter: DrafterKind | None = None
    lookup_max_ngram: int | None = None
    lookup_min_ngram: int | None = None
    draft_min_prob: float | None = None
    exact_layout: bool | None = None
    # constrained decoding: the phrases and the schema's text (the CLI reads them from files)
    ban: tuple[str, ...] | None = None
    ban_policy: BanPolicy | None = None
    refusal: str | None = None
    json_schema: str | None = None
    regex: str | None = None
    # DynamicTreePrune's scalars (PruneParams)
    entropy_low: float | None = None
    entropy_high: float | None = None
    beta_base: float | None = None
    rho_min: float | None = None
    rho_max: float | None = None
    max_k: int | None = None

    def values(self) -> dict[str, Any]:
        """Every setting by name, None where not set: the resolver's `options` layer."""
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}

    def given(self) -> dict[str, Any]:
        """Only the settings that were set."""
        return {key: value for key, value in self.values().items() if value is not None}


_FIELDS = tuple(field.name for field in dataclasses.fields(DecodeOptions))
if sorted(_FIELDS) != sorted(SETTING_KEYS):  # a programming error: DecodeConfig and this class drifted apart
    raise TypeError(f"DecodeOptions and DecodeConfig/PruneParams differ: "
                    f"{sorted(set(_FIELDS) ^ set(SETTING_KEYS))}")
