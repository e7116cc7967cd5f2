"""KV cache policies (records/kv_policy.py) in the fused cpu flavour: `window` keeps sinks + the
last W positions in bounded buffers, equals the masked dynamic graph row for row, lets replies run
past the context, and speculative decoding equals plain decoding under it, trees crossing the
window's edge included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from support.lockstep import Lockstep

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.engine.bundle_info import read_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.fused import FusedRunner
from specdec.pipeline.engine.fused_kv import ROUND_ROWS
from specdec.pipeline.engine.runner import DynamicRunner
from specdec.pipeline.errors import InputError
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind
from specdec.pipeline.records.kv_policy import POSITIONS_PER_CONTEXT, KVCache, KVDtype, KVPolicy
from specdec.pipeline.settings.decode_options import DecodeOptions

CONTEXT = 64
SINKS, WINDOW = 2, 12


def _window(bundle: Bundle, out: Path, **kwargs: object) -> Bundle:
    config = CompileConfig(output=out, target=GraphFlavour.cpu, max_context=CONTEXT, format=OutputFormat.onnx,
                           kv_cache=KVCache.window, kv_sinks=SINKS, kv_window=WINDOW, **kwargs)  # type: ignore[arg-type]
    return compile_bundle(config, bundle)


@pytest.fixture(scope="module")
def windowed(surgered_bundle, tmp_path_factory) -> Bundle:  # type: ignore[no-untyped-def]
    return _window(surgered_bundle, tmp_path_factory.mktemp("kv") / "window")


def test_the_policy_is_recorded_and_bounds_the_buffers(windowed: Bundle) -> None:
    table = windowed.manifest.buckets
    assert table is not None and table.kv_policy == KVPolicy(KVCache.window, sinks=SINKS, window=WINDOW)
    assert table.kv_policy.lossy and windowed.manifest.lineage[-1].config["kv_window"] == WINDOW
    quality = dump(windowed.manifest.reports)["compile"]["kv_quality"]  # measured against the full cache
    assert quality["tokens"] >= CONTEXT - 1 and quality["positions_past_reach"] > 0
    assert 0 <= quality["mismatch_rate"] <= quality["mismatch_rate_past_reach"] <= 1
    assert quality["perplexity_full"] > 1 and quality["perplexity_policy"] > 1
    assert quality["perplexity_delta"] == pytest.approx(quality["perplexity_policy"] - quality["perplexity_full"])
    engine = Engine(windowed.path)
    assert isinstance(engine.target, FusedRunner)
    assert engine.max_context == CONTEXT * POSITIONS_PER_CONTEXT
    for runner in (engine.target, engine.drafter.runner if engine.drafter else None):
        assert isinstance(runner, FusedRunner)
        assert [g.capacity for g in runner.groups] == [SINKS + 2 * WINDOW + ROUND_ROWS]
        assert runner.groups[0].sinks == SINKS and runner.groups[0].prefix == ""


def test_rows_equal_the_masked_dynamic_graph_across_the_window_edge(windowed: Bundle,  # type: ignore[no-untyped-def]
                                                                    surgered_bundle) -> None:
    """Random trees fed one after another, each accepting one path: the bounded, compacted
    buffers give the logits of the dynamic graph that keeps every row and hides what the policy
    drops; past the context, too."""
    policy = KVPolicy(KVCache.window, sinks=SINKS, window=WINDOW)
    fused = Engine(windowed.path).target
    assert isinstance(fused, FusedRunner)
    lockstep = Lockstep(fused, DynamicRunner(read_bundle(surgered_bundle.path).graphs["target"], policy=policy), 4)
    lockstep.prompt(30)  # longer than the window
    lockstep.trees_until(2 * CONTEXT)
    group = fused.groups[0]
    assert group.base > SINKS and group.live_rows(fused.length) <= SINKS + 2 * WINDOW + ROUND_ROWS


@pytest.mark.parametrize("exact", [False, True])
def test_speculative_equals_plain_past_the_context(windowed: Bundle, exact: bool) -> None:
    engine = Engine(windowed.path)
    engine.eos = set()  # the random tiny target says EOS at times: decode the whole length
    new = 3 * CONTEXT  # three contexts past the prompt: every tree crosses the moving window edge
    accepted = []
    for prompt in ([5, 6, 7], list(range(3, 40))):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=new, speculative=False, exact_layout=exact))
        for drafter in (DrafterKind.model, DrafterKind.lookup):
            spec = engine.generate(prompt, DecodeConfig(max_new_tokens=new, drafter=drafter, exact_layout=exact))
            assert spec.output_ids == plain.output_ids, (prompt, drafter)
            assert spec.stop_reason == "max_new_tokens" and len(spec.output_ids) == new
            accepted.append(spec.mean_accepted_len)
    assert max(accepted) > 1.0
    assert engine.target.kv_bytes < CONTEXT * engine.target.info.num_layers * 2 * 4 * 16 * 8  # bounded


def test_the_window_changes_the_output_only_past_the_window(windowed: Bundle, bench_bundle_cpu: Bundle) -> None:
    """Lossy, and measurably so: the first tokens (context within the window) are the full cache's."""
    prompt = [5, 6, 7]
    engines = [Engine(bench_bundle_cpu.path), Engine(windowed.path)]
    for engine in engines:
        engine.eos = set()
    full, window = (engine.generate(prompt, DecodeConfig(max_new_tokens=60, speculative=False)) for engine in engines)
    inside = WINDOW - len(prompt)
    assert window.output_ids[:inside] == full.output_ids[:inside]


