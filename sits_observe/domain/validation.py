"""Settings from user values, with one-line errors: the validator every flag and query
parameter goes through (CLI commands, ``GET /api/v1/reports/{name}``).

A value for a field of a nested settings model is keyed by the path of field names joined
with ``__`` (or ``.``): ``heatmap__window_s=2`` (the flag ``--heatmap-window-s``,
:mod:`sits_observe.surfaces.cli.flags`) sets ``window_s`` of the ``heatmap`` field.

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

#: Joins the field names of a nested setting's key (``heatmap__window_s``).
NEST = "__"


def check_promql_url(value: object) -> object:
    """A PromQL query URL setting: None, or an ``http://`` / ``https://`` URL (for an
    ``after`` field validator)."""
    if isinstance(value, str) and not value.startswith(("http://", "https://")):
        raise ValueError(f"PromQL URL {value!r} must start with http:// or https://")
    return value


def named_seconds(items: typing.Iterable[str], what: str, example: str) -> dict[str, float]:
    """``NAME=SECONDS`` settings (a model's SLO, a namespace's SLA) as ``{name: seconds}``;
    ValueError naming the bad item and the form, with ``example``, otherwise. A name given
    twice keeps its last value, as a repeated flag does."""
    out: dict[str, float] = {}
    for item in items:
        name, sep, text = item.partition("=")
        try:
            seconds = float(text)
        except ValueError:
            seconds = float("nan")
        if not sep or not name.strip() or not 0 < seconds <= 86_400:
            raise ValueError(f"{item!r}: use {what}=SECONDS with 0 < SECONDS <= 86400 ({example})")
        out[name.strip()] = seconds
    return out


def named_values(
    items: typing.Iterable[str], what: str, value: str, example: str
) -> dict[str, str]:
    """``NAME=VALUE`` settings (a namespace's tenant) as ``{name: value}``; ValueError naming
    the bad item and the form, with ``example``, otherwise. A name given twice keeps its last
    value, as a repeated flag does."""
    out: dict[str, str] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip() or not text.strip():
            raise ValueError(f"{item!r}: use {what}={value} ({example})")
        out[name.strip()] = text.strip()
    return out


def comma_separated(value: object) -> object:
    """A list setting given as ``a,b`` or repeated (``--arms a --arms b,c``) as one tuple of
    its stripped, non-empty items; anything else unchanged (for a ``mode="before"``
    validator)."""
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        return value
    return tuple(a.strip() for item in items for a in str(item).split(",") if a.strip())


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
    given = _given(model, values)
    try:
        return model.model_validate(given)
    except ValidationError as exc:
        raise ConfigError(f"invalid {what} settings: {flag_problems(exc, flag)}") from exc


def flag_problems(exc: ValidationError, flag: Callable[[str], str] | None = None) -> str:
    """Each error of ``exc`` as ``--flag: message`` (``flag(field)`` names the flag when
    given), ``; ``-joined, without pydantic's "Value error, " before a validator's own
    message."""
    return "; ".join(
        _problem(e["loc"], str(e["msg"]).removeprefix("Value error, "), flag) for e in exc.errors()
    )


def _given(model: type[BaseModel], values: Mapping[str, Any]) -> dict[str, Any]:
    """The values given (None dropped) as ``model_validate`` takes them: nested keys
    (``heatmap__window_s``) as a mapping under their field, one string for a list field as
    a list of one."""
    given: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in values.items():
        if value is None:
            continue
        head, sep, rest = key.replace(".", NEST).partition(NEST)
        field = model.model_fields.get(head)
        if sep and field is not None and model_of(field.annotation) is not None:
            nested.setdefault(head, {})[rest] = value
            continue
        listed = field is not None and isinstance(value, str) and _is_collection(field.annotation)
        given[key] = [value] if listed else value
    for head, inner in nested.items():
        sub = model_of(model.model_fields[head].annotation)
        assert sub is not None
        whole = given.get(head)
        given[head] = {**(whole if isinstance(whole, Mapping) else {}), **_given(sub, inner)}
    return given


def model_of(annotation: Any) -> type[BaseModel] | None:
    """The settings model a field holds (``X | None`` unwrapped), else None."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return model_of(args[0]) if len(args) == 1 else None
    return (
        annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
    )


def _problem(loc: tuple[int | str, ...], msg: str, flag: Callable[[str], str] | None) -> str:
    """``--flag: message``; a rule across fields (no location) is the message alone."""
    if not loc:
        return msg
    if flag is not None and isinstance(loc[0], str):
        return f"{flag(NEST.join(str(p) for p in loc))}: {msg}"
    return f"--{'-'.join(str(p) for p in loc).replace('_', '-')}: {msg}"


def _is_collection(annotation: Any) -> bool:
    """A list / tuple / set annotation, ``X | None`` unwrapped."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_is_collection(a) for a in typing.get_args(annotation))
    return origin in (list, tuple, set, frozenset)
