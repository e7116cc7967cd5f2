"""The npu flavour under a window KV policy (engine/static_window.py): one ring of S + W + room
slots, rows placed by the runner, masks by position. It equals the masked dynamic graph row for
row across the window's edge and past the context, and speculative decoding equals plain
decoding under it, trees crossing the window's edge included."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.lockstep import Lockstep

from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.bundle.summary import kv_cache
from specdec.pipeline.compile import CompileConfig, GraphFlavour, OutputFormat, compile_bundle
from specdec.pipeline.compile.config import window_slots
from specdec.pipeline.engine.bundle_info import read_bundle
from specdec.pipeline.engine.engine import Engine
from specdec.pipeline.engine.runner import DynamicRunner
from specdec.pipeline.engine.static_window import StaticWindowRunner
from specdec.pipeline.errors import InputError
from specdec.pipeline.records.codec import dump
from specdec.pipeline.records.decode import DecodeConfig, DrafterKind
from specdec.pipeline.records.kv_policy import POSITIONS_PER_CONTEXT, KVCache, KVDtype, KVPolicy

CONTEXT = 64
SINKS, WINDOW = 2, 12
BUCKETS, DRAFT_BUCKETS, CHUNK = (4, 8, 16), (1, 4), 16
SLOTS = SINKS + WINDOW + 2 * 16


def _config(out: Path, **kwargs: object) -> CompileConfig:
    settings: dict[str, object] = {"output": out, "target": GraphFlavour.npu, "max_context": CONTEXT,
                                   "format": OutputFormat.onnx, "buckets": BUCKETS, "draft_buckets": DRAFT_BUCKETS,
                                   "prefill_chunk": CHUNK, "kv_cache": KVCache.window, "kv_sinks": SINKS,
                                   "kv_window": WINDOW, **kwargs}
    return CompileConfig(**settings)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ring(surgered_bundle, tmp_path_factory) -> Bundle:  # type: ignore[no-untyped-def]
    return compile_bundle(_config(tmp_path_factory.mktemp("static-window") / "b"), surgered_bundle)


def test_the_variants_span_one_ring_and_the_policy_is_recorded(ring: Bundle) -> None:
    table = ring.manifest.buckets
    assert table is not None and table.kv_policy == KVPolicy(KVCache.window, sinks=SINKS, window=WINDOW)
    assert window_slots(table.kv_policy, 16) == SLOTS
    assert {v.context for variants in table.graphs.values() for v in variants} == {SLOTS}
    assert kv_cache(ring.manifest)["slots"] == SLOTS  # what inspect shows
    quality = dump(ring.manifest.reports)["compile"]["kv_quality"]
    assert quality["positions_past_reach"] > 0 and 0 <= quality["mismatch_rate"] <= 1
    engine = Engine(ring.path)
    assert engine.max_context == CONTEXT * POSITIONS_PER_CONTEXT
    for runner in (engine.target, engine.drafter.runner if engine.drafter else None):
        assert isinstance(runner, StaticWindowRunner) and runner.slots == SLOTS
        assert runner.kv_bytes == SLOTS * 2 * runner.info.num_layers * runner.info.num_kv_heads \
            * runner.info.head_dim * 4


def test_rows_equal_the_masked_dynamic_graph_across_the_window_edge(ring: Bundle,  # type: ignore[no-untyped-def]
                                                                    surgered_bundle) -> None:
    """A prompt longer than the largest bucket (fed in chunks), then random trees one after
    another, each accepting one path: the ring gives the logits of the dynamic graph that keeps
    every row and hides what the policy drops, past the context too."""
    policy = KVPolicy(KVCache.window, sinks=SINKS, window=WINDOW)
    runner = Engine(ring.path).target
    assert isinstance(runner, StaticWindowRunner)
    lockstep = Lockstep(runner, DynamicRunner(read_bundle(surgered_bundle.path).graphs["target"], policy=policy), 7)
    lockstep.prompt(40)  # chunks, past the window
    lockstep.trees_until(2 * CONTEXT)
    assert runner.kv_live_bytes <= (SINKS + WINDOW) * runner.kv_bytes // SLOTS


@pytest.mark.parametrize("exact", [False, True])
def test_speculative_equals_plain_past_the_context(ring: Bundle, exact: bool) -> None:
    engine = Engine(ring.path)
    engine.eos = set()  # the random tiny target says EOS at times: decode the whole length
    new = 3 * CONTEXT  # past the context: every tree crosses the moving window edge
    accepted = []
    for prompt in ([5, 6, 7], list(range(3, 40))):
        plain = engine.generate(prompt, DecodeConfig(max_new_tokens=new, speculative=False, exact_layout=exact))
        assert plain.stop_reason == "max_new_tokens" and len(plain.output_ids) == new
        for drafter in (DrafterKind.model, DrafterKind.lookup):
            spec = engine.generate(prompt, DecodeConfig(max_new_tokens=new, drafter=drafter, exact_layout=exact))
            assert spec.output_ids == plain.output_ids, (prompt, drafter)
            accepted.append(spec.mean_accepted_len)
    assert max(accepted) > 1.0


def test_the_ring_equals_the_fused_window(ring: Bundle, surgered_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Both flavours under the same policy decode the same greedy reply (one definition of positions)."""
    fused = compile_bundle(CompileConfig(output=tmp_path / "cpu", target=GraphFlavour.cpu, max_context=CONTEXT,
                                         format=OutputFormat.onnx, kv_cache=KVCache.window, kv_sinks=SINKS,
                                         kv_window=WINDOW), surgered_bundle)
    replies = []
    for bundle in (ring, fused):
        engine = Engine(bundle.path)
        engine.eos = set()
        reply = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=2 * CONTEXT, speculative=False))
        replies.append(reply.output_ids)
    assert replies[0] == replies[1]


def test_npu_window_settings_are_checked(surgered_bundle, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(InputError, match="apply to .*full only"):
        compile_bundle(_config(tmp_path / "a", context_buckets=(32,)), surgered_bundle)
    with pytest.raises(InputError, match="int8 is built for the cpu flavour only"):
        compile_bundle(_config(tmp_path / "b", kv_dtype=KVDtype.int8), surgered_bundle)
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
