"""Settings make flags: one generator from a pydantic settings model to Typer options.

Each field of a model becomes ``--field-name`` (``--prefix-field-name`` when the command
takes the model under a prefix, as ``serve`` takes the exporter's settings as
``--exporter-*``), or the name in the field's ``json_schema_extra={"flag": "--db"}``, or the
names in ``{"flags": ["-n", "--namespace"]}`` for a short alias (a field's own names are
used as written, prefix or not). The help is the field's description followed by its
default, bounds and unit in brackets (``[default 2.0; > 0; <= 3600; seconds]``); a
``Literal`` or enum field takes one of its choices, listed in the flag's metavar. The
option defaults to None, so a flag not given leaves the model's default in force: no
default is copied into a command signature. The model validates the values
(:func:`sits_observe.domain.validation.validate_settings`), and a bad value is one line
naming the flag, as krr does. Fields that cannot be a flag (mappings, secrets) come from a
file or their own flags. A nested settings model gives flags only when its field asks with
``json_schema_extra={"nested_flags": True}`` (``"nested_skip": [...]`` leaves some out,
``"nested_names": {...}`` renames some): ``recommend``'s ``heatmap`` field gives
``--heatmap-bin-s``, whose keyword argument is ``heatmap__window_s``
(:data:`~sits_observe.domain.validation.NEST`), which the validator puts back under
``heatmap``. Most nested models stay without: ``serve`` gives their flags under a prefix
of their own (``--ingest-group-*``) or reads them from a file.

A command declares which models give it flags with :class:`SettingFlags` and
:func:`with_flags`; its own flags (a file to read, ``--db``, actions such as ``--act``)
stay in its signature, without a default any model holds.
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import annotated_types
import typer
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from typer.core import TyperCommand

from sits_observe.domain.validation import NEST, model_of, validate_settings

#: Unit of a field by the suffix of its name (longest first: ``_bytes_per_s`` is a rate, not
#: seconds). ``_ratio`` is labelled by its bounds (:func:`_unit`).
_UNITS = (
    ("_bytes_per_s", "bytes/s"),
    ("_ms", "milliseconds"),
    ("_s", "seconds"),
    ("_bytes", "bytes"),
)
_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


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


def _is_choice(inner: Any) -> bool:
    """A ``Literal`` of strings or integers (Typer offers its values as choices)."""
    if typing.get_origin(inner) is not Literal:
        return False
    return all(isinstance(v, str | int) and not isinstance(v, bool) for v in typing.get_args(inner))


def flag_type(field: FieldInfo) -> tuple[Any, bool] | None:
    """The CLI type of a settings field, or None when it cannot be a flag (a mapping, a
    nested model, a secret: those come from a settings file or a flag of their own)."""
    inner, many = _inner(field.annotation)
    simple = (bool, int, float, str, Path)
    if isinstance(inner, type) and (issubclass(inner, Enum) or inner in simple):
        return inner, many
    if _is_choice(inner):
        return inner, many
    return None


def _extra(field: FieldInfo) -> dict[str, Any]:
    return field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}


def nested_model(name: str, field: FieldInfo) -> type[BaseModel] | None:
    """The model whose fields give flags too, for a field marked ``nested_flags``."""
    if not _extra(field).get("nested_flags"):
        return None
    model = model_of(field.annotation)
    if model is None:
        raise ValueError(f"settings field {name!r} has nested_flags but holds no settings model")
    return model


def _resolve(model: type[BaseModel], key: str, prefix: str) -> tuple[str, FieldInfo, str, str]:
    """``(name, field, flag prefix, rest)`` of a nested key (``view__refresh_interval_s``):
    the deepest field that has a flag (or the top one), and the key's parts below it."""
    return _resolve_in(model, key, prefix, {})


def _resolve_in(
    model: type[BaseModel], key: str, prefix: str, stems: Mapping[str, str]
) -> tuple[str, FieldInfo, str, str]:
    head, _, rest = key.partition(NEST)
    field = model.model_fields[head]
    sub = nested_model(head, field)
    if rest and sub is not None and rest.partition(NEST)[0] in sub.model_fields:
        inner = _extra(field).get("nested_names", {})
        return _resolve_in(sub, rest, f"{prefix}_{head}".strip("_"), inner)
    return stems.get(head, head), field, prefix, rest


