"""`quantize_bundle` end to end on tiny exported bundles: valid graphs, lossless decoding, bad input."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from support.quantized import SMALL, op_types

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.runner import causal_mask
from specdec.pipeline.errors import BundleError, InputError, ValidationError
from specdec.pipeline.quantize import QuantizeConfig, quality, quantize_bundle
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.records.manifest import BucketTable, OutputFormat

METHODS = ("rtn", "gptq", "awq")


@pytest.fixture(scope="module")
def quantized(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    source = bundle_factory("llama")
    root = tmp_path_factory.mktemp("quantized")
    return source, {m: quantize_bundle(QuantizeConfig.from_text(output=root / m, format="nbits", method=m, **SMALL),
                                       source) for m in METHODS}


def _prefill_logits(path: Path, ids: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds: dict[str, np.ndarray] = {"input_ids": ids[None], "position_ids": np.arange(ids.size)[None],
                                    "attention_mask": causal_mask(ids.size, 0, np.dtype(np.float32), -3.4e38)}
    for value in session.get_inputs():
        if value.name.startswith("past_key_values."):
            feeds[value.name] = np.zeros((1, value.shape[1], 0, value.shape[3]), np.float32)
    return np.asarray(session.run(["logits"], feeds)[0][0])


@pytest.mark.parametrize("method", METHODS)
def test_graphs_are_valid_int4_and_close_to_float(quantized, method: str) -> None:  # type: ignore[no-untyped-def]
    source, bundles = quantized
    bundle = bundles[method]
    ids = np.random.default_rng(0).integers(1, 300, size=24).astype(np.int64)
    for role, linear_layers in (("target", 15), ("draft", 8)):
        path = bundle.path / f"{role}.onnx"
        onnx.checker.check_model(str(path), full_check=True)
        ops = op_types(path)
        assert ops.count("MatMulNBits") == linear_layers
        assert ops.count("MatMul") == 2 * source.manifest.graphs[role].num_layers  # attention only: q k^T, p v
        before, after = _prefill_logits(source.path / f"{role}.onnx", ids), _prefill_logits(path, ids)
        # 4-bit weights carry ~9% relative noise each; the logits must stay well within that order.
        assert np.linalg.norm(after - before) < 0.2 * np.linalg.norm(before), (role, method)
    record = dump(bundle.manifest.quantization)["graphs"]
    assert record["target"]["method"] == method and record["target"]["accuracy_level"] == 0  # lossless default
    layers = record["target"]["layers"]
    assert layers["lm_head"]["bits"] == 8 and layers["model.layers.0.mlp.down_proj"]["bits"] == 8
    assert layers["model.layers.1.self_attn.q_proj"] == {**layers["model.layers.1.self_attn.q_proj"], "bits": 4,
                                                         "block_size": 64, "method": method}
    assert layers["model.layers.1.mlp.down_proj"]["block_size"] == 128
    assert record["draft"]["summary"] == {"int4": 8, "int8": 0, "float": 0}
    assert bundle.stages() == ["export", "quantize"]
    Bundle.load(bundle.path)  # every file hashed
    Bundle.load(source.path)  # the input is untouched
    assert (bundle.path / "tokenizer" / "tokenizer.json").read_bytes() == (
        source.path / "tokenizer" / "tokenizer.json").read_bytes()


@pytest.mark.parametrize("method", METHODS)
def test_quality_report_is_measured_and_stored(quantized, method: str) -> None:  # type: ignore[no-untyped-def]
    bundle = quantized[1][method]
    report = json.loads((bundle.path / "manifest.json").read_text())["reports"]["quantize"]
    assert report["calibration"]["samples"] == 8 and report["calibration"]["tokens"] == 8 * 32
    for role in ("target", "draft"):
        graph = report["graphs"][role]
        assert graph["bytes_after"] < graph["bytes_before"]
        assert graph["bytes_after"] == (bundle.path / f"{role}.onnx").stat().st_size
        assert np.isfinite(graph["perplexity_before"]) and np.isfinite(graph["perplexity_after"])
        assert 0 < graph["logits_error"] < 1  # the quantized graph's logits moved, not beyond their scale
    spec = report["speculative"]
    assert 0 < spec["top1_agreement_after"] <= 1 and spec["mean_accepted_len_after"] > 0
    assert spec["lossless_prompts"] == spec["prompts"] == 3


def test_awq_scales_inputs_and_gptq_records_damping(quantized) -> None:  # type: ignore[no-untyped-def]
    bundles = quantized[1]
    model = onnx.load(str(bundles["awq"].path / "target.onnx"))
    scaled = [node for node in model.graph.node if node.op_type == "Mul" and node.input[1].endswith(".awq_inv_scale")]
    awq_layers = dump(bundles["awq"].manifest.quantization)["graphs"]["target"]["layers"]
    assert len(scaled) == sum(1 for r in awq_layers.values() if r["alpha"] > 0) > 0
    gptq_layers = dump(bundles["gptq"].manifest.quantization)["graphs"]["draft"]["layers"]
    assert all(r["damp"] > 0 for r in gptq_layers.values())


@pytest.mark.parametrize("method", METHODS)
def test_speculative_greedy_equals_plain_greedy(quantized, method: str) -> None:  # type: ignore[no-untyped-def]
    engine = Engine(quantized[1][method].path)
    rng = np.random.default_rng(3)
    for _ in range(3):
        prompt = rng.integers(1, 300, size=int(rng.integers(2, 10))).tolist()
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=20))
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=20, speculative=False))
        assert spec.output_ids == plain.output_ids


def test_tied_head_and_quantized_embeddings(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Qwen2: lm_head is MatMul(x, Transpose(table)) over the embedding table."""
    source = bundle_factory("qwen2")
    config = QuantizeConfig.from_text(output=tmp_path / "q", method="awq", quantize_embeddings=True, **SMALL)
    bundle = quantize_bundle(config, source)
    for role, bits in (("target", 8), ("draft", 4)):
        model = onnx.load(str(bundle.path / f"{role}.onnx"))
        onnx.checker.check_model(model, full_check=True)
        ops = [node.op_type for node in model.graph.node]
        assert "Gather" not in ops and ops.count("GatherBlockQuantized") == 1 and "Transpose" not in ops[:3]
        record = dump(bundle.manifest.quantization)["graphs"][role]
        assert record["embeddings"]["model.embed_tokens"]["bits"] == bits
        assert record["layers"]["lm_head"]["bits"] == bits
        floats = [init for init in model.graph.initializer if init.data_type == onnx.TensorProto.FLOAT]
        assert all(int(np.prod(init.dims)) < 320 * 64 for init in floats)  # no float table is left
    assert dump(bundle.manifest.reports)["quantize"]["speculative"]["lossless_prompts"] == 3


