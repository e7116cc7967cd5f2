"""Qwen3, Gemma 3, Phi-3 and SmolLM3 end to end: export → surgery → quantize → compile (cpu, npu) →
generate and bench, greedy speculative == plain == Hugging Face greedy.

The reference is Hugging Face's `generate` (greedy) on the checkpoint with each linear layer's
weights replaced by the bundle's own RTN codes, dequantized: the model the quantized bundle
computes (MatMulNBits at accuracy level 0 multiplies in float32). Every reply runs past the
attention window of the windowed models (16 tokens; replies of 24 after prompts of 1–13).

The tiny random-init models come from tests/support/tiny_models.py. Their logits have no
near-ties that float32 summation order could flip on these prompts (seed 0, the suite's prompt
seed); a flip would show as a mismatch between the two runtimes, never as a pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from support.lockstep import Lockstep
from support.tiny_models import NEW_ARCHS
from transformers import AutoModelForCausalLM

from specdec.pipeline.bench.stage import BenchConfig, run_bench
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.compile.fused.weights import read_linears
from specdec.pipeline.engine.bundle_info import read_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.fused import FusedRunner
from specdec.pipeline.engine.fused_kv import ROUND_ROWS
from specdec.pipeline.engine.runner import DynamicRunner
from specdec.pipeline.export import ExportConfig, export_bundle
from specdec.pipeline.quantize import QuantizeConfig, quantize_bundle
from specdec.pipeline.quantize.packing import dequantize, unpack
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.settings.decode_options import DecodeOptions
from specdec.pipeline.surgery import SurgeryConfig, surgery_bundle

# Phi-3 at 2 heads of 64 dims: 0.75 of a head rotates in a multiple of 16 dims, as GQA needs.
PAIRS: dict[str, dict[str, Any]] = {"qwen3": {}, "gemma3_text": {"target_layers": 3}, "phi3": {"hidden": 128},
                                    "smollm3": {}}
QUANTIZE = {"format": "nbits", "method": "rtn", "calib_samples": 4, "calib_seq_len": 32, "eval_prompts": 2,
            "eval_new_tokens": 8}
NEW_TOKENS = 24
MAX_CONTEXT = 96


def _prompts(count: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, vocab, size=int(rng.integers(1, 14))).tolist() for _ in range(count)]


@pytest.fixture(scope="module")
def built(bundle_factory, tmp_path_factory):  # type: ignore[no-untyped-def]
    cache: dict[str, dict[str, Bundle]] = {}

    def build(arch: str) -> dict[str, Bundle]:
        if arch not in cache:
            root = tmp_path_factory.mktemp(f"e2e-{arch}")
            exported = bundle_factory(arch, **PAIRS[arch])
            surgered = surgery_bundle(SurgeryConfig(output=root / "surgery"), exported)
            quantized = quantize_bundle(QuantizeConfig.from_text(output=root / "quantize", **QUANTIZE), surgered)
            cpu = compile_bundle(CompileConfig(output=root / "cpu", target=GraphFlavour.cpu, max_context=MAX_CONTEXT,
                                               format=OutputFormat.onnx), quantized)
            npu = compile_bundle(CompileConfig(output=root / "npu", target=GraphFlavour.npu, max_context=MAX_CONTEXT,
                                               buckets=(8,), draft_buckets=(4,), prefill_chunk=16, context_buckets=(),
                                               format=OutputFormat.onnx), quantized)
            cache[arch] = {"export": exported, "quantize": quantized, "cpu": cpu, "npu": npu}
        return cache[arch]

    return build


def dequantized_reference(bundle: Bundle) -> Any:
    """The bundle's Hugging Face target with every quantized linear layer's weights replaced by the
    bundle's codes times scales: what the quantized graph multiplies by."""
    spec = bundle.manifest.graphs["target"]
    model = AutoModelForCausalLM.from_pretrained(spec.source, dtype=torch.float32).eval()
    modules = dict(model.named_modules())
    replaced = 0
    for name, linear in read_linears(onnx.load(str(bundle.path / spec.file))).items():
        q = linear.quant
        if q is None:
            continue
        assert linear.input_scale is None  # RTN: no AWQ scales to fold
        codes, zero_points = unpack(q.packed, q.zero_points, K=linear.K, N=linear.N, bits=q.bits,
                                    block_size=q.block_size)
        weight = dequantize(codes, q.scales, zero_points, q.block_size)
        # a new Parameter: a tied lm_head must not rewrite the (float) embedding it shares
        modules[name].weight = torch.nn.Parameter(torch.from_numpy(weight.T.copy()))
        replaced += 1
    assert replaced >= 3 * spec.num_layers
    return model


def _hf_greedy(model: Any, prompt: list[int], new_tokens: int) -> list[int]:
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, do_sample=False, eos_token_id=0,
                             pad_token_id=0)
    return [int(t) for t in out[0, len(prompt):]]


