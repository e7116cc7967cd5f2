"""Each bucket must reproduce the dynamic graph it came from (fp32: within 1e-5).

The dynamic graph sees `past` real KV entries; the bucket sees the same entries in the first
slots of its buffer, random garbage in the rest (masked), and the same tree of new tokens.
Graphs that round activations to int8 (w8a8, MatMulNBits accuracy level 4) get the int8 tolerance
(scaled by the format's own logits error where quantize recorded it) and their custom-op outputs
are compared where both graphs rank each row's candidates the same, as in the fused flavour
(compile/fused/validate.py says why). Such a graph also moves when it only attends over more
masked slots: the softmax sums run over a longer row, a last bit moves, and an int8 rounding step
flips in the next layer. The dynamic graph itself, fed the variant's padded buffer and mask,
measures that (`padding_error`), and the tolerance adds it: variant vs dynamic <= variant vs
padded dynamic + padded dynamic vs dynamic. At the Llama-3.2-1B shape (random init, w8a8, q 24,
context 512) the padded dynamic graph differed from itself by 0.0974 and the variant by 0.0977.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec.pipeline.compile.fused.validate import int8_tolerance, same_ranking, tolerance_basis
from specdec.pipeline.engine.masks import FULL_MASK, SLIDING_MASK, mask_feeds
from specdec.pipeline.engine.runner import build_mask
from specdec.pipeline.engine.tree import ancestor_matrix
from specdec.pipeline.errors import ValidationError

# Relative to max(1, max|reference|): a different q changes onnxruntime's GEMM blocking, so
# float32 sums are re-associated; on the demo target (logits up to ~20) that moves logits by
# ~1e-5 in absolute terms, still ~5e-7 relative.
FP32_TOLERANCE = 1e-5
FP16_TOLERANCE = 2e-2


@dataclass(frozen=True)
class Check:
    """A variant's validation: its worst relative difference, the tolerance it met, and (static-qdq) how
    much of that tolerance is the variant's format's own difference from the dynamic graph."""

    worst: float
    tolerance: float
    format_error: float | None = None
    padding_error: float | None = None  # int8 compute: the dynamic graph's own move over the padded buffer


def _tree(q: int, rng: np.random.Generator) -> np.ndarray:
    return np.array([-1] + [int(rng.integers(0, i)) for i in range(1, q)], np.int64)


class BucketValidator:
    """Checks variants against their dynamic graph, loading each dynamic graph once for all of them."""

    def __init__(self) -> None:
        self._sessions: dict[Path, Any] = {}

    def __enter__(self) -> BucketValidator:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._sessions.clear()

    def check(self, dynamic: Path, static: Path, *, q: int, capacity: int, dtype: str, seed: int = 0,
              window: int | None = None, int8_compute: bool = False, logits_error: float | None = None,
              form: Path | None = None) -> Check:
        for path in (dynamic, form):
            if path is not None and path not in self._sessions:
                self._sessions[path] = _session(path)
        return validate_bucket(dynamic, static, q=q, capacity=capacity, dtype=dtype, seed=seed,
                               reference=self._sessions[dynamic], window=window, int8_compute=int8_compute,
                               logits_error=logits_error, form=self._sessions[form] if form is not None else None)


def _session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def validate_bucket(dynamic: Path, static: Path, *, q: int, capacity: int, dtype: str, seed: int = 0,
                    reference: Any = None, window: int | None = None, int8_compute: bool = False,
                    logits_error: float | None = None, form: Any = None) -> Check:
    """Max difference (relative to max(1, max|ref|)) of logits and new KV, bucket vs dynamic graph.

    `reference`: an onnxruntime session of `dynamic` already loaded; `window`: the graph's attention
    window (its windowed layers take their own mask); `logits_error`: what the quantization moved
    the graph's logits (an int8-compute tolerance scales by it, fused/validate.py); `form`: a session of
    the dynamic graph in the variant's own numeric format where that differs from `dynamic`'s (static-qdq
    against dynamic w8a8): its difference from `dynamic` on these same inputs is measured and added to the
    tolerance, so the check still catches what compiling moved (a triangle inequality: variant vs
    dynamic <= format vs dynamic + variant vs format).
    """
    rng = np.random.default_rng(seed + q)
    np_dtype = np.dtype(dtype)
    neg = np.finfo(np_dtype).min
    dyn = reference if reference is not None else _session(dynamic)
    sta = _session(static)
    past = min(5, capacity - q)
    parents = _tree(q, rng)
    depths = np.zeros(q, np.int64)
    for node in range(1, q):
        depths[node] = depths[parents[node]] + 1
    visible = ancestor_matrix(parents)
    ids = rng.integers(0, 50, (1, q)).astype(np.int64)
    positions = (past + depths)[None]
    masks = tuple(i.name for i in sta.get_inputs() if i.name in (FULL_MASK, SLIDING_MASK))
    # a window that cuts into the short past here, so the windowed layers' mask is exercised too
    short_window = min(window, max(past, 1)) if window is not None else None
    dyn_feeds: dict[str, np.ndarray] = {"input_ids": ids, "position_ids": positions, **mask_feeds(
        masks, build_mask(np_dtype, neg, past, past, np.zeros((q, 0), bool), visible), positions[0],
        np.concatenate([np.arange(past), positions[0]]), short_window, neg)}
    sta_feeds: dict[str, np.ndarray] = {"input_ids": ids, "position_ids": positions, **mask_feeds(
        masks, build_mask(np_dtype, neg, past, capacity, np.zeros((q, 0), bool), visible), positions[0],
        np.concatenate([np.arange(past), np.zeros(capacity - past, np.int64), positions[0]]), short_window, neg)}
    for value in dyn.get_inputs():
        if not value.name.startswith("past_key_values."):
            continue
        heads, head_dim = value.shape[1], value.shape[3]
        real = rng.normal(size=(1, heads, past, head_dim)).astype(np_dtype)
        buffer = rng.normal(size=(1, heads, capacity, head_dim)).astype(np_dtype)  # masked garbage
        buffer[:, :, :past] = real
        dyn_feeds[value.name], sta_feeds[value.name] = real, buffer
    op_feeds = _op_feeds(sta, parents, depths, rng)
    dyn_names = ["logits"] + [o.name for o in dyn.get_outputs() if o.name.startswith("present.")]
    dyn_op_feeds = {k: v for k, v in op_feeds.items() if k in {i.name for i in dyn.get_inputs()}}
    want = dict(zip(dyn_names, dyn.run(dyn_names, {**dyn_feeds, **dyn_op_feeds}), strict=True))
    got = dict(zip([o.name for o in sta.get_outputs()], sta.run(None, {**sta_feeds, **op_feeds}), strict=True))
    def relative(a: np.ndarray, b: np.ndarray) -> float:
        a, b = a.astype(np.float32), b.astype(np.float32)
        return float(np.max(np.abs(a - b))) / max(1.0, float(np.max(np.abs(b))))

    def difference(logits: np.ndarray, new_entries: dict[str, np.ndarray]) -> float:
        """Against `want`: the logits, and each layer's new KV entries (`present.*` past the real past)."""
        return max(relative(logits, want["logits"]), *(relative(new_entries[name], value[:, :, past:])
                                                      for name, value in want.items() if name.startswith("present.")))

    presents = [name for name in want if name.startswith("present.")]

    def dynamic_difference(session: Any, feeds: dict[str, np.ndarray], new_from: int) -> float:
        """A dynamic-form graph on `feeds` against `want`; its new KV entries start at slot `new_from`."""
        out = dict(zip(dyn_names, session.run(dyn_names, {**feeds, **dyn_op_feeds}), strict=True))
        return difference(out["logits"], {name: out[name][:, :, new_from:] for name in presents})

    worst = difference(got["logits"], {name: got[name.replace("present.", "new_key_values.")] for name in presents})
    # int8 compute: the dynamic graph over the variant's padded buffer (the same rows, a longer softmax)
    padding_error = dynamic_difference(dyn, sta_feeds, capacity) if int8_compute else None
    # the same inputs through the dynamic graph in the variant's format
    format_error = dynamic_difference(form, dyn_feeds, past) if form is not None else None
    compare_ops = not int8_compute or same_ranking(got["logits"], want["logits"])
    for name in ("accepted", "accepted_len", "next_token", "cand_ids", "keep") if compare_ops else ():
        if name in got and name in {o.name for o in dyn.get_outputs()}:
            reference = dyn.run([name], {**dyn_feeds, **op_feeds})[0]
            if not np.array_equal(got[name], reference):
                raise ValidationError(f"{static.name}: custom-op output '{name}' differs from the dynamic graph",
                                      "report this with SPECDEC_DEBUG=1 output")
    limit = int8_tolerance(logits_error) if int8_compute else FP16_TOLERANCE if np_dtype == np.float16 \
        else FP32_TOLERANCE
    basis = tolerance_basis(int8_compute, logits_error)
    if padding_error is not None:
        limit += padding_error
        basis += f"; plus {padding_error:.3g}, what the dynamic graph itself moves over the variant's padded buffer"
    if format_error is not None:
        limit += format_error
        basis += (f"; plus {format_error:.3g}, what the variant's own format (static QDQ, lossy) moves the "
                  "dynamic graph on these inputs")
    if not np.isfinite(worst) or worst > limit:
        raise ValidationError(f"{static.name}: outputs differ from the dynamic graph by {worst:.3g} (relative; "
                              f"tolerance {limit:.3g}{basis})",
                              "report this with SPECDEC_DEBUG=1 output")
    return Check(worst, limit, format_error, padding_error)


def _op_feeds(session: object, parents: np.ndarray, depths: np.ndarray, rng: np.random.Generator
              ) -> dict[str, np.ndarray]:
    names = {i.name for i in session.get_inputs()}  # type: ignore[attr-defined]
    feeds: dict[str, np.ndarray] = {}
    if "tree_parent" in names:
        feeds.update({"tree_parent": parents, "tree_depth": depths, "uniforms": rng.random((parents.size, 1)),
                      "temperature": np.array(0.0, np.float32), "mode": np.array(0, np.int64),
                      "top_k": np.array(0, np.int64), "top_p": np.array(1.0, np.float32)})
    if "beta_base" in names:
        feeds.update({k: np.array(v, np.float32) for k, v in {"temperature": 1.0, "entropy_low": 0.8,
                                                              "entropy_high": 2.5, "beta_base": 0.3, "rho_min": 0.05,
                                                              "rho_max": 0.6}.items()})
    return feeds
