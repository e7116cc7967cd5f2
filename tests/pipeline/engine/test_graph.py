"""`make_session`: thread choice for small graphs (engine/graph.py)."""

from __future__ import annotations

from pathlib import Path

import onnx
import onnx.parser

from specdec.pipeline.engine.graph import SessionOptions, make_session

_TINY = """
<ir_version: 8, opset_import: ["" : 17]>
tiny (float[2] x) => (float[2] y) {
    y = Relu(x)
}
"""


def _threads(session: object) -> int:
    return int(session.get_session_options().intra_op_num_threads)  # type: ignore[attr-defined]


def test_auto_threads_single_for_small_generic_graphs_all_cores_for_fused(tmp_path: Path) -> None:
    path = tmp_path / "tiny.onnx"
    onnx.save(onnx.parser.parse_model(_TINY), str(path))
    assert _threads(make_session(path, SessionOptions())) == 1  # small generic/static graph
    assert _threads(make_session(path, SessionOptions(), threads_by_size=False)) == 0  # onnxruntime's default
    assert _threads(make_session(path, SessionOptions(threads=3), threads_by_size=False)) == 3  # explicit wins
    assert _threads(make_session(path, SessionOptions(threads=2))) == 2
