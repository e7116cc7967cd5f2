"""Calibration files (formats, bad input, the number of tokens actually used) and the cut-down probe graph."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import onnx
import pytest

from specdec.pipeline.engine.graph import Graph
from specdec.pipeline.errors import InputError
from specdec.pipeline.graphs.query import find_layers, load_weight
from specdec.pipeline.inputs import calibration


def encode(text: str) -> list[int]:
    """A byte-level stand-in for the bundle tokenizer: one token per byte."""
    return list(text.encode())


def _prepare(calib: Path | None, samples: int = 4, seq_len: int = 16, eval_file: Path | None = None):  # type: ignore[no-untyped-def]
    return calibration.prepare(calib=calib, eval_file=eval_file, samples=samples, seq_len=seq_len, prompts=4, seed=0,
                               encode=encode, vocab_size=256)


def test_text_and_jsonl(tmp_path: Path) -> None:
    text = tmp_path / "c.txt"
    text.write_text("hello world, " * 3)
    assert calibration.read_tokens(text, encode, 256) == encode("hello world, " * 3)
    jsonl = tmp_path / "c.jsonl"
    ids = list(range(1, 31))
    jsonl.write_text(f'{{"text": "ab"}}\n\n{{"input_ids": {ids}}}\n')
    assert calibration.read_tokens(jsonl, encode, 256) == [*encode("ab\n\n"), *ids]
    # JSONL is recognised by content too, not only by suffix.
    other = tmp_path / "c.data"
    other.write_text(f'{{"input_ids": {[4] * 32}}}\n')
    assert calibration.read_tokens(other, encode, 256) == [4] * 32


@pytest.mark.parametrize(("content", "match"), [
    (None, "does not exist"),
    ("", "is empty"),
    ("  \n\n", "is empty"),
    ('{"text": "a"}\n{"prompt": "b"}\n', "line 2 is not a JSON object with 'text' or 'input_ids'"),
    ('{"input_ids": [1, 999]}\n', "token ids below 256"),
    ("tiny", "has only 4 tokens \\(at least 32 needed\\)"),
])
def test_bad_calibration_files(tmp_path: Path, content: str | None, match: str) -> None:
    path = tmp_path / "calib.txt"
    if content is not None:
        path.write_text(content)
    with pytest.raises(InputError, match=match):
        calibration.read_tokens(path, encode, 256)


def test_one_reader_names_the_setting_that_gave_the_file(tmp_path: Path) -> None:
    """quantize's --calib, compile's --kv-calib and draft's --calib read through the same rule; the error
    names the setting the file came from."""
    path = tmp_path / "short.txt"
    path.write_text("x" * 31)
    for key in ("calib", "kv_calib", "eval_file"):
        with pytest.raises(InputError, match=f"{key} file '.*' has only 31 tokens"):
            calibration.read_tokens(path, encode, 256, key=key)
    path.write_text("x" * 32)
    assert len(calibration.read_tokens(path, encode, 256, key="kv_calib")) == 32


def test_enough_text_gives_the_requested_windows(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text("the quick brown fox jumps over the lazy dog. " * 40)  # 1800 tokens
    data = _prepare(path)
    assert data.windows.shape == (4, 16) and not data.warnings
    assert data.eval_windows and all(w.size == 16 for w in data.eval_windows)
    assert len(data.prompts) == 4 and all(data.prompts)
    assert data.eval_source.startswith("last 180 tokens")


def test_short_text_warns_with_the_number_used(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "c.txt"
    path.write_text("x" * 100)  # 100 tokens: 16 held out, 84 left = 5 windows of 16
    with caplog.at_level(logging.WARNING, logger="specdec"):
        data = _prepare(path, samples=8)
    assert data.windows.shape == (5, 16)
    assert "fewer than the 8 x 16 requested: using 5 sample(s) of 16 tokens (80 tokens)" in caplog.text
    assert data.warnings and "80 tokens" in data.warnings[0]
    # Shorter than one window: one shorter sample, still said.
    path.write_text("y" * 40)
    assert _prepare(path, seq_len=64).windows.shape == (1, 24)


def test_too_short_to_calibrate(tmp_path: Path) -> None:
    path = tmp_path / "c.txt"
    path.write_text("tiny")
    with pytest.raises(InputError, match="only 4 tokens"):
        _prepare(path)


def test_eval_file_replaces_the_held_out_slice(tmp_path: Path) -> None:
    calib, evaluation = tmp_path / "c.txt", tmp_path / "e.txt"
    calib.write_text("a" * 400)
    evaluation.write_text("b" * 50)
    data = _prepare(calib, eval_file=evaluation)
    assert data.eval_source == str(evaluation) and [w.size for w in data.eval_windows] == [16, 16, 16]
    assert all(int(w[0]) == ord("b") for w in data.eval_windows)


def test_built_in_text_is_shipped() -> None:
    path = calibration.default_calib_path()
    assert path.is_file() and len(path.read_text()) > 10_000
    data = _prepare(None, samples=2, seq_len=32)
    assert data.windows.shape == (2, 32) and data.source == str(path)


def test_probe_keeps_only_what_its_outputs_need(surgered_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = surgered_bundle.graph_path("target")
    spec = surgered_bundle.manifest.graphs["target"]
    full = onnx.load(str(source), load_external_data=False)
    first = find_layers(full)[0].input  # the first layer's input: embedding and first norm only
    window = np.arange(12, dtype=np.int64) % spec.vocab_size
    with calibration.probe_graph(source, "target", spec, [first], tmp_path) as probe:
        assert [o.name for o in probe.session.get_outputs()] == [first]
        kept = len(onnx.load(str(probe.info.file), load_external_data=False).graph.node)
        _, got = calibration.prefill(probe, window, (first,), with_logits=False)
    assert kept < len(full.graph.node) // 4
    head = find_layers(full)[-1]  # its input needs nearly the whole graph: the values of the graph's own run
    with calibration.probe_graph(source, "target", spec, [first, head.input], tmp_path) as probe:
        _, both = calibration.prefill(probe, window, (first, head.input), with_logits=False)
    np.testing.assert_array_equal(got[first], both[first])
    logits, _ = calibration.prefill(Graph(calibration.graph_info("target", spec, source)), window)
    weight = load_weight(full, head, source.parent)
    np.testing.assert_allclose(both[head.input].reshape(-1, weight.shape[0]) @ weight, logits, rtol=1e-4, atol=1e-4)
    assert not list(tmp_path.iterdir())  # each probe is removed afterwards
