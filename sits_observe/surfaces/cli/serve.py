"""CLI: ``sits-observe serve``, the composition root of the central service.

Builds :class:`ServiceSettings` from flags (help texts come from the model), opens the store
the service will own, and runs uvicorn until SIGTERM / SIGINT; uvicorn drains in-flight
requests, then the store is checkpointed and closed. The token comes from ``--token-file``
or the ``SITS_TOKEN`` environment variable, never from a flag (flags show up in ``ps``).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import typer

from sits_observe.errors import ConfigError
from sits_observe.surfaces.alerts.settings import AlertingSettings, alerting_from_flags, flag_help
from sits_observe.surfaces.cli.common import run_cli, settings_from_flags
from sits_observe.surfaces.service.exporter_settings import ExporterSettings
from sits_observe.surfaces.service.settings import ServiceSettings
from sits_observe.surfaces.tracing import OTLP_ENDPOINT_HELP, SERVE_SERVICE_NAME, configure_tracing

TOKEN_ENV = "SITS_TOKEN"
_FIELDS = ServiceSettings.model_fields
_DEFAULTS = ServiceSettings()


def _help(name: str) -> str:
    return _FIELDS[name].description or name


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
        token_file: Path | None = typer.Option(
            None, "--token-file", help=f"{_help('token_file')}; else ${TOKEN_ENV} is used"
        ),
        max_body_bytes: int = typer.Option(_DEFAULTS.max_body_bytes, help=_help("max_body_bytes")),
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
            help="also run the controller (dry-run, with leader election) in this process; "
            "needs --kubeconfig or --in-cluster",
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
        latency_slo_s: float | None = typer.Option(
            None, "--latency-slo-s", help=_exporter_help("latency_slo_s")
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
            settings = build_settings(
                host=host,
                port=port,
                db_path=db,
                token=env_token,
                token_file=token_file,
                max_body_bytes=max_body_bytes,
                retention_interval_s=retention_interval_s,
            )
            settings.resolved_token()
            api = None
            if controller and kubeconfig is None and not in_cluster:
                raise ConfigError("--controller needs --kubeconfig or --in-cluster")
            if kubeconfig is not None or in_cluster:
                from sits_observe.surfaces.cli.ingest_k8s import build_api_client

                api = build_api_client(kubeconfig, context, in_cluster)
            run_service(
                settings,
                log_level=log_level,
                kube_api=api,
                inventory_interval_s=inventory_interval_s,
                controller=controller,
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
                    latency_slo_s=latency_slo_s,
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
    alerting: AlertingSettings | None = None,
    exporter: ExporterSettings | None = None,
) -> None:
    """Open the store, serve until a signal, then close the store (checkpoint).

    With ``kube_api`` (an official-client ``ApiClient``) the service also snapshots the
    Kubernetes inventory every ``inventory_interval_s`` (:mod:`..service.inventory`), and
    with ``controller`` runs the controller loop (its default dry-run mode, leader election
    on) in a thread beside the service.
    """
    import uvicorn

    from sits_observe.store import Store
    from sits_observe.surfaces.service.app import create_app

    store = Store.open(settings.db_path)
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
        from sits_observe.control.settings import ControllerSettings
        from sits_observe.surfaces.cli.controller import build_loop

        loop = build_loop(
            store=store,
            kube=KubeJson(kube_api),
            settings=ControllerSettings(),
            registry=CollectorRegistry(),
        )
        controller_thread = threading.Thread(
            target=loop.run, args=(stop_controller,), name="controller", daemon=True
        )
        controller_thread.start()
    try:
        if threading.current_thread() is threading.main_thread():
            # uvicorn re-raises SIGTERM once drained, which killed the process before this
            # finally and the atexit hooks (span export) ran; exit through Python instead.
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        app = create_app(settings, store, alerting=alerting, exporter=exporter)
        uvicorn.run(
            app,
            host=settings.host,
            port=settings.port,
            log_level=log_level.lower(),
            access_log=log_level.lower() == "debug",
            timeout_graceful_shutdown=10,
        )
    finally:
        stop_controller.set()
        if controller_thread is not None:
            controller_thread.join(timeout=30)
        if inventory is not None:
            inventory.stop()
        store.close()
