"""The benchmark scripts still run: each answers --help, and the cheap ones complete a tiny run.

They are scripts, not tests (their numbers are in benchmarks/RESULTS-archive.md); this only keeps them from
rotting as the code they drive changes. They run in this process, as `python benchmarks/X.py` would.
"""

from __future__ import annotations

import json
import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
# scripts with a command line (common.py is a helper, peer_runners.py a worker peers.py starts)
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if "argparse.ArgumentParser" in p.read_text())


def _run(monkeypatch: pytest.MonkeyPatch, script: str, *argv: str) -> None:
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the scripts import common.py as a top-level module
    monkeypatch.setattr(sys, "argv", [script, *argv])
    runpy.run_path(str(BENCHMARKS / script), run_name="__main__")


def test_every_script_is_found() -> None:
    assert {"peers.py", "round_profile.py", "adaptive_vs_fixed.py", "formats.py"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_answers_help(script: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
                             ) -> None:
    with pytest.raises(SystemExit) as done:
        _run(monkeypatch, script, "--help")
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("usage:")


@pytest.mark.slow
def test_round_profile_tiny_run(bench_bundle_cpu, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                capsys: pytest.CaptureFixture[str]) -> None:
    _run(monkeypatch, "round_profile.py", str(bench_bundle_cpu.path), "--threads", "1", "--prompts", "1",
         "--tokens", "4", "--repeats", "1")
    out = capsys.readouterr().out
    assert out.startswith("plan: ") and "plain" in out and "speculative" in out


@pytest.mark.slow
def test_adaptive_vs_fixed_tiny_run(bundle_factory, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                                    capsys: pytest.CaptureFixture[str]) -> None:
    _run(monkeypatch, "adaptive_vs_fixed.py", "--bundle", str(bundle_factory("llama").path), "--tokens", "4",
         "--prompts", "2")
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"plain", "fixed", "adaptive"} and report["plain"]["tokens_per_s"] > 0


@pytest.mark.slow
def test_toolchain_scale_tiny_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    stages = ["export", "surgery", "quantize-rtn", "compile-cpu", "tune"]
    _run(monkeypatch, "toolchain_scale.py", "--sizes", "tiny", "--stages", ",".join(stages),
         "--work", str(tmp_path), "--quantize-args", "--calib-samples 2 --calib-seq-len 32")
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| tiny")]
    assert [row.split(" | ")[2] for row in rows] == ["build checkpoint", *stages]
    assert all(row.endswith("| 0 |") for row in rows), rows


@pytest.mark.slow
def test_constrained_tiny_run(bundle_factory, monkeypatch: pytest.MonkeyPatch,  # type: ignore[no-untyped-def]
                              capsys: pytest.CaptureFixture[str]) -> None:
    _run(monkeypatch, "constrained.py", str(bundle_factory("llama").path), "--prompts", "2", "--tokens", "6",
         "--threads", "1")
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"none", "ban mask", "ban refuse", "json_schema", "regex", "ban mask, draft unconstrained"}
    assert all(case["speculative_equals_plain"] for case in report.values())


def test_realistic_growth_in_width_keeps_the_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """benchmarks/realistic.py --hidden: wider, deeper, the demo target's logits (float rounding aside)."""
    import torch
    from transformers import AutoModelForCausalLM

    from specdec.pipeline.checkpoints.builtin import tiny_dir as demo_dir

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from realistic import grow

    source = AutoModelForCausalLM.from_pretrained(str(demo_dir("target")), dtype=torch.float32).eval()
    grown = grow(layers=6, intermediate=1024, hidden=2 * source.config.hidden_size)
    assert grown.config.hidden_size == 512 and grown.config.num_attention_heads == 16
    ids = torch.randint(0, source.config.vocab_size, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected, got = source(ids).logits, grown(ids).logits
    assert torch.equal(expected.argmax(-1), got.argmax(-1))
    assert float((expected - got).abs().max()) < 1e-3


def test_toolchain_scale_draft_stage_notes_the_drafts_sharing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    _run(monkeypatch, "toolchain_scale.py", "--sizes", "tiny", "--stages", "draft", "--work", str(tmp_path),
         "--draft-args", "--steps 2 --samples 8 --layers 1")
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| tiny")]
    assert [row.split(" | ")[2] for row in rows] == ["build checkpoint", "draft"]
    assert "(1 layers, 2 KV heads" in rows[1] and "shared" in rows[1] and rows[1].endswith("|"), rows


# a chat template for the tiny checkpoint, so real_peers.py takes its chat path
_TINY_CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{% endfor %}"
                       "{% if add_generation_prompt %}<|assistant|>{% endif %}")