def test_full_cache_still_stops_at_the_context(bench_bundle_cpu: Bundle) -> None:
    engine = Engine(bench_bundle_cpu.path)
    engine.eos = set()
    reply = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=400, speculative=False))
    assert reply.stop_reason == "max_context" and len(reply.output_ids) < 128
    with pytest.raises(InputError, match="context"):
        engine.generate(list(range(1, 200)), DecodeConfig(max_new_tokens=4))


def test_bad_policies_are_one_line_errors(surgered_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="window would keep everything"):
        compile_bundle(CompileConfig(output=tmp_path / "a", target=GraphFlavour.cpu, max_context=CONTEXT,
                                     kv_cache=KVCache.window, kv_window=CONTEXT), surgered_bundle)
    with pytest.raises(InputError, match="cpu flavour only"):
        compile_bundle(CompileConfig(output=tmp_path / "b", target=GraphFlavour.npu, max_context=CONTEXT,
                                     buckets=(8,), draft_buckets=(4,), prefill_chunk=16,
                                     kv_cache=KVCache.window, kv_window=8, kv_dtype=KVDtype.int8), surgered_bundle)
    with pytest.raises(InputError, match="applies to .*window only"):
        compile_bundle(CompileConfig(output=tmp_path / "c", target=GraphFlavour.cpu, kv_sinks=2), surgered_bundle)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_cli_compiles_a_window_policy_and_inspect_shows_it(surgered_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from specdec.cli.app import app

    runner = CliRunner()
    out = tmp_path / "w"
    result = runner.invoke(app, ["compile", str(surgered_bundle.path), "-o", str(out), "--target", "cpu",
                                 "--format", "onnx", "--max-context", str(CONTEXT), "--kv-cache", "window",
                                 "--kv-sinks", "2", "--kv-window", "12"])
    assert result.exit_code == 0, result.output
    assert "is lossy" in result.output and "perplexity" in result.output
    shown = runner.invoke(app, ["inspect", str(out)])
    assert shown.exit_code == 0 and "KV cache: window S=2 W=12 float32 (lossy)" in shown.output
    assert f"replies up to {CONTEXT * POSITIONS_PER_CONTEXT} positions" in shown.output
    bad = runner.invoke(app, ["compile", str(surgered_bundle.path), "-o", str(tmp_path / "x"), "--target", "cpu",
                              "--kv-sinks", "2"])
    assert bad.exit_code != 0 and "--kv-sinks applies to --kv-cache window only" in bad.output


def test_bench_decodes_past_the_context_under_the_window(windowed: Bundle, tmp_path: Path) -> None:
    from specdec.pipeline.bench.stage import BenchConfig, run_bench

    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text('{"id": "a", "input_ids": [5, 6, 7]}\n{"id": "b", "input_ids": [9, 10, 11, 12]}\n')
    outcome = run_bench(BenchConfig(output=tmp_path / "bench", prompts=prompts, repeats=1, tune=False,
                                    decode=DecodeOptions(max_new_tokens=3 * CONTEXT)), windowed)
    results = outcome.results
    assert results.lossless.checked and results.lossless.equal
    memory = results.memory
    assert memory is not None and memory.kv_policy == f"window S={SINKS} W={WINDOW} float32"
    assert max(r.tokens for r in memory.replies) > CONTEXT  # past the compiled context
    bound = (SINKS + 2 * WINDOW + ROUND_ROWS) * memory.kv_bytes_per_token  # type: ignore[operator]
    assert all(r.kv_bytes <= bound for r in memory.replies)


@pytest.fixture(scope="module")
def int8(surgered_bundle, tmp_path_factory) -> Bundle:  # type: ignore[no-untyped-def]
    config = CompileConfig(output=tmp_path_factory.mktemp("kv") / "int8", target=GraphFlavour.cpu, max_context=CONTEXT,
                           format=OutputFormat.onnx, kv_dtype=KVDtype.int8)
    return compile_bundle(config, surgered_bundle)


def test_int8_rows_are_a_quarter_of_the_bytes_and_speculation_stays_exact(int8: Bundle,  # type: ignore[no-untyped-def]
                                                                          bench_bundle_cpu: Bundle) -> None:
    table = int8.manifest.buckets
    assert table is not None and table.kv_policy.quantized and table.kv_policy.lossy
    assert not list((int8.path / "cpu").glob("*float*"))  # the float graph it was calibrated on is gone
    quality = dump(int8.manifest.reports)["compile"]["kv_quality"]
    assert quality["policy"] == "full int8" and 0 <= quality["mismatch_rate"] <= 1
    assert abs(quality["perplexity_delta"]) < 0.5 * quality["perplexity_full"]  # close to the float cache
    engine, float_engine = Engine(int8.path), Engine(bench_bundle_cpu.path)
    assert isinstance(engine.target, FusedRunner) and engine.target.kv_dtype == np.int8
    per_row = engine.target.kv_bytes / engine.target.max_context
    assert per_row <= 0.3 * float_engine.target.kv_bytes / float_engine.target.max_context
    engine.eos = set()
    for prompt in ([5, 6, 7], list(range(3, 30))):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=30, speculative=False))
        spec = engine.generate(prompt, DecodeConfig(max_new_tokens=30))
        assert spec.output_ids == plain.output_ids


