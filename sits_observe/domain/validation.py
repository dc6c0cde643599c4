"""Settings from user values, with one-line errors: the validator every flag and query
parameter goes through (CLI commands, ``GET /api/v1/reports/{name}``).

Pure pydantic, so the node agent's slim install can use it too.
"""

from __future__ import annotations

import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from sits_observe.errors import ConfigError

S = TypeVar("S", bound=BaseModel)


def validate_settings(
    model: type[S],
    values: Mapping[str, Any],
    *,
    what: str,
    flag: Callable[[str], str] | None = None,
) -> S:
    """``model`` from ``values`` (None = the field's default); a bad value is one
    :class:`ConfigError` line naming each flag (``flag(field)``, else ``--field-name``) and
    what is allowed. A single string for a list field (one ``?key=value`` of a query) is a
    list of one."""
    given = {k: v for k, v in values.items() if v is not None}
    for name, value in given.items():
        field = model.model_fields.get(name)
        if field is not None and isinstance(value, str) and _is_collection(field.annotation):
            given[name] = [value]
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        problems = "; ".join(_problem(e["loc"], e["msg"], flag) for e in exc.errors())
        raise ConfigError(f"invalid {what} settings: {problems}") from exc


def _problem(loc: tuple[int | str, ...], msg: str, flag: Callable[[str], str] | None) -> str:
    """``--flag: message``; a rule across fields (no location) is the message alone."""
    if not loc:
        return msg
    if flag is not None and isinstance(loc[0], str):
        return f"{'.'.join([flag(loc[0]), *(str(p) for p in loc[1:])])}: {msg}"
    return f"--{'-'.join(str(p) for p in loc).replace('_', '-')}: {msg}"


def _is_collection(annotation: Any) -> bool:
    """A list / tuple / set annotation, ``X | None`` unwrapped."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_is_collection(a) for a in typing.get_args(annotation))
    return origin in (list, tuple, set, frozenset)
