"""The mixed weight format (`quantize --format mixed --mix attention=w8a8,mlp=nbits,head=nbits`): each
layer class in the format `--mix` gives it, the record naming each layer's, compiled by both flavours,
exact speculation, and as one format among several of a bundle for `tune` to choose by measurement."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from support.quantized import SMALL, op_types, quantized_and_fused
from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.bundle.summary import precision
from specdec.pipeline.compile import CompileConfig, GraphFlavour, compile_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.int8_range import check_weight_range
from specdec.pipeline.errors import InputError
from specdec.pipeline.generate.stage import GenerateConfig, generate_settings
from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle
from specdec.pipeline.quantize.config import LayerClass, WeightFormat, layer_class
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.records.plan import CostFit, DevicePlan, PlanChoice
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.settings.profiles import load_device
from specdec.pipeline.settings.resolve import bundle_requirements
from specdec.pipeline.tune.plans import choose_format

_WANTED = {LayerClass.attention: "w8a8", LayerClass.mlp: "nbits", LayerClass.head: "nbits"}


@pytest.fixture(scope="module")
def mixed(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    return quantized_and_fused(bundle_factory("llama"), tmp_path_factory.mktemp("mixed"), format="mixed",
                               method="rtn")


def test_layer_classes_from_module_paths() -> None:
    assert layer_class("model.layers.3.self_attn.k_proj") is LayerClass.attention
    assert layer_class("transformer.h.0.attn.c_attn") is LayerClass.attention
    assert layer_class("model.layers.0.mlp.down_proj") is LayerClass.mlp
    assert layer_class("transformer.h.1.mlp.c_proj") is LayerClass.mlp
    assert layer_class("lm_head") is LayerClass.head and layer_class("embed_out") is LayerClass.head
    assert layer_class("model.layers.0.router") is None and layer_class("weight_17") is None


def test_each_layer_class_gets_its_format_and_the_record_says_so(mixed) -> None:  # type: ignore[no-untyped-def]
    bundle, _ = mixed
    quantization = bundle.manifest.quantization
    assert quantization is not None and quantization.format == "mixed"
    assert quantization.weight_format is WeightFormat.mixed and not quantization.row_invariant
    for role in ("target", "draft"):
        graph = quantization.graphs[role]
        assert graph.mix == {kind.value: chosen for kind, chosen in _WANTED.items()} and graph.weight_bits == 7
        for name, layer in graph.layers.items():
            kind = layer_class(name)
            assert kind is not None and layer.format == _WANTED[kind], name
            # w8a8 layers are per channel (no block), nbits ones blockwise int4/int8
            assert (layer.block_size is None) == (layer.format == "w8a8"), name
        assert sum(1 for layer in graph.layers.values() if layer.format == "w8a8") == \
            sum(1 for name in graph.layers if layer_class(name) is LayerClass.attention)
        ops = op_types(bundle.path / f"{role}.onnx")
        assert "MatMulInteger" in ops and "MatMulNBits" in ops and "MatMul" not in _linear_matmuls(bundle, role)
        # any w8a8 layer rounds activations per row: the exact layout, and the 8-bit-weight range check
        assert quantization.int8_activations(role) and quantization.int8_matmuls(role)
    assert bundle_requirements(quantization) == {"exact_layout": True}
    assert precision(bundle.manifest, "target") == \
        "mixed int4/int8 weights (rtn + w8a8 by layer class), float32/int8 compute"  # what `inspect` prints
    assert bundle.manifest.lineage[-1].config["mix"] == {"attention": "w8a8", "mlp": "nbits", "head": "nbits"}
    spec = dump(bundle.manifest.reports)["quantize"]["speculative"]
    assert spec["layout"] == "exact" and spec["lossless_prompts"] == spec["prompts"]


def _linear_matmuls(bundle, role: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Op types of the nodes that the float graph's linear layers became (a float MatMul left: a miss)."""
    import onnx

    from specdec.pipeline.graphs.query import module_name

    model = onnx.load(str(bundle.path / f"{role}.onnx"))
    return [n.op_type for n in model.graph.node if layer_class(module_name(n) or "") is not None]


