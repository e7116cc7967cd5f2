"""Dataclass records <-> plain JSON data, validated field by field with the standard library only.

The device runtime reads manifest.json and run.json with only numpy, onnxruntime and the
standard library, so every file that crosses to the device is a stdlib dataclass record and this
module is their one validating reader and writer, on the host too (pydantic, which would do the
same, is not on phones). The rules are pydantic's, which the host's YAML profiles use: unknown
keys are errors, required fields must be present, enums take their values, a record's own
`__post_init__` checks run on construction. Error locations are dotted paths
(`buckets.graphs.target.0.q`).

Supported field types: the JSON scalars, `Path`, enums, `Literal[...]`, nested dataclasses (`FLATTEN`:
read at the parent's level), `list[T]`, `tuple[T, ...]`, `tuple[A, B]`, `dict[str | int | Enum, T]`,
`X | None`, unions of those and `Any`.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

# Field metadata: `OMIT_DEFAULT` leaves a field out of the JSON while it holds its default, so an
# optional key that older files never had keeps those files byte-for-byte the same shape.
OMIT_DEFAULT: Mapping[str, Any] = types.MappingProxyType({"omit_default": True})
# `FLATTEN` puts a nested record's fields at its parent's level: a stage config embeds its
# DecodeOptions so, and a pipeline YAML section reads `max_new_tokens: 32`, not `decode: {...}`.
FLATTEN: Mapping[str, Any] = types.MappingProxyType({"flatten": True})
# `REST` marks a `dict[str, Any]` field that holds the keys no other field names, as they are: a
# report written by another specdec version (an older one's keys, a newer one's) reads and writes
# back unchanged. Only records that are reports have one; every other record refuses unknown keys.
REST: Mapping[str, Any] = types.MappingProxyType({"rest": True})


def json_key(name: str, **extra: Any) -> dict[str, Any]:
    """Field metadata for a JSON key that is not a Python identifier (e.g. `from`)."""
    return {"key": name, **extra}


class RecordError(ValueError):
    """A value does not fit its record; `where` is the dotted path to it."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"'{where}': {problem}" if where else problem)
        self.where = where
        self.problem = problem


def to_dict(record: Any) -> dict[str, Any]:
    """A dataclass record as JSON-ready data (enums by value, paths as strings, tuples as lists)."""
    if not dataclasses.is_dataclass(record) or isinstance(record, type):
        raise TypeError(f"to_dict needs a dataclass record, got {type(record).__name__}")
    data: dict[str, Any] = dump(record)
    return data


def dump(value: Any) -> Any:
    """Any supported value as JSON-ready data."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        out: dict[str, Any] = {}
        for field in dataclasses.fields(value):
            item = getattr(value, field.name)
            if field.metadata.get("flatten") or field.metadata.get("rest"):
                out.update(dump(item))
                continue
            if field.metadata.get("omit_default") and item == _default(field):
                continue
            out[field.metadata.get("key", field.name)] = dump(item)
        return out
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, list | tuple):
        return [dump(item) for item in value]
    if isinstance(value, dict):
        return {(k.value if isinstance(k, enum.Enum) else k): dump(v) for k, v in value.items()}
    return value


def from_dict(cls: type[T], data: Any, where: str = "") -> T:
    """Validate `data` (parsed JSON or YAML) into the record class `cls`."""
    record: T = parse(cls, data, where)
    return record


def parse(tp: Any, value: Any, where: str = "") -> Any:
    """Validate `value` against the type `tp`; raise RecordError naming the first bad field."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin is typing.Union or origin is types.UnionType:
        return _parse_union(tp, value, where)
    if tp is type(None):
        if value is not None:
            raise RecordError(where, f"Input should be null, got {_describe(value)}")
        return None
    if value is None:
        raise RecordError(where, "Input should not be null")
    if origin is typing.Literal:
        choices = typing.get_args(tp)
        if value not in choices:
            raise RecordError(where, f"'{value}' is not one of: {', '.join(str(c) for c in choices)}")
        return value
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        return [parse(item, v, _at(where, i)) for i, v in enumerate(_sequence(value, where))]
    if origin is tuple:
        args = typing.get_args(tp)
        items = _sequence(value, where)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(parse(args[0], v, _at(where, i)) for i, v in enumerate(items))
        if len(items) != len(args):
            raise RecordError(where, f"Input should have {len(args)} items, got {len(items)}")
        return tuple(parse(a, v, _at(where, i)) for i, (a, v) in enumerate(zip(args, items, strict=True)))
    if origin is dict:
        key_type, item_type = typing.get_args(tp) or (Any, Any)
        if not isinstance(value, Mapping):
            raise RecordError(where, f"Input should be a mapping, got {_describe(value)}")
        return {_parse_key(key_type, k, where): parse(item_type, v, _at(where, k)) for k, v in value.items()}
    if isinstance(tp, type):
        if dataclasses.is_dataclass(tp):
            return _parse_record(tp, value, where)
        if issubclass(tp, enum.Enum):
            return _parse_enum(tp, value, where)
        return _parse_scalar(tp, value, where)
    raise TypeError(f"records cannot hold values of type {tp!r}")  # a programming error, not bad input


