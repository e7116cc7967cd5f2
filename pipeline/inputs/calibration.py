"""Calibration text -> token windows, and running a float graph on them (shared by quantize and compile).

The one reader of calibration text (`read_tokens`), for every stage that takes some: quantize's
`--calib`/`--eval-file`, compile's `--kv-calib` and draft's `--calib`. A file is plain text, or
JSONL whose lines carry `text` or `input_ids`; it must hold at least MIN_TOKENS tokens. Without
a file, `default_calib_path()`: the demo pair's `pipeline/demo/calib.txt`, else
`quantize/calib_default.txt` (~20 KB of Python documentation, docstrings and code held out from
the demo corpus; PSF License). quantize tokenises it with the bundle's tokenizer and holds the
last ~10% out for perplexity and the engine's prompts.

Probes: the float graph with chosen intermediate tensors (layer inputs) as its outputs, cut down
to the nodes those tensors need, run in onnxruntime one window at a time (prefill with a causal
mask, past = 0). quantize collects its per-layer statistics this way (quantize/layer_stats.py),
the npu flavour its static activation scales (compile/static/qdq.py).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnx.utils
from onnx import TensorProto, helper

from specdec.pipeline.bundle.store import GraphSpec
from specdec.pipeline.engine.bundle_info import GraphInfo
from specdec.pipeline.engine.graph import HIDDEN_STATES, Graph
from specdec.pipeline.errors import InputError, setting
from specdec.pipeline.graphs.files import external_files, load_graph
from specdec.pipeline.inputs.text import read_text_file

log = logging.getLogger(__name__)

_PIPELINE = Path(__file__).resolve().parents[1]
DEMO_CALIB = _PIPELINE / "demo" / "calib.txt"
DEFAULT_CALIB = _PIPELINE / "quantize" / "calib_default.txt"
HOLDOUT_FRACTION = 10  # 1/10 of the tokens
MIN_HOLDOUT = 16
MIN_TOKENS = 2 * MIN_HOLDOUT
MAX_EVAL_WINDOWS = 16
PROMPT_TOKENS = 24


@dataclass(frozen=True)
class CalibrationData:
    source: str
    windows: np.ndarray  # [S, L] int64: calibration samples
    eval_windows: list[np.ndarray]  # perplexity windows (held-out slice or --eval)
    eval_source: str
    prompts: list[list[int]]  # engine prompts from the held-out slice
    warnings: list[str] = field(default_factory=list)
    # a feature draft's input for each calibration window (draft_features), when it is calibrated
    features: list[np.ndarray] | None = None

    @property
    def tokens_used(self) -> int:
        return int(self.windows.size)


def default_calib_path() -> Path:
    return DEMO_CALIB if DEMO_CALIB.is_file() else DEFAULT_CALIB


Encoder = Callable[[str], list[int]]  # the bundle's TextCodec.encode


def read_tokens(path: Path, encode: Encoder, vocab_size: int, key: str = "calib") -> list[int]:
    """Token ids of a text or JSONL file, at least MIN_TOKENS of them; clear errors for missing,
    unreadable, empty, malformed or too short files. `key` is the setting that named the file."""
    name = setting(key)
    if not path.is_file():
        raise InputError(f"{name} file '{path}' does not exist", "pass a text or JSONL file")
    text = read_text_file(path, f"{name} file")
    if not text.strip():
        raise InputError(f"{name} file '{path}' is empty", "pass a file with text to calibrate on")
    lines = [line for line in text.splitlines() if line.strip()]
    is_jsonl = path.suffix == ".jsonl" or (lines[0].lstrip().startswith("{") and _json_object(lines[0]) is not None)
    ids = _jsonl_tokens(path, name, lines, encode, vocab_size) if is_jsonl else list(encode(text))
    if len(ids) < MIN_TOKENS:
        raise InputError(f"{name} file '{path}' has only {len(ids)} tokens (at least {MIN_TOKENS} needed)",
                         f"pass a longer {name} file")
    return ids


def _jsonl_tokens(path: Path, name: str, lines: list[str], encode: Encoder, vocab_size: int) -> list[int]:
    ids: list[int] = []
    for number, line in enumerate(lines, 1):
        record = _json_object(line)
        if record is None or not ("text" in record or "input_ids" in record):
            raise InputError(f"{name} file '{path}' line {number} is not a JSON object with 'text' or 'input_ids'",
                             "write one JSON object per line")
        if "input_ids" in record:
            values = record["input_ids"]
            if not isinstance(values, list) or not all(isinstance(v, int) and 0 <= v < vocab_size for v in values):
                raise InputError(f"{name} file '{path}' line {number}: input_ids must be token ids below "
                                 f"{vocab_size}", "tokenize with the bundle's tokenizer or pass 'text'")
            ids += values
        else:
            ids += encode(str(record["text"]) + "\n\n")
    return ids


def _json_object(line: str) -> dict[str, object] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def _windows(tokens: Sequence[int], length: int, limit: int) -> list[np.ndarray]:
    count = min(len(tokens) // length, limit) if len(tokens) >= length else 0
    if count == 0 and len(tokens) >= 2:
        return [np.asarray(tokens, np.int64)]
    return [np.asarray(tokens[i * length:(i + 1) * length], np.int64) for i in range(count)]


def prepare(*, calib: Path | None, eval_file: Path | None, samples: int, seq_len: int, prompts: int, seed: int,
            encode: Encoder, vocab_size: int, eval_limit: int = MAX_EVAL_WINDOWS) -> CalibrationData:
    path = calib or default_calib_path()
    tokens = read_tokens(path, encode, vocab_size)
    held = max(len(tokens) // HOLDOUT_FRACTION, MIN_HOLDOUT)
    body, holdout = tokens[:-held], tokens[-held:]
    warnings: list[str] = []
    available = len(body) // seq_len
    if available >= samples:
        rng = np.random.default_rng(seed)
        chosen = np.sort(rng.choice(available, size=samples, replace=False))
        windows = np.asarray(body[: available * seq_len], np.int64).reshape(available, seq_len)[chosen]
    elif available > 0:
        windows = np.asarray(body[: available * seq_len], np.int64).reshape(available, seq_len)
    else:
        windows = np.asarray(body, np.int64)[None]
    if windows.size < samples * seq_len:
        warnings.append(
            f"calibration text '{path.name}' has {len(body)} tokens after the held-out slice, fewer than the "
            f"{samples} x {seq_len} requested: using {windows.shape[0]} sample(s) of {windows.shape[1]} tokens "
            f"({windows.size} tokens)")
    if eval_file is not None:
        eval_tokens = read_tokens(eval_file, encode, vocab_size, key="eval_file")
        eval_windows, eval_source = _windows(eval_tokens, seq_len, eval_limit), str(eval_file)
    else:
        eval_windows, eval_source = _windows(holdout, seq_len, eval_limit), f"last {held} tokens of {path.name}"
    step = max(len(holdout) // prompts, 1)
    prompt_len = max(min(PROMPT_TOKENS, step), 1)
    engine_prompts = [list(holdout[i * step: i * step + prompt_len]) for i in range(min(prompts, len(holdout)))]
    for warning in warnings:
        # The built-in text is small by design; only a file the user chose deserves a warning.
        log.log(logging.WARNING if calib is not None else logging.INFO, warning)
    return CalibrationData(str(path), windows, eval_windows, eval_source, engine_prompts, warnings)


# ---- running a graph -------------------------------------------------------------------------

def graph_info(role: str, spec: GraphSpec, file: Path) -> GraphInfo:
    return GraphInfo(role=role, file=file, num_layers=spec.num_layers, num_kv_heads=spec.num_kv_heads,
                     head_dim=spec.head_dim, vocab_size=spec.vocab_size,
                     max_position_embeddings=spec.max_position_embeddings, dtype=spec.dtype,
                     input_names=tuple(t.name for t in spec.inputs), output_names=tuple(t.name for t in spec.outputs),
                     decoder=spec.decoder)


def prefill(graph: Graph, ids: np.ndarray, extra_outputs: tuple[str, ...] = (), with_logits: bool = True,
            features: np.ndarray | None = None) -> tuple[np.ndarray | None, dict[str, np.ndarray]]:
    """One window from an empty cache with a causal mask: (logits [L, V] or None, extra outputs);
    `features` [L, H]: a feature draft's `hidden_states` input (draft_features)."""
    from specdec.pipeline.engine.kv import KVBuffers
    from specdec.pipeline.engine.runner import causal_mask

    length = int(ids.size)
    mask = causal_mask(length, 0, graph.dtype, graph.mask_min)
    extra_inputs = {HIDDEN_STATES: features[None].astype(graph.dtype)} if features is not None else None
    logits, _, extras = graph.forward(ids, np.arange(length), mask, KVBuffers(graph.info).layers, extra_inputs,
                                      extra_outputs=extra_outputs, with_logits=with_logits)
    return logits, extras


