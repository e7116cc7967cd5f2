"""Batch invariance: what makes speculation on int8-compute (accuracy level 4) bundles exact.

The exact layout relies on one property of onnxruntime's kernels, checked here on this machine:
with at least two rows per call, a row's output is bit-identical whatever the number and content
of the other rows. Then greedy speculative output equals plain greedy output bit for bit, in the
exact layout, on quantized bundles of three architectures.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.invariance import measure
from specdec.pipeline.engine.runner import DynamicRunner
from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle
from specdec.pipeline.quantize.algorithms.base import QuantSpec, round_to_nearest
from specdec.pipeline.quantize.config import Method
from specdec.pipeline.quantize.packing import pack
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig


def _matmul_nbits(k: int, n: int, bits: int, level: int) -> ort.InferenceSession:
    weight = (np.random.default_rng(0).normal(size=(k, n)) * 0.05).astype(np.float32)
    result = round_to_nearest(weight, QuantSpec(bits, 32, True))
    packed = pack(result.codes, result.scales, None, bits=bits, block_size=32)
    node = helper.make_node("MatMulNBits", ["x", "w", "s"], ["y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=32, accuracy_level=level)
    weights = [numpy_helper.from_array(packed.weight, "w"), numpy_helper.from_array(packed.scales, "s")]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])], weights)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("bits,level", [(4, 4), (4, 0), (8, 4)])
def test_rows_are_invariant_with_two_or_more_rows(bits: int, level: int) -> None:
    session = _matmul_nbits(256, 512, bits, level)
    rng = np.random.default_rng(1)
    row = rng.normal(size=(1, 256)).astype(np.float32)
    reference = None
    for m in range(2, 65, 3):
        x = np.concatenate([row, rng.normal(size=(m - 1, 256)).astype(np.float32)])
        out = session.run(None, {"x": x})[0][0]
        reference = out if reference is None else reference
        assert np.array_equal(out, reference), f"row 0 changed with {m} rows"


@pytest.fixture(scope="module")
def int8_bundles(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    root = tmp_path_factory.mktemp("int8")
    return {arch: quantize_bundle(QuantizeConfig.from_text(output=root / arch, method=Method.rtn, accuracy_level=4,
                                                 calib_samples=8, eval_prompts=2, eval_new_tokens=8),
                                  bundle_factory(arch))
            for arch in ("llama", "qwen2", "mistral")}


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_int8_compute_bundles_are_exact_in_the_exact_layout(int8_bundles, arch: str) -> None:  # type: ignore[no-untyped-def]
    bundle = int8_bundles[arch]
    report = dump(bundle.manifest.reports)["quantize"]["speculative"]
    assert report["layout"] == "exact" and report["exact"] and report["invariance"]["chain"]
    engine = Engine(bundle.path)
    assert measure(DynamicRunner(engine.info.graphs["target"]), engine.vocab).chain
    rng = np.random.default_rng(2)
    for _ in range(4):
        prompt = rng.integers(1, engine.vocab, size=int(rng.integers(1, 12))).tolist()
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=20, speculative=False, exact_layout=True))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=20, exact_layout=True, tree_budget=6, depth=5))
        assert spec.output_ids == plain.output_ids
