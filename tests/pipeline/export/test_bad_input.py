"""Every bad input of `specdec export` fails early with a one-line error and leaves no output."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.tiny_models import make_model, make_tokenizer, save
from transformers import BertConfig, BertModel, LlamaConfig, LlamaForSequenceClassification

from specdec.pipeline.errors import CompatibilityError, InputError, UnsupportedModelError
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.export import stage as export_stage
from specdec.pipeline.records.codec import dump


def _export(target: Path | str, draft: Path | str, out: Path, **kwargs: object) -> None:
    export_bundle(ExportConfig(target=str(target), draft=str(draft), output=out, **kwargs))  # type: ignore[arg-type]


def test_missing_directory(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, draft = pair_factory("llama")
    with pytest.raises(InputError, match="does not exist"):
        _export(tmp_path / "nope", draft, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_directory_without_config(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, draft = pair_factory("llama")
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hi")
    with pytest.raises(InputError, match=r"not a Hugging Face checkpoint \(no config.json\)"):
        _export(tmp_path / "junk", draft, tmp_path / "out")


def test_config_without_weights(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, draft = pair_factory("llama")
    (tmp_path / "ckpt").mkdir()
    shutil.copy(target / "config.json", tmp_path / "ckpt" / "config.json")
    with pytest.raises(InputError, match="no weights"):
        _export(tmp_path / "ckpt", draft, tmp_path / "out")


def test_not_a_causal_lm(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, draft = pair_factory("llama")
    config = LlamaConfig(vocab_size=320, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64)
    save(LlamaForSequenceClassification(config), make_tokenizer(), tmp_path / "classifier")
    with pytest.raises(UnsupportedModelError, match="not a causal language model"):
        _export(tmp_path / "classifier", draft, tmp_path / "out")


def test_unsupported_architecture_lists_supported(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, draft = pair_factory("llama")
    config = BertConfig(vocab_size=320, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64)
    save(BertModel(config), make_tokenizer(), tmp_path / "bert")
    with pytest.raises(UnsupportedModelError, match="'bert' is not supported.*gpt2.*llama.*qwen2"):
        _export(tmp_path / "bert", draft, tmp_path / "out")


def test_tokenizer_mismatch_fails_before_export(pair_factory, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    target, _ = pair_factory("llama")
    other = save(make_model("llama", 300, 1), make_tokenizer(vocab_size=300), tmp_path / "other-draft")
    monkeypatch.setattr(export_stage, "export_onnx", lambda *a, **k: pytest.fail("export started"))
    with pytest.raises(CompatibilityError, match="tokenizers differ"):
        _export(target, other, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_padded_vocab_is_accepted_with_warning(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, _ = pair_factory("llama")
    tokenizer = make_tokenizer()
    padded = save(make_model("llama", len(tokenizer) + 16, 1), tokenizer, tmp_path / "padded-draft")
    _export(target, padded, tmp_path / "out")
    from specdec.pipeline.bundle.store import Bundle

    manifest = Bundle.load(tmp_path / "out").manifest
    assert manifest.graphs["draft"].vocab_size == len(tokenizer) + 16
    assert "padding rows" in dump(manifest.reports)["export"]["warnings"][0]


def test_vocab_smaller_than_tokenizer_is_an_error(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, _ = pair_factory("llama")
    tokenizer = make_tokenizer()
    small = save(make_model("llama", len(tokenizer) - 10, 1), tokenizer, tmp_path / "small-draft")
    with pytest.raises(CompatibilityError, match="cannot produce every token"):
        _export(target, small, tmp_path / "out")


def test_existing_output_without_force(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, draft = pair_factory("llama")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="already exists"):
        _export(target, draft, tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_draft_and_no_draft_contradict(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, draft = pair_factory("llama")
    with pytest.raises(InputError, match="contradict"):
        ExportConfig(target=str(target), draft=str(draft), no_draft=True, output=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("failure", [KeyboardInterrupt, RuntimeError])
def test_interrupt_mid_export_leaves_no_output(pair_factory, tmp_path: Path, monkeypatch, failure) -> None:  # type: ignore[no-untyped-def]
    target, draft = pair_factory("llama")
    real = export_stage.export_onnx
    calls = []

    def export_then_fail(model, geometry, path, **kwargs):  # type: ignore[no-untyped-def]
        real(model, geometry, path, **kwargs)
        calls.append(path)
        if len(calls) == 2:  # the target is on disk, the draft just written: fail now
            raise failure()

    monkeypatch.setattr(export_stage, "export_onnx", export_then_fail)
    with pytest.raises(failure):
        _export(target, draft, tmp_path / "out", validate=False)
    assert calls and calls[0].exists() is False
    assert list(tmp_path.iterdir()) == []
