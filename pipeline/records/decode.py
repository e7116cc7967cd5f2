"""Decoding settings: what `specdec generate` and the bench runner pass to the engine.

The field defaults here are the built-in defaults of every decode setting (tree 16 / 6 / 4,
max_k 8, the articles' prune parameters); profiles, scenarios and CLI help refer to them, and
`specdec.pipeline.settings.resolve` resolves the layers above them.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.records.codec import OMIT_DEFAULT


class VerifyMode(str, enum.Enum):
    greedy = "greedy"
    match = "match"
    rrs = "rrs"


class DrafterKind(str, enum.Enum):
    """Who proposes a round's token tree (engine/drafter.py); verification is the same for all."""

    model = "model"  # the bundle's draft graph
    lookup = "lookup"  # prompt lookup: copies what followed earlier occurrences of the context's suffix
    model_lookup = "model+lookup"  # lookup chains grafted into the draft model's tree

    @property
    def needs_model(self) -> bool:
        return self is not DrafterKind.lookup

    @property
    def uses_lookup(self) -> bool:
        return self is not DrafterKind.model


class BanPolicy(str, enum.Enum):
    """What a banned phrase does (engine/processors/ban.py)."""

    mask = "mask"  # a token that would complete a banned phrase is never emitted
    refuse = "refuse"  # the reply stops where one would be completed, and is the refusal template instead


DEFAULT_REFUSAL = "I can't help with that."

MAX_LOOKUP_NGRAM = 8  # longer suffixes almost never match where a shorter one did not


@dataclass(frozen=True)
class PruneParams:
    """DynamicTreePrune scalars (articles: beta_base 0.3, entropy band 0.8 / 2.5 nats)."""

    entropy_low: float = 0.8
    entropy_high: float = 2.5
    beta_base: float = 0.3
    rho_min: float = 0.05
    rho_max: float = 0.6
    max_k: int = 8  # an attribute of the op: fixes output shapes, so not a per-round input


