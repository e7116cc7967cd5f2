"""The command-line options more than one command takes: one definition each (flag, help, default).

A command declares `threads: options.Threads = None`; its parameter name is the field of the
stage config it fills (`BenchConfig.threads`), so `config_from` builds the config from the
command's arguments and the error mapper writes a setting the library names (`threads`) as
the flag the user typed (`--threads`). An option left unset is None and the config's own
default applies: the built-in defaults live in the configs (and DecodeConfig), not here.
tests/cli/test_options.py checks that no command re-declares these flags and that every
command using one gives it the same default.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from specdec.pipeline.engine.controllers import NAMES as CONTROLLER_NAMES
from specdec.pipeline.errors import InputError
from specdec.pipeline.records.decode import BanPolicy, DrafterKind, VerifyMode
from specdec.pipeline.settings.fleet import parse_device
from specdec.pipeline.settings.profiles import RuntimeKind, Transport

C = TypeVar("C")


def config_from(config: type[C], arguments: Mapping[str, Any], *, build: Callable[..., C] | None = None,
                **converted: Any) -> C:
    """`config(**fields)` from a command's arguments named like its fields, the fields of a record it
    embeds flat (`records.codec.FLATTEN`: the DecodeOptions of bench, generate and tune) included;
    unset (None) ones keep the config's defaults. `converted` supplies fields the command parsed
    itself (a comma list, ...); `build` is the config's constructor from text where it has one
    (QuantizeConfig.from_text)."""
    given = {name: value for name, value in (dict(arguments) | converted).items() if value is not None}
    return (build or config)(**_fields(config, given))


def _fields(record: type, given: Mapping[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(record)
    fields: dict[str, Any] = {}
    for field in dataclasses.fields(record):
        if field.metadata.get("flatten"):
            nested = hints[field.name]
            fields[field.name] = nested(**_fields(nested, given))
        elif field.name in given:
            fields[field.name] = given[field.name]
    return fields


def read_ban(path: Path | None) -> tuple[str, ...] | None:
    """`--ban FILE`: one phrase per line (UTF-8; surrounding spaces and blank lines ignored)."""
    if path is None:
        return None
    phrases = tuple(line.strip() for line in _read(path, "ban").splitlines() if line.strip())
    if not phrases:
        raise InputError(f"--ban file '{path}' holds no phrase", "put one phrase on each line")
    return phrases


def read_json_schema(path: Path | None) -> str | None:
    """`--json-schema FILE`: the schema's text (DecodeConfig checks that it is JSON)."""
    return None if path is None else _read(path, "json-schema")


def _read(path: Path, flag: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"--{flag} file '{path}' does not exist", "check the path") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"--{flag} file '{path}' cannot be read ({exc})", "pass a readable UTF-8 text file") from None


def one_device(serials: list[str] | None, adb_host: str | None, adb_port: int | None) -> dict[str, Any]:
    """A command that runs on one device: its `serial`, `adb_host` and `adb_port` from `-s SERIAL` or
    `-s HOST:PORT/SERIAL` (which names the adb server too) and -H/-P."""
    if not serials:
        return {"serial": None, "adb_host": adb_host, "adb_port": adb_port}
    if len(serials) > 1:
        raise InputError(f"--serial is given {len(serials)} times; this command runs on one device",
                         "pass one --serial (`specdec bench --fleet` runs on several)")
    entry = parse_device(serials[0], host=adb_host, port=adb_port)
    return {"serial": entry.serial, "adb_host": entry.host, "adb_port": entry.port}


def parse_sizes(text: str | None, key: str) -> tuple[int, ...] | None:
    """`8,24,48` -> (8, 24, 48); `key` names the setting in the error."""
    if text is None:
        return None
    try:
        return tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        flag = "--" + key.replace("_", "-")
        raise InputError(f"{flag} '{text}' is not a comma-separated list of integers",
                         f"pass e.g. {flag} 8,24,48,96") from None


# ---- outputs and overwriting ------------------------------------------------------------------

# Every command that writes has `--output/-o`; what it names differs (a bundle, a results directory, a
# replies file), so only the stages' bundle output is shared.
BundleOutput = Annotated[Path, typer.Option("--output", "-o", help="Bundle directory to write.")]
Force = Annotated[bool, typer.Option("--force", help="Replace the output if it exists (only what specdec wrote).")]
Rebuild = Annotated[bool, typer.Option("--force", help="Build again even when the archive is cached.")]

# ---- where to run -----------------------------------------------------------------------------

Device = Annotated[Transport, typer.Option("--device", help="Where to run: local (this machine) or adb (a phone).")]
Profile = Annotated[str | None, typer.Option(
    "--profile", help="Device profile, a name or a YAML path (default: local-cpu; android-generic with --device adb).")]
Serial = Annotated[list[str] | None, typer.Option(
    "--serial", "-s", help="adb serial of the device, as `adb devices` lists it, or HOST:PORT/SERIAL for one on "
                           "another adb server (default: ANDROID_SERIAL, else the only device attached); repeated, "
                           "several phones side by side (a fleet) where a command takes several.")]
Fleet = Annotated[Path | None, typer.Option(
    "--fleet", help="Fleet file (YAML): the devices to run on side by side, each with its serial, adb server "
                    "(host, port), profile and label (docs/devices.md).")]
