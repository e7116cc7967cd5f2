"""tensor_sharing: identical tensors of a pair stored once, read one tensor at a time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.export.tensor_sharing import share_identical
from specdec.pipeline.graphs import files as graph_io
from specdec.pipeline.graphs.files import SHARED_DATA, external_files


def _model(own: np.ndarray, common: np.ndarray) -> onnx.ModelProto:
    """y = (x @ own) @ common, with a small bias that stays inline."""
    weights = [numpy_helper.from_array(own, "own"), numpy_helper.from_array(common, "common"),
               numpy_helper.from_array(np.ones(4, dtype=np.float32), "small")]
    nodes = [helper.make_node("MatMul", ["x", "own"], ["h"]), helper.make_node("MatMul", ["h", "common"], ["m"]),
             helper.make_node("Slice", ["m", "zero", "four", "one"], ["s"]),
             helper.make_node("Add", ["s", "small"], ["y"])]
    index = [numpy_helper.from_array(np.array([v], dtype=np.int64), n) for n, v in (("zero", 0), ("four", 4),
                                                                                     ("one", 1))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [*weights, *index])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _run(path: Path, x: np.ndarray) -> np.ndarray:
    out: np.ndarray = ort.InferenceSession(str(path)).run(None, {"x": x})[0]
    return out


@pytest.mark.parametrize("external", [False, True])
def test_common_tensors_move_to_shared_data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, external: bool) -> None:
    if external:
        monkeypatch.setattr(graph_io, "EXTERNAL_DATA_BYTES", 1024)  # both graphs keep weights in side files
    rng = np.random.default_rng(0)
    common = rng.standard_normal((64, 64)).astype(np.float32)
    for name in ("a.onnx", "b.onnx"):
        graph_io.save_graph(_model(rng.standard_normal((64, 64)).astype(np.float32), common), tmp_path / name)
    assert (tmp_path / "a.onnx.data").is_file() == external
    x = rng.standard_normal((1, 64)).astype(np.float32)
    before = {name: _run(tmp_path / name, x) for name in ("a.onnx", "b.onnx")}

    sharing = share_identical(tmp_path, ["a.onnx", "b.onnx"])

    assert sharing.file == SHARED_DATA and sharing.tensors == 1 and sharing.saved_bytes == sharing.bytes == 64 * 64 * 4
    assert (tmp_path / SHARED_DATA).stat().st_size == 64 * 64 * 4
    for name in ("a.onnx", "b.onnx"):
        np.testing.assert_array_equal(_run(tmp_path / name, x), before[name])
        own = tmp_path / f"{name}.data"
        assert external_files(tmp_path / name) == ([f"{name}.data", SHARED_DATA] if external else [SHARED_DATA])
        if external:  # rewritten without the tensor that moved: the own weight only
            assert own.stat().st_size == 64 * 64 * 4
    assert not list(tmp_path.glob("*.sharing"))


def test_nothing_common_leaves_the_graphs_alone(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for name in ("a.onnx", "b.onnx"):
        graph_io.save_graph(_model(*(rng.standard_normal((64, 64)).astype(np.float32) for _ in range(2))),
                            tmp_path / name)
    written = {name: (tmp_path / name).read_bytes() for name in ("a.onnx", "b.onnx")}
    assert share_identical(tmp_path, ["a.onnx", "b.onnx"]).file is None
    assert {name: (tmp_path / name).read_bytes() for name in ("a.onnx", "b.onnx")} == written
    assert not (tmp_path / SHARED_DATA).exists()