@pytest.mark.parametrize("arch", NEW_ARCHS)
def test_end_to_end_greedy_equals_hugging_face(built, arch: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundles = built(arch)
    spec = bundles["export"].manifest.graphs["target"]
    assert spec.architecture == arch and spec.decoder is not None
    reference = dequantized_reference(bundles["quantize"])
    engines = {flavour: Engine(bundles[flavour].path) for flavour in ("cpu", "npu")}
    accepted = []
    for prompt in _prompts(3, engines["cpu"].vocab):
        want = _hf_greedy(reference, prompt, NEW_TOKENS)
        for flavour, engine in engines.items():
            plain = engine.generate(prompt, DecodeConfig(max_new_tokens=NEW_TOKENS, speculative=False))
            spec_reply = engine.generate(prompt, DecodeConfig(max_new_tokens=NEW_TOKENS))
            assert plain.output_ids == want, (flavour, prompt)
            assert spec_reply.output_ids == want, (flavour, prompt)
            accepted.append(spec_reply.mean_accepted_len)
    assert np.mean(accepted) > 1.0  # the layer-dropped draft is accepted at times
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "input_ids": [5, 6, 7]}\n')
    outcome = run_bench(BenchConfig(output=tmp_path / "bench", prompts=prompts, repeats=1, tune=False,
                                    decode=DecodeOptions(max_new_tokens=8)), bundles["cpu"])
    assert outcome.results.lossless.checked and outcome.results.lossless.equal


@pytest.mark.parametrize("arch", NEW_ARCHS)
def test_w8a8_plain_steps_of_one_row_equal_speculation(bundle_factory, arch: str, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The fused w8a8 target's attention pad row on every new layout (q/k norms, windowed layers,
    partial rotary, NoPE layers): plain steps of one row, bitwise the chain rows speculation verifies."""
    quantized = quantize_bundle(QuantizeConfig.from_text(output=tmp_path / "w8a8", **{**QUANTIZE, "format": "w8a8"}),
                                bundle_factory(arch, **PAIRS[arch]))
    cpu = compile_bundle(CompileConfig(output=tmp_path / "cpu", target=GraphFlavour.cpu, max_context=MAX_CONTEXT,
                                       format=OutputFormat.onnx), quantized)
    assert dump(cpu.manifest.reports)["compile"]["invariance"]["single_row"]
    engine = Engine(cpu.path)
    exact = DecodeConfig(max_new_tokens=NEW_TOKENS, exact_layout=True)
    assert engine.target.single_row_exact and engine.root_rows(exact) == 1
    for prompt in _prompts(3, engine.vocab):  # replies run past the 16-token windows
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=NEW_TOKENS, speculative=False, exact_layout=True))
        assert engine.generate(prompt, exact).output_ids == plain.output_ids, prompt


def test_windowed_layers_hold_about_their_window(built, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The fused runner's windowed layers keep ~2 windows of rows, not the context: a long prompt is
    fed in chunks, rows nobody can see are dropped as rounds go, a round too large grows the buffer;
    the logits stay the dynamic graph's throughout."""
    exported = built("gemma3_text")["export"]
    compiled = compile_bundle(CompileConfig(output=tmp_path / "cpu", target=GraphFlavour.cpu, max_context=256,
                                            format=OutputFormat.onnx), exported)
    fused = Engine(compiled.path).target
    assert isinstance(fused, FusedRunner)
    dynamic = DynamicRunner(read_bundle(exported.path).graphs["target"])
    windowed = next(group for group in fused.groups if group.window is not None)
    assert windowed.window == 16 and windowed.capacity == 2 * 16 + ROUND_ROWS < 256
    assert {group.capacity for group in fused.groups if group.window is None} == {256}
    lockstep = Lockstep(fused, dynamic, 1)
    lockstep.prompt(120)  # more than the windowed buffer: fed in two chunks
    assert fused.length == 120 and windowed.base > 0
    for size in (7, 7, 7, 100):  # the last round is larger than the buffer was sized for: it grows
        lockstep.tree(size)
    assert 96 < windowed.capacity < 256 and windowed.buffers[0].shape[2] == windowed.capacity


@pytest.mark.slow
def test_gemma3_with_a_64_token_window_generates_256_tokens_like_hugging_face(tmp_path: Path) -> None:
    """Past the window four times over, the fused runner's compacted windowed rows give Hugging
    Face's greedy tokens, plainly and with prompt lookup; without the window they would differ."""
    from support.tiny_models import make_model, make_tokenizer, save

    tokenizer = make_tokenizer()
    model = make_model("gemma3_text", len(tokenizer), layers=3, window=64)
    source = save(model, tokenizer, tmp_path / "gemma")
    exported = export_bundle(ExportConfig(target=str(source), output=tmp_path / "export"))
    compiled = compile_bundle(CompileConfig(output=tmp_path / "cpu", target=GraphFlavour.cpu, max_context=320,
                                            format=OutputFormat.onnx), exported)
    engine = Engine(compiled.path)
    prompt = tokenizer("the quick brown fox jumps over the lazy dog.")["input_ids"]
    want = _hf_greedy(model, prompt, 256)
    plain = engine.generate(prompt, DecodeConfig(max_new_tokens=256, speculative=False))
    looked_up = engine.generate(prompt, DecodeConfig(max_new_tokens=256, drafter="lookup"))  # type: ignore[arg-type]
    assert plain.output_ids == looked_up.output_ids == want
    model.config.sliding_window = 4096  # the same weights attending to everything
    assert _hf_greedy(model, prompt, 128) != want[:128]
