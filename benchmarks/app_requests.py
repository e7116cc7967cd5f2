"""A stand-in app's requests for `specdec draft --train-prompts`: a code assistant asked to explain
functions of Python's standard library, as two JSONL files whose functions never overlap.

    .venv/bin/python benchmarks/app_requests.py OUT_DIR [--train 1500] [--eval 48] [--seed 0]

`OUT_DIR/train.jsonl` draws from modules a-m and `OUT_DIR/eval.jsonl` from modules n-z (the name's
first letter, leading underscores dropped), each a function of 5-20 lines wrapped as "Explain what
this Python function does:". The A/B of benchmarks/RESULTS-archive.md (2026-12-07) ran
`specdec -v draft demo --minutes 12 --clock cpu --eval-prompts OUT_DIR/eval.jsonl -o DIR`, with and
without `--train-prompts OUT_DIR/train.jsonl`.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sysconfig
import textwrap
from pathlib import Path

MIN_LINES, MAX_LINES, MAX_CHARS = 5, 20, 900


def requests(library: Path) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    """(modules a-m, modules n-z): one request per short function, in file order."""
    first: list[dict[str, str]] = []
    second: list[dict[str, str]] = []
    for path in sorted(library.glob("*.py")):
        try:
            source = path.read_text()
            tree = ast.parse(source)
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        lines = source.splitlines()
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.end_lineno is None or node.name.startswith("test"):
                continue
            if not MIN_LINES <= node.end_lineno - node.lineno + 1 <= MAX_LINES:
                continue
            body = textwrap.dedent("\n".join(lines[node.lineno - 1:node.end_lineno]))
            if len(body) > MAX_CHARS:
                continue
            item = {"id": f"{path.stem}.{node.name}",
                    "text": f"Explain what this Python function does:\n\n```python\n{body}\n```"}
            (first if path.stem.lstrip("_")[:1] <= "m" else second).append(item)
    return first, second


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--train", type=int, default=1500, help="at most this many training requests")
    parser.add_argument("--eval", type=int, default=48, help="evaluation requests")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    train, held_out = requests(Path(sysconfig.get_paths()["stdlib"]))
    rng = random.Random(args.seed)
    rng.shuffle(train)
    rng.shuffle(held_out)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, items in (("train.jsonl", train[:args.train]), ("eval.jsonl", held_out[:args.eval])):
        (args.out / name).write_text("".join(json.dumps(item) + "\n" for item in items))
    print(json.dumps({"train": min(len(train), args.train), "eval": min(len(held_out), args.eval),
                      "available": [len(train), len(held_out)]}))


if __name__ == "__main__":
    main()
