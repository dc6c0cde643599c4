"""``GET /api/v1/reports/{name}``: any report over the service's store, as its JSON document.

The query holds the window (``since=2h``, ``until=now|newest|<ISO time>``) and the report's
settings by field name (``by=gpu``, ``max_skew_s=5``), validated by the same model the CLI's
flags are (:meth:`~sits_observe.reports.spec.ReportSpec.validate`). The answer is
:meth:`~sits_observe.reports.result.Report.document`, which ``--service`` reads back, so an
answer read through the service is the one the file gives. Read token (the ``/api/v1/*``
rule of :mod:`.auth`).

Errors: an unknown report 404, bad settings or window 400, settings naming files on the
caller's machine 400, no data in the window 404; each is one ``detail`` line.

Which reports there are is the composition root's to say (``catalog``: ``serve`` passes the
product's and the lab's, :func:`sits_observe.lab.catalog.all_reports`; by default the product's
registry). The reports (every report and analytics module: about 0.5 s of CPU in imports)
load on the first request to the route, in the thread pool, not when the service starts:
the scheduler extender's first answer after a restart does not wait for them
(docs/extender.md, cold start).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from sits_observe.errors import ConfigError, NoDataError, UnknownNameError
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.service.http.json_answers import problem

if TYPE_CHECKING:
    from sits_observe.reports.spec import ReportSpec

_WINDOW_KEYS = ("since", "until")

#: The reports the route answers, called on the first request (their imports are heavy).
Catalog = Callable[[], Mapping[str, "ReportSpec[Any]"]]


def product_reports() -> Mapping[str, ReportSpec[Any]]:
    """The product's report registry (the default catalog)."""
    from sits_observe.reports.registry import REPORTS  # first use: see the module docstring

    return REPORTS


def add_report_routes(
    app: FastAPI,
    store: Store,
    clock: Callable[[], datetime],
    kube_api: Any = None,
    catalog: Catalog = product_reports,
) -> None:
    """Add the reports route to ``app``; with ``kube_api`` (the service's Kubernetes API
    access) reports with a ``live`` builder read the cluster too (``recommend``: queues);
    ``catalog`` gives the reports there are."""

    @app.get("/api/v1/reports/{name}", response_model=None)
    async def report(name: str, request: Request) -> JSONResponse:
        """One report as JSON (see the module docstring)."""
        values: dict[str, object] = {}
        for key, value in request.query_params.multi_items():
            if key in _WINDOW_KEYS:
                continue
            previous = values.get(key)
            if previous is None:
                values[key] = value
            elif isinstance(previous, list):
                previous.append(value)
            else:
                values[key] = [previous, value]
        since = request.query_params.get("since")
        until = request.query_params.get("until")

        def answer() -> JSONResponse:
            return _answer(
                store, name, values, since, until, now=clock(), kube_api=kube_api, catalog=catalog
            )

        return await run_in_threadpool(answer)


def _answer(
    store: Store,
    name: str,
    values: dict[str, object],
    since: str | None,
    until: str | None,
    *,
    now: datetime,
    kube_api: Any,
    catalog: Catalog,
) -> JSONResponse:
    """The report ``name`` over ``store`` as a JSON answer, or its problem answer."""
    from sits_observe.reports.registry import find_report  # first use: see the docstring
    from sits_observe.reports.spec import run_report

    try:
        spec = find_report(name, catalog())
    except UnknownNameError as exc:
        return problem(404, "unknown_report", str(exc))
    try:
        local = [f for f in spec.local_files if values.get(f) is not None]
        if local:
            raise ConfigError(
                f"{', '.join('--' + f.replace('_', '-') for f in local)} names a file on the "
                "reader's machine, which the service cannot open; read with --db instead"
            )
        window = WindowRequest.parse(since, until)
        settings = spec.validate(values)
    except ConfigError as exc:
        return problem(400, "bad_request", str(exc))
    try:
        document = run_report(spec, store, window, settings, now=now, kube_api=kube_api).document()
    except NoDataError as exc:
        return problem(404, "no_data", str(exc))
    except ConfigError as exc:
        return problem(400, "bad_request", str(exc))
    return JSONResponse(document)
