"""``GET /api/v1/reports/{name}``: any report over the service's store, as its JSON document.

The query holds the window (``since=2h``, ``until=now|newest|<ISO time>``) and the report's
settings by field name (``by=gpu``, ``max_skew_s=5``), validated by the same model the CLI's
flags are (:meth:`~sits_observe.reports.spec.ReportSpec.validate`). The answer is
:meth:`~sits_observe.reports.result.Report.document`, which ``--service`` reads back, so an
answer read through the service is the one the file gives. Read token (the ``/api/v1/*``
rule of :mod:`.auth`).

Errors: an unknown report 404, bad settings or window 400, settings naming files on the
caller's machine 400, no data in the window 404; each is one ``detail`` line.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from sits_observe.errors import ConfigError, NoDataError, UnknownNameError
from sits_observe.reports.registry import find_report
from sits_observe.reports.spec import run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.surfaces.service.ingest import problem

_WINDOW_KEYS = ("since", "until")


def add_report_routes(
    app: FastAPI, store: Store, clock: Callable[[], datetime], kube_api: Any = None
) -> None:
    """Add the reports route to ``app``; with ``kube_api`` (the service's Kubernetes API
    access) reports with a ``live`` builder read the cluster too (``recommend``: queues)."""

    @app.get("/api/v1/reports/{name}", response_model=None)
    async def report(name: str, request: Request) -> JSONResponse:
        """One report as JSON (see the module docstring)."""
        try:
            spec = find_report(name)
        except UnknownNameError as exc:
            return problem(404, "unknown_report", str(exc))
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
        try:
            local = [f for f in spec.local_files if values.get(f) is not None]
            if local:
                raise ConfigError(
                    f"{', '.join('--' + f.replace('_', '-') for f in local)} names a file on the "
                    "reader's machine, which the service cannot open; read with --db instead"
                )
            window = WindowRequest.parse(
                request.query_params.get("since"), request.query_params.get("until")
            )
            settings = spec.validate(values)
        except ConfigError as exc:
            return problem(400, "bad_request", str(exc))

        def answer() -> dict[str, object]:
            return run_report(
                spec, store, window, settings, now=clock(), kube_api=kube_api
            ).document()

        try:
            document = await run_in_threadpool(answer)
        except NoDataError as exc:
            return problem(404, "no_data", str(exc))
        except ConfigError as exc:
            return problem(400, "bad_request", str(exc))
        return JSONResponse(document)