def reads_features(spec: GraphSpec) -> bool:
    """Is the graph a feature draft's (it takes the target's `hidden_states`)?"""
    return any(value.name == HIDDEN_STATES for value in spec.inputs)


def draft_features(target: Graph, windows: Sequence[np.ndarray]) -> list[np.ndarray]:
    """A feature draft's input for each window, from the (float) target graph: row t reads the target's
    feature of row t - 1, zeros at t = 0 (pipeline/draft/feature_model.py's alignment)."""
    result = []
    for window in windows:
        _, extras = prefill(target, np.asarray(window), (HIDDEN_STATES,), with_logits=False)
        rows = extras[HIDDEN_STATES][0].astype(np.float32)
        result.append(np.concatenate([np.zeros_like(rows[:1]), rows[:-1]]))
    return result


@contextmanager
def probe_graph(source: Path, role: str, spec: GraphSpec, names: Sequence[str], workdir: Path) -> Iterator[Graph]:
    """The float graph file `source` cut down to `names` as its only outputs, loaded in onnxruntime;
    removed afterwards. It takes the graph's inputs (an unused past is fed and ignored).

    onnxruntime runs every node of a graph whatever outputs a run asks for (onnxruntime#16483), so
    the probe keeps only the nodes `names` need (onnx.utils.Extractor): a pass over the first layers
    of a 1B-parameter model skips the others and the 128k-row head. Only the graph's structure is
    loaded and rewritten: its weights stay where they are, and the probe's directory links the
    source's external data files (the graph is 5 GB; writing or holding a second copy per pass is
    what the structure-only probe avoids). A graph small enough to keep its weights inside the
    .onnx is simply re-saved.
    """
    model = load_graph(source, weights=False)
    elem = TensorProto.FLOAT16 if spec.dtype == "float16" else TensorProto.FLOAT
    existing = {value.name for value in model.graph.output}
    model.graph.output.extend(helper.make_tensor_value_info(name, elem, None) for name in names
                              if name not in existing)
    model = onnx.utils.Extractor(model).extract_model([value.name for value in model.graph.input], list(names))
    with tempfile.TemporaryDirectory(prefix=f"calib-{role}-", dir=workdir) as tmp:
        path = Path(tmp) / source.name
        for location in external_files(source):
            _link(source.parent / location, Path(tmp) / location)
        onnx.save(model, str(path))
        del model
        graph = Graph(graph_info(role, spec, path))
        yield graph
        del graph


def _link(source: Path, link: Path) -> None:
    """A hard link where the filesystem allows one (the probe lives next to the output), else a symlink."""
    link.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, link)
    except OSError:
        link.symlink_to(source.resolve())
