"""CLI: ``sits-observe serve``, the composition root of the central service.

Builds :class:`ServiceSettings` from flags (help texts come from the model), checks the
tokens, binds the port(s) (a port in use is a one-line error before any file is created),
opens the store the service will own, and serves until SIGTERM / SIGINT (:mod:`..service.server`):
in-flight requests get ``shutdown_grace_s``, background work ``background_stop_s``, then the
store is checkpointed and closed. Tokens come from files (``--token-file``,
``--read-token-file``, ``--ingest-tokens-file``, ``--scrape-token-file``) or the ``SITS_TOKEN``
environment variable, never from a flag (flags show up in ``ps``).
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sits_observe.control.settings import ControllerSettings, Mode
from sits_observe.errors import ConfigError
from sits_observe.surfaces.alerts.settings import AlertingSettings, alerting_from_flags, flag_help
from sits_observe.surfaces.cli.common import run_cli, settings_from_flags
from sits_observe.surfaces.service.exporter_settings import ExporterSettings
from sits_observe.surfaces.service.limits import HttpLimits
from sits_observe.surfaces.service.settings import ServiceSettings
from sits_observe.surfaces.tracing import OTLP_ENDPOINT_HELP, SERVE_SERVICE_NAME, configure_tracing

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sits_observe.store import Store
    from sits_observe.surfaces.service.exporter import Signal

TOKEN_ENV = "SITS_TOKEN"
_FIELDS = ServiceSettings.model_fields
_DEFAULTS = ServiceSettings()
_LIMITS = HttpLimits()

log = logging.getLogger(__name__)


def _help(name: str) -> str:
    return _FIELDS[name].description or name


def _limit_help(name: str) -> str:
    return HttpLimits.model_fields[name].description or name


def _exporter_help(name: str) -> str:
    field = ExporterSettings.model_fields[name]
    return f"{field.description} [default: {field.default:g}]"


def build_settings(**values: object) -> ServiceSettings:
    """Validated settings; bad values become a :class:`ConfigError` naming the flag."""
    return settings_from_flags(ServiceSettings, "service", **values)


def configure_logging(level: str) -> None:
    """Diagnostics to stderr, one line each, with the logger name."""
    logging.basicConfig(
        level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def register(app: typer.Typer) -> None:
    """Add ``serve`` to ``app``."""

    @app.command("serve")
    def serve(
        *,
        db: Path = typer.Option(..., "--db", help=_help("db_path")),
        host: str = typer.Option(_DEFAULTS.host, help=_help("host")),
        port: int = typer.Option(_DEFAULTS.port, help=_help("port")),
        extender_port: int | None = typer.Option(
            None, "--extender-port", help=_help("extender_port")
        ),
        token_file: Path | None = typer.Option(
            None, "--token-file", help=f"{_help('token_file')}; else ${TOKEN_ENV} is used"
        ),
        read_token_file: Path | None = typer.Option(
            None, "--read-token-file", help=_help("read_token_file")
        ),
        ingest_tokens_file: Path | None = typer.Option(
            None, "--ingest-tokens-file", help=_help("ingest_tokens_file")
        ),
        scrape_token_file: Path | None = typer.Option(
            None, "--scrape-token-file", help=_help("scrape_token_file")
        ),
        api_docs: bool = typer.Option(False, "--api-docs", help=_help("api_docs")),
        max_body_bytes: int = typer.Option(_DEFAULTS.max_body_bytes, help=_help("max_body_bytes")),
        header_timeout_s: float = typer.Option(
            _LIMITS.header_timeout_s, help=_limit_help("header_timeout_s")
        ),
        body_timeout_s: float = typer.Option(
            _LIMITS.body_timeout_s, help=_limit_help("body_timeout_s")
        ),
        max_connections: int = typer.Option(
            _LIMITS.max_connections, help=_limit_help("max_connections")
        ),
        max_concurrent_requests: int = typer.Option(
            _LIMITS.max_concurrent_requests, help=_limit_help("max_concurrent_requests")
        ),
        shutdown_grace_s: int = typer.Option(
            _DEFAULTS.shutdown_grace_s, help=_help("shutdown_grace_s")
        ),
        retention_interval_s: float = typer.Option(
            _DEFAULTS.retention_interval_s, help=_help("retention_interval_s")
        ),
        log_level: str = typer.Option("info", help="debug, info, warning or error"),
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
            "needs --kubeconfig or --in-cluster",
        ),
        controller_mode: str = typer.Option(
            "dry-run",
            "--controller-mode",
            help="what the controller of --controller writes: dry-run (nothing), annotate "
            "(recommendation annotations and Events) or act (also labels, quotas, ConfigMap "
            "entry, QoS values); docs/controller.md",
        ),
        inventory_interval_s: float = typer.Option(
            30.0,
            min=1.0,
            help="seconds between inventory snapshots (with --kubeconfig / --in-cluster)",
        ),
        alertmanager_url: str | None = typer.Option(
            None, "--alertmanager-url", help=flag_help("alertmanager_url")
        ),
        alert_webhook_url: list[str] | None = typer.Option(
            None, "--alert-webhook-url", help=flag_help("webhook_urls") + " (repeatable)"
        ),
        alert_webhook_secret_file: Path | None = typer.Option(
            None, "--alert-webhook-secret-file", help=flag_help("webhook_secret_file")
        ),
        alert_eval_interval_s: float | None = typer.Option(
            None, "--alert-eval-interval-s", help=flag_help("eval_interval_s") + " [default: 15]"
        ),
        exporter_cache_s: float | None = typer.Option(
            None, "--exporter-cache-s", help=_exporter_help("cache_s")
        ),
        exporter_slow_cache_s: float | None = typer.Option(
            None, "--exporter-slow-cache-s", help=_exporter_help("slow_cache_s")
        ),
        exporter_window_s: float | None = typer.Option(
            None, "--exporter-window-s", help=_exporter_help("window_s")
        ),
        slo_ms: float | None = typer.Option(
            None,
            "--slo-ms",
            help="P95 latency SLO of every model, in milliseconds, as every command takes it "
            f"[default: {ExporterSettings.model_fields['latency_slo_s'].default * 1000:g}]",
        ),
        no_exporter: bool = typer.Option(
            False, "--no-exporter", help="do not export the derived signals on /metrics"
        ),
    ) -> None:
        """Run the central service: ingest from agents, reads, /healthz, /readyz, /metrics."""

        def go() -> None:
            configure_logging(log_level)
            configure_tracing(SERVE_SERVICE_NAME, otlp_endpoint)  # spans out over OTLP/HTTP
            env_token = (os.environ.get(TOKEN_ENV) or None) if token_file is None else None
            limits = settings_from_flags(
                HttpLimits,
                "HTTP limit",
                header_timeout_s=header_timeout_s,
                body_timeout_s=body_timeout_s,
                max_connections=max_connections,
                max_concurrent_requests=max_concurrent_requests,
            )
            settings = build_settings(
                host=host,
                port=port,
                extender_port=extender_port,
                db_path=db,
                token=env_token,
                token_file=token_file,
                read_token_file=read_token_file,
                ingest_tokens_file=ingest_tokens_file,
                scrape_token_file=scrape_token_file,
                api_docs=api_docs,
                max_body_bytes=max_body_bytes,
                http=limits,
                shutdown_grace_s=shutdown_grace_s,
                retention_interval_s=retention_interval_s,
            )
            if settings.extender_port is not None and settings.extender_port == settings.port:
                raise ConfigError("--extender-port must differ from --port (or leave it out)")
            settings.resolved_tokens()  # unreadable or missing tokens stop here, before any file
            api = None
            if controller and kubeconfig is None and not in_cluster:
                raise ConfigError("--controller needs --kubeconfig or --in-cluster")
            mode = _controller_mode(controller_mode, controller)
            if kubeconfig is not None or in_cluster:
                from sits_observe.surfaces.cli.ingest_k8s import build_api_client

                api = build_api_client(kubeconfig, context, in_cluster)
            run_service(
                settings,
                log_level=log_level,
                kube_api=api,
                inventory_interval_s=inventory_interval_s,
                controller=controller,
                controller_settings=ControllerSettings(mode=mode),
                alerting=alerting_from_flags(  # None (off) without --alertmanager-url / webhooks
                    alertmanager_url=alertmanager_url,
                    webhook_urls=alert_webhook_url,
                    webhook_secret_file=alert_webhook_secret_file,
                    eval_interval_s=alert_eval_interval_s,
                    external_url=f"http://{host}:{port}",
                ),
                exporter=settings_from_flags(  # docs/metrics.md
                    ExporterSettings,
                    "exporter",
                    enabled=not no_exporter,
                    cache_s=exporter_cache_s,
                    slow_cache_s=exporter_slow_cache_s,
                    window_s=exporter_window_s,
                    latency_slo_s=None if slo_ms is None else slo_ms / 1000,
                ),
            )

        run_cli(go)


def run_service(
    settings: ServiceSettings,
    *,
    log_level: str = "info",
    kube_api: Any = None,
    inventory_interval_s: float = 30.0,
    controller: bool = False,
    controller_settings: ControllerSettings | None = None,
    alerting: AlertingSettings | None = None,
    exporter: ExporterSettings | None = None,
    exporter_signals: Sequence[Signal] | None = None,
) -> None:
    """Bind the port(s), open the store, serve until a signal, then close the store.

    The sockets are bound before the store is opened, so a port in use is a
    :class:`ConfigError` and creates no database file. With ``kube_api`` (an official-client
    ``ApiClient``) the service also snapshots the Kubernetes inventory every
    ``inventory_interval_s`` (:mod:`..service.inventory`) and serves the extender's bind verb
    (:mod:`sits_observe.control.extender_kube`), and with ``controller`` runs the
    controller loop (``controller_settings``, dry-run by default; leader election on) in a
    thread beside the service: the one process that owns the store also plans from it.
    ``exporter_signals`` replaces the derived signals on ``/metrics`` (tests).
    """
    from sits_observe.store import Store
    from sits_observe.surfaces.service.app import create_app
    from sits_observe.surfaces.service.server import Listener, Servers, bind

    sockets = [bind(settings.host, settings.port, "--port")]
    try:
        if settings.extender_port is not None:
            sockets.append(bind(settings.host, settings.extender_port, "--extender-port"))
        store = Store.open(settings.db_path)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    inventory = None
    if kube_api is not None:
        from sits_observe.collectors.kube import KubeInventoryCollector
        from sits_observe.surfaces.service.inventory import InventoryLoop

        inventory = InventoryLoop(
            KubeInventoryCollector(kube_api), store, interval_s=inventory_interval_s
        ).start()
    stop_controller = threading.Event()
    controller_thread = None
    if controller and kube_api is not None:
        from prometheus_client import CollectorRegistry

        from sits_observe.control.kube import KubeJson
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
        from sits_observe.control.extender_kube import KubePodApi

        extender_pods = KubePodApi(kube_api)
    try:
        app = create_app(
            settings,
            store,
            alerting=alerting,
            exporter=exporter,
            exporter_signals=exporter_signals,
            extender_pods=extender_pods,
        )
        listeners = [Listener(app, sockets[0], settings.http, "the API")]
        if app.state.extender_app is not None:
            listeners.append(
                Listener(
                    app.state.extender_app,
                    sockets[1],
                    settings.extender_http,
                    "the scheduler extender",
                )
            )
        Servers(listeners, log_level=log_level, shutdown_grace_s=settings.shutdown_grace_s).run()
    finally:
        for sock in sockets:
            sock.close()
        stop_controller.set()
        if controller_thread is not None:
            controller_thread.join(timeout=settings.background_stop_s)
        if inventory is not None:
            inventory.stop()
        _close_store(store)


def _controller_mode(value: str, controller: bool) -> Mode:
    """``--controller-mode`` as a :class:`Mode`; a mode other than dry-run needs --controller."""
    try:
        mode = Mode(value)
    except ValueError:
        choices = ", ".join(m.value for m in Mode)
        raise ConfigError(f"--controller-mode {value!r}: choose one of {choices}") from None
    if mode is not Mode.DRY_RUN and not controller:
        raise ConfigError(f"--controller-mode {mode.value} needs --controller")
    return mode


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