@dataclass(frozen=True)
class DecodeConfig:
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    mode: VerifyMode | None = None  # None: greedy at temperature 0, match otherwise
    speculative: bool = True
    tree_budget: int = 16  # nodes verified per round, root included (the bucket size)
    depth: int = 6  # draft levels per round
    width: int = 4  # frontier nodes expanded per level
    prune: PruneParams = field(default_factory=PruneParams)
    drafter: DrafterKind = DrafterKind.model
    # Prompt lookup matches the context's last n tokens for n = max ... min (longest first).
    lookup_max_ngram: int = 3
    lookup_min_ngram: int = 1
    # The draft's confidence gate: a node the draft model proposes is dropped when its path
    # probability under the draft's own distribution (the product of its raw softmax probabilities
    # from the root, not the pruned and renormalised q~ the tree ranks by) is below this. A verified
    # row costs a target row and its children a draft call; a node the draft itself doubts is rarely
    # accepted. Only where the proposal distribution does not enter verification (greedy, match);
    # rrs ignores it. 0: off. Tune chooses it (engine/tune/planner.py).
    draft_min_prob: float = field(default=0.0, metadata=OMIT_DEFAULT)
    # Bitwise-exact layout: every target call has at least two rows (plain steps get a pad row)
    # and trees are chains, so each token is computed by the same kernels on the same data
    # whether it is decoded alone or verified in a round (see engine/invariance.py).
    exact_layout: bool = False
    # Constrained decoding (engine/processors/): each constraint transforms the target's distribution
    # at every position given the prefix, in plain decoding, at every tree node and for the draft's
    # proposals alike, so speculative output equals plain output under the same constraints. Left out
    # of the JSON while unset, so records without them keep their shape.
    ban: tuple[str, ...] = field(default=(), metadata=OMIT_DEFAULT)  # banned phrases (text)
    ban_policy: BanPolicy = field(default=BanPolicy.mask, metadata=OMIT_DEFAULT)
    refusal: str = field(default=DEFAULT_REFUSAL, metadata=OMIT_DEFAULT)  # the reply when ban_policy is refuse
    json_schema: str | None = field(default=None, metadata=OMIT_DEFAULT)  # a JSON schema (its text) replies follow
    regex: str | None = field(default=None, metadata=OMIT_DEFAULT)  # a regular expression replies match

    def __post_init__(self) -> None:
        if self.mode is not None and not isinstance(self.mode, VerifyMode):
            try:
                object.__setattr__(self, "mode", VerifyMode(self.mode))
            except ValueError:
                raise InputError(f"unknown mode '{self.mode}'",
                                 f"use one of: {', '.join(m.value for m in VerifyMode)}") from None
        if not isinstance(self.drafter, DrafterKind):
            try:
                object.__setattr__(self, "drafter", DrafterKind(self.drafter))
            except ValueError:
                raise InputError(f"unknown {setting('drafter')} '{self.drafter}'",
                                 f"use one of: {', '.join(k.value for k in DrafterKind)}") from None
        if not isinstance(self.ban_policy, BanPolicy):
            try:
                object.__setattr__(self, "ban_policy", BanPolicy(self.ban_policy))
            except ValueError:
                raise InputError(f"unknown {setting('ban_policy')} '{self.ban_policy}'",
                                 f"use one of: {', '.join(p.value for p in BanPolicy)}") from None
        object.__setattr__(self, "ban", tuple(self.ban))
        self._check_constraints()
        fix_it = "fix the setting and run again"
        mode, temperature = setting("mode"), setting("temperature")
        problems = [
            (self.max_new_tokens < 1, f"{setting('max_new_tokens')} must be at least 1", fix_it),
            (self.temperature < 0, f"{temperature} must be >= 0", fix_it),
            (self.top_k < 0, f"{setting('top_k')} must be >= 0", "0 disables top-k"),
            (not 0 < self.top_p <= 1, f"{setting('top_p')} must be in (0, 1]", "1 disables top-p"),
            (self.tree_budget < 1, f"{setting('tree_budget')} must be at least 1", fix_it),
            (self.depth < 1, f"{setting('depth')} must be at least 1", fix_it),
            (self.width < 1, f"{setting('width')} must be at least 1", fix_it),
            (self.prune.max_k < 1, f"{setting('max_k')} must be at least 1", fix_it),
            (not 0 <= self.draft_min_prob < 1, f"{setting('draft_min_prob')} must be in [0, 1)", "0 turns it off"),
            (not 1 <= self.lookup_min_ngram <= self.lookup_max_ngram <= MAX_LOOKUP_NGRAM,
             f"lookup n-gram lengths need 1 <= {setting('lookup_min_ngram')} <= {setting('lookup_max_ngram')} "
             f"<= {MAX_LOOKUP_NGRAM} (got {self.lookup_min_ngram} and {self.lookup_max_ngram})", fix_it),
            (self.mode is VerifyMode.greedy and self.temperature > 0,
             f"{mode} greedy needs {temperature} 0", f"use {mode} match or rrs to sample"),
        ]
        for failed, problem, fix in problems:
            if failed:
                raise InputError(problem, fix)

    def _check_constraints(self) -> None:
        if any(not phrase.strip() for phrase in self.ban):
            raise InputError(f"{setting('ban')} holds an empty phrase", "put one non-empty phrase on each line")
        if self.json_schema is not None and self.regex is not None:
            raise InputError(f"both {setting('json_schema')} and {setting('regex')} are set",
                             "constrain a reply with one of them")
        if self.json_schema is not None:
            try:
                schema = json.loads(self.json_schema)
            except ValueError as exc:
                raise InputError(f"{setting('json_schema')} is not valid JSON ({exc})", "fix the schema file") from None
            if not isinstance(schema, dict | bool):
                raise InputError(f"{setting('json_schema')} must be a JSON object (a schema)", "fix the schema file")
        if self.regex is not None and not self.regex:
            raise InputError(f"{setting('regex')} is empty", "pass a pattern, e.g. --regex '[0-9]+'")

    @property
    def constrained(self) -> bool:
        """Whether any logits processor runs (engine/processors/)."""
        return bool(self.ban) or self.json_schema is not None or self.regex is not None

    @property
    def effective_mode(self) -> VerifyMode:
        if self.temperature == 0:
            return VerifyMode.greedy
        return self.mode or VerifyMode.match

    @property
    def draft_temperature(self) -> float:
        # Greedy verification does not care how the tree was shaped; the draft's natural (T = 1)
        # distribution spreads candidates where it is unsure instead of collapsing to a chain.
        return 1.0 if self.effective_mode is VerifyMode.greedy else self.temperature

    @property
    def draft_gate(self) -> float:
        """The confidence gate in force: draft_min_prob, or 0 under rrs (whose verification reads the
        proposal distribution, which a gate on the drawn tokens would bias)."""
        return 0.0 if self.effective_mode is VerifyMode.rrs else self.draft_min_prob
