"""Validate an exported graph against PyTorch (docs/design.md §1: every stage checks itself).

The reference is the Hugging Face model run the ordinary way (plain causal forward, its own
mask and cache), not our export wrapper, so the check also proves the tree mask means what we
think: every tree node's logits must equal a plain forward over the prompt plus that node's path.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec.pipeline.engine.graph import HIDDEN_STATES
from specdec.pipeline.engine.masks import mask_feeds, mask_names
from specdec.pipeline.engine.runner import tree_mask
from specdec.pipeline.errors import ValidationError
from specdec.pipeline.export.architectures import Architecture, KVGeometry
from specdec.pipeline.records.decoder import Decoder

log = logging.getLogger(__name__)

_PROMPT_LEN = 8
# A windowed model is checked with a prompt longer than its window, so the window's mask is
# exercised, as long as that costs little; wider windows get a note in the log instead.
_MAX_WINDOW_CHECKED = 1024
# A branching tree: the root has two children, one of them two, and one path is three deep.
TREE_PARENTS = (-1, 0, 0, 1, 1, 2, 4)


@dataclass(frozen=True)
class Check:
    case: str
    output: str
    max_abs_diff: float
    tolerance: float

    @property
    def passed(self) -> bool:
        return self.max_abs_diff <= self.tolerance


def tree_depths(parents: tuple[int, ...]) -> list[int]:
    depths: list[int] = []
    for parent in parents:
        depths.append(0 if parent < 0 else depths[parent] + 1)
    return depths


def _path(parents: tuple[int, ...], node: int) -> list[int]:
    path = []
    while node >= 0:
        path.append(node)
        node = parents[node]
    return path[::-1]


class _Reference:
    """Plain Hugging Face forward passes, the ground truth; with `feature_layer`, that decoder layer's
    output too (a feature draft's target: the graph's `hidden_states`)."""

    def __init__(self, model: Any, feature_layer: int | None = None) -> None:
        self.model = model
        self.feature_layer = feature_layer

    def run(self, ids: list[int]) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
        import torch

        from specdec.pipeline.draft.feature_model import decoder_layers, layer_output

        seen: list[Any] = []
        layer = None if self.feature_layer is None else decoder_layers(self.model)[self.feature_layer]
        hook = None if layer is None else layer.register_forward_hook(
            lambda module, args, output: seen.append(layer_output(output)))
        try:
            with torch.no_grad():
                out = self.model(input_ids=torch.tensor([ids], dtype=torch.int64), use_cache=True)
        finally:
            if hook is not None:
                hook.remove()
        cache = out.get("cache", None) or out.get("past_key_values", None)
        flat: list[np.ndarray] = []
        for layer in cache.layers:
            flat += [layer.keys.float().numpy(), layer.values.float().numpy()]
        feature = seen[-1][0].float().numpy() if seen else None
        return out.logits[0].float().numpy(), flat, feature


class _Graph:
    def __init__(self, path: Path, geometry: KVGeometry, dtype: np.dtype[Any], decoder: Decoder | None) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self.geometry = geometry
        self.dtype = dtype
        self.masks = mask_names(decoder)
        self.window = decoder.window if decoder is not None else None
        self.past_names = [f"past_key_values.{i}.{kind}" for i in range(geometry.num_layers)
                           for kind in ("key", "value")]
        self.present_names = [f"present.{i}.{kind}" for i in range(geometry.num_layers) for kind in ("key", "value")]
        self.features = HIDDEN_STATES in {o.name for o in self.session.get_outputs()}

    def empty_past(self) -> list[np.ndarray]:
        g = self.geometry
        return [np.zeros((1, g.num_kv_heads, 0, g.head_dim), self.dtype) for _ in range(2 * g.num_layers)]

    def run(
        self, ids: list[int], positions: list[int], mask: np.ndarray, past: list[np.ndarray]
    ) -> tuple[np.ndarray, list[np.ndarray], np.ndarray | None]:
        keys = np.concatenate([np.arange(past[0].shape[2]), positions])  # the past is a valid prefix
        neg = float(np.finfo(self.dtype).min)
        feeds = {"input_ids": np.array([ids], np.int64), "position_ids": np.array([positions], np.int64),
                 **mask_feeds(self.masks, mask, np.array(positions), keys, self.window, neg),
                 **dict(zip(self.past_names, past, strict=True))}
        extra = [HIDDEN_STATES] if self.features else []
        outputs = self.session.run(["logits", *extra, *self.present_names], feeds)
        feature = outputs[1][0].astype(np.float32) if self.features else None
        return outputs[0][0].astype(np.float32), list(outputs[1 + len(extra):]), feature


def _tails(got: list[np.ndarray], want: list[np.ndarray]) -> np.ndarray:
    """Each layer's last rows, as many as the reference kept: Hugging Face's own cache keeps only
    the window of a windowed layer, the graph's `present` every row."""
    return np.concatenate([g[:, :, g.shape[2] - w.shape[2]:].ravel() for g, w in zip(got, want, strict=True)])