AdbHost = Annotated[str | None, typer.Option("--adb-host", "-H", help="Host of a remote adb server (device farm).")]
AdbPort = Annotated[int | None, typer.Option("--adb-port", "-P", help="Port of the adb server (default 5037).")]
Python = Annotated[str | None, typer.Option(
    "--python", help="Python on the device, e.g. /data/local/tmp/python/bin/python3 (default: the profile's "
                     "runtime.python).")]
Runtime = Annotated[RuntimeKind | None, typer.Option(
    "--runtime", help="What runs on the device: its own Python (device-python), the portable runtime pushed once "
                      "(portable), or auto: the device's Python if it has numpy and onnxruntime, else portable "
                      "(default: the profile's runtime.use).")]
Threads = Annotated[int | None, typer.Option(
    "--threads", help="onnxruntime intra-op threads of the target; 0 = auto: all cores (one for generic and static "
                      "graphs under 64 MiB; the draft always runs on one) (default: the profile's runtime.threads).")]

# ---- what to decode ---------------------------------------------------------------------------

Prompts = Annotated[Path | None, typer.Option(
    "--prompts", help="JSONL prompts, one {\"id\", \"text\", \"input_ids\" or chat \"messages\"} object per line.")]
Chat = Annotated[bool, typer.Option(
    "--chat", help="Apply the bundle's chat template (from the checkpoint's tokenizer files): each text prompt is one "
                   "user message. Prompt-file lines with \"messages\" always use it.")]
# `--calib` means prompts to a command that tunes, and text to one that calibrates weights: one option each
CalibPrompts = Annotated[Path | None, typer.Option(
    "--calib", help="JSONL prompts to calibrate the tree plan on (default: held-out prompts the run does not "
                    "measure).")]
CalibText = Annotated[Path | None, typer.Option(
    "--calib", help="Calibration text: plain text, or JSONL with 'text' or 'input_ids' lines; 32 tokens or more.")]
Scenario = Annotated[str | None, typer.Option(
    "--scenario", help="Scenario template: code, chat, creative, knowledge (or a YAML path).")]
MaxNewTokens = Annotated[int | None, typer.Option(
    "--max-new-tokens", "-n", help="Tokens per reply at most (default 64).")]
Temperature = Annotated[float | None, typer.Option(
    "--temperature", help="0 = greedy; > 0 samples from the target's distribution (default 0).")]
Mode = Annotated[VerifyMode | None, typer.Option(
    "--mode", help="Verification: greedy (temperature 0), match or rrs (sampling; default match).")]
Seed = Annotated[int | None, typer.Option(
    "--seed", help="Random seed (default 0): the same seed and inputs give the same result, on any machine.")]

# ---- the tree (default: the tuned plan's, else the scenario's, else the profile's) --------------

TreeBudget = Annotated[int | None, typer.Option(
    "--tree-budget", help="Tree nodes verified per round, root included (default: the plan's, else the profile's; "
                          "clamped to a compiled bundle's largest bucket, with a note).")]
Depth = Annotated[int | None, typer.Option(
    "--depth", help="Draft levels per round (default: the plan's, scenario's or profile's).")]
Width = Annotated[int | None, typer.Option(
    "--width", help="Frontier nodes the draft expands per level (default: the plan's, scenario's or profile's).")]
Drafter = Annotated[DrafterKind | None, typer.Option(
    "--drafter", help="Who drafts: model, lookup (prompt lookup, no model call) or model+lookup (default: the plan's, "
                      "scenario's or profile's, else model; lookup on bundles without a draft graph).")]
LookupMaxNgram = Annotated[int | None, typer.Option(
    "--lookup-max-ngram", help="Longest context suffix prompt lookup matches (default 3).")]
LookupMinNgram = Annotated[int | None, typer.Option(
    "--lookup-min-ngram", help="Shortest context suffix prompt lookup matches (default 1).")]
DraftMinProb = Annotated[float | None, typer.Option(
    "--draft-min-prob", help="Confidence gate: draft-model nodes whose path probability under the draft is below "
                             "this are not proposed (greedy and match; rrs ignores it; 0 = off; default: the "
                             "plan's, else 0).")]
ExactLayout = Annotated[bool | None, typer.Option(
    "--exact-layout/--tree-layout",
    help="Exact layout: chains only and no single-row calls (unless the target computes one row exactly, as "
         "fused w8a8 ones do), so every token is computed bitwise as in plain decoding (default: on for "
         "int8-compute bundles, else trees).")]
Controllers = Annotated[str | None, typer.Option(
    "--controllers", help=f"Adaptive controllers: all, none, or a comma list of {','.join(CONTROLLER_NAMES)} "
                          "(default: the command's, in its help).")]

# ---- constrained decoding (docs/constrained.md) -------------------------------------------------

Ban = Annotated[Path | None, typer.Option(
    "--ban", help="Banned phrases, one per line (UTF-8, matched on the reply's bytes, also across tokens) "
                  "(default: the scenario's or profile's list, else none).")]
BanPolicyOption = Annotated[BanPolicy | None, typer.Option(
    "--ban-policy", help="mask: never emit a token that completes a banned phrase; refuse: stop there and reply "
                         "with the refusal template (default mask).")]
Refusal = Annotated[str | None, typer.Option(
    "--refusal", help="The reply under --ban-policy refuse (default: the scenario's or profile's, else a built-in "
                      "sentence).")]
JsonSchema = Annotated[Path | None, typer.Option(
    "--json-schema", help="JSON schema file: every reply is JSON that follows it (compact separators).")]
Regex = Annotated[str | None, typer.Option(
    "--regex", help="Regular expression every reply matches in full.")]
