"""What every generated report command shares: the source, window and output flags, and the
read of a report from a file, a service or a PromQL store (:mod:`.report_commands` builds the
commands; :mod:`.heatmap_extras` reads through the same functions)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import typer

from sits_observe.errors import ConfigError
from sits_observe.reports.remote import fetch_report
from sits_observe.reports.result import Report
from sits_observe.reports.spec import PromQLReader, ReportSpec, run_promql_report, run_report
from sits_observe.reports.window import WindowRequest
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient
from sits_observe.surfaces.cli.reports.output import Output
from sits_observe.surfaces.ui.config import TOKEN_ENV, read_token

DB_ENV = "SITS_DB"
SERVICE_ENV = "SITS_SERVICE"

#: Names the generated commands use for their own flags (a settings field may not take them).
COMMON_FLAGS = ("db", "service", "token_file", "since", "until", "output", "columns")
PROMQL_FLAGS = ("promql_url", "promql_step_s", "promql_matchers")
KUBE_FLAGS = ("kubeconfig", "context", "in_cluster")


def _option(default: Any, *names: str, help: str, **extra: Any) -> Any:
    return typer.Option(default, *names, help=help, **extra)


def common_parameters() -> list[inspect.Parameter]:
    """The source, window and output flags of every read command."""
    keyword = inspect.Parameter.KEYWORD_ONLY

    def p(name: str, annotation: Any, default: Any) -> inspect.Parameter:
        return inspect.Parameter(name, keyword, default=default, annotation=annotation)

    return [
        p(
            "db",
            Path | None,
            _option(None, "--db", help="DuckDB file to read", envvar=DB_ENV),
        ),
        p(
            "service",
            str | None,
            _option(
                None,
                "--service",
                help="URL of a running `sits-observe serve` to read through (instead of --db)",
                envvar=SERVICE_ENV,
            ),
        ),
        p(
            "token_file",
            Path | None,
            _option(None, "--token-file", help=f"read token of --service; else ${TOKEN_ENV}"),
        ),
        p(
            "since",
            str | None,
            _option(
                None, "--since", help="look back DUR from --until, e.g. 15m, 2h, 7d (default: all)"
            ),
        ),
        p(
            "until",
            str,
            _option(
                "now",
                "--until",
                help="end of the window: now, newest (the newest sample read) or an ISO time",
            ),
        ),
        p(
            "output",
            Output,
            _option(
                Output.table, "-o", "--output", "--format", help="table, wide, json, yaml or csv"
            ),
        ),
        p(
            "columns",
            str | None,
            _option(None, "--columns", help="comma-separated columns to show (names or headers)"),
        ),
    ]


def promql_parameters() -> list[inspect.Parameter]:
    """``--promql-url`` and its two companions, for reports with a PromQL builder."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter(
            "promql_url",
            keyword,
            default=_option(
                None,
                "--promql-url",
                help="read the series from this Prometheus-compatible query URL "
                "(VictoriaMetrics, Thanos, Mimir, Prometheus) instead of --db; needs --since",
            ),
            annotation=str | None,
        ),
        inspect.Parameter(
            "promql_step_s",
            keyword,
            default=_option(
                None,
                "--promql-step-s",
                min=0.001,
                help="with --promql-url: one point per STEP seconds instead of every raw sample",
            ),
            annotation=float | None,
        ),
        inspect.Parameter(
            "promql_matchers",
            keyword,
            default=_option(
                "",
                "--promql-matchers",
                help='with --promql-url: extra label matchers for every series, e.g. job="dcgm"',
            ),
            annotation=str,
        ),
    ]


def kube_parameters() -> list[inspect.Parameter]:
    """``--kubeconfig``, ``--context`` and ``--in-cluster``, for reports with a ``live``
    builder (inputs read from the Kubernetes API beside the store)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    return [
        inspect.Parameter(
            "kubeconfig",
            keyword,
            default=_option(
                None,
                "--kubeconfig",
                help="also read what the store does not keep from this cluster (recommend: its "
                "Kueue / KAI queues); with --db",
            ),
            annotation=Path | None,
        ),
        inspect.Parameter(
            "context",
            keyword,
            default=_option(None, "--context", help="kubeconfig context (with --kubeconfig)"),
            annotation=str | None,
        ),
        inspect.Parameter(
            "in_cluster",
            keyword,
            default=_option(
                False, "--in-cluster", help="as --kubeconfig, with the pod's service account"
            ),
            annotation=bool,
        ),
    ]


def promql_reader(flags: dict[str, Any]) -> PromQLReader | None:
    """The PromQL store ``--promql-url`` names (the caller closes its client), or None."""
    if flags.get("promql_url") is None:
        return None
    return PromQLReader(
        PromQLClient(flags["promql_url"]), flags["promql_matchers"], flags["promql_step_s"]
    )


def kube_api_of(kwargs: dict[str, Any]) -> Any:
    """The ApiClient the kube flags ask for, or None when none is given."""
    if kwargs.get("kubeconfig") is None and not kwargs.get("in_cluster"):
        if kwargs.get("context") is not None:
            raise ConfigError("--context needs --kubeconfig")
        return None
    if kwargs.get("service") is not None:
        raise ConfigError(
            "--kubeconfig / --in-cluster read the cluster beside --db; through --service the "
            "service reads it with its own access"
        )
    from sits_observe.surfaces.cli.ingest.k8s import build_api_client

    return build_api_client(kwargs.get("kubeconfig"), kwargs.get("context"), kwargs["in_cluster"])


def read_report(
    spec: ReportSpec[Any],
    *,
    db: Path | None,
    service: str | None,
    token_file: Path | None,
    since: str | None,
    until: str | None,
    values: dict[str, Any],
    promql: PromQLReader | None = None,
    kube_api: Any = None,
) -> Report:
    """The report from ``db``, through ``service`` or from a PromQL store (settings validated
    here in every case); ``kube_api`` feeds the spec's ``live`` builder."""
    request = WindowRequest.parse(since, until)
    settings = spec.validate(values)
    if spec.offline is not None and spec.offline(settings):
        if db is not None or service is not None or promql is not None:
            files = ", ".join(f"--{f.replace('_', '-')}" for f in spec.local_files)
            raise ConfigError(f"give either --db / --service or the files ({files}), not both")
        with Store.open(":memory:") as store:
            return run_report(spec, store, request, settings)
    if promql is not None:
        if db is not None or service is not None:
            raise ConfigError("give one source: --db, --service or --promql-url")
        return run_promql_report(spec, promql, request, settings)
    if (db is None) == (service is None):
        raise ConfigError(
            f"give one source: --db FILE or --service URL (or ${DB_ENV} / ${SERVICE_ENV})"
        )
    if service is not None:
        if token_file is not None:
            token = read_token(token_file).get_secret_value()
        elif os.environ.get(TOKEN_ENV):
            token = os.environ[TOKEN_ENV].strip()
        else:
            raise ConfigError(f"--service needs a read token: --token-file FILE or ${TOKEN_ENV}")
        local = [f for f in spec.local_files if values.get(f) is not None]
        if local:
            raise ConfigError(
                f"--{local[0].replace('_', '-')} names a local file, which the service cannot "
                "open; read with --db"
            )
        return fetch_report(service, token, spec.name, request, values)
    assert db is not None
    if not db.exists():
        raise ConfigError(f"database {db} does not exist; give the --db of an ingest or serve")
    with Store.open(db, read_only=True) as store:
        return run_report(spec, store, request, settings, kube_api=kube_api)