@pytest.mark.slow
def test_real_peers_tiny_run(pair_factory, tmp_path: Path,  # type: ignore[no-untyped-def]
                             monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """The reference and specdec's fp32 rows end to end (CLI export -> surgery -> compile -> tune) on a tiny
    checkpoint; the peers are left out so the test runs whether they are installed or not."""
    target, _ = pair_factory("llama", chat_template=_TINY_CHAT_TEMPLATE)
    out = tmp_path / "real_peers.json"
    _run(monkeypatch, "real_peers.py", "--hf-dir", str(target), "--only", "specdec fp32", "--prompts", "2",
         "--tokens", "6", "--repeats", "1", "--threads", "1", "--ppl-window", "16", "--ppl-windows", "2",
         "--cache", str(tmp_path / "cache"), "--json", str(out))
    printed = capsys.readouterr().out
    assert "| transformers | fp32 | plain |" in printed and "| specdec | fp32 | speculative |" in printed
    report = json.loads(out.read_text())
    rows = {row["key"]: row for row in report["rows"]}
    assert set(rows) == {"transformers fp32 plain", "specdec fp32 plain", "specdec fp32 speculative"}
    assert all(len(output) <= 6 for row in rows.values() for output in row["outputs"])
    assert rows["transformers fp32 plain"]["identical_to_reference"] == 2
    assert rows["specdec fp32 speculative"]["identical_to_own_plain"] == 2  # lossless
    perplexities = {row["perplexity"] for row in rows.values()}
    assert all(isinstance(p, float) and p > 1 for p in perplexities)


def test_real_peers_agreement_and_options() -> None:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from real_peer_report import divergence
        from real_peers import chosen, parse_options
    finally:
        sys.path.remove(str(BENCHMARKS))
    assert divergence([[1, 2, 3], [4, 5], [7]], [[1, 2, 3], [4, 6], [7, 8]]) == (1, 1)  # a prefix differs at its end
    assert divergence([[1]], [[1]]) == (1, None)
    assert parse_options("ngram_size=4,ngram_chained_lookup=true, x=a") == {
        "ngram_size": 4, "ngram_chained_lookup": True, "x": "a"}
    assert chosen("llama.cpp Q4_0 lookup", ["llama.cpp Q4_0"]) and not chosen("llama.cpp Q4_0 lookup", ["llama"])


@pytest.mark.slow
def test_answer_rate_tiny_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                              capsys: pytest.CaptureFixture[str]) -> None:
    from support.tiny_models import make_model, make_tokenizer, save

    tokenizer = make_tokenizer()
    target = save(make_model("llama", len(tokenizer), layers=2, hidden=64, seed=5), tokenizer, tmp_path / "target")
    _run(monkeypatch, "answer_rate.py", str(target), "--rows", "4", "--prompts", "6", "--threads", "1")
    report = json.loads(capsys.readouterr().out)
    assert report["batch"]["rows"] == 4 and report["batch"]["prompts"] == 6 and report["batch"]["answer_tokens"] > 0
    assert report["decode_share_of_ceiling"] > 0 and report["matmul_ceiling_tokens_per_s"] > 0
    measured = report["default_run_answer_tokens"]["measured"]
    assert measured == pytest.approx(report["answer_tokens_per_s"] * 30 * 60 * 0.7, rel=0.01)
