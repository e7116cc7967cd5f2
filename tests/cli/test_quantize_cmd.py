"""`specdec quantize` through the CLI: the report table, exit codes of bad input."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from specdec.cli.app import app

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def test_quantize_prints_the_quality_report(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = bundle_factory("llama")
    out = tmp_path / "q"
    result = runner.invoke(app, ["quantize", str(source.path), "-o", str(out), "--target-method", "awq",
                                 "--draft-method", "gptq", "--calib-samples", "4", "--calib-seq-len", "32",
                                 "--keep-float", "model.layers.1.mlp.*", "--symmetric"], env=WIDE)
    assert result.exit_code == 0, result.output
    for needle in ("quantization quality", "size on disk", "perplexity", "draft top-1 agreement",
                   "mean accepted length", "greedy lossless", "calibrated on 4 × 32 tokens", "MatMulNBits"):
        assert needle in result.output, needle
    manifest = json.loads((out / "manifest.json").read_text())
    graphs = manifest["quantization"]["graphs"]
    assert graphs["target"]["method"] == "awq" and graphs["draft"]["method"] == "gptq"
    assert graphs["target"]["symmetric"] is True
    assert graphs["target"]["layers"]["model.layers.1.mlp.up_proj"]["bits"] == "float"
    assert manifest["lineage"][-1]["config"]["keep_float"] == ["model.layers.1.mlp.*"]

    again = runner.invoke(app, ["quantize", str(out), "-o", str(tmp_path / "q2")])
    assert again.exit_code == 3 and "already quantized" in again.output


def test_bad_options(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    source = str(bundle_factory("llama").path)
    cases = [
        (["--method", "int3"], "unknown quantization method 'int3' for --method — use one of: rtn, gptq, awq"),
        (["--draft-method", "hqq"], "unknown quantization method 'hqq' for --draft-method"),
        (["--group-size", "48"], "--group-size 48 is not a power of two >= 16"),
        (["--group-size", "512"], "group size 512 divides no layer (widths: 64, 128)"),
        (["--accuracy-level", "7"], "--accuracy-level 7 is not one of"),
        (["--graphs", "drafts"], "--graphs drafts names no graph of a bundle — use target, draft or both"),
        (["--calib", str(tmp_path / "nope.txt")], "does not exist"),
    ]
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    cases.append((["--calib", str(empty)], f"--calib file '{empty}' is empty"))
    for extra, message in cases:
        result = runner.invoke(app, ["quantize", source, "-o", str(tmp_path / "out"), *extra], env=WIDE)
        assert result.exit_code == 2, (extra, result.output)
        assert message in " ".join(result.output.split()), (extra, result.output)
    assert not (tmp_path / "out").exists()


def test_the_profiles_format_is_the_default_and_the_flag_wins(bundle_factory, tmp_path: Path  # type: ignore[no-untyped-def]
                                                              ) -> None:
    source = str(bundle_factory("llama").path)
    small = ["--calib-samples", "4", "--calib-seq-len", "32"]
    formats = {}
    for name, extra in (("default", []), ("flag", ["--format", "nbits", "--method", "rtn"])):
        result = runner.invoke(app, ["quantize", source, "-o", str(tmp_path / name), *small, *extra], env=WIDE)
        assert result.exit_code == 0, (name, result.output)
        formats[name] = json.loads((tmp_path / name / "manifest.json").read_text())["quantization"]["format"]
    # local-cpu (the default profile) states w8a8; the flag gives MatMulNBits (phone profiles: test_config.py)
    assert formats == {"default": "w8a8", "flag": "MatMulNBits"}
