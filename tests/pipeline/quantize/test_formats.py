"""A bundle that carries its target in two weight formats (`quantize --format nbits,w8a8`): quantize
writes one more target, compile builds each, tune measures each and the plan's format is what
`generate` decodes with."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.quantized import op_types, quantized_and_fused
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.compile import CompileConfig, GraphFlavour, compile_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.errors import BundleError, InputError
from specdec.pipeline.generate.stage import GenerateConfig, Generator, generate_settings
from specdec.pipeline.quantize import QuantizeConfig
from specdec.pipeline.quantize.config import WeightFormat
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.plan import CostFit, DevicePlan, PlanChoice
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import load_device
from specdec.pipeline.tune import TuneConfig, tune_bundle
from specdec.pipeline.tune.plans import choose_format


@pytest.fixture(scope="module")
def two(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    source = bundle_factory("llama")
    root = tmp_path_factory.mktemp("formats")
    return source, *quantized_and_fused(source, root, format="nbits,w8a8", method="rtn")


def test_quantize_stores_one_more_target_and_shares_the_rest(two) -> None:  # type: ignore[no-untyped-def]
    _, bundle, _ = two
    manifest = bundle.manifest
    assert manifest.weight_formats() == ["nbits", "w8a8"]
    for role in ("target", "draft"):
        assert "MatMulNBits" in op_types(bundle.path / f"{role}.onnx")
    variant = manifest.variants["w8a8"]
    assert variant.graph.file == "target.w8a8.onnx" and variant.format == "w8a8"
    assert "MatMulInteger" in op_types(bundle.path / variant.graph.file)
    assert variant.quantization.weight_bits == 7 and variant.quantization.method == "rtn"
    graphs = [rel for rel in manifest.files if rel.endswith(".onnx")]
    assert sorted(graphs) == ["draft.onnx", "target.onnx", "target.w8a8.onnx"]  # one draft, one tokenizer
    report = dump(manifest.reports)["quantize"]["variants"]["w8a8"]
    assert abs(report["graphs"]["target"]["perplexity_increase_pct"]) < 1.0
    assert report["speculative"]["lossless_prompts"] == report["speculative"]["prompts"]
    assert manifest.lineage[-1].config["format"] == "nbits,w8a8"
    view = manifest.with_format("w8a8")
    assert view.quantization is not None and view.quantization.row_invariant and not view.variants
    assert view.graphs["target"].file == "target.w8a8.onnx" and view.graphs["draft"] == manifest.graphs["draft"]
    assert manifest.with_format("nbits") is manifest and manifest.with_format(None) is manifest
    with pytest.raises(BundleError, match="not stored in weight format int3"):
        manifest.with_format("int3")


def test_compile_builds_each_format_and_each_decodes_exactly(two) -> None:  # type: ignore[no-untyped-def]
    _, _, fused = two
    variant = fused.manifest.variants["w8a8"].fused
    assert variant is not None and variant.file == "cpu/w8a8/target.onnx"
    assert "com.microsoft.MatMulIntegerToFloat" in variant.ops  # the fused form of the w8a8 linear
    assert "com.microsoft.MatMulNBits" in fused.manifest.buckets.fused["target"].ops
    assert "w8a8" in dump(fused.manifest.reports)["compile"]["variants"]
    for name in ("nbits", "w8a8"):
        engine = Engine(fused.runtime_info(name))
        ops = op_types(engine.target.path) if hasattr(engine.target, "path") else None
        if ops is not None:
            assert ("MatMulInteger" in ops or "MatMulIntegerToFloat" in ops) == (name == "w8a8")
        for prompt in ([5, 6, 7], [11, 3, 9, 2]):
            exact = name == "w8a8"  # w8a8 rounds activations per row: the exact layout (bundle_requirements)
            plain = engine.generate(prompt, _config(12, False, exact))
            assert engine.generate(prompt, _config(12, True, exact)).output_ids == plain.output_ids


def _config(tokens: int, speculative: bool, exact: bool):  # type: ignore[no-untyped-def]
    from specdec.pipeline.records.decode import DecodeConfig

    return DecodeConfig(max_new_tokens=tokens, speculative=speculative, exact_layout=exact)


def test_tune_measures_each_format_and_generate_and_bench_use_the_plans(two, prompts_file: Path,  # type: ignore[no-untyped-def]
                                                                       tmp_path: Path) -> None:
    tuned, plan = tune_bundle(TuneConfig(output=tmp_path / "tuned", decode=DecodeOptions(max_new_tokens=12)), two[2])
    assert plan.weight_format in ("nbits", "w8a8")
    assert [line.split(":")[0] for line in plan.formats_compared] == ["nbits", "w8a8"]
    assert any(note.startswith(f"weight format {plan.weight_format}") for note in plan.notes)
    stored = Bundle.load(tuned.path).manifest.plan
    assert stored is not None and stored.for_device(plan.device) == plan
    settings = generate_settings(GenerateConfig(decode=DecodeOptions(max_new_tokens=16, speculative=True)), tuned,
                                 load_device("local-cpu"),
                                 None)
    assert settings.weight_format == plan.weight_format
    engine = Generator(tuned, weight_format=settings.weight_format).engine
    assert engine.info.quantization is not None
    assert engine.info.quantization.weight_format.value == plan.weight_format
    plain = replace(settings.config, speculative=False)
    for prompt in ([5, 6, 7], [1]):
        assert engine.generate(prompt, settings.config).output_ids == engine.generate(prompt, plain).output_ids
    # the device gets the plan's format only, and decodes with it
    files = tuned.runner_files(plan.weight_format)
    chosen, other = (("cpu/w8a8/target.onnx", "cpu/target.onnx") if plan.weight_format == "w8a8"
                     else ("cpu/target.onnx", "cpu/w8a8/target.onnx"))
    assert chosen in files and other not in files and "cpu/draft.onnx" in files
    outcome = run_bench(BenchConfig(output=tmp_path / "bench", prompts=prompts_file, limit=2,
                                    decode=DecodeOptions(max_new_tokens=10)),
                        tuned)
    assert outcome.results.plan is not None and outcome.results.plan.source == "bundle"
    assert outcome.results.lossless.equal


def _plan(name: str, speedup: float, plain_ms: float, exact: bool) -> DevicePlan:
    choice = PlanChoice("model", 4, 4, 1, 2.0, plain_ms * 2 / speedup, speedup)
    return DevicePlan(device="local/x/y/threads=1", created="now", threads=1, exact_layout=exact, choice=choice,
                      plain_step_ms=plain_ms, verify_ms=[(1, plain_ms)], verify_fit=CostFit(plain_ms, 0.0, 0.0),
                      context=8, acceptance={}, weight_format=name)


def test_choose_format_takes_the_best_predicted_tokens_per_second_among_exact_ones(two) -> None:  # type: ignore[no-untyped-def]
    manifest = two[1].manifest  # w8a8 needs the exact layout, nbits at accuracy level 0 does not
    # nbits: 1.5x of 10 ms = 150 tok/s; w8a8: 1.2x of 6 ms = 200 tok/s
    chosen = choose_format({"nbits": _plan("nbits", 1.5, 10.0, False), "w8a8": _plan("w8a8", 1.2, 6.0, True)},
                           manifest)
    assert chosen.weight_format == "w8a8" and chosen.predicted_tokens_per_s == pytest.approx(200.0)
    assert chosen.formats_compared[0].startswith("nbits: 150.0 tok/s predicted")
    # a w8a8 plan in the tree layout would not be exact: the slower exact format wins
    chosen = choose_format({"nbits": _plan("nbits", 1.5, 10.0, False), "w8a8": _plan("w8a8", 1.2, 6.0, False)},
                           manifest)
    assert chosen.weight_format == "nbits" and chosen.formats_compared[1].endswith("not exact")


def test_bad_format_lists(tmp_path: Path) -> None:
    config = QuantizeConfig.from_text(output=tmp_path / "x", format="w8a8,nbits")
    assert (config.weight_format, config.also_formats) == (WeightFormat.w8a8, (WeightFormat.nbits,))
    assert config.for_format(WeightFormat.nbits).method_for("target").value == "awq"  # w8a8's rtn is not "given"
    with pytest.raises(InputError, match="names w8a8 twice"):
        QuantizeConfig.from_text(output=tmp_path / "x", format="w8a8,w8a8")
    with pytest.raises(InputError, match="leaves the target out"):
        QuantizeConfig.from_text(output=tmp_path / "x", format="nbits,w8a8", graphs="draft")
    with pytest.raises(InputError, match="unknown weight format 'int3'"):
        QuantizeConfig.from_text(output=tmp_path / "x", format="nbits,int3")


def test_npu_flavour_refuses_two_formats(two, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="npu flavour builds one weight format"):
        compile_bundle(CompileConfig(output=tmp_path / "npu", target=GraphFlavour.npu), two[1])


def test_cli_quantize_two_formats(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "q"
    result = CliRunner().invoke(app, ["quantize", str(bundle_factory("llama").path), "-o", str(out), "--format",
                                      "nbits,w8a8", "--method", "rtn", "--calib-samples", "4", "--calib-seq-len",
                                      "32", "--eval-prompts", "2", "--eval-new-tokens", "8"],
                                env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    assert "w8a8" in result.output and (out / "target.w8a8.onnx").is_file()
