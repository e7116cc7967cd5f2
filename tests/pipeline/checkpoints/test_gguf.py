"""What a GGUF file says about itself (GGUFReader), and the one-line error for a file that cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGMLQuantizationType
from support.tiny_gguf import write_llama

from specdec.pipeline.checkpoints.gguf import forget_quantization, read_facts
from specdec.pipeline.errors import InputError


def test_facts_name_the_architecture_file_type_and_tensor_types(tmp_path: Path) -> None:
    plain = read_facts(write_llama(tmp_path / "f32.gguf"), "target")
    assert (plain.architecture, plain.file_type, plain.tensor_types) == ("llama", "ALL_F32", {"F32": 20})
    quantized = read_facts(write_llama(tmp_path / "q8.gguf", GGMLQuantizationType.Q8_0), "target")
    # the 2-D weights in Q8_0 (embedding + 7 a layer), the 5 norm vectors in F32, as llama.cpp stores them
    assert (quantized.file_type, quantized.tensor_types) == ("MOSTLY_Q8_0", {"Q8_0": 15, "F32": 5})


@pytest.mark.parametrize("keep", [0.5, 0.05, 0.0])
def test_a_truncated_file_is_one_input_error(tmp_path: Path, keep: float) -> None:
    whole = write_llama(tmp_path / "whole.gguf", GGMLQuantizationType.Q8_0).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(whole[:int(len(whole) * keep)])
    with pytest.raises(InputError, match="cannot read target GGUF file .*cut.gguf.* truncated or not a GGUF file"):
        read_facts(cut, "target")


def test_a_file_that_is_not_gguf_is_one_input_error(tmp_path: Path) -> None:
    other = tmp_path / "model.gguf"
    other.write_bytes(b"PK\x03\x04" + bytes(4096))
    with pytest.raises(InputError, match="cannot read draft GGUF file"):
        read_facts(other, "draft")


def test_forget_quantization_leaves_a_plain_float_model(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    path = write_llama(tmp_path / "q8.gguf", GGMLQuantizationType.Q8_0)
    model = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32)
    assert model.config.quantization_config is not None  # what transformers leaves on a GGUF model
    forget_quantization(model)
    model.save_pretrained(str(tmp_path / "saved"))  # refused while the GGUF quantizer is attached
    assert "quantization_config" not in (tmp_path / "saved" / "config.json").read_text()
    reloaded = AutoModelForCausalLM.from_pretrained(str(tmp_path / "saved"), dtype=torch.float32)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, reloaded.state_dict()[name]), name
