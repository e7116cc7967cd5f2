"""export with a feature draft (and a model draft with a reduced vocabulary): the graph contract,
the manifest's `draft` record, validation against PyTorch, bad input."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.errors import CompatibilityError, InputError
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.records.draft_spec import DraftKind
from specdec.pipeline.records.manifest import read_manifest


def _io(specs: list) -> list[tuple[str, str, list[int | str]]]:  # type: ignore[type-arg]
    return [(t.name, t.dtype, t.shape) for t in specs if not t.name.startswith(("past_key_values", "present"))]


def test_the_feature_bundle_follows_the_contract(feature_factory) -> None:  # type: ignore[no-untyped-def]
    bundle = feature_factory(vocab_step=3)
    manifest = bundle.manifest
    target, draft = manifest.graphs["target"], manifest.graphs["draft"]
    assert [name for name, _, _ in _io(target.outputs)] == ["logits", "hidden_states"]
    assert _io(target.outputs)[1][1:] == ("float32", [1, "sequence_length", 64])
    assert _io(draft.inputs) == [("input_ids", "int64", [1, "sequence_length"]),
                                 ("hidden_states", "float32", [1, "sequence_length", 64]),
                                 ("position_ids", "int64", [1, "sequence_length"]),
                                 ("attention_mask", "float32", [1, 1, "sequence_length", "total_sequence_length"])]
    assert _io(draft.outputs) == [("logits", "float32", [1, "sequence_length", 107]),
                                  ("hidden_out", "float32", [1, "sequence_length", 64])]
    assert draft.architecture == "specdec_feature_draft" and draft.vocab_size == 107 and draft.num_layers == 1
    assert draft.decoder is not None and draft.decoder.fused
    record = manifest.draft
    assert record is not None and record.kind is DraftKind.feature
    assert (record.feature_layer, record.hidden_size) == (1, 64)
    assert record.vocab is not None and record.vocab.size == 107 and record.vocab.file in manifest.files
    assert np.array_equal(np.load(bundle.path / record.vocab.file), np.arange(0, 320, 3))
    export = manifest.reports.export
    assert export is not None and isinstance(export.validation, dict)
    checks = {(c["case"], c["output"]) for role in ("target", "draft") for c in export.validation[role]["checks"]}
    assert {("tree", "hidden_states"), ("decode", "hidden_states"), ("tree", "hidden_out")} <= checks
    assert export.shared is not None and export.shared.tensors >= 1  # the embedding, stored once


def test_a_full_vocabulary_feature_draft_writes_no_vocabulary_file(feature_factory) -> None:  # type: ignore[no-untyped-def]
    manifest = feature_factory().manifest
    assert manifest.draft is not None and manifest.draft.vocab is None
    assert "draft_vocab.npy" not in manifest.files


def test_bundles_without_a_draft_record_read_as_model_drafts(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Schema 5 (before the record) and later bundles of model drafts alike."""
    old = tmp_path / "old"
    shutil.copytree(bundle_factory("llama").path, old)
    raw = json.loads((old / "manifest.json").read_text())
    assert "draft" not in raw
    raw["schema_version"] = 5
    (old / "manifest.json").write_text(json.dumps(raw))
    manifest = read_manifest(old)
    assert manifest.draft is None and manifest.draft_spec.kind is DraftKind.model
    engine = Engine(old)
    assert engine.drafter is not None and not engine.drafter.needs_features and engine.drafter.vocab_map is None


def test_a_feature_draft_of_another_target_is_refused_before_loading(pair_factory, feature_factory,  # type: ignore[no-untyped-def]
                                                                      tmp_path: Path) -> None:
    other_target, _ = pair_factory("llama", hidden=32)
    draft = Path(feature_factory().manifest.graphs["draft"].source)
    with pytest.raises(CompatibilityError, match="hidden_size 64, this target has 32"):
        export_bundle(ExportConfig(target=str(other_target), draft=str(draft), output=tmp_path / "b"))
    assert not (tmp_path / "b").exists()


def test_draft_vocab_is_for_model_drafts(pair_factory, feature_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, _ = pair_factory("llama")
    draft = Path(feature_factory().manifest.graphs["draft"].source)
    ids = tmp_path / "ids.txt"
    ids.write_text("0 1 2")
    with pytest.raises(InputError, match="carries its own vocabulary"):
        export_bundle(ExportConfig(target=str(target), draft=str(draft), output=tmp_path / "b", draft_vocab=ids))


@pytest.mark.parametrize("text, message", [
    ("3 2 1", "not strictly increasing"),
    ("0 1 999", "outside the target's 0..319"),
    ("zero", "holds no list of token ids"),
    ("", "is empty"),
])
def test_bad_draft_vocab_files(pair_factory, tmp_path: Path, text: str, message: str) -> None:  # type: ignore[no-untyped-def]
    target, draft = pair_factory("llama")
    ids = tmp_path / "ids.txt"
    ids.write_text(text)
    with pytest.raises(InputError, match=message):
        export_bundle(ExportConfig(target=str(target), draft=str(draft), output=tmp_path / "b", draft_vocab=ids))
    assert not (tmp_path / "b").exists()


def test_a_model_draft_with_a_reduced_vocabulary(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, draft = pair_factory("llama")
    vocab = np.arange(0, 320, 2)
    np.save(tmp_path / "vocab.npy", vocab)
    bundle = export_bundle(ExportConfig(target=str(target), draft=str(draft), output=tmp_path / "b",
                                        draft_vocab=tmp_path / "vocab.npy"))
    manifest = Bundle.load(bundle.path).manifest
    assert manifest.draft is not None and manifest.draft.kind is DraftKind.model
    assert manifest.draft.vocab is not None and manifest.draft.vocab.size == 160
    assert manifest.graphs["draft"].vocab_size == 160 and manifest.graphs["target"].vocab_size == 320
    assert all(o.name != "hidden_states" for o in manifest.graphs["target"].outputs)
    engine = Engine(bundle.path)
    accepted = 0
    for prompt in ([5, 6, 7], [11, 40, 2, 9]):
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=20))
        assert spec.output_ids == engine.generate(prompt, DecodeConfig(max_new_tokens=20, speculative=False)).output_ids
        accepted += sum(r.accepted_len - 1 for r in spec.speculative_rounds)
    assert accepted > 0  # the layer-dropped draft still agrees where the target's token is in the vocabulary
