"""The runtime imports and runs with torch, transformers and every non-device dependency blocked."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BLOCKED = ["torch", "transformers", "onnxscript", "onnx", "pydantic", "tokenizers", "yaml", "typer", "rich",
           "matplotlib", "scipy", "safetensors"]


def test_runtime_runs_without_torch(bundle_factory) -> None:  # type: ignore[no-untyped-def]
    bundle = bundle_factory("llama")
    script = textwrap.dedent(f"""
        import sys
        for name in {BLOCKED!r}:
            sys.modules[name] = None  # any import of these now raises ImportError
        from specdec.pipeline.engine.engine import Engine
        from specdec.pipeline.records.decode import DecodeConfig
        engine = Engine({str(bundle.path)!r})
        greedy = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=8))
        sampled = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=8, temperature=0.8, mode="rrs"))
        plain = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=8, speculative=False))
        assert greedy.output_ids == plain.output_ids, (greedy.output_ids, plain.output_ids)
        for drafter in ("lookup", "model+lookup"):
            copied = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=8, drafter=drafter))
            assert copied.output_ids == plain.output_ids, (drafter, copied.output_ids)
        banned = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=8, ban=("e",), regex="[a-z ]+"))
        plain_banned = engine.generate([5, 6, 7], DecodeConfig(max_new_tokens=8, ban=("e",), regex="[a-z ]+",
                                                               speculative=False))
        assert banned.output_ids == plain_banned.output_ids, (banned.output_ids, plain_banned.output_ids)
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in {BLOCKED!r} and sys.modules[m] is not None)
        assert not loaded, loaded
        print("ok", len(greedy.output_ids), len(sampled.output_ids))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok 8 8")
