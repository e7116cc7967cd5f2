"""Shared options are defined once (cli/options.py): no command re-declares their flags, and every command
using one gives it the same default; parameters are named like the config fields they fill."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import typer

from specdec.cli import options
from specdec.cli.app import app
from specdec.cli.console import command_options
from specdec.pipeline.bench import BenchConfig
from specdec.pipeline.compile import CompileConfig
from specdec.pipeline.errors import InputError
from specdec.pipeline.generate.stage import GenerateConfig
from specdec.pipeline.records.codec import record_keys
from specdec.pipeline.tune import TuneConfig


def _commands(typer_app: typer.Typer, prefix: str = "") -> Iterator[tuple[str, Callable[..., Any]]]:
    for info in typer_app.registered_commands:
        assert info.callback is not None
        yield f"{prefix}{info.name}", info.callback
    for group in typer_app.registered_groups:
        assert group.typer_instance is not None
        yield from _commands(group.typer_instance, f"{prefix}{group.name} ")


def _long_flag(info: typer.models.OptionInfo, parameter: str) -> str:
    """The option's long flag as Typer reads it (declared, or made from the parameter's name)."""
    declared = [d.split("/")[0] for d in info.param_decls or () if d.startswith("--")]
    return declared[0] if declared else "--" + parameter.replace("_", "-")


def _shared(value: object) -> typer.models.OptionInfo | None:
    """The option of an `Annotated` alias of cli/options.py (flags as Typer reads them: the first is `default`)."""
    if typing.get_origin(value) is not typing.Annotated:
        return None
    return next((m for m in value.__metadata__ if isinstance(m, typer.models.OptionInfo)), None)  # type: ignore[attr-defined]


def _flag(info: typer.models.OptionInfo) -> str:
    return str(next(d for d in (info.default, *info.param_decls) if str(d).startswith("--"))).split("/")[0]


# flag -> its definitions: one per meaning (`--calib` is prompts to tune on, or calibration text)
SHARED: dict[str, list[typer.models.OptionInfo]] = {}
for _info in map(_shared, vars(options).values()):
    if _info is not None:
        SHARED.setdefault(_flag(_info), []).append(_info)


def _uses(command: Callable[..., Any]) -> dict[str, typer.models.OptionInfo]:
    """Parameter -> the shared option object its annotation carries, if any."""
    hints = typing.get_type_hints(command, include_extras=True)
    return {name: info for name, hint in hints.items() if (info := _shared(hint)) is not None}


def test_shared_flags_are_declared_only_in_options_module() -> None:
    """(`--output` names a different thing per command: only the stages' bundle output is shared.)"""
    assert len(SHARED) > 20
    redeclared = []
    for name, command in _commands(app):
        uses = _uses(command)
        for parameter, info in command_options(command).items():
            flag = _long_flag(info, parameter)
            if flag in SHARED and flag != "--output" and not any(uses.get(parameter) is i for i in SHARED[flag]):
                redeclared.append(f"{name} {flag} ({parameter})")
    assert not redeclared, "use the option from cli/options.py"


def test_shared_help_names_no_command() -> None:
    """A shared option's help says what it means wherever it is used; what a command adds goes in its own
    docstring (bench's --seed help once spoke of quantize's windows and draft's training order)."""
    # commands whose names are also nouns of the help texts (the draft model, the portable runtime) by
    # their "NAME:" form only
    nouns = {"draft", "export", "runtime", "profiles", "devices"}
    names = {name.split()[0] for name, _ in _commands(app)}
    for flag, infos in SHARED.items():
        for info in infos:
            text = str(info.help)
            words = set(text.replace(";", " ").replace(":", " ").replace(",", " ").replace("'s", " ").split())
            assert not words & (names - nouns) and not any(f"{n}:" in text for n in nouns), (flag, text)


def test_command_help_is_the_docstring() -> None:
    """Help lives in one place: `specdec CMD --help` is the command function's docstring."""
    for name, command in _commands(app):
        info = next(i for i in [*app.registered_commands,
                                *(c for g in app.registered_groups if g.typer_instance is not None
                                  for c in g.typer_instance.registered_commands)] if i.callback is command)
        assert info.help is None and command.__doc__, name


def test_a_shared_option_has_one_default_everywhere() -> None:
    defaults: dict[str, set[str]] = {}
    for _, command in _commands(app):
        signature = inspect.signature(command)
        for parameter, info in _uses(command).items():
            flag = next(str(d) for d in (info.default, *info.param_decls) if str(d).startswith("--"))
            defaults.setdefault(flag, set()).add(repr(signature.parameters[parameter].default))
    assert defaults and {flag: d for flag, d in defaults.items() if len(d) > 1} == {}


def test_parameters_are_named_like_config_fields() -> None:
    """So `config_from` fills the config, and an error naming a setting names the flag (no mapping table);
    a misspelt parameter would be left out of the config silently, so it fails here."""
    commands = dict(_commands(app))
    # bench's fleet options fill the fleet (settings/fleet.py's file, bench/fleet.py's FleetConfig), not BenchConfig
    command_only = {"generate": {"prompt", "prompts", "output", "force", "stats"}, "bench": {"fleet", "jobs"}}
    for command, config in (("bench", BenchConfig), ("tune", TuneConfig), ("generate", GenerateConfig),
                            ("compile", CompileConfig)):
        fields = record_keys(config)  # the decode settings it embeds flat (DecodeOptions) included
        assert set(command_options(commands[command])) - fields == command_only.get(command, set()), command


def test_one_device_from_serial_options() -> None:
    assert options.one_device(None, "h", 5) == {"serial": None, "adb_host": "h", "adb_port": 5}
    assert options.one_device(["R5"], None, None) == {"serial": "R5", "adb_host": None, "adb_port": None}
    assert options.one_device(["farm:5038/R5"], "h", 5) == {"serial": "R5", "adb_host": "farm", "adb_port": 5038}
    with pytest.raises(InputError, match="this command runs on one device"):
        options.one_device(["A", "B"], None, None)
