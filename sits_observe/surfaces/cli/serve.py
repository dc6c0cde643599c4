"""CLI: ``sits-observe serve``, the composition root of the central service.

Builds :class:`ServiceSettings` from flags (help texts come from the model), checks the
tokens, binds the port(s) (a port in use is a one-line error before any file is created),
opens the store the service will own, reads every block of it before the service's app takes
batches (a damaged file is one line and exit 2: :mod:`sits_observe.store.integrity`; with a
warm extender view, after the extender already answers), and serves until SIGTERM / SIGINT
(:mod:`..service.server`): in-flight requests get ``shutdown_grace_s``, background work
``background_stop_s``, then the store is checkpointed and closed. Tokens come from files
(``--token-file``, ``--read-token-file``, ``--ingest-tokens-file``, ``--scrape-token-file``)
or the ``SITS_TOKEN`` environment variable, never from a flag (flags show up in ``ps``).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sits_observe.control.controller.settings import ControllerSettings, Mode
from sits_observe.errors import ConfigError
from sits_observe.store.group_commit import GroupCommitSettings
from sits_observe.surfaces.alerts.settings import AlertingSettings, NotifySettings
from sits_observe.surfaces.cli.common import run_cli
from sits_observe.surfaces.cli.flags import SectionedCommand, SettingFlags, with_flags
from sits_observe.surfaces.cli.process_settings import LogSettings
from sits_observe.surfaces.cli.startup import resume_collection
from sits_observe.surfaces.service.exporter.settings import ExporterSettings
from sits_observe.surfaces.service.extender import ExtenderSettings
from sits_observe.surfaces.service.http.limits import HttpLimits
from sits_observe.surfaces.service.settings import ServiceSettings
from sits_observe.surfaces.tracing import OTLP_ENDPOINT_HELP, SERVE_SERVICE_NAME, configure_tracing

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from starlette.applications import Starlette
    from starlette.types import ASGIApp

    from sits_observe.reports.spec import ReportSpec
    from sits_observe.store import Store
    from sits_observe.surfaces.service.exporter.registry import Signal
    from sits_observe.surfaces.service.extender import ExtenderServing
    from sits_observe.surfaces.service.metrics import ServiceMetrics

TOKEN_ENV = "SITS_TOKEN"

#: ``serve``'s settings flags, one group per model (defaults, bounds and help from each).
SERVICE = SettingFlags(ServiceSettings, skip=("db_path",), panel="Service")
LIMITS = SettingFlags(HttpLimits, panel="HTTP limits of --port")
GROUP = SettingFlags(GroupCommitSettings, prefix="ingest_group", panel="Ingest group commit")
EXPORTER = SettingFlags(ExporterSettings, prefix="exporter", panel="Derived signals on /metrics")
#: Alerting's delivery; the rule thresholds are not flags: the generated Prometheus rules
#: file (grafana/alerts/) holds the same defaults, and a flag would make the two disagree.
ALERTING = SettingFlags(AlertingSettings, prefix="alert", panel="Alerting")
NOTIFY = SettingFlags(NotifySettings, prefix="alert", skip=("external_url",), panel="Alerting")
CONTROLLER = SettingFlags(ControllerSettings, prefix="controller", only=("mode", "sla"))
#: The extender's switches, view and scoring (``--extender-view-*``, ``--extender-scoring-*``).
EXTENDER = SettingFlags(ExtenderSettings, prefix="extender", panel="Scheduler extender")
LOG = SettingFlags(LogSettings)

log = logging.getLogger(__name__)


def configure_logging(level: str) -> None:
    """Diagnostics to stderr, one line each, with the logger name."""
    LogSettings.model_validate({"log_level": level}).configure()


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""
    app.command("serve", cls=SectionedCommand)(serve)


@with_flags(SERVICE, LIMITS, GROUP, EXPORTER, ALERTING, NOTIFY, CONTROLLER, EXTENDER, LOG)
def serve(
    *,
    db: Path = typer.Option(..., "--db", help=ServiceSettings.model_fields["db_path"].description),
    otlp_endpoint: str | None = typer.Option(None, "--otlp-endpoint", help=OTLP_ENDPOINT_HELP),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="snapshot the Kubernetes inventory with this kubeconfig"
    ),
    context: str | None = typer.Option(None, "--context", help="kubeconfig context"),
    in_cluster: bool = typer.Option(
        False, "--in-cluster", help="snapshot the inventory with the pod's service account"
    ),
    controller: bool = typer.Option(
        False,
        "--controller",
        help="also run the controller (with leader election) in this process; "
        "needs --kubeconfig or --in-cluster (--controller-mode: what it writes, "
        "docs/controller.md)",
    ),
    **flags: Any,
) -> None:
    """Run the central service: ingest from agents, reads, /healthz, /readyz, /metrics."""

    def go() -> None:
        logging_settings = LOG.validate(flags, what="service")
        logging_settings.configure()
        configure_tracing(SERVE_SERVICE_NAME, otlp_endpoint)  # spans out over OTLP/HTTP
        given_file = flags.get("token_file")
        env_token = (os.environ.get(TOKEN_ENV) or None) if given_file is None else None
        limits = LIMITS.validate(flags, what="HTTP limit")
        group = GROUP.validate(flags, what="ingest group commit")
        settings = SERVICE.validate(
            flags, what="service", db_path=db, token=env_token, http=limits, group_commit=group
        )
        if settings.extender_port is not None and settings.extender_port == settings.port:
            raise ConfigError("--extender-port must differ from --port (or leave it out)")
        settings.resolved_tokens()  # unreadable or missing tokens stop here, before any file
        api = None
        if controller and kubeconfig is None and not in_cluster:
            raise ConfigError("--controller needs --kubeconfig or --in-cluster")
        controller_settings = CONTROLLER.validate(flags, what="controller")
        if controller_settings.mode is not Mode.DRY_RUN and not controller:
            raise ConfigError(
                f"--controller-mode {controller_settings.mode.value} needs --controller"
            )
        if kubeconfig is not None or in_cluster:
            from sits_observe.surfaces.cli.ingest.k8s import build_api_client

            api = build_api_client(kubeconfig, context, in_cluster)
        run_service(
            settings,
            log_level=logging_settings.log_level,
            kube_api=api,
            controller=controller,
            controller_settings=controller_settings,
            alerting=alerting_settings(
                flags, external_url=f"http://{settings.host}:{settings.port}"
            ),
            exporter=EXPORTER.validate(flags, what="exporter"),  # docs/metrics.md
            extender=EXTENDER.validate(flags, what="extender"),  # docs/extender.md
        )

    run_cli(go)


def alerting_settings(flags: Mapping[str, Any], *, external_url: str) -> AlertingSettings | None:
    """``serve``'s alerting flags as settings; None (alerting off) when no target is given.
    A bad value or a missing / unreadable webhook secret is a :class:`ConfigError`."""
    targets = NOTIFY.values(flags)
    if targets["alertmanager_url"] is None and not targets["webhook_urls"]:
        return None
    notify = NOTIFY.validate(flags, what="alerting", external_url=external_url)
    settings = ALERTING.validate(flags, what="alerting", notify=notify)
    settings.notify.resolved_secret()  # fail at start-up, not at the first alert
    return settings


def run_service(
    settings: ServiceSettings,
    *,
    log_level: str = "info",
    kube_api: Any = None,
    controller: bool = False,
    controller_settings: ControllerSettings | None = None,
    alerting: AlertingSettings | None = None,
    exporter: ExporterSettings | None = None,
    exporter_signals: Sequence[Signal] | None = None,
    extender: ExtenderSettings | None = None,
) -> None:
    """Bind the port(s), open the store, serve until a signal, then close the store.

    The sockets are bound before the store is opened, so a port in use is a
    :class:`ConfigError` and creates no database file. With ``kube_api`` (an official-client
    ``ApiClient``) the service also snapshots the Kubernetes inventory every
    ``settings.inventory_interval_s`` (:mod:`..service.inventory`) and serves the extender's
    bind verb (:mod:`sits_observe.control.extender.kube`), and with ``controller`` runs the
    controller loop (``controller_settings``, dry-run by default; leader election on) in a
    thread beside the service: the one process that owns the store also plans from it.
    ``exporter_signals`` replaces the derived signals on ``/metrics`` (tests).
    """
    from sits_observe.store import Store
    from sits_observe.surfaces.service.extender import serve_extender
    from sits_observe.surfaces.service.http.sockets import bind
    from sits_observe.surfaces.service.metrics import ServiceMetrics

    sockets = [bind(settings.host, settings.port, "--port")]
    try:
        if settings.extender_port is not None:
            sockets.append(bind(settings.host, settings.extender_port, "--extender-port"))
        store = Store.open(settings.db_path, memory_limit=settings.db_memory_limit)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    inventory = None
    if kube_api is not None:
        from sits_observe.collectors.kube.inventory import KubeInventoryCollector
        from sits_observe.surfaces.service.inventory import InventoryLoop

        inventory = InventoryLoop(
            KubeInventoryCollector(kube_api), store, interval_s=settings.inventory_interval_s
        ).start()
    stop_controller = threading.Event()
    controller_thread = None
    if controller and kube_api is not None:
        from prometheus_client import CollectorRegistry

        from sits_observe.control.controller.kube import KubeJson
        from sits_observe.surfaces.cli.controller import build_loop

        chosen = controller_settings or ControllerSettings()
        log.info("controller in %s mode inside the service", chosen.mode)
        loop = build_loop(
            store=store,
            kube=KubeJson(kube_api),
            settings=chosen,
            registry=CollectorRegistry(),
        )
        controller_thread = threading.Thread(
            target=loop.run, args=(stop_controller,), name="controller", daemon=True
        )
        controller_thread.start()
    extender_pods = None
    if kube_api is not None:  # the extender's bind verb binds through the Kubernetes API
        from sits_observe.control.extender.kube import KubePodApi

        extender_pods = KubePodApi(kube_api)
    try:
        metrics = ServiceMetrics()
        serving = serve_extender(
            store,
            metrics,
            None if settings.extender_port is None else settings.extender_http,
            settings=extender,
            pods=extender_pods,
        )
        # Imported once the warm view's build has started: its reads run meanwhile.
        from sits_observe.surfaces.service.http.server import Listener, Servers
        from sits_observe.surfaces.service.http.staged import StagedApp

        servers: list[Servers] = []

        def build() -> Starlette:
            try:
                # A damaged file is refused before the app is made, so before it takes
                # batches; the check reads meanwhile the app's module imports.
                checked = _verify_meanwhile(store)
                try:
                    from sits_observe.surfaces.service.app import create_app  # FastAPI: stage 2
                finally:
                    checked()
                return create_app(
                    settings,
                    store,
                    metrics=metrics,
                    alerting=alerting,
                    exporter=exporter,
                    exporter_signals=exporter_signals,
                    extender_serving=serving,
                    kube_api=kube_api,
                    reports=_all_reports,
                )
            finally:
                resume_collection()  # the start is over: main paused the collector (startup.py)

        first_view = _first_view(serving)
        staged = None
        if first_view is None:  # the service's app first, as its imports would slow the view
            main: ASGIApp = build()
        else:  # warm: the extender answers while the rest loads (docs/extender.md)
            main = staged = StagedApp(
                build,
                extender=_early_extender(serving, metrics, settings.http),
                first_view=first_view,
                on_failure=lambda _: servers[0].stop(),
            )
        listeners = [Listener(main, sockets[0], settings.http, "the API", metrics)]
        if serving.port_app is not None:
            listeners.append(
                Listener(
                    serving.port_app,
                    sockets[1],
                    settings.extender_http,
                    "the scheduler extender",
                    metrics,
                )
            )
        servers.append(
            Servers(listeners, log_level=log_level, shutdown_grace_s=settings.shutdown_grace_s)
        )
        servers[0].run()
        if staged is not None and staged.failure is not None:
            raise staged.failure
    finally:
        for sock in sockets:
            sock.close()
        stop_controller.set()
        if controller_thread is not None:
            controller_thread.join(timeout=settings.background_stop_s)
        if inventory is not None:
            inventory.stop()
        _close_store(store)


def _verify(store: Store) -> None:
    """Read every block the store uses (:mod:`sits_observe.store.integrity`); a damaged
    file raises :class:`~sits_observe.store.integrity.StoreDamaged` (one line, exit 2)."""
    from sits_observe.store.integrity import verify_store

    report = verify_store(store)
    log.info(
        "database %s checked: %d tables, %d rows, %.0f MB in %.2f s",
        store.path,
        report.tables,
        report.rows,
        report.file_bytes / 1e6,
        report.seconds,
    )


def _verify_meanwhile(store: Store) -> Callable[[], None]:
    """Start :func:`_verify` in a thread; the function returned waits for it and raises what
    it raised. The check is DuckDB reading (outside the GIL), so it costs the start nothing
    while the service's app imports in the calling thread (bench_extender_cold_start)."""
    failed: list[Exception] = []

    def run() -> None:
        try:
            _verify(store)
        except Exception as exc:  # raised in the caller's thread by wait()
            failed.append(exc)

    thread = threading.Thread(target=run, name="store-verify", daemon=True)
    thread.start()

    def wait() -> None:
        thread.join()
        if failed:
            raise failed[0]

    return wait


