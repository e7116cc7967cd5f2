"""Device profiles: the quantize section (default weight format) is validated like every other key."""

from __future__ import annotations

from pathlib import Path

import pytest

from specdec.pipeline.errors import InputError
from specdec.pipeline.records.quantization import WeightFormat
from specdec.pipeline.settings.profiles import builtin_names, load_device


def test_every_builtin_profile_states_its_default_weight_format() -> None:
    formats = {name: load_device(name).quantize.format for name in builtin_names("device")}
    assert formats.pop("local-cpu") is WeightFormat.w8a8  # measured fastest-exact on this CPU class
    assert set(formats.values()) == {WeightFormat.nbits}  # phones: not measured there, nbits


def test_a_profile_without_the_key_gets_nbits_and_bad_values_are_errors(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("transport: local\n")
    assert load_device(path).quantize.format is WeightFormat.nbits
    for body in ("quantize: {format: int3}\n", "quantize: {bits: 4}\n"):
        path.write_text("transport: local\n" + body)
        with pytest.raises(InputError, match="quantize"):
            load_device(path)
