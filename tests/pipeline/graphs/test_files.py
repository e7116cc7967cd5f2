"""graph_io: the file helpers every stage shares."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from specdec.pipeline.graphs import files as graph_io
from specdec.pipeline.records.manifest import TensorSpec


def _model() -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["q", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["q", 64])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_sha256_and_graph_files(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 3_000_000)
    assert graph_io.sha256_file(tmp_path / "f") == hashlib.sha256(b"x" * 3_000_000).hexdigest()
    files = ["tokenizer/tokenizer.json", "target.onnx.data", "target.onnx", "draft.onnx", "buckets/target_q4.onnx"]
    assert graph_io.graph_files(files, ["target.onnx", "draft.onnx"]) == ["draft.onnx", "target.onnx",
                                                                          "target.onnx.data"]


def test_save_with_external_data_and_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_io, "EXTERNAL_DATA_BYTES", 1024)  # this small graph counts as large
    model = _model()
    before = model.SerializeToString()
    graph_io.save_graph(model, tmp_path / "m.onnx")
    assert model.SerializeToString() == before  # the caller's model is not changed (nothing moved out)
    assert (tmp_path / "m.onnx.data").stat().st_size == 4096 * 4
    assert (tmp_path / "m.onnx").stat().st_size < 1024  # the .onnx is the skeleton only
    assert graph_io.external_files(tmp_path / "m.onnx") == ["m.onnx.data"]
    loaded = graph_io.load_graph(tmp_path / "m.onnx")
    assert np.array_equal(numpy_helper.to_array(loaded.graph.initializer[0]), np.arange(4096).reshape(64, 64))
    onnx.checker.check_model(str(tmp_path / "m.onnx"), full_check=True)
    inputs, outputs = graph_io.describe_io(tmp_path / "m.onnx")
    assert inputs == [TensorSpec("x", "float32", ["q", 64])] and outputs == [TensorSpec("y", "float32", ["q", 64])]
