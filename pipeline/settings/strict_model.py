"""`StrictModel`, the pydantic base of the YAML profiles (pipeline/settings/profiles.py), and its one error mapper.

Host only. Files that cross to the device (manifest.json, run.json, results.json) are stdlib
records read by `records.codec` instead.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from specdec.pipeline.errors import InputError, SpecdecError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every validated file: unknown keys are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=False)


def first_problem(exc: PydanticValidationError) -> str:
    """`'where.it.is': what is wrong` for the first error pydantic found."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = first["msg"]
    return f"'{where or '(top level)'}': {message}"


def validate_model(model: type[M], data: Any, *, source: str, fix: str,
                   error: type[SpecdecError] = InputError) -> M:
    """`model.model_validate(data)`, with pydantic's error as one line: `SOURCE: 'where': problem`."""
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise error(f"{source}: {first_problem(exc)}", fix) from exc
