"""`specdec generate BUNDLE --prompt TEXT | --prompts FILE.jsonl --output OUT.jsonl`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape
from rich.table import Table

from specdec.cli import options
from specdec.cli.console import RichProgress, err, note, out, warn
from specdec.cli.render import narrow
from specdec.pipeline.bundle.staging import StagedFile
from specdec.pipeline.bundle.store import Bundle
from specdec.pipeline.errors import InputError
from specdec.pipeline.generate.stage import (
    GenerateConfig,
    Generator,
    generate_settings,
    host_controllers,
    local_threads,
)
from specdec.pipeline.inputs.prompts import PromptItem, load_prompts
from specdec.pipeline.settings.profiles import load_device, load_scenario
from specdec.pipeline.settings.resolve import parse_controllers


def _stats_table(rows: list[tuple[str, dict[str, Any]]], by_source: bool) -> Table:
    """Per-reply statistics; `by_source` adds accepted/proposed nodes of the model and of prompt lookup
    (only when lookup drafts: with the model alone they repeat the acceptance column). Under
    render.NARROW columns the table keeps the columns people compare (tokens, acceptance, speed, stop)."""
    table = Table(title="generation statistics", title_justify="left")
    sources = ("model", "lookup") if by_source else ()
    short = narrow(err)
    columns = (("prompt", "tokens", "mean accepted", "α", "tok/s", "stop") if short else
               ("prompt", "tokens", "rounds", "mean accepted", "acceptance α",
                *(f"{name} acc/prop" for name in sources), "TTFT ms", "total ms", "tok/s", "stop"))
    for column in columns:
        # prompt ids are what people look for: never cut them, let the numbers wrap their headers instead
        table.add_column(column, justify="right" if column not in ("prompt", "stop") else "left",
                         no_wrap=column == "prompt", min_width=len(column) if column == "prompt" else None)
    for prompt_id, s in rows:
        rate = s["new_tokens"] / (s["total_ms"] / 1e3) if s["total_ms"] else 0.0
        speculated = bool(s.get("speculative_rounds"))  # no speculative round: acceptance is undefined, not 0
        values = {"prompt": escape(prompt_id), "tokens": str(s["new_tokens"]), "rounds": str(s["rounds"]),
                  "mean accepted": f"{s['mean_accepted_len']:.2f}" if speculated else "—",
                  "TTFT ms": f"{s['ttft_ms']:.1f}", "total ms": f"{s['total_ms']:.1f}", "tok/s": f"{rate:.1f}",
                  "stop": s["stop_reason"]}
        values["acceptance α"] = values["α"] = f"{s['acceptance_rate']:.2f}" if speculated else "—"
        for name in sources:
            counts = s["by_source"][name]
            values[f"{name} acc/prop"] = f"{counts['accepted']}/{counts['proposed']}" if speculated else "—"
        table.add_row(*(values[column] for column in columns))
    return table


def generate(
    bundle: Path = typer.Argument(..., help="Bundle directory (any stage); every file's sha256 is checked first."),
    prompt: str = typer.Option(None, "--prompt", "-p", help="Text to continue; streamed to the terminal."),
    prompts: options.Prompts = None,
    chat: options.Chat = False,
    output: Path = typer.Option(None, "--output", "-o", help="JSONL file to write replies to (with --prompts)."),
    force: options.Force = False,
    max_new_tokens: options.MaxNewTokens = None,
    temperature: options.Temperature = None,
    top_k: int = typer.Option(None, "--top-k", help="Keep the k most likely tokens (default 0: off)."),
    top_p: float = typer.Option(None, "--top-p", help="Nucleus sampling mass (default 1: off)."),
    seed: options.Seed = None,
    mode: options.Mode = None,
    tree_budget: options.TreeBudget = None,
    depth: options.Depth = None,
    width: options.Width = None,
    drafter: options.Drafter = None,
    lookup_max_ngram: options.LookupMaxNgram = None,
    lookup_min_ngram: options.LookupMinNgram = None,
    draft_min_prob: options.DraftMinProb = None,
    profile: options.Profile = None,
    scenario: options.Scenario = None,
    controllers: options.Controllers = None,
    speculative: bool = typer.Option(None, "--speculation/--no-speculation",
                                     help="Speculate, or decode plainly with the target only (default: speculate "
                                          "unless the plan chose plain decoding)."),
    truncate: bool = typer.Option(False, "--truncate", help="Keep the end of prompts longer than the context."),
    exact_layout: options.ExactLayout = None,
    ban: options.Ban = None,
    ban_policy: options.BanPolicyOption = None,
    refusal: options.Refusal = None,
    json_schema: options.JsonSchema = None,
    regex: options.Regex = None,
    threads: options.Threads = None,
    stats: bool = typer.Option(False, "--stats", help="Print a statistics table at the end."),
) -> None:
    """Stream text with speculative decoding from any bundle.

    --prompt streams one reply to the terminal; --prompts FILE.jsonl writes replies to --output.
    Adaptive controllers run only when named (default: none)."""
    chosen = parse_controllers(controllers) if controllers is not None else ()
    request = options.config_from(GenerateConfig, locals(), controllers=chosen, ban=options.read_ban(ban),
                                  json_schema=options.read_json_schema(json_schema))
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
    inputs = (bundle, prompts, ban, json_schema)
    staged = StagedFile(output, force=force, sources=inputs) if output is not None else None
    items = load_prompts(prompts) if prompts is not None else [PromptItem("prompt", text=prompt)]
    template = load_scenario(request.scenario) if request.scenario else None
    device = load_device(request.profile)
    loaded = Bundle.load(bundle)
    settings = generate_settings(request, loaded, device, template)
    config = settings.config
    for adjustment in settings.notes:
        warn(adjustment)
    controller = host_controllers(request.controllers, device, template, settings)
    generator = Generator(loaded, threads=local_threads(request.threads, device), weight_format=settings.weight_format)
    generator.engine.constraints_for(config)  # a bad schema or pattern fails here, before the prompt is echoed
    rows: list[tuple[str, dict[str, Any]]] = []
    if staged is None:
        ids = generator.prepare(items, config, truncate, request.chat)[0]  # checked before the prompt is echoed
        # a chat reply is the assistant's turn, not a continuation of the user's text: on its own line
        out.print(prompt, end="\n" if request.chat else "", style="dim", highlight=False, markup=False)
        reply, _ = generator.run(ids, config, controller=controller,
                                 on_text=lambda text: out.print(text, end="", highlight=False, markup=False))
        out.print()
        rows.append(("prompt", reply.as_dict()))
        if reply.stop_reason == "max_context":
            note(f"stopped: the bundle's context of {generator.engine.max_context} tokens is full")
    else:
        records = []
        # every prompt is checked before the progress line starts: bad input stays one line
        replies = generator.run_all(items, config, truncate=truncate, chat=request.chat, controller=controller)
        with staged, RichProgress(stage="generate").task("generating", total=len(items)) as task:
            for record in replies:
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
