"""One DecodeOptions, embedded in every config that decodes: its fields are the resolver's settings, a
misspelt one is an error wherever it comes from, and the CLI and a pipeline section fill it alike."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from specdec.cli.options import config_from
from specdec.pipeline.bench.stage import BenchConfig
from specdec.pipeline.chain.stage import load_config
from specdec.pipeline.errors import InputError
from specdec.pipeline.generate.stage import GenerateConfig
from specdec.pipeline.records.codec import FLATTEN, RecordError, from_dict, record_keys, to_dict
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind, PruneParams
from specdec.pipeline.settings.decode_options import SETTING_KEYS, DecodeOptions
from specdec.pipeline.tune import TuneConfig


def test_the_fields_are_the_decode_settings() -> None:
    names = [f.name for f in dataclasses.fields(DecodeOptions)]
    expected = [f.name for f in dataclasses.fields(DecodeConfig) if f.name != "prune"]
    assert sorted(names) == sorted(SETTING_KEYS) == sorted(expected + [f.name for f in dataclasses.fields(PruneParams)])
    assert all(getattr(DecodeOptions(), name) is None for name in names)  # nothing set: every layer below decides


@pytest.mark.parametrize("config", [BenchConfig, GenerateConfig, TuneConfig])
def test_every_decoding_config_embeds_it_flat(config: type) -> None:
    decode = [f for f in dataclasses.fields(config) if f.name == "decode"]
    assert decode and decode[0].metadata == FLATTEN
    assert not {f.name for f in dataclasses.fields(config)} & set(SETTING_KEYS)  # no hand-copied field left
    assert set(SETTING_KEYS) <= record_keys(config)


def test_a_misspelt_setting_is_an_error() -> None:
    with pytest.raises(TypeError, match="tree_budjet"):
        DecodeOptions(tree_budjet=3)  # type: ignore[call-arg]
    with pytest.raises(RecordError, match="'bench.tree_budjet': Extra inputs are not permitted"):
        from_dict(BenchConfig, {"output": "x", "tree_budjet": 3}, "bench")


def test_a_misspelt_setting_in_a_pipeline_section_names_its_key(tmp_path: Path) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text("bench: {limit: 2, tree_budjet: 3}\n")
    with pytest.raises(InputError, match="'bench.tree_budjet': Extra inputs are not permitted"):
        load_config(path)


def test_flags_and_a_pipeline_section_give_the_same_config(tmp_path: Path) -> None:
    """The CLI's parameters and the YAML's keys are the same flat names."""
    settings = {"max_new_tokens": 12, "tree_budget": 8, "drafter": DrafterKind.lookup, "beta_base": 0.4}
    from_flags = config_from(BenchConfig, {"output": tmp_path / "o", "limit": 2, **settings})
    section = from_dict(BenchConfig, {"output": str(tmp_path / "o"), "limit": 2, **settings,
                                      "drafter": "lookup"}, "bench")
    assert from_flags == section
    assert from_flags.decode == DecodeOptions(**settings)  # type: ignore[arg-type]
    assert to_dict(section)["tree_budget"] == 8 and "decode" not in to_dict(section)
    assert from_flags.decode.given() == settings