def test_compile_builds_the_mix_and_speculation_is_exact(mixed) -> None:  # type: ignore[no-untyped-def]
    _, fused = mixed
    ops = fused.manifest.buckets.fused["target"].ops
    assert "com.microsoft.MatMulIntegerToFloat" in ops and "com.microsoft.MatMulNBits" in ops
    settings = generate_settings(GenerateConfig(decode=DecodeOptions(max_new_tokens=12, speculative=True)), fused,
                                 load_device("local-cpu"), None)
    assert settings.config.exact_layout  # the bundle's requirement reaches the decode settings
    engine = Engine(fused.runtime_info())
    plain = replace(settings.config, speculative=False)
    for prompt in ([5, 6, 7], [11, 3, 9, 2], [1]):
        assert engine.generate(prompt, settings.config).output_ids == engine.generate(prompt, plain).output_ids


def test_npu_flavour_builds_the_mix(mixed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    built = compile_bundle(CompileConfig(output=tmp_path / "npu", target=GraphFlavour.npu, buckets=(4,),
                                         draft_buckets=(1,), max_context=64, prefill_chunk=16), mixed[0])
    assert built.manifest.buckets is not None and built.manifest.buckets.flavour is GraphFlavour.npu
    ops = op_types(built.path / built.manifest.buckets.graphs["target"][0].file)
    assert "MatMulInteger" in ops and "MatMulNBits" in ops


def test_eight_bit_weights_of_a_mix_are_range_checked(mixed) -> None:  # type: ignore[no-untyped-def]
    quantization = mixed[0].manifest.quantization
    wide = replace(quantization, graphs={role: replace(g, weight_bits=8) for role, g in quantization.graphs.items()})
    check_weight_range(wide, machine="x86_64", cpuinfo="flags\t: avx2 avx512_vnni")
    with pytest.raises(Exception, match="8-bit w8a8 weights saturate"):
        check_weight_range(wide, machine="x86_64", cpuinfo="flags\t: avx2")


def test_a_mix_beside_other_formats_is_one_more_target(bundle_factory, tmp_path: Path) -> None:
    source = bundle_factory("llama")
    bundle, fused = quantized_and_fused(source, tmp_path, format="nbits,mixed", mix="attention=nbits,mlp=w8a8",
                                        method="rtn")
    manifest = bundle.manifest
    assert manifest.weight_formats() == ["nbits", "mixed"]
    variant = manifest.variants["mixed"]
    assert variant.graph.file == "target.mixed.onnx" and variant.format == "mixed"
    assert variant.quantization.mix == {"attention": "nbits", "mlp": "w8a8", "head": "nbits"}
    assert {layer.format for name, layer in variant.quantization.layers.items()
            if layer_class(name) is LayerClass.mlp} == {"w8a8"}
    assert manifest.quantization is not None and not manifest.quantization.int8_activations("target")
    view = manifest.with_format("mixed")
    assert bundle_requirements(view.quantization) == {"exact_layout": True}
    assert view.quantization is not None and not view.quantization.int8_activations("draft")  # the nbits draft
    compiled = fused.manifest.variants["mixed"].fused
    assert compiled is not None
    assert "com.microsoft.MatMulIntegerToFloat" in compiled.ops and "com.microsoft.MatMulNBits" in compiled.ops
    engine = Engine(fused.runtime_info("mixed"))
    exact = DecodeConfig(max_new_tokens=10, speculative=True, exact_layout=True)
    assert engine.generate([5, 6, 7], exact).output_ids == \
        engine.generate([5, 6, 7], replace(exact, speculative=False)).output_ids
    # tune's choice: the mix needs the exact layout, so a tree-layout plan of it does not count
    fast_but_tree = {"nbits": _plan("nbits", 1.5, 10.0, False), "mixed": _plan("mixed", 1.4, 5.0, False)}
    assert choose_format(fast_but_tree, manifest).weight_format == "nbits"
    assert choose_format({**fast_but_tree, "mixed": _plan("mixed", 1.4, 5.0, True)}, manifest).weight_format == \
        "mixed"


def _plan(name: str, speedup: float, plain_ms: float, exact: bool) -> DevicePlan:
    choice = PlanChoice("model", 4, 4, 1, 2.0, plain_ms * 2 / speedup, speedup)
    return DevicePlan(device="local/x/y/threads=1", created="now", threads=1, exact_layout=exact, choice=choice,
                      plain_step_ms=plain_ms, verify_ms=[(1, plain_ms)], verify_fit=CostFit(plain_ms, 0.0, 0.0),
                      context=8, acceptance={}, weight_format=name)


@pytest.mark.parametrize(("settings", "message"), [
    ({"format": "mixed", "mix": "attn=w8a8"}, "unknown layer class 'attn'"),
    ({"format": "mixed", "mix": "mlp=int3"}, "unknown weight format 'int3'"),
    ({"format": "mixed", "mix": "mlp"}, "entry 'mlp' is not CLASS=FORMAT"),
    ({"format": "mixed", "mix": "head=mixed"}, "a layer class takes one format"),
    ({"format": "mixed", "mix": "attention=nbits"}, "gives every layer class nbits"),
    ({"format": "w8a8", "mix": "mlp=nbits"}, "applies to the mixed format"),
    ({"format": "nbits,mixed", "graphs": "draft"}, "leaves the target out"),
])
def test_bad_mixes_are_one_line_errors(settings, message: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match=message) as caught:
        QuantizeConfig.from_text(output=tmp_path / "x", **settings)
    assert "\n" not in str(caught.value)


def test_a_layer_outside_the_classes_is_refused_before_any_work(bundle_factory, tmp_path: Path,
                                                                monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from specdec.pipeline.quantize import config as config_module

    monkeypatch.setattr(config_module, "_CLASS_OF_PARENT", {"self_attn": LayerClass.attention})
    with pytest.raises(InputError, match=r"layer model\.layers\.0\.mlp\.\w+ is in no layer class"):
        quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "q", format="mixed", method="rtn", **SMALL),
                        bundle_factory("llama"))
    assert not (tmp_path / "q").exists()


