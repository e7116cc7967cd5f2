"""Weight formats stock onnxruntime runs on a CPU: verify cost by rows, plain step, size, batch invariance.

Speculation pays when verifying q tokens costs about one decoding step, and it is exact only if a
token's logits do not depend on the rows it shares a call with. This script measures both, for
every weight format onnxruntime's CPU provider runs, in one run:

- kernel level (w8a8 rows included: quantize --format w8a8): a stack of matmuls (8 x
  (1024x4096, 4096x1024) by default), time of M rows relative to one row, and whether row 0 is
  bit-identical for M = 1 vs M >= 2 and among all M >= 2 (random other rows, M up to 64);
- graph level (`--graphs`): the compute-realistic target (benchmarks/realistic.py) built as the
  fused CPU flavour with every linear layer in the format: plain step ms, verify cost c(q)/c(1)
  for q = 1, 2, 4, 8, 16, 32, size, and invariance.measure (single row / exact-layout chain /
  branching tree bit-identical).

    .venv/bin/python benchmarks/formats.py [--threads 2] [--graphs] [--only w8a8] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.graphs import int8_matmul
from specdec.pipeline.graphs.query import unique_name
from specdec.pipeline.quantize.algorithms.base import QuantSpec, round_to_nearest
from specdec.pipeline.quantize.packing import pack


@dataclass(frozen=True)
class Format:
    name: str
    kind: str  # fp32 | fp16 | nbits | int8_dynamic | w8a8
    bits: int = 0
    level: int = 0
    block: int = 32
    symmetric: bool = True


FORMATS = [
    Format("fp32 MatMul", "fp32"),
    Format("fp16 MatMul", "fp16"),
    *[Format(f"MatMulNBits {bits}-bit L{level} b{block} {'sym' if sym else 'zp'}", "nbits", bits, level, block, sym)
      for bits in (4, 8) for level in (0, 4) for block in (32, 64, 128) for sym in (True, False)],
    Format("int8 per-channel, dynamic act. (DynamicQuantizeMatMul)", "int8_dynamic"),
    # quantize --format w8a8 (pipeline/graphs/int8_matmul.py): per-row uint8 activations, MatMulInteger
    *[Format(f"w8a8 {bits}-bit weights, per-row act. (MatMulInteger)", "w8a8", bits) for bits in (7, 8)],
]
GRAPH_FORMATS = ("fp32 MatMul", "MatMulNBits 4-bit L0 b32 sym", "MatMulNBits 4-bit L4 b32 sym",
                 "MatMulNBits 4-bit L4 b128 zp", "MatMulNBits 8-bit L4 b32 sym",
                 "w8a8 7-bit weights, per-row act. (MatMulInteger)")


def _session(model: onnx.ModelProto, threads: int) -> Any:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _layer(fmt: Format, weight: np.ndarray, x: str, y: str,
           tag: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    k, n = weight.shape
    inits: list[onnx.TensorProto] = []
    if fmt.kind in ("fp32", "fp16"):
        dtype = np.float16 if fmt.kind == "fp16" else np.float32
        inits.append(numpy_helper.from_array(weight.astype(dtype), f"w{tag}"))
        return [helper.make_node("MatMul", [x, f"w{tag}"], [y])], inits
    if fmt.kind == "w8a8":
        taken = {x, y}
        return int8_matmul.emit(x, y, int8_matmul.quantize_columns(weight, fmt.bits), f"l{tag}",
                                lambda base: unique_name(base, taken))
    if fmt.kind == "int8_dynamic":
        scale = (np.abs(weight).max(axis=0) / 127).astype(np.float32)
        codes = np.clip(np.round(weight / scale), -127, 127).astype(np.int8)
        inits += [numpy_helper.from_array(codes, f"w{tag}"), numpy_helper.from_array(scale, f"s{tag}")]
        node = helper.make_node("DynamicQuantizeMatMul", [x, f"w{tag}", f"s{tag}"], [y], domain="com.microsoft")
        return [node], inits
    result = round_to_nearest(weight, QuantSpec(fmt.bits, fmt.block, fmt.symmetric))
    packed = pack(result.codes, result.scales, None if fmt.symmetric else result.zero_points, bits=fmt.bits,
                  block_size=fmt.block)
    inits += [numpy_helper.from_array(packed.weight, f"w{tag}"), numpy_helper.from_array(packed.scales, f"s{tag}")]
    inputs = [x, f"w{tag}", f"s{tag}"]
    if packed.zero_points is not None:
        inits.append(numpy_helper.from_array(packed.zero_points, f"z{tag}"))
        inputs.append(f"z{tag}")
    return [helper.make_node("MatMulNBits", inputs, [y], domain="com.microsoft", K=k, N=n, bits=fmt.bits,
                             block_size=fmt.block, accuracy_level=fmt.level)], inits


def kernel_model(fmt: Format, weights: list[np.ndarray]) -> onnx.ModelProto:
    """A stack of matmuls (up, down, up, down, ...) in the format."""
    dtype = TensorProto.FLOAT16 if fmt.kind == "fp16" else TensorProto.FLOAT
    nodes, inits = [], []
    for index, weight in enumerate(weights):
        layer_nodes, tensors = _layer(fmt, weight, "x" if index == 0 else f"h{index}",
                                      "y" if index == len(weights) - 1 else f"h{index + 1}", str(index))
        nodes += layer_nodes
        inits += tensors
    k, n = weights[0].shape[0], weights[-1].shape[1]
    graph = helper.make_graph(nodes, "kernel", [helper.make_tensor_value_info("x", dtype, ["M", k])],
                              [helper.make_tensor_value_info("y", dtype, ["M", n])], inits)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def kernel_row(fmt: Format, weights: list[np.ndarray], threads: int, repeats: int) -> dict[str, Any]:
    try:
        session = _session(kernel_model(fmt, weights), threads)
    except Exception as exc:  # a format this build of onnxruntime does not run on CPU
        return {"format": fmt.name, "runs": False, "reason": str(exc).splitlines()[0][:120]}
    rng = np.random.default_rng(0)
    dtype = np.float16 if fmt.kind == "fp16" else np.float32
    x = rng.normal(size=(64, weights[0].shape[0])).astype(dtype)
    try:
        alone = session.run(None, {"x": x[:1]})[0][0]
    except Exception as exc:
        return {"format": fmt.name, "runs": False, "reason": str(exc).splitlines()[0][:120]}
    with_others = []
    for m in (2, 3, 4, 7, 8, 16, 33, 64):
        rows = x[:m].copy()
        rows[1:] = rng.normal(size=(m - 1, weights[0].shape[0])).astype(dtype)
        with_others.append(session.run(None, {"x": rows})[0][0])
    times = {}
    for m in (1, 2, 4, 8, 16, 32):
        samples = []
        for _ in range(repeats):
            start = time.perf_counter()
            session.run(None, {"x": x[:m]})
            samples.append(time.perf_counter() - start)
        times[m] = statistics.median(samples)
    return {"format": fmt.name, "runs": True, "ms_1": round(times[1] * 1e3, 3),
            **{f"c{m}": round(times[m] / times[1], 2) for m in (2, 4, 8, 16, 32)},
            "row_invariant_1_vs_many": all(np.array_equal(alone, r) for r in with_others),
            "row_invariant_many": all(np.array_equal(with_others[0], r) for r in with_others)}


def graph_row(fmt: Format, target_dir: Path, threads: int, workdir: Path) -> dict[str, Any]:
    from specdec.pipeline.compile.fused.builder import build_decoder
    from specdec.pipeline.compile.fused.validate import graph_info_for
    from specdec.pipeline.compile.fused.weights import DecoderLayer, Linear, QuantWeight, read_decoder
    from specdec.pipeline.engine.bundle_info import read_bundle
    from specdec.pipeline.engine.fused import FusedRunner
    from specdec.pipeline.engine.graph import SessionOptions
    from specdec.pipeline.engine.invariance import measure
    from specdec.pipeline.engine.runner import causal, no_scratch

    info = read_bundle(target_dir)
    spec = info.graphs["target"]
    assert spec.decoder is not None, "a bundle exported with this specdec version records its decoder"
    weights = read_decoder(onnx.load(str(spec.file)), num_kv_heads=spec.num_kv_heads, head_dim=spec.head_dim,
                           dtype=spec.dtype, decoder=spec.decoder)

    def convert(layer: Linear) -> Linear:
        if fmt.kind == "w8a8" and layer.weight is not None:
            return replace(layer, weight=None, int8=int8_matmul.quantize_columns(layer.weight, fmt.bits))
        if fmt.kind != "nbits" or layer.weight is None:
            return layer
        result = round_to_nearest(layer.weight, QuantSpec(fmt.bits, fmt.block, fmt.symmetric))
        packed = pack(result.codes, result.scales, None if fmt.symmetric else result.zero_points, bits=fmt.bits,
                      block_size=fmt.block)
        return replace(layer, weight=None, quant=QuantWeight(packed.weight, packed.scales, packed.zero_points,
                                                             fmt.bits, fmt.block, fmt.level))

    def converted(layer: DecoderLayer) -> DecoderLayer:
        linears: dict[str, Any] = {name: convert(getattr(layer, name))
                                   for name in ("q", "k", "v", "o", "gate", "up", "down")}
        return replace(layer, **linears)

    layers = [converted(layer) for layer in weights.layers]
    weights = replace(weights, layers=layers, head=convert(weights.head))
    path = workdir / f"{fmt.name.replace(' ', '_')}.onnx"
    onnx.save(build_decoder(weights, max_positions=spec.max_position_embeddings), str(path),
              save_as_external_data=True, location=path.name + ".data")
    size = sum(p.stat().st_size for p in workdir.glob(path.name + "*"))
    runner = FusedRunner(graph_info_for(spec, path), path, 512, SessionOptions(threads=threads))
    invariance = measure(runner, spec.vocab_size)
    runner.forward(np.arange(100), np.arange(100), no_scratch(100), causal(100))
    runner.commit(np.arange(100))
    times: dict[int, float] = {}
    for q in (1, 2, 4, 8, 16, 32):
        samples = []
        for _ in range(5):
            start = time.perf_counter()
            runner.forward(np.arange(q), 100 + np.arange(q), no_scratch(q), causal(q))
            samples.append(time.perf_counter() - start)
            runner.commit([])
        times[q] = statistics.median(samples)
    return {"format": fmt.name, "size_mb": round(size / 1e6, 1), "plain_step_ms": round(times[1] * 1e3, 2),
            **{f"c{q}": round(times[q] / times[1], 2) for q in (2, 4, 8, 16, 32)}, **invariance.as_dict()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--layers", type=int, default=8, help="kernel stack: pairs of up/down matmuls")
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--intermediate", type=int, default=4096)
    parser.add_argument("--graphs", action="store_true", help="also build and time the whole realistic target")
    parser.add_argument("--only", default=None,
                        help="comma-separated texts: measure only the formats whose name contains one of them")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    wanted = None if args.only is None else [text.strip() for text in args.only.split(",")]
    chosen = [fmt for fmt in FORMATS if wanted is None or any(text in fmt.name for text in wanted)]
    rng = np.random.default_rng(1)
    shapes = ((args.hidden, args.intermediate), (args.intermediate, args.hidden))
    weights = [(rng.normal(size=shape) * 0.03).astype(np.float32) for _ in range(args.layers) for shape in shapes]
    print(f"kernel: {args.layers} x ({args.hidden}x{args.intermediate}, {args.intermediate}x{args.hidden}) matmuls, "
          f"{args.threads} threads")
    kernel = [kernel_row(fmt, weights, args.threads, args.repeats) for fmt in chosen]
    for row in kernel:
        print(json.dumps(row))
    graphs: list[dict[str, Any]] = []
    if args.graphs:
        from common import realistic_bundle

        bundle = realistic_bundle().path
        with tempfile.TemporaryDirectory() as scratch:
            for fmt in chosen:
                if fmt.name in GRAPH_FORMATS:
                    graphs.append(graph_row(fmt, bundle, args.threads, Path(scratch)))
                    print(json.dumps(graphs[-1]))
    if args.json:
        args.json.write_text(json.dumps({"threads": args.threads, "kernel": kernel, "graphs": graphs}, indent=1))


if __name__ == "__main__":
    main()
