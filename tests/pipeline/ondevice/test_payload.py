"""The runtime zip pushed to devices is self-contained and torch-free."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

from specdec.pipeline.ondevice.payload import build_payload, write_runtime_zip
from specdec.pipeline.records.decode import DecodeConfig
from specdec.pipeline.records.results import RunSpec

BLOCKED = ["torch", "transformers", "onnxscript", "onnx", "pydantic", "tokenizers", "yaml", "typer", "rich",
           "matplotlib", "scipy"]


def test_zip_is_deterministic(tmp_path: Path) -> None:
    write_runtime_zip(tmp_path / "a.zip")
    write_runtime_zip(tmp_path / "b.zip")
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    names = zipfile.ZipFile(tmp_path / "a.zip").namelist()
    assert "specdec/pipeline/engine/device_main.py" in names
    assert not any("function.py" in n or "bench/" in n for n in names)  # no onnxscript, no host code


def test_device_runner_runs_from_the_zip_alone(bench_bundle, tmp_path: Path) -> None:
    """Only the zip provides specdec (the editable install is hidden); torch and friends are blocked."""
    spec = RunSpec(decode=DecodeConfig(max_new_tokens=6), prompts=[[5, 6, 7]], repeats=1, threads=1,
                   controllers={"enabled": ["fallback"]})
    payload = build_payload(bench_bundle, spec, tmp_path / "payload")
    pushed = {p.relative_to(payload / "bundle").as_posix() for p in (payload / "bundle").rglob("*") if p.is_file()}
    assert set(bench_bundle.runner_files()) == pushed - {"manifest.json"}
    # the npu variants (q x context) and the weights files they share
    assert {"buckets/target.weights", "buckets/draft.weights"} <= pushed
    assert any(name.endswith("_c128.onnx") for name in pushed) and not any(name.endswith(".ort") for name in pushed)
    script = textwrap.dedent(f"""
        import sys
        sys.meta_path[:] = [f for f in sys.meta_path if "Editable" not in type(f).__name__]
        root = {str(Path(__file__).resolve().parents[3])!r}
        sys.path[:] = [{str(payload / "runtime.zip")!r}] + [p for p in sys.path if p and p.rstrip("/") != root]
        for name in list(sys.modules):
            if name.startswith("specdec"):
                del sys.modules[name]
        for name in {BLOCKED!r}:
            sys.modules[name] = None
        from specdec.pipeline.engine import device_main
        assert device_main.__file__.startswith({str(payload / "runtime.zip")!r}), device_main.__file__
        sys.exit(device_main.main([{str(payload / "run.json")!r}]))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    events = [json.loads(line) for line in (payload / "events.jsonl").read_text().splitlines()]
    replies = [e for e in events if e["type"] == "reply"]
    assert {r["mode"] for r in replies} == {"plain", "speculative"}
    assert replies[0]["output_ids"] == replies[1]["output_ids"]
    assert events[-1]["type"] == "done"
