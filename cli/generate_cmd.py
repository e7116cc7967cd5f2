"""`specdec generate BUNDLE --prompt TEXT | --prompts FILE.jsonl --output OUT.jsonl`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from specdec.cli.console import RichProgress, err, note, out, warn
from specdec.pipeline.bundle import Bundle
from specdec.pipeline.errors import InputError
from specdec.pipeline.generate import Generator, decode_settings, host_controllers
from specdec.pipeline.profiles import load_device, load_scenario
from specdec.pipeline.prompts import PromptItem, load_prompts
from specdec.pipeline.records.decode import DrafterKind, VerifyMode
from specdec.pipeline.runtime.controllers import NAMES as CONTROLLER_NAMES
from specdec.pipeline.settings import parse_controllers
from specdec.pipeline.staging import StagedFile


def _stats_table(rows: list[tuple[str, dict[str, Any]]], by_source: bool) -> Table:
    """Per-reply statistics; `by_source` adds accepted/proposed nodes of the model and of prompt lookup
    (only when lookup drafts: with the model alone they repeat the acceptance column)."""
    table = Table(title="generation statistics", title_justify="left")
    sources = ("model", "lookup") if by_source else ()
    columns = ("prompt", "tokens", "rounds", "mean accepted", "acceptance α",
               *(f"{name} acc/prop" for name in sources), "TTFT ms", "total ms", "tok/s", "stop")
    for column in columns:
        # prompt ids are what people look for: never cut them, let the numbers wrap their headers instead
        table.add_column(column, justify="right" if column not in ("prompt", "stop") else "left",
                         no_wrap=column == "prompt", min_width=len(column) if column == "prompt" else None)
    for prompt_id, s in rows:
        rate = s["new_tokens"] / (s["total_ms"] / 1e3) if s["total_ms"] else 0.0
        speculated = bool(s.get("speculative_rounds"))  # no speculative round: acceptance is undefined, not 0
        counts = [f"{s['by_source'][name]['accepted']}/{s['by_source'][name]['proposed']}" if speculated else "—"
                  for name in sources]
        table.add_row(escape(prompt_id), str(s["new_tokens"]), str(s["rounds"]),
                      f"{s['mean_accepted_len']:.2f}" if speculated else "—",
                      f"{s['acceptance_rate']:.2f}" if speculated else "—", *counts, f"{s['ttft_ms']:.1f}",
                      f"{s['total_ms']:.1f}", f"{rate:.1f}", s["stop_reason"])
    return table


def generate(
    bundle: Path = typer.Argument(..., help="Bundle directory (any stage); every file's sha256 is checked first."),
    prompt: str = typer.Option(None, "--prompt", "-p", help="Text to continue; streamed to the terminal."),
    prompts: Path = typer.Option(None, "--prompts", help="JSONL file: lines with 'id' and 'text' or 'input_ids'."),
    output: Path = typer.Option(None, "--output", "-o", help="JSONL file to write replies to (with --prompts)."),
    force: bool = typer.Option(False, "--force", help="Replace --output if it exists."),
    max_new_tokens: int = typer.Option(64, "--max-new-tokens", "-n", help="Tokens to generate at most."),
    temperature: float = typer.Option(0.0, help="0 = greedy; > 0 samples."),
    top_k: int = typer.Option(0, "--top-k", help="Keep the k most likely tokens (0 disables)."),
    top_p: float = typer.Option(1.0, "--top-p", help="Nucleus sampling mass (1 disables)."),
    seed: int = typer.Option(0, help="Seed of the Philox generator (reproducible across machines)."),
    mode: VerifyMode = typer.Option(None, help="Verification: greedy (temperature 0), match or rrs (sampling)."),
    tree_budget: int = typer.Option(None, "--tree-budget",
                                    help="Tree nodes verified per round, root included (profile's: 16 on local-cpu; "
                                         "clamped to a compiled bundle's largest bucket, with a warning)."),
    depth: int = typer.Option(None, help="Draft tree depth limit (the scenario's or profile's: 6 on local-cpu)."),
    width: int = typer.Option(None, help="Frontier nodes the draft expands per level (scenario's or profile's: 4)."),
    drafter: DrafterKind = typer.Option(None, "--drafter",
                                        help="Who drafts: model, lookup (prompt lookup, no model call) or "
                                             "model+lookup (default: the scenario's or profile's, else model; "
                                             "lookup on bundles without a draft graph)."),
    lookup_max_ngram: int = typer.Option(None, "--lookup-max-ngram",
                                         help="Longest context suffix prompt lookup matches (default 3)."),
    lookup_min_ngram: int = typer.Option(None, "--lookup-min-ngram",
                                         help="Shortest context suffix prompt lookup matches (default 1)."),
    profile: str = typer.Option("local-cpu", "--profile",
                                help="Device profile for the tree limits and controllers (name or YAML path)."),
    scenario: str = typer.Option(None, "--scenario", help="Prune template: code, chat, creative, knowledge (or YAML)."),
    controllers: str = typer.Option("none", "--controllers",
                                    help=f"Adaptive controllers: all, none, or a comma list of "
                                         f"{','.join(CONTROLLER_NAMES)}."),
    no_speculation: bool = typer.Option(False, "--no-speculation", help="Plain decoding with the target only."),
    truncate: bool = typer.Option(False, "--truncate", help="Keep the end of prompts longer than the context."),
    exact_layout: bool = typer.Option(None, "--exact-layout/--tree-layout",
                                      help="Exact layout: chains only, no single-row calls, so every token is "
                                           "computed bitwise as in plain decoding (default: on for int8-compute "
                                           "bundles, else trees)."),
    threads: int = typer.Option(0, help="onnxruntime intra-op threads (0 = auto: 1 for small graphs, else all)."),
    stats: bool = typer.Option(False, "--stats", help="Print a statistics table at the end."),
) -> None:
    """Stream text with speculative decoding from any bundle."""
    if (prompt is None) == (prompts is None):
        raise InputError("pass exactly one of --prompt TEXT or --prompts FILE.jsonl", "see `specdec generate --help`")
    if prompts is not None and output is None:
        raise InputError("--prompts needs --output FILE.jsonl", "say where the replies go")
    if prompt is not None and output is not None:
        raise InputError("--output is for --prompts FILE.jsonl", "--prompt streams its reply to the terminal")
    if prompt is not None and not prompt:
        raise InputError("--prompt is empty", "pass some text to continue")
    # Everything that can be checked is checked before the first token: the output (writable, not
    # clobbered), the bundle (every sha256), the settings, the controllers and every prompt.
    chosen = parse_controllers(controllers)
    staged = StagedFile(output, force=force) if output is not None else None
    items = load_prompts(prompts) if prompts is not None else [PromptItem("prompt", text=prompt)]
    template = load_scenario(scenario) if scenario else None
    device = load_device(profile)
    loaded = Bundle.load(bundle)
    settings = decode_settings(loaded.runtime_info(), {
        "max_new_tokens": max_new_tokens, "temperature": temperature, "top_k": top_k, "top_p": top_p, "seed": seed,
        "mode": mode, "speculative": False if no_speculation else None, "exact_layout": exact_layout,
        "tree_budget": tree_budget, "depth": depth, "width": width, "drafter": drafter,
        "lookup_max_ngram": lookup_max_ngram, "lookup_min_ngram": lookup_min_ngram}, device, template, threads=threads)
    config = settings.config
    for adjustment in settings.notes:
        warn(adjustment)
    controller = host_controllers(chosen, device, template, settings)
    generator = Generator(loaded, threads=threads)
    rows: list[tuple[str, dict[str, Any]]] = []
    if staged is None:
        ids = generator.prepare(items, config, truncate)[0]  # checked before the prompt is echoed
        out.print(prompt, end="", style="dim", highlight=False, markup=False)
        reply, _ = generator.run(ids, config, controller=controller,
                                 on_text=lambda text: out.print(text, end="", highlight=False, markup=False))
        out.print()
        rows.append(("prompt", reply.as_dict()))
        if reply.stop_reason == "max_context":
            note(f"stopped: the bundle's context of {generator.engine.max_context} tokens is full")
    else:
        records = []
        with staged, RichProgress().task("generating", total=len(items)) as task:
            for record in generator.run_all(items, config, truncate=truncate, controller=controller):
                staged.write(json.dumps(record) + "\n")
                records.append(record)
                rows.append((record["id"], record["stats"]))
                task.advance()
            staged.commit()
        full = [r["id"] for r in records if r["stats"]["stop_reason"] == "max_context"]
        if full:
            note(f"{len(full)} replies stopped at the context limit ({', '.join(full[:5])})")
        err.print(f"wrote {len(records)} replies to [bold]{escape(str(output))}[/]")
    if stats:
        err.print(_stats_table(rows, by_source=config.speculative and config.drafter.uses_lookup))
        err.print(f"settings: {settings.describe()}", highlight=False)
