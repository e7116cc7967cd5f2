"""How `--minutes` is split: the first text chunk and the importance probe sized from the target's
measured step time, not fixed counts.

At the Qwen2.5-0.5B shape a fixed first chunk (8 + 8 rows of 128 tokens) and a fixed probe (8 rows
x 64 tokens) took 9 minutes of a 5-minute budget on a loaded 2-core machine (benchmarks/RESULTS-archive.md).
A few short target forwards are timed first; from them a cost model predicts a generation chunk and
an importance probe, and each phase takes the largest size that fits its share, down to a floor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch

from specdec.pipeline.draft.pruning import Geometry

log = logging.getLogger(__name__)

CORPUS_SHARE = 0.4  # of the budget, at most, for loading, this measurement and the target's text
# of the budget for the importance probe: on the realistic target the 8-row probe took 56 s of an
# 8-minute budget (12 %) and gave the plan distillation needs; a little more lets slower shapes keep it
IMPORTANCE_SHARE = 0.15
# The probe's largest size: 8 rows, not fewer, when they fit: on the realistic target 4 rows put the
# 99 % FFN-mass cut at 640 channels instead of the 704 that compute (agreement 0.846 against 0.986).
PROBE_ROWS, PROBE_TOKENS = 8, 64
# The probe's floor, used when nothing larger fits the share: 2 rows of 32 tokens (64 positions).
# The layer ranking is what must survive (it decides which layers the draft keeps; a coarse FFN cut
# only costs agreement that distillation recovers): dropping a layer that matters moves the next-token
# distribution at every position, so its KL stands orders above a layer that does nothing (the
# realistic target: 4 working layers, 20 below 1e-6) on any 64 positions; and 4 rows ranked the
# realistic target's layers exactly as 8 did (layers 0-3 kept both times). Below 32 tokens a row is
# mostly its first positions, whose distributions barely depend on the layers.
PROBE_FLOOR_ROWS, PROBE_FLOOR_TOKENS = 2, 32
# The text's floor: a first chunk of 2 rows (1 trains, 1 is held out for the report, of each kind)
# of 32 tokens (a 16-token greedy continuation still holds the report's 8-token chains).
TEXT_FLOOR_ROWS, TEXT_FLOOR_SEQ = 2, 32
TAYLOR_FORWARDS = 3.0  # a forward and its backward (about twice a forward) on the LM loss


@dataclass(frozen=True)
class StepCost:
    """The target's measured cost: `fixed_s` of any forward (weights read once, the head on one
    token), `token_s` per further token of a prefill, `row_s` per further row of a cached decode step
    (timed on its own: at the 0.5B shape a prefill's per-token rate predicted half of what decoding
    7 rows really took)."""

    fixed_s: float
    token_s: float
    row_s: float = 0.0

    def forward(self, tokens: int) -> float:
        return self.fixed_s + max(0, tokens - 1) * self.token_s

    def decode(self, rows: int) -> float:
        return self.fixed_s + max(0, rows - 1) * max(self.row_s, self.token_s)


@torch.no_grad()
def measure(target: Any, start_token: int, clock: Callable[[], float] = time.perf_counter) -> StepCost:
    """Short timed forwards after a warm-up one: a cached decode step of 1 row and of 8 rows, and a
    4 x 16 prefill."""

    def decode_step(rows: int) -> float:
        ids = torch.full((rows, 1), start_token, dtype=torch.long)
        out = target(input_ids=ids, use_cache=True)
        began = clock()
        target(input_ids=ids, cache=out.cache, use_cache=True)
        return clock() - began

    wide = torch.full((4, 16), start_token, dtype=torch.long)
    target(input_ids=wide[:1, :1], use_cache=False)  # first call: allocations, lazy initialisation
    fixed = decode_step(1)
    per_row = max(0.0, (decode_step(8) - fixed) / 7)
    began = clock()
    target(input_ids=wide, use_cache=False)
    per_token = max(0.0, (clock() - began - fixed) / (wide.numel() - 1))
    return StepCost(fixed_s=fixed, token_s=per_token, row_s=per_row)


def chunk_seconds(cost: StepCost, rows: int, seq: int, *, user_text: bool = False) -> float:
    """One chunk of `build_corpus`: `rows` sampled rows of `seq` tokens (a decode step each, the cache
    kept), then their greedy continuations: a prefill of half a row and seq - half decode steps; with
    `user_text`, the teacher's pass over as many windows of the user's text."""
    half = seq // 2
    text = cost.forward(rows * seq) if user_text else 0.0
    return seq * cost.decode(rows) + cost.forward(rows * half) + (seq - half) * cost.decode(rows) + text


def probe_forwards(shape: Geometry) -> float:
    """Forward passes one importance batch costs (pruning.measure): the reference forward, the layer
    sweep (dropping layer i re-runs layers i+1.. and the head: by FLOPs, the decoder's share times
    (L-1-i)/L plus the head's share), and the Taylor pass."""
    decoder = shape.layers * shape.layer_params(shape.kv_heads, shape.intermediate)
    head = shape.vocab * shape.hidden
    share = decoder / (decoder + head)
    sweep = sum((shape.layers - 1 - i) / shape.layers for i in range(shape.layers)) * share \
        + shape.layers * (1 - share)
    return 1 + sweep + TAYLOR_FORWARDS


def probe_seconds(cost: StepCost, shape: Geometry, rows: int, tokens: int, batch: int) -> float:
    batches = [min(batch, rows - b) for b in range(0, rows, batch)]
    return probe_forwards(shape) * sum(cost.forward(b * (tokens + 1)) for b in batches)


@dataclass(frozen=True)
class PhasePlan:
    seconds: float  # what the size chosen is predicted to cost
    share_s: float  # what the phase may spend
    rows: int
    tokens: int
    fits: bool  # False: the floor, and even it is predicted to exceed the share

    def record(self) -> dict[str, Any]:
        return {k: round(v, 1) if isinstance(v, float) else v for k, v in asdict(self).items()}


def first_chunk(cost: StepCost, share_s: float, *, rows: int, seq: int, user_text: bool = False) -> PhasePlan:
    """The most rows (at most `rows`) of `seq` tokens that fit `share_s`; then shorter rows at the floor."""
    def seconds(count: int, length: int) -> float:
        return chunk_seconds(cost, count, length, user_text=user_text)

    for count in range(rows, TEXT_FLOOR_ROWS - 1, -1):
        if seconds(count, seq) <= share_s:
            return PhasePlan(seconds(count, seq), share_s, count, seq, True)
    floor = min(rows, TEXT_FLOOR_ROWS)
    for length in range(seq - 16, TEXT_FLOOR_SEQ - 1, -16):
        if seconds(floor, length) <= share_s:
            return PhasePlan(seconds(floor, length), share_s, floor, length, True)
    length = min(seq, TEXT_FLOOR_SEQ)
    return PhasePlan(seconds(floor, length), share_s, floor, length, False)


def next_chunk(cost: StepCost, left_s: float, *, rows: int, seq: int, user_text: bool = False) -> int:
    """Rows of a later chunk that fit the `left_s` seconds left of the share (0: stop)."""
    for count in range(rows, 0, -1):
        if chunk_seconds(cost, count, seq, user_text=user_text) <= left_s:
            return count
    return 0


def probe(cost: StepCost, shape: Geometry, share_s: float, *, available_rows: int, seq: int,
          batch: int) -> PhasePlan:
    """The importance probe with the most positions (then rows) that fit `share_s`, down to the floor."""
    top_rows, top_tokens = min(PROBE_ROWS, available_rows), min(PROBE_TOKENS, seq)
    candidates = [(r, t) for r in range(top_rows, 0, -1) for t in range(top_tokens, 0, -8)
                  if r >= min(PROBE_FLOOR_ROWS, top_rows) and t >= min(PROBE_FLOOR_TOKENS, top_tokens)]
    candidates.sort(key=lambda c: (c[0] * c[1], c[0]), reverse=True)
    for rows, tokens in candidates:
        seconds = probe_seconds(cost, shape, rows, tokens, batch)
        if seconds <= share_s:
            return PhasePlan(seconds, share_s, rows, tokens, True)
    rows, tokens = candidates[-1]
    return PhasePlan(probe_seconds(cost, shape, rows, tokens, batch), share_s, rows, tokens, False)
