"""One ONNX graph of a bundle behind a small typed call (docs/design.md §2 contract)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from specdec.pipeline.engine.bundle_info import GraphInfo
from specdec.pipeline.engine.masks import FULL_MASK, SLIDING_MASK, mask_feeds
from specdec.pipeline.errors import BundleError
from specdec.pipeline.records.bundle_paths import io_mismatch
from specdec.pipeline.records.decode import PruneParams

# Below this size the generic and static graphs' kernels are too short for intra-op threads to pay
# for their synchronisation (the demo pair on a 2-core host, plain decoding: static npu flavour
# 1230 tok/s on one thread, 650-700 on two; generic export 1340 vs 1360). The fused cpu flavour's
# kernels are few and large (packed QKV, fused norms, GroupQueryAttention), and threads pay from
# the demo size up (fp32 1900 vs 2350, int4 level 0 450 vs 520; int4 level 4 in the exact layout
# 1930 vs 1790): it always runs on onnxruntime's default, all cores, as onnxruntime-genai does.
SMALL_GRAPH_BYTES = 64 << 20


@dataclass(frozen=True)
class SessionOptions:
    threads: int = 0  # 0: auto (all cores; 1 for generic and static graphs under 64 MiB)
    optimization: str = "all"  # onnxruntime graph optimisation level: disable|basic|extended|all
    spinning: bool = True  # intra-op worker threads busy-wait for the next job (onnxruntime's default)
    # The draft runs single-threaded: its kernels are too short for threads to pay, and a second
    # pool's spinning workers steal the cores the target's verify call needs (measured on the
    # realistic pair, 2 threads: verify took 22 ms after a 2-thread draft, 11 ms after a 1-thread one).
    draft_threads: int = 1


def _auto_threads(path: os.PathLike[str] | str, extra_bytes: int, by_size: bool) -> int:
    if not by_size:
        return 0  # onnxruntime's default: all cores
    base = Path(path)
    size = extra_bytes + sum(p.stat().st_size for p in base.parent.glob(base.name + "*") if p.is_file())
    return 1 if size < SMALL_GRAPH_BYTES else 0


def make_session(path: os.PathLike[str] | str, options: SessionOptions, extra_bytes: int = 0,
                 threads_by_size: bool = True) -> Any:
    """`extra_bytes`: weights the graph reads from a file not named after it (a shared weights file);
    `threads_by_size`: auto threads are 1 for a graph under SMALL_GRAPH_BYTES (not for fused graphs)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = (options.threads if options.threads > 0
                               else _auto_threads(path, extra_bytes, threads_by_size))
    so.inter_op_num_threads = 1
    if not options.spinning:
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    so.graph_optimization_level = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[options.optimization]
    try:
        return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types per failure
        raise BundleError(f"onnxruntime cannot load '{path}': {str(exc).splitlines()[0]}",
                          "re-create the bundle with this specdec version") from exc


# Inputs that graph surgery adds; unused ones get these neutral values (greedy, no tree).
def default_op_inputs(q: int) -> dict[str, np.ndarray]:
    scalar = np.float32
    prune = PruneParams()
    return {
        "tree_parent": np.full(q, -1, np.int64),
        "tree_depth": np.zeros(q, np.int64),
        "uniforms": np.zeros((q, 1), np.float64),
        "temperature": np.array(1.0, scalar),
        "mode": np.array(0, np.int64),
        "top_k": np.array(0, np.int64),
        "top_p": np.array(1.0, scalar),
        "entropy_low": np.array(prune.entropy_low, scalar),
        "entropy_high": np.array(prune.entropy_high, scalar),
        "beta_base": np.array(prune.beta_base, scalar),
        "rho_min": np.array(prune.rho_min, scalar),
        "rho_max": np.array(prune.rho_max, scalar),
    }


OP_INPUT_NAMES = frozenset(default_op_inputs(0))
# A feature draft's tensors (pipeline/draft/feature_model.py), [1, q, hidden]: the target's features
# (its output, the draft's input) and the draft's guess of the next feature (its output).
HIDDEN_STATES = "hidden_states"
HIDDEN_OUT = "hidden_out"
# Graph inputs with a row per query token that callers fill besides input_ids and position_ids.
ROW_INPUT_NAMES = frozenset({HIDDEN_STATES})


class Graph:
    """Runs `(ids, positions, mask, past) -> (logits, present, extras)` on onnxruntime.

    `mask` is the tree/causal mask; a graph with windowed layers also gets their mask, built from
    it with the positions of the past rows (`past_positions`, 0 … past - 1 unless given)."""

    def __init__(self, info: GraphInfo, options: SessionOptions | None = None) -> None:
        self.info = info
        self.session = make_session(info.file, options or SessionOptions())
        self.dtype = np.dtype(info.dtype)
        self.mask_min = np.finfo(self.dtype).min
        inputs = [i.name for i in self.session.get_inputs()]
        outputs = [o.name for o in self.session.get_outputs()]
        mismatch = io_mismatch(info.role, info.file.name, info.input_names, inputs)
        if mismatch is not None:
            raise BundleError(mismatch, "re-create the bundle (were its graph files swapped or replaced?)")
        self._past_names = [n for n in inputs if n.startswith("past_key_values.")]
        self._present_names = [n for n in outputs if n.startswith("present.")]
        self._op_inputs = [n for n in inputs if n in OP_INPUT_NAMES]
        self._masks = tuple(n for n in inputs if n in (FULL_MASK, SLIDING_MASK))
        self.outputs = set(outputs)
        self.has_prune = "cand_ids" in self.outputs  # DynamicTreePrune is in the graph
        self.has_verify = "next_token" in self.outputs  # BlockSparseVerify is in the graph
        self.last_bytes_out = 0

    def forward(
        self,
        ids: np.ndarray,
        positions: np.ndarray,
        mask: np.ndarray,
        past: list[np.ndarray],
        extra_inputs: dict[str, np.ndarray] | None = None,
        extra_outputs: tuple[str, ...] = (),
        with_logits: bool = True,
        past_positions: np.ndarray | None = None,
    ) -> tuple[np.ndarray | None, list[np.ndarray], dict[str, np.ndarray]]:
        q = int(np.size(ids))
        positions = np.ascontiguousarray(positions, np.int64).reshape(1, -1)
        feeds: dict[str, np.ndarray] = {
            "input_ids": np.ascontiguousarray(ids, np.int64).reshape(1, -1),
            "position_ids": positions,
        }
        if self._masks == (FULL_MASK,):
            feeds[FULL_MASK] = mask
        else:
            past_len = mask.shape[-1] - q
            keys = np.concatenate([np.arange(past_len) if past_positions is None else past_positions, positions[0]])
            feeds.update(mask_feeds(self._masks, mask, positions[0], keys, self.info.window, self.mask_min))
        feeds.update(zip(self._past_names, past, strict=True))
        if self._op_inputs:
            defaults = default_op_inputs(q)
            feeds.update({name: defaults[name] for name in self._op_inputs})
        if extra_inputs:
            feeds.update(extra_inputs)
        names = (["logits"] if with_logits else []) + self._present_names + list(extra_outputs)
        values = self.session.run(names, feeds)
        self.last_bytes_out = sum(v.nbytes for v in values)
        offset = 1 if with_logits else 0
        logits = values[0][0] if with_logits else None
        present = values[offset : offset + len(self._present_names)]
        extras = dict(zip(extra_outputs, values[offset + len(self._present_names) :], strict=True))
        return logits, present, extras