def test_cli_mix(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bad = CliRunner().invoke(app, ["quantize", str(bundle_factory("llama").path), "-o", str(tmp_path / "bad"),
                                   "--format", "mixed", "--mix", "attention=int2"], env={"COLUMNS": "250"})
    assert bad.exit_code != 0 and "unknown weight format 'int2' for --mix" in bad.output
    assert not (tmp_path / "bad").exists()


def test_settings_survive_replace(tmp_path: Path) -> None:
    """Stages copy configs with dataclasses.replace, which runs the checks again on resolved values."""
    import dataclasses

    mixed = QuantizeConfig.from_text(output=tmp_path / "x", format="w8a8,mixed",
                                     mix="mlp=w8a8,head=w8a8,attention=nbits")
    again = dataclasses.replace(mixed, output=tmp_path / "y")
    assert again.layer_formats == mixed.layer_formats
    assert again.layer_formats[LayerClass.attention] is WeightFormat.nbits
    assert mixed.for_format(WeightFormat.mixed).layer_formats == mixed.layer_formats
    assert mixed.for_format(WeightFormat.mixed).method_for("target").value == "awq"  # w8a8's rtn is not "given"
    plain = dataclasses.replace(QuantizeConfig.from_text(output=tmp_path / "x", format="nbits"), output=tmp_path / "z")
    assert plain.mix is None and "mix" not in plain.record()