def _early_extender(
    serving: ExtenderServing, metrics: ServiceMetrics, limits: HttpLimits
) -> Starlette | None:
    """The extender on the service's port while the service starts (None: it has a port of
    its own, or is off)."""
    from sits_observe.surfaces.service.extender import create_extender_app

    if serving.port_app is not None or serving.endpoints is None:
        return None
    return create_extender_app(serving.endpoints, metrics, limits)


def _first_view(serving: ExtenderServing) -> Callable[[], object] | None:
    """Waits for the first view a warm start builds (None: not warm, nothing to wait for).

    Only a warm start is staged: without it the first extender call builds the view while
    the service's app would be importing (the GIL shared), which made that first answer
    about 7 % later than building the app before listening (bench_extender_cold_start)."""
    endpoints = serving.endpoints
    if endpoints is None or not endpoints.settings.warm_view:
        return None
    timeout_s = endpoints.settings.view.first_view_timeout_s
    return lambda: endpoints.cache.wait(timeout_s)


def _close_store(store: Store) -> None:
    """Checkpoint and close; a background query that outlived the shutdown budget makes
    DuckDB refuse, and the file is then left to its write-ahead log (replayed at the next
    start: nothing acknowledged is lost)."""
    try:
        store.close()
    except Exception as exc:
        log.warning(
            "database not checkpointed at exit (%s); it opens normally next time, "
            "DuckDB replays its write-ahead log",
            exc,
        )


def _all_reports() -> Mapping[str, ReportSpec[Any]]:
    """Every report, the lab's ``whatif`` included, for ``/api/v1/reports/{name}``: imported
    on the route's first request, as the product's registry is (the extender's cold start)."""
    from sits_observe.lab.catalog import all_reports

    return all_reports()
