"""Settings make flags: one generator from a pydantic settings model to Typer options.

Each field of a model becomes ``--field-name`` (or the name in the field's
``json_schema_extra={"flag": "--db"}``, or the names in ``{"flags": ["-n", "--namespace"]}``
for a short alias) with the field's description as help, followed by its
default, bounds and unit in brackets (``[default 2.0; > 0; <= 3600; seconds]``). The option
defaults to None, so a flag not given leaves the model's default in force: no default is
copied into a command signature. The model validates the values
(:func:`sits_observe.reports.spec.validate_settings`), and a bad value is one line naming the
flag, as krr does. Fields that cannot be a flag (mappings, nested models) come from a file.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Collection
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

import annotated_types
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo

_UNITS = {"_s": "seconds", "_ms": "milliseconds", "_bytes": "bytes", "_ratio": "0-1"}


def _inner(annotation: Any) -> tuple[Any, bool]:
    """``(type, is_list)`` of a field annotation, ``X | None`` unwrapped."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return _inner(args[0])
    if origin in (list, tuple, set, frozenset):
        (arg, *_rest) = typing.get_args(annotation) or (str,)
        return arg, True
    return annotation, False


def flag_type(field: FieldInfo) -> tuple[Any, bool] | None:
    """The CLI type of a settings field, or None when it cannot be a flag (a mapping, a
    nested model: those come from a settings file)."""
    inner, many = _inner(field.annotation)
    simple = (bool, int, float, str, Path)
    if isinstance(inner, type) and (issubclass(inner, Enum) or inner in simple):
        return inner, many
    return None


def _extra(field: FieldInfo) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def field_help(name: str, field: FieldInfo) -> str:
    """The field's description, then its default, bounds and unit in brackets."""
    parts: list[str] = []
    default = field.get_default(call_default_factory=True) if not field.is_required() else None
    if default not in (None, (), [], "", {}):
        parts.append(f"default {getattr(default, 'value', default)}")
    for bound in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            if isinstance(bound, getattr(annotated_types, attr.capitalize())):
                parts.append(f"{sign} {getattr(bound, attr)}")
    unit = _extra(field).get("unit") or next(
        (u for suffix, u in _UNITS.items() if name.endswith(suffix)), None
    )
    if unit:
        parts.append(str(unit))
    text = (field.description or name.replace("_", " ")).rstrip(".")
    return f"{text} [{'; '.join(parts)}]" if parts else text


def flag_names(name: str, field: FieldInfo) -> list[str]:
    """The field's own ``flags`` (``["-n", "--namespace"]``), else its ``flag`` (``db_path``
    -> ``--db``), else ``--field-name``."""
    extra = _extra(field)
    names = extra.get("flags")
    if isinstance(names, list | tuple) and names:
        return [str(n) for n in names]
    return [str(extra.get("flag") or "--" + name.replace("_", "-"))]


def flag_name(name: str, field: FieldInfo) -> str:
    """The long name of the field's flag (:func:`flag_names`)."""
    names = flag_names(name, field)
    return next((n for n in names if n.startswith("--")), names[0])


def setting_options(
    model: type[BaseModel], *, skip: Collection[str] = (), reserved: Collection[str] = ()
) -> list[inspect.Parameter]:
    """One keyword parameter (a Typer option defaulting to None) per flaggable field of
    ``model`` but those in ``skip``; a field named like a ``reserved`` parameter of the
    command is a programming error."""
    params = []
    for name, field in model.model_fields.items():
        kind = flag_type(field)
        if kind is None or name in skip:
            continue
        if name in reserved:
            raise ValueError(f"settings field {name!r} of {model.__name__} shadows a common flag")
        inner, many = kind
        flag = flag_name(name, field)
        names = (
            [f"{flag}/--no-{flag[2:]}"] if inner is bool and not many else flag_names(name, field)
        )
        annotation: Any = list[inner] if many else inner  # type: ignore[valid-type]
        params.append(
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=typer.Option(None, *names, help=field_help(name, field)),
                annotation=annotation | None,
            )
        )
    return params


F = TypeVar("F", bound=Callable[..., Any])


def with_parameters(params: list[inspect.Parameter]) -> Callable[[F], F]:
    """A decorator giving a ``**kwargs`` command function the signature ``params`` (what
    Typer reads to build the options)."""

    def apply(fn: F) -> F:
        fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return fn

    return apply
