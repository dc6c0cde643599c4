"""How a report is declared, run and validated: one :class:`ReportSpec` per question.

A spec names the report, says in one line what it answers, gives the pydantic model of its
settings (each field's description, default, bounds and unit become a CLI flag and a query
parameter of ``GET /api/v1/reports/{name}``: one validator for both), names the tables whose
newest sample ``--until newest`` means, and holds the function that builds the report from a
store and a resolved :class:`~sits_observe.reports.window.Window`.

:func:`run_report` is the one path every surface takes: resolve the window, build, return.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from sits_observe.domain.validation import validate_settings
from sits_observe.errors import ConfigError, NoDataError
from sits_observe.reports.result import Report
from sits_observe.reports.window import Window, WindowRequest, empty_window_message, resolve
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient
from sits_observe.store.reads import TIME_COLUMNS, is_empty, newest_at, rows_between

S = TypeVar("S", bound=BaseModel)


@dataclass(frozen=True)
class PromQLReader:
    """A PromQL store to read from: the client, extra label matchers for every series
    (``job="dcgm"``) and the step (None = every raw sample)."""

    client: PromQLClient
    matchers: str = ""
    step_s: float | None = None


@dataclass(frozen=True)
class ReportSpec(Generic[S]):
    """One report: its name, one-line summary, settings model, tables read and builder.

    ``local_files``: settings fields naming files on the reader's machine (a trace, a price
    table); a ``--service`` read refuses them, since the service cannot open them.
    ``promql``: the builder on a Prometheus-compatible store (``--promql-url``), for reports
    that can read their series from one (docs/scaling.md); None = DuckDB only.
    ``offline``: true for settings that name local files holding every input (a trace), so
    no store is read: the builder then gets an empty in-memory store (None = never).
    ``live``: the builder when the surface holds Kubernetes API access (an official-client
    ``ApiClient``: ``serve --in-cluster``, a read command's ``--kubeconfig``), for reports
    with inputs the store does not keep (``recommend``: the cluster's Kueue / KAI queues);
    None = the store alone.
    """

    name: str
    summary: str
    settings: type[S]
    reads: tuple[str, ...]
    build: Callable[[Store, Window, S], Report]
    local_files: tuple[str, ...] = ()
    promql: Callable[[PromQLReader, Window, S], Report] | None = None
    offline: Callable[[S], bool] | None = None
    live: Callable[[Store, Window, S, Any], Report] | None = None

    def validate(self, values: Mapping[str, Any]) -> S:
        """The settings from flag or query values (None = the default); see
        :func:`validate_settings`."""
        return validate_settings(self.settings, values, what=self.name)


def time_column(table: str) -> str:
    """The time column of a table a report reads (the store's readable-table list)."""
    return TIME_COLUMNS[table]


def newest(store: Store, tables: Sequence[str]) -> datetime | None:
    """The newest time in any of ``tables`` (None when they are all empty)."""
    times = [newest_at(store, t) for t in tables]
    present = [t for t in times if t is not None]
    return max(present) if present else None


def window_for(
    spec: ReportSpec[Any], store: Store, request: WindowRequest, now: datetime | None = None
) -> Window:
    """The window ``request`` means for ``spec`` on ``store``."""
    return resolve(request, newest=newest(store, spec.reads), now=now or datetime.now(UTC))


def run_report(
    spec: ReportSpec[S],
    store: Store,
    request: WindowRequest,
    settings: S,
    *,
    now: datetime | None = None,
    kube_api: Any = None,
) -> Report:
    """Resolve the window and build the report: the one path of every surface (with
    ``kube_api``, through the spec's ``live`` builder when it has one)."""
    window = window_for(spec, store, request, now)
    if kube_api is not None and spec.live is not None:
        report = spec.live(store, window, settings, kube_api)
    else:
        report = spec.build(store, window, settings)
    note = raw_retention_note(spec, store, window)
    return report if note is None else replace(report, notes=(*report.notes, note))


#: Raw sample tables and the one-minute roll-ups that keep them past raw retention.
ROLLED_UP = {"gpu_samples": "gpu_samples_1m", "container_samples": "container_samples_1m"}


def raw_retention_note(spec: ReportSpec[Any], store: Store, window: Window) -> str | None:
    """A note when the window starts before the raw rows a report reads (raw retention, 6 h by
    default, rolled older ones into minute roll-ups, which reports do not read), so a 7-day
    window that answers from 6 h says so; None otherwise (or when nothing older exists)."""
    if window.since is None:
        return None
    for table, rollup in ROLLED_UP.items():
        if table not in spec.reads:
            continue
        oldest = store.scalar(f"SELECT min(ts) FROM {table}")
        if oldest is None or oldest <= window.since:
            continue
        if store.scalar(f"SELECT min(minute) FROM {rollup} WHERE minute < ?", [oldest]) is None:
            continue
        return (
            f"the window starts {window.since:%Y-%m-%d %H:%M:%S}, but {table} keeps raw rows "
            f"only from {oldest:%Y-%m-%d %H:%M:%S} (raw retention; older ones are one-minute "
            "roll-ups, which this report does not read): it answers from there"
        )
    return None


def run_promql_report(
    spec: ReportSpec[S],
    reader: PromQLReader,
    request: WindowRequest,
    settings: S,
    *,
    now: datetime | None = None,
) -> Report:
    """The report read from a PromQL store: ``--until newest`` is refused (a PromQL store
    has no cheap "newest sample"), and ``--since`` is required (the range to query)."""
    if spec.promql is None:
        raise ConfigError(f"{spec.name} reads only a DuckDB store; give --db or --service")
    if request.until == "newest":
        raise ConfigError("--until newest needs --db or --service; with --promql-url use now")
    if request.since_s is None:
        raise ConfigError("--promql-url needs --since DUR (e.g. 1h): the range to query")
    window = resolve(request, newest=None, now=now or datetime.now(UTC))
    return spec.promql(reader, window, settings)


def require_rows(store: Store, window: Window, table: str, filled_by: str) -> None:
    """A :class:`NoDataError` when ``table`` has no row in ``window``: the message names the
    table, how it gets filled, and ``--until newest`` when the data lies before the window."""
    if rows_between(store, table, window.since, window.until):
        return
    if is_empty(store, table):
        raise NoDataError(f"table {table} is empty; fill it with {filled_by}")
    raise NoDataError(empty_window_message(window, f"{table} rows", newest(store, [table])))