def test_window_and_int8_combine(surgered_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = _window(surgered_bundle, tmp_path / "both", kv_dtype=KVDtype.int8)
    policy = bundle.manifest.buckets.kv_policy  # type: ignore[union-attr]
    assert policy.describe("float32") == f"window S={SINKS} W={WINDOW} int8"
    engine = Engine(bundle.path)
    engine.eos = set()
    assert isinstance(engine.target, FusedRunner) and engine.target.groups[0].buffers[0].dtype == np.int8
    plain = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=2 * CONTEXT, speculative=False))
    spec = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=2 * CONTEXT))
    assert spec.output_ids == plain.output_ids and len(plain.output_ids) == 2 * CONTEXT


@pytest.fixture(scope="module")
def half(surgered_bundle, tmp_path_factory) -> Bundle:  # type: ignore[no-untyped-def]
    config = CompileConfig(output=tmp_path_factory.mktemp("kv") / "half", target=GraphFlavour.cpu, max_context=CONTEXT,
                           format=OutputFormat.onnx, kv_dtype=KVDtype.float16)
    return compile_bundle(config, surgered_bundle)


@pytest.mark.parametrize("exact", [False, True])
def test_float16_rows_are_half_the_bytes_and_speculation_stays_exact(half: Bundle, bench_bundle_cpu: Bundle,
                                                                     exact: bool) -> None:
    """float16 rows: the attention runs in float16, so a tree's rows are seen as a later step sees
    them (onnxruntime's kernel would otherwise attend over a call's own rows at float32)."""
    table = half.manifest.buckets
    assert table is not None and table.kv_policy.dtype is KVDtype.float16 and table.kv_policy.lossy
    assert half.manifest.lineage[-1].config["kv_dtype"] == "float16"
    quality = dump(half.manifest.reports)["compile"]["kv_quality"]
    assert quality["policy"] == "full float16" and 0 <= quality["mismatch_rate"] <= 1
    assert abs(quality["perplexity_delta"]) < 0.1 * quality["perplexity_full"]
    engine, float_engine = Engine(half.path), Engine(bench_bundle_cpu.path)
    assert isinstance(engine.target, FusedRunner) and engine.target.kv_dtype == np.float16
    per_row = engine.target.kv_bytes / engine.target.max_context
    assert per_row == 0.5 * float_engine.target.kv_bytes / float_engine.target.max_context
    engine.eos = set()
    for prompt in ([5, 6, 7], list(range(3, 30))):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=30, speculative=False, exact_layout=exact))
        for drafter in (DrafterKind.model, DrafterKind.lookup):
            spec = engine.generate(prompt, DecodeConfig(max_new_tokens=30, drafter=drafter, exact_layout=exact))
            assert spec.output_ids == plain.output_ids, (prompt, drafter)