def test_gemm_layers(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """GPT-2: Conv1D layers are Gemm(x, W, b): MatMulNBits then Add; tables stay float by default."""
    bundle = quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "q", format="nbits", method="rtn", **SMALL),
                             bundle_factory("gpt2"))
    model = onnx.load(str(bundle.path / "target.onnx"))
    onnx.checker.check_model(model, full_check=True)
    record = dump(bundle.manifest.quantization)["graphs"]["target"]
    assert record["layers"]["transformer.h.0.attn.c_attn"]["bits"] == 8
    assert record["layers"]["transformer.h.1.mlp.c_proj"]["bits"] == 4 and record["layers"]["lm_head"]["bits"] == 8
    assert record["embeddings"]["transformer.wte"]["bits"] == "float"
    ops = [node.op_type for node in model.graph.node]
    assert "Gemm" not in ops and ops.count("MatMulNBits") == 9 and ops.count("Gather") == 2
    assert dump(bundle.manifest.reports)["quantize"]["speculative"]["lossless_prompts"] == 3


def test_custom_ops_survive_quantization(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

    surgered = surgery_bundle(SurgeryConfig(output=tmp_path / "s"), bundle_factory("llama"))
    bundle = quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "q", method="gptq", **SMALL), surgered)
    for role, op in (("draft", "DynamicTreePrune"), ("target", "BlockSparseVerify")):
        before = onnx.load(str(surgered.path / f"{role}.onnx"))
        after = onnx.load(str(bundle.path / f"{role}.onnx"))
        onnx.checker.check_model(after, full_check=True)
        assert [f.SerializeToString() for f in after.functions] == [f.SerializeToString() for f in before.functions]
        assert [n.op_type for n in after.graph.node if n.domain == "com.endpoint.ai"] == [op]
        assert [o.name for o in after.graph.output] == [o.name for o in before.graph.output]
        assert "MatMulNBits" in {n.op_type for n in after.graph.node}
    assert bundle.manifest.custom_ops == surgered.manifest.custom_ops
    assert bundle.stages() == ["export", "surgery", "quantize"]
    engine = Engine(bundle.path)
    assert engine.target.has_verify and engine.drafter is not None
    for prompt in ([5, 6, 7], [40, 2, 99, 17]):
        assert (engine.generate(prompt, DecodeConfig(max_new_tokens=16)).output_ids
                == engine.generate(prompt, DecodeConfig(max_new_tokens=16, speculative=False)).output_ids)