def _at(where: str, key: object) -> str:
    return f"{where}.{key}" if where else str(key)


def _describe(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 40 else text[:37] + '...'}"


def _sequence(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise RecordError(where, f"Input should be a list, got {_describe(value)}")
    return list(value)


def _parse_union(tp: Any, value: Any, where: str) -> Any:
    members = typing.get_args(tp)
    if value is None:
        if type(None) in members:
            return None
        raise RecordError(where, "Input should not be null")
    errors: list[RecordError] = []
    for member in members:
        if member is type(None):
            continue
        try:
            return parse(member, value, where)
        except RecordError as exc:
            errors.append(exc)
    if len(errors) == 1:
        raise errors[0]
    deepest = max(errors, key=lambda e: e.where.count("."))
    if deepest.where != where:
        raise deepest  # the value had the right shape; a field inside it is wrong
    names = " or ".join(_type_name(m) for m in members)
    raise RecordError(where, f"Input should be {names}, got {_describe(value)}")


def _type_name(tp: Any) -> str:
    return "null" if tp is type(None) else getattr(tp, "__name__", str(tp))


def _parse_key(key_type: Any, key: Any, where: str) -> Any:
    # JSON object keys are strings: int and enum keys come back from their text
    if key_type is int and isinstance(key, str):
        try:
            return int(key)
        except ValueError:
            raise RecordError(_at(where, key), "key should be an integer") from None
    return parse(key_type, key, _at(where, key))


def _parse_enum(tp: type[enum.Enum], value: Any, where: str) -> enum.Enum:
    if isinstance(value, tp):
        return value
    try:
        return tp(value)
    except ValueError:
        choices = ", ".join(str(m.value) for m in tp)
        raise RecordError(where, f"'{value}' is not one of: {choices}") from None


def _parse_scalar(tp: type, value: Any, where: str) -> Any:
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        ok = False
    elif tp is str:
        ok = isinstance(value, str)
    elif tp is Path:
        if isinstance(value, str | Path):
            return Path(value)
        ok = False
    else:
        raise TypeError(f"records cannot hold values of type {tp!r}")
    if not ok:
        raise RecordError(where, f"Input should be a valid {tp.__name__}, got {_describe(value)}")
    return value


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    hints = _HINTS.get(cls)
    if hints is None:
        hints = _HINTS[cls] = typing.get_type_hints(cls)
    return hints


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:
        return field.default_factory()
    return dataclasses.MISSING


def record_keys(cls: type) -> set[str]:
    """The keys a record reads, those of its FLATTEN fields' records included."""
    keys: set[str] = set()
    hints = _hints(cls)
    for field in dataclasses.fields(cls):
        if not field.init or field.metadata.get("rest"):
            continue
        keys |= record_keys(hints[field.name]) if field.metadata.get("flatten") else {field.metadata.get("key",
                                                                                                        field.name)}
    return keys


def _parse_record(cls: type, value: Any, where: str) -> Any:
    if isinstance(value, cls):
        return value  # already a record: its constructor validated it
    if not isinstance(value, Mapping):
        raise RecordError(where, f"Input should be a mapping, got {_describe(value)}")
    hints = _hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    rest = next((f for f in fields if f.metadata.get("rest")), None)
    by_key = {f.metadata.get("key", f.name): f for f in fields if not f.metadata.get("flatten")
              and not f.metadata.get("rest")}
    flattened = {f.name: record_keys(hints[f.name]) for f in fields if f.metadata.get("flatten")}
    for name, keys in flattened.items():
        if keys & set(by_key):  # a programming error: the parent's key would hide the nested one
            raise TypeError(f"{cls.__name__}.{name} flattens keys its parent has: {sorted(keys & set(by_key))}")
    extra = {key: item for key, item in value.items()
             if key not in by_key and not any(key in keys for keys in flattened.values())}
    if extra and rest is None:
        raise RecordError(_at(where, next(iter(extra))), "Extra inputs are not permitted")
    kwargs: dict[str, Any] = {rest.name: dict(extra)} if rest is not None else {}
    for key, field in by_key.items():
        if key in value:
            kwargs[field.name] = parse(hints[field.name], value[key], _at(where, key))
        elif _default(field) is dataclasses.MISSING:
            raise RecordError(_at(where, key), "Field required")
    for name, keys in flattened.items():
        kwargs[name] = parse(hints[name], {key: item for key, item in value.items() if key in keys}, where)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(where, str(exc)) from exc
