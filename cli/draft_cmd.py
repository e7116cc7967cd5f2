"""`specdec draft TARGET -o DRAFT_DIR`: a draft made from the target (a feature draft, or pruning + distillation)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from specdec.cli import options
from specdec.cli.console import RichProgress, err
from specdec.cli.render import human_bytes
from specdec.pipeline.draft import DraftConfig, make_draft
from specdec.pipeline.draft.clock import ClockKind
from specdec.pipeline.draft.config import DraftMethod, RequestSource, default_kind
from specdec.pipeline.draft.device import DraftDevice


def _prompt_mix(batches: dict[str, int] | None) -> str:
    """'; batches: 9 built-in, 4 recycled, 8 self-written' (older reports have no such record)."""
    if not batches:
        return ""
    return "; batches: " + ", ".join(f"{count} {kind}" for kind, count in sorted(batches.items()))


def feature_table(report: dict[str, Any]) -> Table:
    """A feature draft's figures (feature_stage.py's report)."""
    sizes, quality, data, made = report["sizes"], report["quality"], report["data"], report["draft"]
    table = Table(title="feature draft made from the target", title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    chain = quality["chain"]["5"]
    coverage = made["heldout_vocab_coverage"]
    rows = [
        ("reads the target's layer", str(made["feature_layer"])),
        ("draft vocabulary", f"{made['vocab_size']} of {made['target_vocab_size']} tokens"
                             + (f" ({coverage:.1%} of held-out answer tokens)" if coverage is not None else "")),
        ("parameters stored (the embedding is the target's)", f"{sizes['own_params'] / 1e6:.2f}M "
                                                              f"({human_bytes(sizes['own_bytes'])})"),
        ("target's answers", f"{data['rows']} rows, {data['answer_tokens']} answer tokens ({data['dtype']}"
                             f"{', ' + report['device'] if report.get('device') else ''})"
                             + _prompt_mix(data.get("batches_by_prompts"))),
        ("held-out first-token acceptance", f"{quality['alpha1']:.3f} over {quality['positions']} positions"),
        ("acceptance by depth 1-4", " / ".join(f"{a:.2f}" for a in quality["alpha_cond"][:4])),
        ("5-token chain: tokens a round", f"{chain['tokens_per_round']:.2f}"),
        ("training", f"{report['training']['steps']} steps; {report['minutes']:.1f} min ({report['clock']} clock)"),
    ]
    on_prompts = report.get("quality_eval_prompts")
    if on_prompts is not None:
        rows[7:7] = [  # after the held-out figures
            (f"first-token acceptance on {Path(on_prompts['file']).name}",
             f"{on_prompts['alpha1']:.3f} over {on_prompts['positions']} positions ({on_prompts['rows']} answers)"),
            ("  by depth 1-4", " / ".join(f"{a:.2f}" for a in on_prompts["alpha_cond"][:4])),
            ("  5-token chain: tokens a round", f"{on_prompts['chain']['5']['tokens_per_round']:.2f}"),
        ]
    for row in rows:
        table.add_row(*row)
    return table


def draft_table(report: dict[str, Any]) -> Table:
    sizes, quality, plan = report["sizes"], report["quality"], report["plan"]
    table = Table(title="draft made from the target", title_justify="left")
    table.add_column("figure")
    table.add_column("value", justify="right")
    rows = [
        ("layers kept (of the target's)", ", ".join(map(str, plan["layers"]))),
        ("KV heads / FFN channels per layer", f"{plan['kv_heads']} / {plan['intermediate']}"),
        ("parameters (own + shared with target)", f"{sizes['own_params'] / 1e6:.2f}M + "
                                                  f"{(sizes['params'] - sizes['own_params']) / 1e6:.2f}M"),
        ("bytes not shared with the target", f"{human_bytes(sizes['own_bytes'])} "
                                             f"({report['own_share_of_target']:.1%} of the target)"),
        ("held-out top-1 agreement", f"{quality['heldout_agreement']:.3f} "
                                     f"(at init {report['quality_at_init']['heldout_agreement']:.3f})"),
        ("on-policy next-token match", f"{quality['on_policy_match']:.3f}"),
        ("expected accepted tokens, 8-token chain", f"{quality['expected_accepted']:.2f}"),
        ("training", f"{report['steps']} steps, {report['minutes']:.1f} min"),
    ]
    if report.get("budget"):
        phases = report["budget"]["phases"]
        rows.append(("seconds spent / share: text, importance, distillation", ", ".join(
            f"{phase.get('spent_s') or 0:.0f} / {phase.get('share_s', 0):.0f}" for phase in phases.values())))
    for row in rows:
        table.add_row(*row)
    return table


def draft(
    target: Annotated[str, typer.Argument(help="Target checkpoint directory or .gguf file (llama, mistral, qwen2, "
                                               "qwen3), or a built-in: 'demo', 'demo-tiny'.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="Draft checkpoint directory to write.")],
    kind: DraftMethod = typer.Option(None, "--kind", help="feature: an EAGLE-style draft, one decoder layer over the "
                                                          "target's hidden states; pruned: the target pruned at its "
                                                          "width and distilled (default feature; pruned when "
                                                          "--size, --heads or --ffn is given)."),
    size: float = typer.Option(None, "--size", help="Draft's share of the target's decoder-layer weights, used for "
                                                    "what --layers/--ffn leave open (default 0.1)."),
    layers: int = typer.Option(None, "--layers", help="Decoder layers to keep, the most important by measured KL "
                                                      "(default: as many as --size allows)."),
    heads: int = typer.Option(None, "--heads", help="KV heads (whole GQA groups) to keep per layer, by Taylor "
                                                    "importance (default: all)."),
    ffn: int = typer.Option(None, "--ffn", help="FFN channels to keep per layer, a multiple of 64 (default: those "
                                                "holding 99% of the measured importance)."),
    calib: options.CalibText = None,
    minutes: float = typer.Option(None, "--minutes", help="Time budget of the whole run, in minutes (default: 15 "
                                                          "pruned, 30 feature; none when only --steps is given)."),
    clock: ClockKind = typer.Option(None, "--clock", help="feature: what --minutes counts, wall time (default) or "
                                                          "this process's CPU time per thread (a shared machine)."),
    vocab_size: int = typer.Option(None, "--vocab-size", help="feature: rows of the draft's head, the target's most "
                                                              "frequent answer tokens (default 8192)."),
    max_prompts: int = typer.Option(None, "--max-prompts", help="feature: at most this many prompts answered by "
                                                                "the target (default: what the budget allows)."),
    answer_tokens: int = typer.Option(None, "--answer-tokens", help="feature: tokens an answer may take "
                                                                    "(default 192)."),
    data: Path = typer.Option(None, "--data", file_okay=False, help="feature: keep the target's answers in this "
                                                                    "directory and reuse them in a later run with the "
                                                                    "same seed and text."),
    requests: RequestSource = typer.Option(None, "--requests", help="feature: whose chat requests the target "
                                                                    "answers for the training data: builtin "
                                                                    "(English requests from word lists, default), "
                                                                    "target (it writes them itself: any language or "
                                                                    "domain it knows) or mixed (half each)."),
    train_prompts: Path = typer.Option(None, "--train-prompts", dir_okay=False,
                                       help="feature: your own requests (JSONL with 'text', 'messages' or "
                                            "'input_ids' lines, as bench reads), answered by the target first; "
                                            "the built-in or --requests ones fill the rest of the budget."),
    eval_prompts: Path = typer.Option(None, "--eval-prompts", dir_okay=False,
                                      help="feature: also measure acceptance on the target's answers to these "
                                           "prompts (JSONL with 'text', 'messages' or 'input_ids' lines, as bench "
                                           "reads): your own requests, not the built-in held-out ones."),
    torch_device: DraftDevice = typer.Option(None, "--torch-device",
                                             help="feature: where the target answers and the draft trains: auto "
                                                  "(a CUDA GPU when torch sees one, else the CPU; default), cpu "
                                                  "or cuda."),
    steps: int = typer.Option(None, "--steps", help="Distillation steps (with --minutes: at most this many)."),
    samples: int = typer.Option(None, "--samples", help="Rows the target writes to distil on, sampled and as many "
                                                        "greedy continuations (default 512)."),
    seed: options.Seed = None,
    resume: bool = typer.Option(False, "--resume", help="Continue an interrupted run from its checkpoint (same "
                                                        "options): the weights equal an uninterrupted run's."),
    force: options.Force = False,
) -> None:
    """Make a draft from the target: a feature draft over its hidden states, or the target pruned and distilled.

    --kind feature (EAGLE-style): one decoder layer that reads the target's hidden states, trained on
    the target's own answers to chat prompts (--calib text for a target without a chat template), its
    head covering the target's most frequent answer tokens. --kind pruned: the draft is pruned at the
    target's width and distilled on the target's own text; its embedding, final norm and head are the
    target's tensors, so `export` stores them once; --calib adds your text to the target's own
    (default: none). --seed fixes the target's text and the training order."""
    if kind is None:
        kind = default_kind(locals())
    config = options.config_from(DraftConfig, locals())
    result = make_draft(config, progress=RichProgress())
    err.print(TABLES.get(result.report.get("kind", "pruned"), draft_table)(result.report))
    err.print(f"wrote [bold]{result.path}[/] — pair it with `specdec export {target} --draft {result.path}`")


TABLES = {"feature": feature_table, "pruned": draft_table}  # by the report's kind