def test_surgery_runs_on_a_quantized_bundle(quantized, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

    bundle = surgery_bundle(SurgeryConfig(output=tmp_path / "s"), quantized[1]["awq"])
    assert bundle.stages() == ["export", "quantize", "surgery"] and bundle.manifest.quantization is not None
    engine = Engine(bundle.path)
    assert (engine.generate([9, 8, 7], DecodeConfig(max_new_tokens=16)).output_ids
            == engine.generate([9, 8, 7], DecodeConfig(max_new_tokens=16, speculative=False)).output_ids)


def test_genai_layout_puts_every_target_layer_at_4_bits(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--head-bits 4 --first-block-bits 4: onnxruntime-genai's int4 (every MatMul 4-bit), still lossless."""
    default = QuantizeConfig.from_text(output=tmp_path / "d")
    assert default.bits_for("target", "model.layers.0.mlp.up_proj") == 8 and default.bits_for("target", "lm_head") == 8
    config = QuantizeConfig.from_text(output=tmp_path / "q", method="rtn", head_bits=4, first_block_bits=4, **SMALL)
    bundle = quantize_bundle(config, bundle_factory("llama"))
    record = dump(bundle.manifest.quantization)["graphs"]["target"]["layers"]
    assert record and {layer["bits"] for layer in record.values()} == {4}
    nodes = onnx.load(str(bundle.path / "target.onnx")).graph.node
    assert {a.i for n in nodes if n.op_type == "MatMulNBits" for a in n.attribute if a.name == "bits"} == {4}
    assert bundle.manifest.lineage[-1].config["first_block_bits"] == 4
    assert dump(bundle.manifest.reports)["quantize"]["speculative"]["lossless_prompts"] == 3
    with pytest.raises(InputError, match="first_block_bits 6 is not 4 or 8"):
        QuantizeConfig.from_text(output=tmp_path / "x", first_block_bits=6)


def test_draft_only_keeps_the_target_bit_for_bit(quantized, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """--graphs draft: the target file is copied unchanged, so plain output is the float bundle's; the
    draft alone is 4-bit, even at accuracy level 4 without the exact layout the int8 target would need."""
    from specdec.pipeline.settings.resolve import bundle_requirements

    source = quantized[0]
    config = QuantizeConfig.from_text(output=tmp_path / "q", graphs="draft", method="rtn", accuracy_level=4, **SMALL)
    bundle = quantize_bundle(config, source)
    assert (bundle.path / "target.onnx").read_bytes() == (source.path / "target.onnx").read_bytes()
    assert "MatMulNBits" not in op_types(bundle.path / "target.onnx")
    assert op_types(bundle.path / "draft.onnx").count("MatMulNBits") == 8
    quantization = bundle.manifest.quantization
    assert quantization is not None and list(quantization.graphs) == ["draft"]
    assert bundle_requirements(quantization) == {}  # the target computes in float: trees stay exact
    report = dump(bundle.manifest.reports)["quantize"]
    assert list(report["graphs"]) == ["draft"] and report["speculative"]["layout"] == "tree"
    assert report["speculative"]["lossless_prompts"] == 3
    assert bundle.manifest.lineage[-1].config["graphs"] == ["draft"]
    prompt, plain = [9, 8, 7], DecodeConfig(max_new_tokens=16, speculative=False)
    expected = Engine(source.path).generate(prompt, plain).output_ids
    engine = Engine(bundle.path)
    assert engine.generate(prompt, plain).output_ids == expected
    assert engine.generate(prompt, DecodeConfig(max_new_tokens=16)).output_ids == expected


def test_graphs_setting_is_validated(quantized, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert QuantizeConfig.from_text(output=tmp_path / "q", graphs="draft, target").graphs == ("target", "draft")
    with pytest.raises(InputError, match="graphs drafts names no graph of a bundle"):
        QuantizeConfig.from_text(output=tmp_path / "q", graphs="drafts")
    with pytest.raises(InputError, match=r"graphs \(empty\) names no graph"):
        QuantizeConfig.from_text(output=tmp_path / "q", graphs=",")
    source = quantized[0]
    target_only = Bundle(source.path, dataclasses.replace(source.manifest,
                                                          graphs={"target": source.manifest.graphs["target"]}))
    with pytest.raises(InputError, match="has no draft graph to quantize") as caught:
        quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "t", graphs="draft", **SMALL), target_only)
    assert not (tmp_path / "t").exists()
    assert "graphs target (or leave it out: every graph)" in caught.value.one_line()
    default = QuantizeConfig.from_text(output=tmp_path / "a")
    assert default.roles_in(["target"]) == ("target",)  # the default: what is there


def test_keep_float_and_short_calibration(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    calib = tmp_path / "short.txt"
    calib.write_text("the quick brown fox jumps over the lazy dog. " * 6)
    config = QuantizeConfig.from_text(output=tmp_path / "q", method="awq", keep_float=("*mlp*", "lm_head"), calib=calib,
                            **SMALL)
    bundle = quantize_bundle(config, bundle_factory("llama"))
    layers = dump(bundle.manifest.quantization)["graphs"]["target"]["layers"]
    assert layers["lm_head"] == {"bits": "float", "reason": "--keep-float"}
    assert all(r["bits"] == "float" for name, r in layers.items() if ".mlp." in name)
    assert layers["model.layers.1.self_attn.o_proj"]["bits"] == 4
    warning = dump(bundle.manifest.reports)["quantize"]["warnings"][0]
    samples = dump(bundle.manifest.reports)["quantize"]["calibration"]["samples"]
    assert f"using {samples} sample(s)" in warning and samples < 8


def test_explicit_group_size_leaves_layers_it_does_not_divide_float(
        quantized, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    config = QuantizeConfig.from_text(output=tmp_path / "q", method="rtn", group_size=128, **SMALL)
    with caplog.at_level("WARNING", logger="specdec"):
        bundle = quantize_bundle(config, quantized[0])
    layers = dump(bundle.manifest.quantization)["graphs"]["draft"]["layers"]
    assert layers["model.layers.0.mlp.down_proj"]["block_size"] == 128  # K = 128
    assert layers["model.layers.0.self_attn.q_proj"] == {"bits": "float",
                                                          "reason": "group size 128 does not divide its width 64"}
    assert "model.layers.0.self_attn.q_proj stays float (group size 128 does not divide K = 64)" in caplog.text


def test_bad_input(quantized, bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source, bundles = quantized
    with pytest.raises(BundleError, match="already quantized"):
        quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "again", **SMALL), bundles["rtn"])
    compiled = Bundle(source.path, dataclasses.replace(source.manifest, buckets=BucketTable(
        max_context=8, prefill_chunk=0, format=OutputFormat.onnx, profile="local-cpu", graphs={})))
    with pytest.raises(BundleError, match="quantize before compile"):
        quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "c", **SMALL), compiled)
    with pytest.raises(InputError, match=r"group size 256 divides no layer \(widths: 64, 128\)"):
        quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "g", group_size=256, **SMALL), source)
    with pytest.raises(InputError, match="power of two"):
        QuantizeConfig.from_text(output=tmp_path / "g", group_size=48)
    with pytest.raises(InputError, match="unknown quantization method 'int3'"):
        QuantizeConfig.from_text(output=tmp_path / "m", method="int3")  # type: ignore[arg-type]
    with pytest.raises(InputError, match="already exists"):
        quantize_bundle(QuantizeConfig.from_text(output=bundles["rtn"].path, **SMALL), source)
    with pytest.raises(InputError, match="calib file .* does not exist"):
        quantize_bundle(QuantizeConfig(output=tmp_path / "x", calib=tmp_path / "missing.txt"), source)
    assert not any(tmp_path.iterdir())  # nothing half-written