def validate_graph(
    model: Any,
    onnx_path: Path,
    geometry: KVGeometry,
    architecture: Architecture,
    dtype: str,
    token_range: int,
    seed: int = 0,
    decoder: Decoder | None = None,
    feature_layer: int | None = None,
) -> list[Check]:
    """Run prefill, a branching tree on a past, and one decode step through ORT and PyTorch; with
    `feature_layer`, the graph's `hidden_states` are checked against that layer's output too."""
    np_dtype = np.dtype(dtype)
    fp16 = dtype == "float16"
    atol = architecture.atol_fp16 if fp16 else architecture.atol
    rtol = architecture.rtol_fp16 if fp16 else architecture.rtol
    rng = np.random.default_rng(seed)
    window = decoder.window if decoder is not None else None
    length = _PROMPT_LEN
    if window is not None and window <= _MAX_WINDOW_CHECKED:
        length = max(length, window + 4)
    elif window is not None:
        log.info("%s: window %d not exercised by the check (prompt of %d tokens)", onnx_path.name, window, length)
    prompt = [int(t) for t in rng.integers(0, token_range, length)]
    reference = _Reference(model, feature_layer)
    graph = _Graph(onnx_path, geometry, np_dtype, decoder)
    checks: list[Check] = []

    def compare(case: str, output: str, got: np.ndarray, want: np.ndarray) -> None:
        diff = float(np.max(np.abs(got.astype(np.float32) - want))) if want.size else 0.0
        if not np.isfinite(diff):
            diff = float("inf")
        checks.append(Check(case, output, diff, atol + rtol * float(np.max(np.abs(want)))))

    def compare_features(case: str, got: np.ndarray | None, want: np.ndarray | None) -> None:
        if feature_layer is not None:
            if got is None or want is None:
                raise ValidationError(f"{onnx_path.name} has no '{HIDDEN_STATES}' output",
                                      "report this with SPECDEC_DEBUG=1 output")
            compare(case, HIDDEN_STATES, got, want)

    # (a) prefill with a causal mask
    ref_logits, ref_kv, ref_feature = reference.run(prompt)
    causal = tree_mask(tuple(range(-1, length - 1)), 0, np_dtype)
    logits, present, feature = graph.run(prompt, list(range(length)), causal, graph.empty_past())
    compare("prefill", "logits", logits, ref_logits)
    compare_features("prefill", feature, ref_feature)
    compare("prefill", "present", _tails(present, ref_kv), np.concatenate([r.ravel() for r in ref_kv]))

    # (b) a branching tree on top of the prefill's cache
    past = length
    tokens = [int(t) for t in rng.integers(0, token_range, len(TREE_PARENTS))]
    depths = tree_depths(TREE_PARENTS)
    logits, tree_present, feature = graph.run(
        tokens, [past + d for d in depths], tree_mask(TREE_PARENTS, past, np_dtype), present
    )
    tree_ref_logits, tree_ref_kv, tree_got_kv, tree_ref_features = [], [], [], []
    for node in range(len(TREE_PARENTS)):
        node_logits, node_kv, node_feature = reference.run(prompt + [tokens[i] for i in _path(TREE_PARENTS, node)])
        tree_ref_logits.append(node_logits[-1])
        if node_feature is not None:
            tree_ref_features.append(node_feature[-1])
        tree_ref_kv += [kv[:, :, -1] for kv in node_kv]
        tree_got_kv += [kv[:, :, past + node] for kv in tree_present]
    compare("tree", "logits", logits, np.stack(tree_ref_logits))
    compare_features("tree", feature, np.stack(tree_ref_features) if tree_ref_features else None)
    compare("tree", "present", np.concatenate([k.ravel() for k in tree_got_kv]),
            np.concatenate([k.ravel() for k in tree_ref_kv]))

    # (c) one decode step on the prefill's cache
    token = int(rng.integers(0, token_range))
    step_logits, step_present, step_feature = graph.run([token], [past], np.zeros((1, 1, 1, past + 1), np_dtype),
                                                        present)
    ref_step_logits, ref_step_kv, ref_step_feature = reference.run([*prompt, token])
    compare("decode", "logits", step_logits, ref_step_logits[-1:])
    compare_features("decode", step_feature, ref_step_feature[-1:] if ref_step_feature is not None else None)
    compare("decode", "present", _tails(step_present, ref_step_kv), np.concatenate([r.ravel() for r in ref_step_kv]))
    return checks


def enforce(checks: list[Check], graph_file: str) -> dict[str, Any]:
    """Raise on the first failed check; return the report stored in the manifest."""
    for check in checks:
        log.info("%s %s/%s max|diff| %.3g (tolerance %.3g)", graph_file, check.case, check.output,
                 check.max_abs_diff, check.tolerance)
    failed = [c for c in checks if not c.passed]
    if failed:
        worst = max(failed, key=lambda c: c.max_abs_diff / max(c.tolerance, 1e-30))
        raise ValidationError(
            f"{graph_file}: '{worst.output}' differs from PyTorch by {worst.max_abs_diff:.3g} in the "
            f"'{worst.case}' check (tolerance {worst.tolerance:.3g})",
            "report this with SPECDEC_DEBUG=1 output; --no-validate skips the check at your own risk",
        )
    return {"passed": True, "checks": [asdict(c) for c in checks]}
