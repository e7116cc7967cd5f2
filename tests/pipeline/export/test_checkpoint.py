"""GGUF files in: export through transformers' GGUF loader, greedy output equal to Hugging Face's
greedy output of the same dequantized checkpoint, and the two errors (an architecture specdec does
not export, a file that cannot be read)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType
from support.tiny_gguf import CHAT_TEMPLATE, write_llama
from transformers import AutoModelForCausalLM

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.errors import InputError, UnsupportedModelError
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.export.checkpoint import gguf_architectures
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.records.manifest import CheckpointFormat


@pytest.mark.parametrize("qtype", [GGMLQuantizationType.F32, GGMLQuantizationType.Q8_0])
def test_gguf_export_decodes_like_hugging_face_on_the_dequantized_checkpoint(
        tmp_path: Path, qtype: GGMLQuantizationType) -> None:
    folder = tmp_path / "gguf"
    folder.mkdir()
    path = write_llama(folder / "tiny.gguf", qtype)
    bundle = export_bundle(ExportConfig(target=str(path), output=tmp_path / "bundle"))

    graph = Bundle.load(bundle.path).manifest.graphs["target"]
    assert graph.source == str(path) and graph.architecture == "llama"
    assert graph.source_format is not None and graph.source_format.format is CheckpointFormat.gguf
    assert graph.source_format.file_type == {"F32": "ALL_F32", "Q8_0": "MOSTLY_Q8_0"}[qtype.name]
    assert graph.source_format.tensor_types[qtype.name] == 15 + (5 if qtype.name == "F32" else 0)
    assert "draft" not in bundle.manifest.graphs  # target only: lookup speculates
    from transformers import PreTrainedTokenizerFast

    assert PreTrainedTokenizerFast.from_pretrained(str(bundle.tokenizer_dir)).chat_template == CHAT_TEMPLATE

    reference = AutoModelForCausalLM.from_pretrained(str(folder), gguf_file=path.name, dtype=torch.float32).eval()
    engine = Engine(bundle.path)
    rng = np.random.default_rng(1)
    prompts = [rng.integers(1, engine.vocab, size=int(rng.integers(2, 12))).tolist() for _ in range(4)]
    prompts.append(prompts[0] + prompts[0])  # a repeat, so that prompt lookup drafts something it can match
    for prompt in prompts:
        with torch.no_grad():
            expected = reference.generate(torch.tensor([prompt]), max_new_tokens=20, do_sample=False,
                                          eos_token_id=0, pad_token_id=0)[0, len(prompt):].tolist()
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=20, speculative=False))
        lookup = engine.generate(prompt, DecodeConfig(max_new_tokens=20, drafter="lookup"))  # type: ignore[arg-type]
        assert plain.output_ids == lookup.output_ids == expected


def test_a_directory_holding_one_gguf_file_exports_it(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    path = write_llama(folder / "tiny.gguf")
    bundle = export_bundle(ExportConfig(target=str(folder), output=tmp_path / "bundle", validate=False))
    assert bundle.manifest.graphs["target"].source == str(path)
    assert set(bundle.manifest.lineage[0].inputs) == {"target/tiny.gguf"}


def test_a_hugging_face_export_records_its_format(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    graph = bundle_factory("llama").manifest.graphs["draft"]
    assert graph.source_format is not None and graph.source_format.format is CheckpointFormat.huggingface


def test_an_architecture_specdec_does_not_export_is_refused_before_loading(tmp_path: Path) -> None:
    path = write_llama(tmp_path / "falcon.gguf", architecture="falcon")  # transformers reads falcon GGUFs
    with pytest.raises(UnsupportedModelError) as caught:
        export_bundle(ExportConfig(target=str(path), output=tmp_path / "bundle"))
    assert caught.value.exit_code == 4
    assert caught.value.one_line() == (
        f"target GGUF file '{path}' holds a 'falcon' model, which specdec cannot export — GGUF architectures "
        f"specdec exports: {', '.join(gguf_architectures())}")
    assert not (tmp_path / "bundle").exists()


def test_every_registered_architecture_transformers_reads_from_gguf_is_listed() -> None:
    assert {"llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3", "gpt2"} <= set(gguf_architectures())


def test_a_truncated_gguf_file_is_an_input_error(tmp_path: Path) -> None:
    whole = write_llama(tmp_path / "whole.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[: len(whole) // 3])
    with pytest.raises(InputError) as caught:
        export_bundle(ExportConfig(target=str(cut), output=tmp_path / "bundle"))
    assert caught.value.exit_code == 2 and "cannot read target GGUF file" in caught.value.one_line()
