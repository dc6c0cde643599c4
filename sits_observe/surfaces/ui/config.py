"""What the Streamlit app reads and how: a DuckDB file, or the service's read API.

The app is started as ``streamlit run dashboards/app.py -- --db FILE`` or
``... -- --service URL --token-file F`` (``sits-observe ui`` builds that command line). Streamlit
hands the arguments after ``--`` to the script in ``sys.argv``; the same settings can come from
``SITS_UI_*`` environment variables (handy where no command line is passed, e.g. in
``streamlit.testing``), and a flag wins over its variable. The bearer token is read from a
file or ``SITS_TOKEN``, never from a flag (flags show up in ``ps``), as ``serve`` does.

The window is the CLI's (:mod:`sits_observe.reports.window`): ``--since DUR`` back from
``--until now|newest|TIME``; every page asks its reports for that window (the sidebar can
change it for a session).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from sits_observe.domain.validation import flag_problems
from sits_observe.errors import ConfigError
from sits_observe.reports.window import WindowRequest

TOKEN_ENV = "SITS_TOKEN"
#: Environment variable of each setting (flag ``--db`` <-> ``SITS_UI_DB`` ...).
ENV = {
    "db": "SITS_UI_DB",
    "service": "SITS_UI_SERVICE",
    "token_file": "SITS_UI_TOKEN_FILE",
    "since": "SITS_UI_SINCE",
    "until": "SITS_UI_UNTIL",
    "slo_ms": "SITS_UI_SLO_MS",
    "trace_nodes": "SITS_UI_TRACE_NODES",
    "trace_pods": "SITS_UI_TRACE_PODS",
}


class UiSettings(BaseModel):
    """Where the app's data comes from and the defaults of its pages."""

    model_config = ConfigDict(frozen=True)

    db: Path | None = Field(None, description="DuckDB file, opened read-only")
    service: str | None = Field(
        None, description="base URL of a running `sits-observe serve` (http://host:port)"
    )
    token: SecretStr | None = Field(None, description="bearer token of the service")
    since: str = Field(
        "6h",
        description="look back DUR from --until (15m, 6h, 7d; 'all' = every row), the "
        "window every page reads",
    )
    until: str = Field(
        "now",
        description="end of the window: now, newest (the newest sample each report reads) "
        "or an ISO-8601 time",
    )
    slo_ms: float | None = Field(
        None,
        gt=0,
        le=3_600_000,
        description="P95 latency SLO of the heatmap page's models, ms (none: the page says "
        "no SLO is set and shows no safe maximum)",
    )
    trace_nodes: Path | None = Field(
        None, description="default node list CSV of the what-if page (Alibaba v2023 schema)"
    )
    trace_pods: Path | None = Field(
        None, description="default pod list CSV of the what-if page (Alibaba v2023 schema)"
    )

    @model_validator(mode="after")
    def _one_source(self) -> UiSettings:
        try:
            self.window()
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        if (self.db is None) == (self.service is None):
            raise ValueError("give exactly one data source: --db FILE or --service URL")
        if self.service is not None:
            if not self.service.startswith(("http://", "https://")):
                raise ValueError(f"--service {self.service!r} must start with http:// or https://")
            if self.token is None:
                raise ValueError(
                    f"--service needs a bearer token: --token-file FILE or ${TOKEN_ENV}"
                )
        return self

    def window(self) -> WindowRequest:
        """The window every page asks its reports for (the CLI's ``--since`` / ``--until``)."""
        return window_request(self.since, self.until)

    @property
    def source_key(self) -> str:
        """A short text naming the source (cache key, page caption)."""
        return f"service {self.service}" if self.service else f"file {self.db}"


def _parser() -> argparse.ArgumentParser:
    fields = UiSettings.model_fields
    parser = argparse.ArgumentParser(prog="dashboards/app.py", add_help=False)
    parser.add_argument("--db", help=fields["db"].description)
    parser.add_argument("--service", help=fields["service"].description)
    parser.add_argument("--token-file", help="file holding the service's bearer token")
    parser.add_argument("--since", help=fields["since"].description)
    parser.add_argument("--until", help=fields["until"].description)
    parser.add_argument("--slo-ms", type=float, help=fields["slo_ms"].description)
    parser.add_argument("--trace-nodes", help=fields["trace_nodes"].description)
    parser.add_argument("--trace-pods", help=fields["trace_pods"].description)
    return parser


def window_request(since: str, until: str) -> WindowRequest:
    """``since`` / ``until`` as the CLI reads them; ``since`` ``all`` (or empty) = no start."""
    look_back = since.strip()
    return WindowRequest.parse(None if look_back.lower() in ("", "all") else look_back, until)


def read_token(path: Path) -> SecretStr:
    """The token in ``path`` (whitespace around it ignored); :class:`ConfigError` otherwise."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigError(f"cannot read token file {path}: {exc.strerror or exc}") from exc
    if not token or any(c.isspace() for c in token):
        raise ConfigError(f"token file {path}: the token must be non-empty, without whitespace")
    return SecretStr(token)


def load_settings(argv: Sequence[str], environ: Mapping[str, str]) -> UiSettings:
    """Settings from ``argv`` (unknown arguments ignored) over ``environ``.

    Raises :class:`ConfigError` saying which flag is wrong and what is allowed.
    """
    args, _ = _parser().parse_known_args(list(argv))
    values: dict[str, object] = {}
    for name, env in ENV.items():
        flag = getattr(args, name)
        value = flag if flag is not None else environ.get(env) or None
        if value is not None:
            values[name] = value
    token_file = values.pop("token_file", None)
    if token_file is not None:
        values["token"] = read_token(Path(str(token_file)))
    elif environ.get(TOKEN_ENV):
        values["token"] = SecretStr(environ[TOKEN_ENV].strip())
    try:
        return UiSettings.model_validate(values)
    except ValidationError as exc:
        raise ConfigError(f"invalid UI settings: {flag_problems(exc)}") from exc


def settings_from_process() -> UiSettings:
    """:func:`load_settings` of this process's arguments and environment."""
    import sys

    return load_settings(sys.argv[1:], os.environ)