def test_perplexity_gate_fails_without_writing(quantized, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = {"graphs": {"target": {"perplexity_before": 10.0, "perplexity_after": 10.4,
                                    "perplexity_increase_pct": 4.0}}}
    quality.enforce(report, 5.0)
    with pytest.raises(ValidationError, match=r"target perplexity rose from 10 to 10\.4 \(\+4\.00%\), above "
                                              r"max_ppl_increase 1%"):
        quality.enforce(report, 1.0)

    measured: dict[str, Any] = {}
    real = quality.evaluate

    def evaluate(*args: Any, **kwargs: Any) -> dict[str, Any]:
        measured.update(real(*args, **kwargs))
        for graph in measured["graphs"].values():  # pretend quantization hurt, whatever it measured
            graph["perplexity_increase_pct"] = 50.0
        return measured

    monkeypatch.setattr(quality, "evaluate", evaluate)
    out = tmp_path / "gated"
    with pytest.raises(ValidationError, match="above max_ppl_increase 10%"):
        quantize_bundle(QuantizeConfig.from_text(output=out, format="nbits", method="rtn", max_ppl_increase=10.0,
                                                  **SMALL), quantized[0])
    assert measured and not out.exists() and not any(tmp_path.iterdir())


def test_inspect_shows_precision_quantization_and_quality(quantized) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from specdec.cli.app import app

    _, bundles = quantized
    shown = CliRunner().invoke(app, ["inspect", str(bundles["rtn"].path)], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    graphs = shown.output.split("graphs", 1)[1].split("inputs / outputs", 1)[0]
    assert "int4/int8 weights (rtn), float32 compute" in graphs  # not the exported dtype alone
    assert "quantization (MatMulNBits" in shown.output and "asymmetric" in shown.output
    assert "quantization quality" in shown.output and "perplexity" in shown.output


def test_graphs_with_external_data_quantize_like_inline_ones(pair_factory, bundle_factory, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph past the external-data threshold (1 GiB; lowered here) goes through surgery, the calibration
    probes and the save tensor by tensor, never as one proto: the result equals the inline graph's."""
    from specdec.pipeline.export import ExportConfig, export_bundle, torch_graph
    from specdec.pipeline.graphs import files as graph_io
    from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

    monkeypatch.setattr(graph_io, "EXTERNAL_DATA_BYTES", 4096)
    monkeypatch.setattr(torch_graph, "EXTERNAL_DATA_BYTES", 4096)
    target, draft = pair_factory("llama")
    exported = export_bundle(ExportConfig(target=str(target), draft=str(draft), output=tmp_path / "e"))
    assert (exported.path / "target.onnx.data").is_file()
    surgered = surgery_bundle(SurgeryConfig(output=tmp_path / "s"), exported)
    assert (surgered.path / "target.onnx.data").is_file()
    # the weights stay outside the proto: in the graph's own data file and in the pair's shared one
    external = sum((surgered.path / f).stat().st_size for f in graph_io.external_files(surgered.path / "target.onnx"))
    assert (surgered.path / "target.onnx").stat().st_size < external
    # a probe's hard link left behind by a killed run (onnx's own reader refuses such a file)
    os.link(surgered.path / "target.onnx.data", tmp_path / "left-by-a-killed-probe.data")
    w8a8 = [quantize_bundle(QuantizeConfig.from_text(output=tmp_path / f"w8a8-{i}", format="w8a8", **SMALL), source)
            for i, source in enumerate((surgered, bundle_factory("llama")))]
    streamed, inline_w8a8 = (dump(b.manifest.quantization)["graphs"] for b in w8a8)
    assert streamed == inline_w8a8
    for method in ("awq", "gptq"):
        config = QuantizeConfig.from_text(output=tmp_path / method, method=method, head_bits=4, first_block_bits=4,
                                          **SMALL)
        external = quantize_bundle(config, surgered)
        monkeypatch.setattr(graph_io, "EXTERNAL_DATA_BYTES", 1 << 30)
        inline = quantize_bundle(dataclasses.replace(config, output=tmp_path / f"{method}-inline"),
                                 bundle_factory("llama"))
        monkeypatch.setattr(graph_io, "EXTERNAL_DATA_BYTES", 4096)
        assert (external.path / "target.onnx.data").is_file() and not (inline.path / "target.onnx.data").exists()
        records = [dump(b.manifest.quantization)["graphs"]["target"]["layers"] for b in (external, inline)]
        assert records[0] == records[1]
    assert not list(surgered.path.glob("calib-*")) and not list((tmp_path / "awq").glob("calib-*"))


def test_large_vocabularies_get_quantized_tables_by_default(bundle_factory, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from specdec.pipeline.quantize import config as config_module

    monkeypatch.setattr(config_module, "LARGE_VOCAB", 256)  # the tiny vocabulary (320) counts as large
    source = bundle_factory("qwen2")
    bundle = quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "q", format="nbits", method="rtn", **SMALL),
                             source)
    graphs = dump(bundle.manifest.quantization)["graphs"]
    assert graphs["target"]["embeddings"]["model.embed_tokens"]["bits"] == 8
    assert graphs["draft"]["embeddings"]["model.embed_tokens"]["bits"] == 4
    float_bundle = quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "f", format="nbits", method="rtn",
                                                            quantize_embeddings=False, **SMALL), source)
    record = dump(float_bundle.manifest.quantization)["graphs"]["target"]["embeddings"]["model.embed_tokens"]
    assert record == {**record, "bits": "float", "reason": "--float-embeddings"}
    sizes = [sum(p.stat().st_size for p in b.path.glob("*.onnx*")) for b in (bundle, float_bundle)]
    assert sizes[0] < sizes[1]


def test_logits_error_is_compiles_relative_measure_over_all_windows() -> None:
    before = [np.array([[0.5, -3.0]]), np.array([[4.0, 1.0]])]
    after = [np.array([[0.7, -3.0]]), np.array([[4.0, 0.6]])]
    error = quality.LogitsError()
    for index, logits in enumerate(before):
        error.record(index, logits)
    for index, logits in enumerate(after):
        error.compare(index, logits)
    assert error.value == pytest.approx(0.4 / 4.0)  # max|after - before| / max(1, max|before|)
