"""`specdec pipeline`: every stage from one YAML, unchanged stages reused, bad configs refused."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.chain.stage import demo_config_file, load_config, run_pipeline
from specdec.pipeline.errors import InputError

runner = CliRunner()


def _config_file(tmp_path: Path, target: Path, draft: Path) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"""
target: {target}
draft: {draft}
output: out
quantize: {{method: rtn, draft_method: rtn, calib_samples: 4, calib_seq_len: 32}}
compile: {{buckets: [4, 8, 16], draft_buckets: [1, 4], max_context: 96, prefill_chunk: 16, format: onnx}}
bench: {{limit: 2, max_new_tokens: 12, asserts: [lossless], cooldown: false}}
""")
    return path


@pytest.mark.slow
def test_pipeline_runs_every_stage_and_reuses_them(pair_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    target, draft = pair_factory("llama")
    config = load_config(_config_file(tmp_path, target, draft))
    seen: list[tuple[str, bool]] = []
    bundle, outcome = run_pipeline(config, report=lambda name, b, reused: seen.append((name, reused)))
    assert seen == [(s, False) for s in ("export", "surgery", "quantize", "compile")]
    assert bundle.stages() == ["export", "surgery", "quantize", "compile"]
    assert outcome is not None and not outcome.failed_gates
    results = json.loads((tmp_path / "out" / "bench" / "results.json").read_text())
    assert results["bundle"]["compiled"] and results["bundle"]["quantized"] and results["lossless"]["equal"]
    seen.clear()
    result = runner.invoke(app, ["pipeline", str(tmp_path / "pipeline.yaml"), "--no-bench"])
    assert result.exit_code == 0, result.output
    assert result.output.count("reused") == 4  # nothing changed: nothing rebuilt


def test_bad_pipeline_configs(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("target: demo\nquantise: {method: awq}\n")
    with pytest.raises(InputError, match="'quantise': Extra inputs are not permitted"):
        load_config(bad)
    bad.write_text("quantize: {method: int3}\n")
    with pytest.raises(InputError, match="quantize.method"):
        load_config(bad)
    with pytest.raises(InputError, match="does not exist"):
        load_config(tmp_path / "missing.yaml")
    result = runner.invoke(app, ["pipeline", str(bad)])
    assert result.exit_code == 2 and "quantize.method" in result.output


def test_default_is_the_demo_file() -> None:
    """No file: the demo's own pipeline file, SmolLM2 with prompt lookup on its chat requests, into ./specdec-out."""
    config = load_config(None)
    assert config.target == "demo" and config.bench.device.value == "local"
    assert config.output == Path("specdec-out") and config.export.output == Path("specdec-out/01-export")
    assert config.export.target_only and config.export.sources() == {"target": "demo"}
    assert config.bench.decode.drafter is not None and config.bench.decode.drafter.value == "lookup"
    assert config.quantize.weight_format.value == "w8a8"
    assert config.bench.prompts == demo_config_file().parent / "prompts.jsonl" and config.bench.prompts.is_file()
    assert load_config(None, output=Path("elsewhere")).output == Path("elsewhere")


def test_the_demo_prompts_are_chat_requests() -> None:
    from specdec.pipeline.inputs.prompts import load_prompts

    items = load_prompts(demo_config_file().parent / "prompts.jsonl")
    assert 30 <= len(items) <= 40 and len({item.id for item in items}) == len(items)
    assert all(item.messages is not None and [m["role"] for m in item.messages] == ["user"] for item in items)
    measured = {item.scenario for item in items[:8]}  # what the demo benches (bench.limit 8)
    assert {"knowledge", "chat", "code"} <= measured


