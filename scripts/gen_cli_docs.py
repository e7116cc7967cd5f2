"""Write docs/cli.md, the command-line reference, from the Typer app (typer's own Markdown generator).

    python scripts/gen_cli_docs.py          # regenerate docs/cli.md after changing a command or option
    python scripts/gen_cli_docs.py --check  # exit 1 if docs/cli.md is out of date (the test suite runs this)
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"
COMMAND = "python scripts/gen_cli_docs.py"
HEADER = (f"<!-- Generated from the Typer app by `{COMMAND}`; do not edit by hand. -->\n\n"
          "# Command-line reference\n\n"
          "Every command prints one line `error: PROBLEM — FIX` on bad input and exits with the code of its "
          "error class (see the README's exit codes). `SPECDEC_DEBUG=1` shows the traceback.\n\n")


def render() -> str:
    os.environ["COLUMNS"] = "100"  # help text does not depend on the terminal, but be sure
    import typer
    from typer.cli import get_docs_for_click

    from specdec.cli.app import app

    command = typer.main.get_command(app)
    context = typer.Context(command, info_name="specdec")
    body = get_docs_for_click(obj=command, ctx=context, name="specdec", title="`specdec`", indent=1)
    return HEADER + body.strip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="fail if docs/cli.md differs from the app")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not DOC.is_file() or DOC.read_text() != text:
            print(f"{DOC.relative_to(Path.cwd()) if DOC.is_relative_to(Path.cwd()) else DOC} is out of date with "
                  f"the CLI: run `{COMMAND}` and commit the result", file=sys.stderr)
            return 1
        return 0
    DOC.parent.mkdir(exist_ok=True)
    DOC.write_text(text)
    print(f"wrote {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
