"""The attention pad row of fused w8a8 targets (compile/fused/builder.py, runtime/fused_kv.PAD_ROW_KEY).

onnxruntime's GroupQueryAttention multiplies one query row's probabilities by the values in a
GEMV whose sums round differently from the GEMM of two or more rows. The pad row makes a call of
one row compute its attention as the first row of a two-row call, bit for bit; without it the
same comparison differs (checked here too, so the test can tell the two apart).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from support.quantized import SMALL

from specdec.pipeline.compile.fused.builder import build_decoder, row_exact_linears
from specdec.pipeline.compile.fused.weights import DecoderWeights, read_decoder
from specdec.pipeline.engine.fused_kv import PAD_ROW_KEY, SINGLE_ROW_EXACT_KEY
from specdec.pipeline.graphs.files import load_graph
from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle


@pytest.fixture(scope="module")
def w8a8_weights(bundle_factory, tmp_path_factory) -> DecoderWeights:  # type: ignore[no-untyped-def]
    bundle = quantize_bundle(QuantizeConfig.from_text(output=tmp_path_factory.mktemp("w8a8") / "q", format="w8a8",
                                                      **SMALL),
                             bundle_factory("llama"))
    spec = bundle.manifest.graphs["target"]
    return read_decoder(load_graph(bundle.path / spec.file), num_kv_heads=spec.num_kv_heads, head_dim=spec.head_dim,
                        dtype=spec.dtype, decoder=spec.decoder)


def _session(weights: DecoderWeights, pad_row: bool, tmp_path: Path) -> tuple[ort.InferenceSession, str]:
    model = build_decoder(weights, max_positions=128, attention_pad_row=pad_row)
    attention = next(node for node in model.graph.node if node.op_type == "GroupQueryAttention")
    # the attention's rows as the next op reads them (after the pad row is dropped)
    output = next((node.output[0] for node in model.graph.node if node.input and node.input[0] == attention.output[0]
                   and node.op_type == "Slice"), attention.output[0])
    model.graph.output.append(onnx.helper.make_tensor_value_info(output, onnx.TensorProto.FLOAT, None))
    path = tmp_path / f"pad{int(pad_row)}.onnx"
    onnx.save(model, str(path))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]), output


def _attention_row(session: ort.InferenceSession, output: str, weights: DecoderWeights, rows: int, past: int,
                   seed: int) -> np.ndarray:
    """Attention of token 7 at position `past` over a random past, in a call of `rows` rows (pads after it)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {
        "input_ids": np.array([[7] + [0] * (rows - 1)], np.int64),
        "position_ids": (past + np.arange(rows))[None].astype(np.int64),
        "attention_bias": np.where(np.arange(past + rows)[None] > past + np.arange(rows)[:, None],
                                   np.float32(-3e38), np.float32(0))[None, None].astype(np.float32),
        "seqlens_k": np.array([past + rows - 1], np.int32), "total_sequence_length": np.array(past + rows, np.int32)}
    for i in range(len(weights.layers)):
        for kind in ("key", "value"):
            feeds[f"past_key_values.{i}.{kind}"] = rng.normal(
                size=(1, weights.num_kv_heads, past, weights.head_dim)).astype(np.float32)
    row: np.ndarray = session.run([output], feeds)[0][0, 0]
    return row


def test_w8a8_target_gets_the_pad_row_and_says_so(w8a8_weights: DecoderWeights, tmp_path: Path) -> None:
    assert row_exact_linears(w8a8_weights)
    model = build_decoder(w8a8_weights, max_positions=128, attention_pad_row=True)
    props = {p.key: p.value for p in model.metadata_props}
    assert props == {PAD_ROW_KEY: "1", SINGLE_ROW_EXACT_KEY: "1"}
    ops = [node.op_type for node in model.graph.node]
    layers = len(w8a8_weights.layers)
    assert ops.count("Slice") == layers and ops.count("Pad") == layers + 2  # qkv per layer; bias, positions once
    assert not build_decoder(w8a8_weights, max_positions=128).metadata_props


@pytest.mark.parametrize("past", [5, 24, 61])
def test_a_single_row_attends_as_the_first_of_two(w8a8_weights: DecoderWeights, tmp_path: Path, past: int) -> None:
    padded, output = _session(w8a8_weights, True, tmp_path)
    alone = _attention_row(padded, output, w8a8_weights, 1, past, seed=past)
    assert np.array_equal(alone, _attention_row(padded, output, w8a8_weights, 2, past, seed=past))
    assert np.array_equal(alone, _attention_row(padded, output, w8a8_weights, 5, past, seed=past))
    plain, output = _session(w8a8_weights, False, tmp_path)  # the GEMV path: last bits differ
    assert not np.array_equal(_attention_row(plain, output, w8a8_weights, 1, past, seed=past),
                              _attention_row(plain, output, w8a8_weights, 2, past, seed=past))
