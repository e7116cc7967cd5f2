"""records.codec: stdlib dataclasses <-> JSON data, validated like the host's pydantic models."""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from specdec.pipeline.errors import InputError
from specdec.pipeline.records.codec import OMIT_DEFAULT, RecordError, dump, from_dict, json_key, parse, to_dict
from specdec.pipeline.records.decode import DecodeConfig, VerifyMode
from specdec.pipeline.records.manifest import BucketTable, OutputFormat
from specdec.pipeline.records.quantization import LayerQuantization


class Colour(str, enum.Enum):
    red = "red"
    blue = "blue"


@dataclass
class Inner:
    q: int
    names: tuple[str, ...] = ()


@dataclass
class Outer:
    colour: Colour
    inners: list[Inner]
    by_size: dict[int, float]
    path: Path | None = None
    either: int | str = 0
    pair: tuple[float, float] = (0.0, 1.0)
    note: str | None = field(default=None, metadata=OMIT_DEFAULT)
    origin: str = field(default="a", metadata=json_key("from"))


def test_round_trip_through_json() -> None:
    record = Outer(Colour.blue, [Inner(4, ("a", "b"))], {8: 0.5}, Path("x/y"), "auto", (1.0, 2.5), origin="b")
    data = json.loads(json.dumps(to_dict(record)))
    assert data == {"colour": "blue", "inners": [{"q": 4, "names": ["a", "b"]}], "by_size": {"8": 0.5},
                    "path": "x/y", "either": "auto", "pair": [1.0, 2.5], "from": "b"}  # note: omitted at default
    assert from_dict(Outer, data) == record


@pytest.mark.parametrize("data, where, problem", [
    ({"colour": "red", "inners": [], "by_size": {}, "extra": 1}, "extra", "Extra inputs are not permitted"),
    ({"colour": "red", "inners": [{}], "by_size": {}}, "inners.0.q", "Field required"),
    ({"colour": "green", "inners": [], "by_size": {}}, "colour", "'green' is not one of: red, blue"),
    ({"colour": "red", "inners": [{"q": "4"}], "by_size": {}}, "inners.0.q", "valid int"),
    ({"colour": "red", "inners": [{"q": True}], "by_size": {}}, "inners.0.q", "valid int"),
    ({"colour": "red", "inners": [], "by_size": {"x": 1.0}}, "by_size.x", "integer"),
    ({"colour": "red", "inners": [], "by_size": {}, "pair": [1.0]}, "pair", "2 items"),
    ({"colour": "red", "inners": [], "by_size": {}, "either": 1.5}, "either", "int or str"),
    ({"colour": "red", "inners": None, "by_size": {}}, "inners", "not be null"),
])
def test_bad_data_names_the_field(data: dict[str, object], where: str, problem: str) -> None:
    with pytest.raises(RecordError) as info:
        from_dict(Outer, data)
    assert info.value.where == where and problem in info.value.problem


def test_floats_accept_ints_and_records_pass_through() -> None:
    assert parse(float, 3) == 3.0 and isinstance(parse(float, 3), float)
    inner = Inner(2)
    assert parse(Inner | None, inner) is inner


def test_a_records_own_checks_run_on_construction() -> None:
    config = from_dict(DecodeConfig, {"temperature": 0.7, "mode": "rrs", "prune": {"max_k": 4}})
    assert config.mode is VerifyMode.rrs and config.prune.max_k == 4
    with pytest.raises(InputError, match="top_p must be in"):
        from_dict(DecodeConfig, {"top_p": 0})
    assert from_dict(DecodeConfig, to_dict(config)) == config


def test_manifest_records_keep_the_schema_1_json_shape() -> None:
    table = {"max_context": 96, "prefill_chunk": 16, "format": "both", "profile": "local-cpu",
             "graphs": {"target": [{"q": 1, "file": "buckets/target_q1.onnx", "ort_file": None,
                                    "inputs": [{"name": "input_ids", "dtype": "int64", "shape": [1, 1]}],
                                    "outputs": []}]}}
    record = from_dict(BucketTable, table)
    assert record.format is OutputFormat.both and record.largest("target") == 1 and record.largest("draft") == 0
    assert record.contexts("target") == [96] and record.files() == ["buckets/target_q1.onnx"]  # one bucket: max_context
    assert dump(record) == table
    # schema 3: a context bucket per variant and the weights file the onnx variants share
    table["graphs"]["target"] = [{**table["graphs"]["target"][0], "context": c,  # type: ignore[index]
                                  "file": f"buckets/target_q1_c{c}.onnx"} for c in (32, 96)]
    table["weights"] = {"target": "buckets/target.weights"}
    record = from_dict(BucketTable, table)
    assert record.contexts("target") == [32, 96] and record.sizes("target") == [1]
    assert record.files() == ["buckets/target.weights", "buckets/target_q1_c32.onnx", "buckets/target_q1_c96.onnx"]
    assert dump(record) == table
    layer = {"bits": 4, "method": "awq", "block_size": 32, "weight_rel_error": 0.01, "alpha": 0.5, "loss_vs_rtn": 0.9}
    assert dump(from_dict(LayerQuantization, layer)) == layer
    assert dump(LayerQuantization(bits="float", reason="--keep-float")) == {"bits": "float", "reason": "--keep-float"}
