"""`make_draft` end to end on a tiny target: a loadable checkpoint sharing the target's tensors, a
report, resume equal to an uninterrupted run, and a pair `specdec export` accepts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from specdec.pipeline.draft import DraftConfig, make_draft
from specdec.pipeline.draft.stage import state_path
from specdec.pipeline.errors import InputError
from specdec.pipeline.records.codec import dump

# one thread: the same numbers whatever the load, and far faster on a busy machine; a checkpoint every step
SMALL = {"samples": 16, "seq": 32, "batch": 4, "threads": 1, "checkpoint_minutes": 1e-9}


@pytest.fixture(scope="module")
def made(target: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("made") / "draft"
    make_draft(DraftConfig(target=str(target), output=out, layers=2, heads=1, steps=6, **SMALL))  # type: ignore[arg-type]
    return out


def test_draft_is_a_checkpoint_sharing_the_target_tensors(target: Path, made: Path) -> None:
    model = AutoModelForCausalLM.from_pretrained(str(made))
    assert (model.config.num_hidden_layers, model.config.num_key_value_heads) == (2, 1)
    ours, theirs = load_file(str(made / "model.safetensors")), load_file(str(target / "model.safetensors"))
    for name in ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        assert torch.equal(ours[name], theirs[name]), name
    report = json.loads((made / "draft_report.json").read_text())
    assert report["schema"] == "specdec.draft/1" and report["steps"] == 6
    sizes = report["sizes"]
    assert sizes["shared_bytes"] == sum(theirs[n].numel() * 4 for n in ("model.embed_tokens.weight",
                                                                         "model.norm.weight", "lm_head.weight"))
    assert 0 < sizes["own_bytes"] < sizes["target_bytes"]
    assert 0 <= report["quality"]["heldout_agreement"] <= 1 and report["quality"]["expected_accepted"] >= 0
    assert set(report["files"]) == {p.name for p in made.iterdir()}
    assert not state_path(made).exists()  # the checkpoint goes once the draft is written


class _Interrupt:
    """A Progress whose distillation task raises KeyboardInterrupt after `at` steps."""

    def __init__(self, at: int) -> None:
        self.at = at

    @contextmanager
    def task(self, description: str, total: int | None = None) -> Iterator[Any]:
        at = self.at if description.startswith("distilling") else None

        class Task:
            done = 0

            def advance(self, steps: int = 1) -> None:
                self.done += steps
                if at is not None and self.done > at:
                    raise KeyboardInterrupt

            def describe(self, description: str) -> None:
                return None

        yield Task()


def test_resume_gives_the_weights_of_an_uninterrupted_run(target: Path, tmp_path: Path) -> None:
    whole = make_draft(DraftConfig(target=str(target), output=tmp_path / "whole", layers=2, steps=8, **SMALL))  # type: ignore[arg-type]
    config = DraftConfig(target=str(target), output=tmp_path / "parts", layers=2, steps=8, **SMALL)  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        make_draft(config, progress=_Interrupt(at=3))
    assert state_path(config.output).is_file() and not config.output.exists()
    resumed = make_draft(DraftConfig(**{**config.__dict__, "resume": True}))
    ours, theirs = load_file(str(resumed.path / "model.safetensors")), load_file(str(whole.path / "model.safetensors"))
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert resumed.report["steps"] == 8


def test_resume_refuses_a_checkpoint_of_other_options(target: Path, tmp_path: Path) -> None:
    config = DraftConfig(target=str(target), output=tmp_path / "d", layers=2, steps=8, **SMALL)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="nothing to resume"):
        make_draft(DraftConfig(**{**config.__dict__, "resume": True}))
    with pytest.raises(KeyboardInterrupt):
        make_draft(config, progress=_Interrupt(at=1))
    with pytest.raises(InputError, match="another target or other options"):
        make_draft(DraftConfig(**{**config.__dict__, "resume": True, "lr": 0.5}))


@pytest.mark.slow
def test_export_accepts_the_draft_and_stores_shared_tensors_once(target: Path, made: Path, tmp_path: Path) -> None:
    import onnx
    import onnxruntime as ort

    from specdec.pipeline.bundle.store import Bundle
    from specdec.pipeline.export import ExportConfig, export_bundle
    from specdec.pipeline.graphs.files import SHARED_DATA

    bundle = export_bundle(ExportConfig(target=str(target), draft=str(made), output=tmp_path / "bundle"))
    assert bundle.manifest.graphs["draft"].num_layers == 2 and bundle.manifest.graphs["draft"].num_kv_heads == 1
    shared = dump(bundle.manifest.reports)["export"]["shared"]
    # embedding and head (the final norm, 256 bytes at this width, stays inline like every small tensor)
    assert shared["file"] == SHARED_DATA and shared["tensors"] == 2
    assert shared["saved_bytes"] == shared["bytes"] >= 2 * 320 * 64 * 4
    for role in ("target", "draft"):
        model = onnx.load(str(bundle.path / f"{role}.onnx"), load_external_data=False)
        external = [t.name for t in model.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL]
        assert len(external) == shared["tensors"], role
        ort.InferenceSession(str(bundle.path / f"{role}.onnx"))  # resolves shared.data next to the graph
    assert SHARED_DATA in Bundle.load(bundle.path).runner_files()  # pushed to the device with the graphs
    unshared = export_bundle(ExportConfig(target=str(target), draft=str(made), output=tmp_path / "unshared",
                                          validate=False, share_tensors=False))
    assert "shared" not in dump(unshared.manifest.reports)["export"] and not (unshared.path / SHARED_DATA).exists()
    assert unshared.manifest.lineage[-1].config["share_tensors"] is False
    from typer.testing import CliRunner

    from specdec.cli.app import app

    shown = CliRunner().invoke(app, ["inspect", str(bundle.path)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "shared by target and draft" in shown.output and "stored once" in shown.output
    # surgery edits the structure only, so the graphs still read the one shared file; quantize writes
    # them with their weights inline, and the shared file, referenced by nothing, is not carried on
    from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle
    from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

    surgered = surgery_bundle(SurgeryConfig(output=tmp_path / "surgered"), Bundle.load(bundle.path))
    assert SHARED_DATA in surgered.manifest.files
    quantized = quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "quantized", format="nbits", method="rtn",
                                                         calib_samples=2,
                                               calib_seq_len=16, eval_prompts=1, eval_new_tokens=4), surgered)
    assert SHARED_DATA not in quantized.manifest.files and not (quantized.path / SHARED_DATA).exists()
    shown = CliRunner().invoke(app, ["inspect", str(quantized.path)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0 and "each with its own copy" in shown.output


def test_a_draft_from_a_gguf_target_is_a_plain_float_checkpoint(tmp_path: Path) -> None:
    """A GGUF target loads through transformers' GGUF loader; the draft saved from it carries no GGUF record."""
    from gguf import GGMLQuantizationType
    from support.tiny_gguf import write_llama

    path = write_llama(tmp_path / "target.gguf", GGMLQuantizationType.Q8_0)
    out = tmp_path / "draft"
    result = make_draft(DraftConfig(target=str(path), output=out, layers=1, steps=2, **SMALL))  # type: ignore[arg-type]
    assert "quantization_config" not in (out / "config.json").read_text()
    assert result.report["target"] == str(path)
    target = AutoModelForCausalLM.from_pretrained(str(tmp_path), gguf_file=path.name, dtype=torch.float32)
    draft = AutoModelForCausalLM.from_pretrained(str(out), dtype=torch.float32)
    assert draft.config.num_hidden_layers == 1
    assert torch.equal(draft.model.embed_tokens.weight, target.model.embed_tokens.weight)  # shared, bit for bit
    assert (out / "tokenizer.json").is_file()


def test_user_text_is_read_by_the_calibration_reader(target: Path, tmp_path: Path) -> None:
    """--calib goes through inputs/calibration.read_tokens: the same formats and minimum as quantize's."""
    short = tmp_path / "short.txt"
    short.write_text("a few words")
    with pytest.raises(InputError, match=r"calib file '.*short.txt' has only \d+ tokens \(at least 32 needed\)"):
        make_draft(DraftConfig(target=str(target), output=tmp_path / "d", layers=2, steps=1, calib=short, **SMALL))  # type: ignore[arg-type]
    assert not (tmp_path / "d").exists()
