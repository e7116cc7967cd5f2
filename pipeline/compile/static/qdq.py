"""The w8a8 format in QDQ form for the npu flavour (`specdec compile --target npu --activations static-qdq`).

A w8a8 bundle computes each linear layer with per-row dynamic activation scales (ReduceMax, Round,
Cast, MatMulInteger: pipeline/graphs/int8_matmul.py). NPU toolchains do not take that: they want the
QDQ form, QuantizeLinear/DequantizeLinear pairs with constant scales, from which each toolchain
builds its own integer kernel. Each w8a8 linear becomes

    x -> QuantizeLinear(s_x, 128 uint8) -> DequantizeLinear(s_x, 128) --\\
                                                                        MatMul -> (bias, as before)
    int8 codes -> DequantizeLinear(column scales, zero 0 int8, axis 1) -/

with the bundle's own int8 weight codes and column scales (unchanged), and one constant activation
scale per layer input, s_x = absmax / 127 over the calibration text: the same uint8 code range as
the dynamic format (zero point 128, codes 1..255), with the row's scale replaced by one fixed for
the tensor.

The statistic is the absolute maximum of the layer's input over every calibration token: no
calibration value is clipped. A percentile would make the step finer for most rows but saturate
the rare large activations (the outlier channels transformer residual streams carry), which move
the logits far more than a coarser step does; absmax keeps the error a rounding error. Values
beyond the calibrated range saturate at the code range's ends at run time.

Exactness: the scales are constants, so a row's codes do not depend on the other rows of a call;
the measured batch invariance (engine/invariance.py) of the QDQ graph is recorded in the compile
report. This is a different numeric format from dynamic w8a8 (a tensor-wide step instead of the
row's own): its error against the dynamic w8a8 graph is measured on the held-out calibration text
and recorded as lossy. The variants are validated against the dynamic w8a8 graph with the int8
tolerance plus the error the QDQ format itself shows on the validator's own inputs (measured there
with this module's dynamic QDQ graph: static/validate.py), since its random tokens and random past
KV drive activations outside the calibrated range, where the text-measured error does not bound them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.bundle.store import Bundle, GraphSpec, Manifest
from specdec.pipeline.errors import BundleError, InputError, setting
from specdec.pipeline.graphs import int8_matmul
from specdec.pipeline.graphs.edit import retain
from specdec.pipeline.graphs.query import names_used, unique_name
from specdec.pipeline.inputs import calibration

log = logging.getLogger(__name__)

ACTIVATION_ZERO_POINT = int8_matmul.ACTIVATION_ZERO_POINT
ACTIVATION_MAX = int8_matmul.ACTIVATION_MAX
MIN_OPSET = 13  # per-axis DequantizeLinear
MAX_WINDOWS = 32  # calibration windows run (the bundle's calibration samples, capped)


@dataclass(frozen=True)
class Linear:
    """A w8a8 layer in a graph: its MatMulInteger, float input, weight and output before any bias."""

    key: str  # the int8 codes' initializer name: the same in the source graph and every variant
    matmul: onnx.NodeProto
    x: str
    weight: int8_matmul.Int8Columns
    out: str


def _producer_chain(producers: dict[str, onnx.NodeProto], start: str, ops: Iterable[str]) -> onnx.NodeProto | None:
    """Walk back from `start` through producers of the op types `ops` in order; the last node or None."""
    node = None
    value = start
    for op in ops:
        node = producers.get(value)
        if node is None or node.op_type != op:
            return None
        value = node.input[0]
    return node


def find_linears(model: onnx.ModelProto) -> list[Linear]:
    """The w8a8 layers of `model` (the int8_matmul.emit pattern, also after simplification)."""
    graph = model.graph
    inits = {init.name: init for init in graph.initializer}
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def constant(name: str) -> np.ndarray | None:
        if name in inits:
            return numpy_helper.to_array(inits[name])
        node = producers.get(name)
        if node is not None and node.op_type == "Constant":
            return numpy_helper.to_array(node.attribute[0].t)
        return None

    found = []
    for node in graph.node:
        if node.op_type != "MatMulInteger" or node.domain not in ("", "ai.onnx"):
            continue
        read = int8_matmul.read(node, constant, lambda value: consumers.get(value, []))
        # x_uint8 <- Cast <- Add(zero point) <- Round <- Div(x, row scale)
        divide = _producer_chain(producers, node.input[0], ("Cast", "Add", "Round", "Div"))
        if read is None or divide is None:
            raise BundleError(f"MatMulInteger node '{node.name}' is not a w8a8 layer of this specdec version",
                              "quantize the float bundle again with --format w8a8")
        weight, out = read
        found.append(Linear(node.input[1], node, divide.input[0], weight, out))
    return found


def rewrite(model: onnx.ModelProto, scales: dict[str, float]) -> int:
    """Rewrite every w8a8 layer of `model` in place into QDQ form with the activation `scales`
    (by Linear.key); returns how many. The dynamic quantization nodes left unused are removed."""
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if version < MIN_OPSET:
        raise BundleError(f"the graph imports opset {version}; per-channel DequantizeLinear needs {MIN_OPSET}",
                          "export the bundle again with this specdec version")
    graph = model.graph
    taken = set(names_used(graph))

    def name(base: str) -> str:
        made = unique_name(base, taken)
        taken.add(made)
        return made

    linears = find_linears(model)
    replaced: dict[str, tuple[Linear, list[onnx.NodeProto]]] = {}  # the chain's last output -> its QDQ nodes
    inits: list[TensorProto] = []
    dequantized: dict[str, str] = {}  # an activation -> its Q/DQ'd value (q/k/v, gate/up read one input)
    for linear in linears:
        if linear.key not in scales:
            raise BundleError(f"no activation scale calibrated for the w8a8 layer '{linear.key}'", "report this bug")
        prefix = linear.key.removesuffix(".qweight8")
        weight = linear.weight
        made = [numpy_helper.from_array(weight.scales.astype(np.float32), name(f"{prefix}.qdq_weight_scale")),
                numpy_helper.from_array(np.zeros(weight.N, np.int8), name(f"{prefix}.qdq_weight_zero"))]
        inits += made
        w_dq = name(f"{prefix}/qdq_w")
        # the bundle's int8 codes are read as they are (linear.key): no copy, shared weights stay shared
        replaced[linear.out] = (linear, [
            helper.make_node("DequantizeLinear", [linear.key, made[0].name, made[1].name], [w_dq],
                             name=name(f"{w_dq}_node"), axis=1),
            helper.make_node("MatMul", [dequantized.setdefault(linear.x, name(f"{prefix}/qdq_x")), w_dq],
                             [linear.out], name=name(f"{prefix}/qdq_matmul_node")),
        ])
    pairs: dict[str, list[onnx.NodeProto]] = {}
    for linear in linears:
        if linear.x in pairs:
            continue
        prefix = linear.key.removesuffix(".qweight8")
        made = [numpy_helper.from_array(np.array(scales[linear.key], np.float32), name(f"{prefix}.qdq_act_scale")),
                numpy_helper.from_array(np.array(ACTIVATION_ZERO_POINT, np.uint8), name(f"{prefix}.qdq_act_zero"))]
        inits += made
        x_q = name(f"{prefix}/qdq_x_q")
        pairs[linear.x] = [
            helper.make_node("QuantizeLinear", [linear.x, made[0].name, made[1].name], [x_q], name=name(f"{x_q}_node")),
            helper.make_node("DequantizeLinear", [x_q, made[0].name, made[1].name], [dequantized[linear.x]],
                             name=name(f"{dequantized[linear.x]}_node")),
        ]
    # each chain's last Mul is replaced where it stood, so the node order stays topological
    # an activation's Q/DQ pair goes before the first layer reading it
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        found = replaced.get(node.output[0]) if len(node.output) == 1 else None
        if found is None:
            nodes.append(node)
            continue
        linear, layer_nodes = found
        nodes += pairs.pop(linear.x, [])
        nodes += layer_nodes
    del graph.node[:]
    graph.node.extend(nodes)
    graph.initializer.extend(inits)
    _remove_dead(model)
    return len(linears)


def _remove_dead(model: onnx.ModelProto) -> None:
    """Drop nodes whose outputs nothing reads (the per-row quantization), then unread initializers."""
    graph = model.graph
    outputs = {value.name for value in graph.output}
    def read() -> set[str]:
        return {name for node in graph.node for name in node.input} | outputs

    while True:
        used = read()
        if not retain(graph.node, lambda node, used=used: any(out in used for out in node.output)):  # type: ignore[misc]
            break
    used = read()
    # subgraphs and local functions read their own values; only top-level initializers are pruned
    retain(graph.initializer, lambda init: init.name in used)


# ---- calibration and measurement (on the dynamic graphs) ------------------------------------------

def calibration_windows(manifest: Manifest, tokenizer_dir: Path) -> tuple[np.ndarray, list[np.ndarray], str]:
    """(calibration windows, held-out windows, source): the bundle's own calibration text (quantize's
    lineage record, with its sample count capped at MAX_WINDOWS and its window length), else
    quantize's default text; quantize's own split, so the held-out windows were not calibrated on."""
    from specdec.pipeline.inputs.text import TextCodec

    record = next((entry.config for entry in reversed(manifest.lineage) if entry.stage == "quantize"), {})
    recorded = (record.get("calib") or {}).get("path")
    path = Path(recorded) if recorded is not None and Path(recorded).is_file() else None
    samples = min(int(record.get("calib_samples", MAX_WINDOWS)), MAX_WINDOWS)
    seq_len = int(record.get("calib_seq_len", 128))
    codec = TextCodec(tokenizer_dir)
    data = calibration.prepare(calib=path, eval_file=None, samples=samples, seq_len=seq_len, prompts=1, seed=0,
                               encode=codec.encode, vocab_size=manifest.graphs["target"].vocab_size)
    return data.windows, data.eval_windows, data.source


def calibrate(source: Path, role: str, spec: GraphSpec, windows: np.ndarray, workdir: Path) -> dict[str, float]:
    """Per w8a8 layer (Linear.key): the absolute maximum of its input over every token of `windows`,
    as the activation scale absmax / 127 (module docstring: why absmax)."""

    linears = find_linears(onnx.load(str(source), load_external_data=False))
    if not linears:
        raise InputError(f"the {role} graph has no w8a8 layers", "quantize the bundle with --format w8a8")
    inputs = sorted({linear.x for linear in linears})
    peaks = dict.fromkeys(inputs, 0.0)
    with calibration.probe_graph(source, role, spec, inputs, workdir) as graph:
        for window in windows:
            _, extras = calibration.prefill(graph, window, tuple(inputs), with_logits=False)
            for name in inputs:
                peaks[name] = max(peaks[name], float(np.abs(extras[name]).max()))
    tiny = float(np.finfo(np.float32).tiny)
    return {linear.key: max(peaks[linear.x] / ACTIVATION_MAX, tiny) for linear in linears}


def write_qdq_graph(source: Path, scales: dict[str, float], out: Path) -> Path:
    """The dynamic graph `source` in QDQ form at `out` (weights in one external file beside it)."""
    model = onnx.load(str(source))
    rewrite(model, scales)
    onnx.save(model, str(out), save_as_external_data=True, location=f"{out.name}.data", size_threshold=1024)
    return out


def measure(reference: Path, qdq: Path, role: str, spec: GraphSpec, windows: list[np.ndarray]) -> dict[str, Any]:
    """The QDQ graph against the dynamic w8a8 graph on the held-out `windows`: logits error (the
    validator's metric), greedy mismatch, perplexity of both; and the target QDQ graph's batch invariance."""
    from specdec.pipeline.engine.graph import Graph, SessionOptions
    from specdec.pipeline.engine.invariance import measure as invariance
    from specdec.pipeline.engine.runner import DynamicRunner

    want_graph = Graph(calibration.graph_info(role, spec, reference))
    got_graph = Graph(calibration.graph_info(role, spec, qdq))
    errors, mismatch, nll_ref, nll_qdq = [], [], [], []
    for window in windows:
        want, _ = calibration.prefill(want_graph, window)
        got, _ = calibration.prefill(got_graph, window)
        assert want is not None and got is not None
        errors.append(float(np.abs(got - want).max()) / max(1.0, float(np.abs(want).max())))
        mismatch.append(want[:-1].argmax(-1) != got[:-1].argmax(-1))
        nll_ref.append(_nll(want[:-1], window[1:]))
        nll_qdq.append(_nll(got[:-1], window[1:]))
    report: dict[str, Any] = {
        "tokens": int(sum(w.size for w in windows)),
        "max_logits_error": max(errors),
        "greedy_mismatch_rate": float(np.concatenate(mismatch).mean()),
        "perplexity_w8a8": float(np.exp(np.concatenate(nll_ref).mean())),
        "perplexity_qdq": float(np.exp(np.concatenate(nll_qdq).mean())),
    }
    if role == "target":  # what exact speculation rests on; a draft's rows need not be invariant
        runner = DynamicRunner(calibration.graph_info(role, spec, qdq), SessionOptions(threads=1))
        report["invariance"] = invariance(runner, spec.vocab_size).as_dict()
    return report


@dataclass(frozen=True)
class QDQPlan:
    """What the npu flavour needs to write QDQ variants: the scales per role and the measurements."""

    scales: dict[str, dict[str, float]]  # role -> Linear.key -> activation scale
    report: dict[str, Any]
    graphs: dict[str, Path]  # role -> its dynamic graph in QDQ form (the validator's `form`)


def plan(source: Bundle, roles: list[str], workdir: Path) -> QDQPlan:
    """Calibrate every w8a8 graph of `source` among `roles`, write its QDQ form under `workdir` and
    measure it against the dynamic w8a8 graph."""
    manifest = source.manifest
    quantization = manifest.quantization
    if quantization is None or not quantization.row_invariant:
        raise InputError(f"{setting('activations')} static-qdq rewrites the w8a8 format, and the bundle is "
                         f"{'not quantized' if quantization is None else f'in {quantization.format}'}",
                         f"quantize with --format w8a8, or drop {setting('activations')}")
    windows, held_out, text = calibration_windows(manifest, source.path / manifest.tokenizer.dir)
    scales: dict[str, dict[str, float]] = {}
    graphs: dict[str, Any] = {}
    paths: dict[str, Path] = {}
    for role in roles:
        path, spec = source.graph_path(role), manifest.graphs[role]
        if not find_linears(onnx.load(str(path), load_external_data=False)):
            continue  # a graph quantize left float (--graphs)
        scales[role] = calibrate(path, role, spec, windows, workdir)
        paths[role] = write_qdq_graph(path, scales[role], workdir / f"{role}.qdq.onnx")
        graphs[role] = measure(path, paths[role], role, spec, held_out)
        log.info("%s static-qdq vs dynamic w8a8: max logits error %.3g, greedy mismatch %.3f, perplexity "
                 "%.3f -> %.3f", role, graphs[role]["max_logits_error"], graphs[role]["greedy_mismatch_rate"],
                 graphs[role]["perplexity_w8a8"], graphs[role]["perplexity_qdq"])
    report = {"mode": "static-qdq", "lossy_vs": "dynamic w8a8", "statistic": "absmax over the calibration tokens",
              "calibration": text, "calibration_tokens": int(windows.size), "graphs": graphs}
    return QDQPlan(scales, report, paths)


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return np.asarray(np.log(np.exp(shifted).sum(axis=-1)) - shifted[np.arange(targets.size), targets])