def _bounds(field: FieldInfo) -> list[tuple[str, str, float]]:
    """``(attr, sign, value)`` of each bound of ``field`` (``("le", "<=", 3600)``)."""
    found = []
    for bound in field.metadata:
        for attr, sign in _BOUNDS:
            if isinstance(bound, getattr(annotated_types, attr.capitalize())):
                found.append((attr, sign, getattr(bound, attr)))
    return found


def _unit(name: str, field: FieldInfo) -> str | None:
    """The unit shown in the help: the field's own ``unit``, else by its name's suffix. A
    ``_ratio`` is ``0-1`` only when its upper bound keeps it there; above, it is a multiple
    (``load_ratio`` 1.3 = 130 % of capacity)."""
    unit = _extra(field).get("unit")
    if unit:
        return str(unit)
    if name.endswith("_ratio"):
        upper = [v for attr, _, v in _bounds(field) if attr in ("lt", "le")]
        return "0-1" if upper and min(upper) <= 1 else "x"
    return next((u for suffix, u in _UNITS if name.endswith(suffix)), None)


def _scale(field: FieldInfo) -> float:
    """How many flag units make one unit of the field (``--slo-ms`` of a seconds field:
    1000); 1 for most fields."""
    return float(_extra(field).get("flag_scale", 1))


def _shown(value: Any, scale: float) -> Any:
    value = getattr(value, "value", value)
    if scale != 1 and isinstance(value, int | float) and not isinstance(value, bool):
        scaled = value * scale
        return int(scaled) if float(scaled).is_integer() else scaled
    return value


def field_help(name: str, field: FieldInfo) -> str:
    """The field's description, then its default, bounds and unit in brackets (in the
    flag's unit where it has a ``flag_scale``)."""
    scale = _scale(field)
    parts: list[str] = []
    default = field.get_default(call_default_factory=True) if not field.is_required() else None
    if default not in (None, (), [], "", {}):
        if isinstance(default, tuple | list) and not isinstance(default, str):
            shown = ", ".join(str(_shown(v, scale)) for v in default)
        else:
            shown = str(_shown(default, scale))
        parts.append(f"default {shown}")
    parts.extend(f"{sign} {_shown(value, scale)}" for _, sign, value in _bounds(field))
    unit = _unit(name, field)
    if unit:
        parts.append(unit)
    text = (field.description or name.replace("_", " ")).rstrip(".")
    return f"{text} [{'; '.join(parts)}]" if parts else text


def flag_names(name: str, field: FieldInfo, prefix: str = "") -> list[str]:
    """The field's own ``flags`` (``["-n", "--namespace"]``), else its ``flag`` (``db_path``
    -> ``--db``), else ``--prefix-field-name``."""
    extra = _extra(field)
    names = extra.get("flags")
    if isinstance(names, list | tuple) and names:
        return [str(n) for n in names]
    if extra.get("flag"):
        return [str(extra["flag"])]
    return ["--" + f"{prefix}_{name}".strip("_").replace("_", "-")]


def flag_name(name: str, field: FieldInfo, prefix: str = "") -> str:
    """The long name of the field's flag (:func:`flag_names`)."""
    names = flag_names(name, field, prefix)
    return next((n for n in names if n.startswith("--")), names[0])


def param_name(name: str, prefix: str = "") -> str:
    """The command's keyword argument for field ``name`` under ``prefix``."""
    return f"{prefix}_{name}" if prefix else name


def _param(name: str, under: str) -> str:
    """``name`` under ``under``: a prefix (``extender`` -> ``extender_enabled``) or a nested
    field's path, which ends in :data:`NEST` (``extender_view__`` -> ``extender_view__x``)."""
    return f"{under}{name}" if under.endswith(NEST) else param_name(name, under)


