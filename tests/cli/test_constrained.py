"""`--ban`, `--ban-policy`, `--refusal`, `--json-schema`, `--regex` on generate; scenario compliance; bad input."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from specdec.cli.app import app
from specdec.pipeline.records.decode import BanPolicy
from specdec.pipeline.settings.profiles import load_scenario


def test_generate_with_constraints(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = str(bundle_factory("llama").path)
    runner = CliRunner()
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"id": "a", "text": "the quick"}\n{"id": "b", "text": "brown fox"}\n')
    free = runner.invoke(app, ["generate", bundle, "--prompts", str(prompts), "-o", str(tmp_path / "free"), "-n", "16"])
    assert free.exit_code == 0, free.output
    texts = [json.loads(line)["text"] for line in (tmp_path / "free").read_text().splitlines()]
    # random tiny models emit invalid UTF-8 too; a phrase is text, so take an ASCII word of the reply
    phrase = max(re.findall(r"[A-Za-z]{2,}", " ".join(texts)), key=len)
    (tmp_path / "ban.txt").write_text(f"\n{phrase}\n")
    banned = runner.invoke(app, ["generate", bundle, "--prompts", str(prompts), "-o", str(tmp_path / "banned"),
                                 "-n", "16", "--ban", str(tmp_path / "ban.txt")])
    assert banned.exit_code == 0, banned.output
    replies = [json.loads(line) for line in (tmp_path / "banned").read_text().splitlines()]
    assert all(phrase not in r["text"] for r in replies)

    refused = runner.invoke(app, ["generate", bundle, "--prompt", "the quick", "-n", "16", "--ban",
                                  str(tmp_path / "ban.txt"), "--ban-policy", "refuse", "--refusal", "No comment."])
    assert refused.exit_code == 0, refused.output
    free_one = runner.invoke(app, ["generate", bundle, "--prompt", "the quick", "-n", "16"]).output
    assert ("No comment." in refused.output) == (phrase in free_one)

    digits = runner.invoke(app, ["generate", bundle, "--prompt", "the", "-n", "8", "--regex", "[0-9]{3}"])
    assert digits.exit_code == 0, digits.output
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"type": "object", "properties": {"a": {"enum": [1, 2]}}, "required": ["a"],
                                  "additionalProperties": False}))
    out = tmp_path / "json.jsonl"
    shaped = runner.invoke(app, ["generate", bundle, "--prompts", str(prompts), "-o", str(out), "-n", "24",
                                 "--json-schema", str(schema)])
    assert shaped.exit_code == 0, shaped.output
    assert all(json.loads(json.loads(line)["text"])["a"] in (1, 2) for line in out.read_text().splitlines())


def test_bad_constraint_input_is_one_line(bundle_factory, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    bundle = str(bundle_factory("llama").path)
    runner = CliRunner()
    (tmp_path / "empty.txt").write_text("\n  \n")
    (tmp_path / "bad.json").write_text("{nope")
    cases = [
        (["--ban", str(tmp_path / "missing.txt")], "does not exist"),
        (["--ban", str(tmp_path / "empty.txt")], "holds no phrase"),
        (["--json-schema", str(tmp_path / "bad.json")], "not valid JSON"),
        (["--regex", "(unclosed"], "cannot be compiled"),
        (["--regex", "a", "--json-schema", str(tmp_path / "empty.txt")], ""),
    ]
    for flags, message in cases:
        result = runner.invoke(app, ["generate", bundle, "--prompt", "the", "-n", "4", *flags])
        assert result.exit_code != 0, flags
        assert message in result.output
        assert "Traceback" not in result.output


def test_scenario_names_a_ban_file_and_refusal(tmp_path: Path) -> None:
    (tmp_path / "ban.txt").write_text("alpha\nbeta gamma\n")
    path = tmp_path / "careful.yaml"
    path.write_text("compliance:\n  ban: ban.txt\n  ban_policy: refuse\n  refusal: Not here.\n")
    scenario = load_scenario(path)
    assert scenario.compliance.settings() == {"ban": ("alpha", "beta gamma"), "ban_policy": BanPolicy.refuse,
                                              "refusal": "Not here."}
