"""Numpy reference of DynamicTreePrune. Torch-free: the device runtime calls it directly.

Per row of draft logits: softmax at `temperature` in log space, entropy H, prune ratio
`clip(alpha(H) * beta_base, rho_min, rho_max)` with alpha rising linearly from 0 at
`entropy_low` to 1 at `entropy_high`, then the fewest top tokens whose probability mass reaches
`1 - prune` (at least 1, at most `max_k`), with log-probabilities renormalised over that set.
Everything stays in float32 and log space so no finite input (or -inf) yields NaN.
"""

from __future__ import annotations

import numpy as np

from specdec.custom_ops import numerics
from specdec.custom_ops.schema import OpSchema, Port

SCHEMA = OpSchema(
    name="DynamicTreePrune",
    inputs=(
        Port("logits", "float", ("n", "vocab")),
        Port("temperature", "float", ()),
        Port("entropy_low", "float", ()),
        Port("entropy_high", "float", ()),
        Port("beta_base", "float", ()),
        Port("rho_min", "float", ()),
        Port("rho_max", "float", ()),
    ),
    outputs=(
        Port("cand_ids", "int64", ("n", "max_k"), "kept token ids by descending probability, -1 padded"),
        Port("cand_logprob", "float", ("n", "max_k"), "log-probability renormalised over the kept set, -inf padded"),
        Port("keep", "int64", ("n",), "number of kept candidates per row, 1..max_k"),
        Port("entropy", "float", ("n",), "entropy in nats of the tempered distribution"),
    ),
    attributes={"max_k": 8},
)

_F32 = np.float32


def log_softmax(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Tempered log-softmax per row; a row that is entirely -inf is treated as uniform."""
    return numerics.log_softmax(numerics.scale(logits, temperature))


def top_indices(values: np.ndarray, width: int) -> np.ndarray:
    """Indices of the `width` largest values per row, descending, ties by lower index (as ONNX TopK).

    A partition picks the candidates in O(V) instead of sorting the whole vocabulary; only the
    boundary value needs care so that equal values are taken lowest index first.
    """
    rows, vocab = values.shape
    if width >= vocab:
        order: np.ndarray = np.argsort(-values, axis=-1, kind="stable")
        return order
    kth = -np.partition(-values, width - 1, axis=-1)[:, width - 1 : width]
    result = np.empty((rows, width), np.int64)
    for row in range(rows):
        above = np.flatnonzero(values[row] > kth[row])
        equal = np.flatnonzero(values[row] == kth[row])[: width - above.size]
        chosen = np.concatenate([above, equal])
        result[row] = chosen[np.lexsort((chosen, -values[row][chosen]))]
    return result


def entropy_of(logp: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        terms = np.where(np.isneginf(logp), _F32(0), np.exp(logp) * logp)
    entropy: np.ndarray = (-terms.sum(axis=-1, dtype=_F32)).astype(_F32)
    return entropy


def prune_ratio(entropy: np.ndarray, entropy_low: float, entropy_high: float, beta_base: float,
                rho_min: float, rho_max: float) -> np.ndarray:
    span = max(float(entropy_high) - float(entropy_low), 1e-6)
    alpha = np.clip((entropy - _F32(entropy_low)) / _F32(span), 0, 1).astype(_F32)
    ratio: np.ndarray = np.clip(alpha * _F32(beta_base), _F32(rho_min), _F32(rho_max)).astype(_F32)
    return ratio


def dynamic_tree_prune(
    logits: np.ndarray,
    temperature: float,
    entropy_low: float,
    entropy_high: float,
    beta_base: float,
    rho_min: float,
    rho_max: float,
    max_k: int = 8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    logits = np.atleast_2d(np.asarray(logits, _F32))
    n, vocab = logits.shape
    width = min(max_k, vocab)
    logp = log_softmax(logits, temperature)
    entropy = entropy_of(logp)
    prune = prune_ratio(entropy, entropy_low, entropy_high, beta_base, rho_min, rho_max)
    order = top_indices(logp, width)
    top_logp = np.take_along_axis(logp, order, axis=-1)
    mass = np.cumsum(np.exp(top_logp), axis=-1, dtype=_F32)
    need = (_F32(1) - prune)[:, None]
    keep = 1 + (mass[:, : width - 1] < need).sum(axis=-1)
    kept = np.arange(width)[None, :] < keep[:, None]
    masked = np.where(kept, top_logp, -np.inf).astype(_F32)
    peak = masked[:, :1]  # the first candidate is always kept and is the largest
    lse = peak + np.log(np.exp(masked - peak).sum(axis=-1, keepdims=True, dtype=_F32))
    cand_logprob = np.full((n, max_k), -np.inf, _F32)
    cand_ids = np.full((n, max_k), -1, np.int64)
    cand_logprob[:, :width] = np.where(kept, masked - lse, -np.inf)
    cand_ids[:, :width] = np.where(kept, order, -1)
    return cand_ids, cand_logprob, keep.astype(np.int64), entropy