def _scaled_parser(name: str, field: FieldInfo) -> Callable[[str], float]:
    """Reads a flag given in its own unit (``--slo-ms 400``) as the field's (0.4), checking
    the field's bounds in the flag's unit so the message speaks the unit typed."""
    scale = _scale(field)
    checks = {"gt": float.__gt__, "ge": float.__ge__, "lt": float.__lt__, "le": float.__le__}

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise typer.BadParameter(f"{text!r} is not a number") from None
        broken = [
            f"{sign} {_shown(bound, scale)}"
            for attr, sign, bound in _bounds(field)
            if not checks[attr](value, float(bound) * scale)
        ]
        if broken:
            raise typer.BadParameter(f"{value:g} must be {' and '.join(broken)}")
        return value / scale

    parse.__name__ = name
    return parse


def setting_options(
    model: type[BaseModel],
    *,
    skip: Collection[str] = (),
    reserved: Collection[str] = (),
    prefix: str = "",
    only: Collection[str] | None = None,
    panel: str | None = None,
) -> list[inspect.Parameter]:
    """One keyword parameter (a Typer option defaulting to None) per flaggable field of
    ``model`` (those in ``only``, when given) but those in ``skip``, named
    ``prefix_field``; a field named like a ``reserved`` parameter of the command is a
    programming error. ``panel`` groups the options under a heading in ``--help``."""
    return _options(
        model, skip=skip, reserved=reserved, prefix=prefix, under=prefix, only=only, panel=panel
    )


def _options(
    model: type[BaseModel],
    *,
    skip: Collection[str],
    reserved: Collection[str],
    prefix: str,
    under: str,
    only: Collection[str] | None,
    panel: str | None,
    stems: Mapping[str, str] | None = None,
) -> list[inspect.Parameter]:
    """:func:`setting_options` with flags under ``prefix`` and keyword arguments under
    ``under`` (``extender_view__`` for the fields of a nested ``view``); ``stems``
    renames a nested model's flags to the name its peers use (the heatmap's ``window_s`` is
    ``--heatmap-bin-s``, as ``heatmap --bin-s``)."""
    params = []
    stems = stems or {}
    for name, field in model.model_fields.items():
        if name in skip or (only is not None and name not in only):
            continue
        sub = nested_model(name, field)
        if sub is not None:
            inner_skip = [*_extra(field).get("nested_skip", ())]
            inner_skip += [k.partition(NEST)[2] for k in skip if k.startswith(name + NEST)]
            params += _options(
                sub,
                skip=inner_skip,
                reserved=reserved,
                prefix=f"{prefix}_{name}".strip("_"),
                under=f"{_param(name, under)}{NEST}",
                only=None,
                panel=panel,
                stems=_extra(field).get("nested_names", {}),
            )
            continue
        kind = flag_type(field)
        if kind is None:
            continue
        param = _param(name, under)
        if param in reserved:
            raise ValueError(f"settings field {name!r} of {model.__name__} shadows a common flag")
        inner, many = kind
        stem = stems.get(name, name)
        flag = flag_name(stem, field, prefix)
        names = (
            [f"{flag}/--no-{flag[2:]}"]
            if inner is bool and not many
            else flag_names(stem, field, prefix)
        )
        extra: dict[str, Any] = {"rich_help_panel": panel} if panel else {}
        if _scale(field) != 1:
            extra["parser"] = _scaled_parser(name, field)
        annotation: Any = list[inner] if many else inner  # type: ignore[valid-type]
        params.append(
            inspect.Parameter(
                param,
                inspect.Parameter.KEYWORD_ONLY,
                default=typer.Option(None, *names, help=field_help(name, field), **extra),
                annotation=annotation | None,
            )
        )
    return params