def test_draft_lookup_exports_the_target_alone_and_benches_with_lookup(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("target: some/model\ndraft: lookup\nbench: {prompts: chats.jsonl, limit: 2}\n")
    config = load_config(path)
    assert config.export.no_draft and config.export.target_only and config.draft is None
    assert config.bench.decode.drafter is not None and config.bench.decode.drafter.value == "lookup"
    assert config.bench.prompts == tmp_path / "chats.jsonl"  # relative to the file
    path.write_text("target: some/model\ndraft: lookup\nbench: {drafter: model}\n")
    with pytest.raises(InputError, match="bench.drafter.*model needs a draft model, and `draft: lookup` exports none"):
        load_config(path)


def test_drafter_settings_and_a_target_only_export_from_yaml(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("export: {no_draft: true}\nbench: {drafter: model+lookup, lookup_max_ngram: 4}\n")
    config = load_config(path)
    assert config.export.target_only and config.export.sources() == {"target": "demo"}
    assert config.bench.decode.drafter is not None and config.bench.decode.drafter.value == "model+lookup"
    assert config.bench.decode.lookup_max_ngram == 4
    path.write_text("bench: {drafter: ngram}\n")
    with pytest.raises(InputError, match="bench.drafter"):
        load_config(path)


def test_draft_from_target_section(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("target: demo\noutput: out\ndraft: {from_target: {layers: 2, steps: 10, calib: text.txt}}\n")
    config = load_config(path)
    assert config.from_target is not None and config.from_target.layers == 2 and config.from_target.steps == 10
    assert config.from_target.output == tmp_path / "out" / "00-draft" and config.draft == str(config.from_target.output)
    assert config.from_target.calib == tmp_path / "text.txt"
    path.write_text("target: demo\ndraft: {from_target: {steps: 10, train_prompts: mine.jsonl, eval_prompts: e.jsonl, "
                    "data: answers}}\n")
    made = load_config(path).from_target
    assert made is not None and made.kind.value == "feature"
    assert (made.train_prompts, made.eval_prompts, made.data) == (tmp_path / "mine.jsonl", tmp_path / "e.jsonl",
                                                                  tmp_path / "answers")  # beside the pipeline file
    for bad, where in (("{from_target: {layer: 2}}", "draft.from_target.layer"),
                       ("{from_target: {output: x}}", "draft.from_target.output"),
                       ("{make: {}}", "'draft'"),
                       ("{from_target: {ffn: 100}}", "ffn 100")):
        path.write_text(f"target: demo\ndraft: {bad}\n")
        with pytest.raises(InputError, match=where):
            load_config(path)


class _Built(Exception):
    """Stops a command once it has built its config."""


@pytest.mark.parametrize(("flags", "section"), [
    ([], {}),
    (["--method", "rtn", "--calib-samples", "4", "--graphs", "draft,target", "--seed", "3"],
     {"method": "rtn", "calib_samples": 4, "graphs": ["target", "draft"], "seed": 3}),
    (["--format", "nbits,w8a8", "--mix", "mlp=w8a8"], None),
    (["--format", "nbits,w8a8,mixed", "--mix", "mlp=w8a8", "--group-size", "32"],
     {"format": "nbits", "also_formats": ["w8a8", "mixed"], "mix": {"mlp": "w8a8"}, "group_size": 32}),
    (["--profile", "pixel-8"], {}),
])
def test_quantize_flags_and_the_pipeline_section_make_the_same_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                      flags: list[str], section: dict | None) -> None:  # type: ignore[type-arg]
    """The profile's default format lives in QuantizeConfig: `specdec quantize` and a pipeline's quantize
    section with the same settings (and the same profile) quantize alike."""
    from specdec.cli import quantize_cmd

    built = []

    def capture(config, *args, **kwargs):  # type: ignore[no-untyped-def]
        built.append(config)
        raise _Built

    monkeypatch.setattr(quantize_cmd, "quantize_bundle", capture)
    monkeypatch.setattr(quantize_cmd.Bundle, "load", staticmethod(lambda path: None))
    result = runner.invoke(app, ["quantize", "b", "-o", str(tmp_path / "q"), "--draft-method", "rtn", *flags])
    if section is None:  # --mix without mixed among the formats: refused by the config, as in YAML
        assert result.exit_code == 2 and "--mix applies to the mixed format" in result.output
        return
    assert isinstance(result.exception, _Built), result.output
    profile = flags[flags.index("--profile") + 1] if "--profile" in flags else None
    yaml = tmp_path / "pipeline.yaml"
    yaml.write_text(json.dumps({**({"profile": profile} if profile else {}),
                                "quantize": {**section, "draft_method": "rtn"}}))
    piped = load_config(yaml).quantize
    from_flags = built[0]
    assert dataclasses.replace(from_flags, output=piped.output, force=True) == piped
    assert from_flags.weight_format is piped.weight_format
    assert from_flags.record() == piped.record()
