"""How a page gets its reports: from a DuckDB file, or through a running service.

The app reads only reports (:mod:`sits_observe.reports`), never tables:

- ``--db FILE``: the file is opened read-only for one page run and closed again (so an
  ``ingest`` can open it for writing between two runs); each report is
  :func:`~sits_observe.reports.spec.run_report` on it, as ``sits-observe <report> --db``.
- ``--service URL``: each report is ``GET /api/v1/reports/{name}`` with the bearer token
  (:func:`~sits_observe.reports.remote.fetch_report`), as ``sits-observe <report>
  --service``: the service owns its file and answers from it.

Settings that name local files holding every input (a what-if trace) are run here on an
empty in-memory store, as the CLI does (:attr:`~sits_observe.reports.spec.ReportSpec.offline`).
A report is looked up by name when a page asks for it, so a page names reports, never
imports them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from sits_observe.errors import ConfigError
from sits_observe.lab.catalog import all_reports
from sits_observe.reports.registry import find_report
from sits_observe.reports.remote import fetch_report
from sits_observe.reports.result import Report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.ui.config import UiSettings

#: A service read: (base URL, token, report name, window, settings) -> report.
Fetch = Callable[[str, str, str, WindowRequest, Mapping[str, Any]], Report]


class Reader(Protocol):
    """What a page reads its reports with."""

    request: WindowRequest

    def report(self, name: str, values: Mapping[str, Any] | None = None) -> Report:
        """Report ``name`` over the page's window with settings ``values`` (by field name;
        missing ones take the report's defaults)."""
        ...


class StoreReader:
    """Reports built from an open store (a file opened read-only for this page run)."""

    def __init__(self, store: Store, request: WindowRequest) -> None:
        self.store = store
        self.request = request

    def report(self, name: str, values: Mapping[str, Any] | None = None) -> Report:
        """See :meth:`Reader.report`."""
        spec = find_report(name, all_reports())
        settings = spec.validate(values or {})
        if spec.offline is not None and spec.offline(settings):
            return _offline(name, values or {}, self.request)
        return run_report(spec, self.store, self.request, settings)


class ServiceReader:
    """Reports read through ``sits-observe serve`` (``fetch`` may cache them)."""

    def __init__(
        self, url: str, token: str, request: WindowRequest, fetch: Fetch = fetch_report
    ) -> None:
        self.url = url
        self.token = token
        self.request = request
        self._fetch = fetch

    def report(self, name: str, values: Mapping[str, Any] | None = None) -> Report:
        """See :meth:`Reader.report`; settings are checked here first, so a bad value is the
        same one line as with ``--db``."""
        spec = find_report(name, all_reports())
        settings = spec.validate(values or {})
        if spec.offline is not None and spec.offline(settings):
            return _offline(name, values or {}, self.request)
        local = [f for f in spec.local_files if (values or {}).get(f) is not None]
        if local:
            raise ConfigError(
                f"{local[0].replace('_', ' ')} names a file here, which the service cannot open"
            )
        return self._fetch(self.url, self.token, name, self.request, dict(values or {}))


def _offline(name: str, values: Mapping[str, Any], request: WindowRequest) -> Report:
    """A report whose settings name every input as local files: no store is read."""
    spec = find_report(name, all_reports())
    with Store.open(":memory:") as store:
        return run_report(spec, store, request, spec.validate(values))


@contextmanager
def open_reader(
    settings: UiSettings, request: WindowRequest, fetch: Fetch = fetch_report
) -> Iterator[Reader]:
    """The reader of one page run (see the module docstring)."""
    if settings.db is not None:
        if not settings.db.exists():
            raise ConfigError(f"database {settings.db} does not exist; give the --db of an ingest")
        with Store.open(settings.db, read_only=True) as store:
            yield StoreReader(store, request)
        return
    assert settings.service is not None and settings.token is not None
    yield ServiceReader(settings.service, settings.token.get_secret_value(), request, fetch)