M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class SettingFlags(Generic[M]):
    """The flags a command takes from one settings model: every flaggable field (or those
    in ``only``) but ``skip``, under ``prefix``, listed under ``panel`` in ``--help``."""

    model: type[M]
    prefix: str = ""
    only: tuple[str, ...] | None = None
    skip: tuple[str, ...] = ()
    panel: str | None = None

    def options(self, reserved: Collection[str] = ()) -> list[inspect.Parameter]:
        """The Typer options (:func:`setting_options`)."""
        return setting_options(
            self.model,
            skip=self.skip,
            reserved=reserved,
            prefix=self.prefix,
            only=self.only,
            panel=self.panel,
        )

    def fields(self) -> list[str]:
        """The names of the fields that have a flag here."""
        start = len(self.prefix) + 1 if self.prefix else 0
        return [p.name[start:] for p in self.options()]

    def flag(self, name: str) -> str:
        """The flag of field ``name`` (also for a field given by the command itself), or of
        a nested one (``view__refresh_interval_s``)."""
        field_name, field, prefix, _ = _resolve(self.model, name, self.prefix)
        return flag_name(field_name, field, prefix)

    def values(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        """The fields' values among a command's keyword arguments (None: not given)."""
        return {name: flags.get(param_name(name, self.prefix)) for name in self.fields()}

    def validate(self, flags: Mapping[str, Any], *, what: str, **fixed: Any) -> M:
        """The model from the flags given and ``fixed`` (values the command sets itself);
        a bad value is one :class:`~sits_observe.errors.ConfigError` line naming its flag."""
        values = {**self.values(flags), **fixed}
        return validate_settings(self.model, values, what=what, flag=self._known_flag)

    def _known_flag(self, key: str) -> str:
        """The flag a validation error's location names (``view__x`` -> ``--extender-view-x``,
        ``links__0__name`` -> ``--links.0.name``)."""
        if key.partition(NEST)[0] not in self.model.model_fields:
            return "--" + key.replace(NEST, ".").replace("_", "-")
        name, field, prefix, rest = _resolve(self.model, key, self.prefix)
        flag = flag_name(name, field, prefix)
        return f"{flag}.{rest.replace(NEST, '.')}" if rest else flag


F = TypeVar("F", bound=Callable[..., Any])


def with_parameters(params: list[inspect.Parameter]) -> Callable[[F], F]:
    """A decorator giving a ``**kwargs`` command function the signature ``params`` (what
    Typer reads to build the options)."""

    def apply(fn: F) -> F:
        fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return fn

    return apply


def with_flags(*groups: SettingFlags[Any]) -> Callable[[F], F]:
    """A decorator adding the flags of ``groups`` to a command's own (keyword-only)
    parameters; the command takes them as ``**flags`` and builds its settings with
    :meth:`SettingFlags.validate`. A generated flag named like one of the command's own
    is a programming error."""

    def apply(fn: F) -> F:
        own = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind is not inspect.Parameter.VAR_KEYWORD
        ]
        params = list(own)
        for group in groups:
            params.extend(group.options(reserved=[p.name for p in params]))
        seen: dict[str, str] = {}
        for param in params:
            for name in option_names(param):
                if seen.setdefault(name, param.name) != param.name:
                    raise ValueError(f"{name} is the flag of both {seen[name]} and {param.name}")
        fn.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return fn

    return apply


def option_names(param: inspect.Parameter) -> list[str]:
    """Every flag string of a Typer option parameter (``--x/--no-x`` gives both)."""
    decls = getattr(param.default, "param_decls", None) or ()
    names = [n for decl in decls for n in decl.split("/") if n.startswith("-")]
    return names or ["--" + param.name.replace("_", "-")]


class SectionedCommand(TyperCommand):
    """A command whose ``--help`` lists the command's own options under "Options" and the
    flags of each settings model under its ``panel`` (Typer draws panels only with Rich,
    which the CLI leaves off so errors stay on one line)."""

    def format_options(self, ctx: Any, formatter: Any) -> None:  # Typer's vendored Click types
        sections: dict[str, list[tuple[str, str]]] = {"Options": []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is not None and param.param_type_name == "option":
                title = getattr(param, "rich_help_panel", None) or "Options"
                sections.setdefault(title, []).append(record)
        for title, records in sections.items():
            if records:
                with formatter.section(title):
                    formatter.write_dl(records)
