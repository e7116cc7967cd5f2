"""The pydantic base of host-side configs and files, and the one mapping of its errors to ours.

Host only: the device runtime reads its records with `records.codec` instead.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticValidationError

from specdec.pipeline.errors import InputError, SpecdecError
from specdec.pipeline.records.codec import RecordError

M = TypeVar("M", bound=BaseModel)


class StrictModel(BaseModel):
    """Base for every validated file: unknown keys are errors, not silently dropped."""

    model_config = ConfigDict(extra="forbid", frozen=False)


def first_problem(exc: PydanticValidationError) -> str:
    """`'where.it.is': what is wrong` for the first error pydantic found."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = first["msg"]
    inner = first.get("ctx", {}).get("error")
    if isinstance(inner, RecordError):  # a record field (records.codec) knows where inside it
        where = ".".join(p for p in (where, inner.where) if p)
        message = inner.problem
    return f"'{where or '(top level)'}': {message}"


def validate_model(model: type[M], data: Any, *, source: str, fix: str,
                   error: type[SpecdecError] = InputError) -> M:
    """`model.model_validate(data)`, with pydantic's error as one line: `SOURCE: 'where': problem`."""
    try:
        return model.model_validate(data)
    except PydanticValidationError as exc:
        raise error(f"{source}: {first_problem(exc)}", fix) from exc
