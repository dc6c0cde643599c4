"""CLI: ``sits-observe controller`` (the control loop) and ``sits-observe recommend``.

``controller --db DB [--kubeconfig PATH | --in-cluster] [--act | --annotate]`` runs the
level-triggered loop against a cluster: signals from the store, state from the API, decisions
recorded in the store's ``decisions`` table. Dry-run unless ``--annotate`` or ``--act``
(docs/controller.md says what each mode writes). It owns the DuckDB file for writing, like
``serve``; inside a cluster run it next to (or, later, inside) the service.

``recommend --db DB [--format table|json|yaml]`` prints every standing recommendation,
computed from the store like the controller's plan (as of the newest data in the store),
with each object's current value read from the cluster when ``--kubeconfig`` /
``--context`` / ``--in-cluster`` is given and from the store's inventory otherwise. It
writes nothing. ``kubectl sits recommend`` is the same command through the ``kubectl-sits``
plug-in entry point.

This module is the composition root of both: it builds settings, the store, the official
client, the elector, the recorder and the metrics from flags.
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Any

import typer
import yaml
from prometheus_client import CollectorRegistry, start_http_server

from sits_observe.control.apply import Applier
from sits_observe.control.inputs import CurrentState, History
from sits_observe.control.kube import KubeJson
from sits_observe.control.leader import LeaderElector
from sits_observe.control.loop import HISTORY_WINDOW, ControllerLoop
from sits_observe.control.plan import plan as make_plan
from sits_observe.control.record import ControllerMetrics, StoreRecorder, load_history
from sits_observe.control.settings import ControllerSettings, Mode
from sits_observe.control.state import read_state
from sits_observe.control.store_signals import (
    latest_data_at,
    signals_from_store,
    state_from_store,
)
from sits_observe.errors import ConfigError, KubeApiError
from sits_observe.store import Store
from sits_observe.surfaces.cli.common import (
    OutputFormat,
    out,
    print_rows,
    run_cli,
    settings_from_flags,
)
from sits_observe.surfaces.cli.ingest_k8s import build_api_client

log = logging.getLogger(__name__)

_FIELDS = ControllerSettings.model_fields
_DEFAULTS = ControllerSettings()
#: Keys of each printed recommendation, in order.
RECOMMENDATION_KEYS = (
    "kind",
    "namespace",
    "name",
    "action",
    "current",
    "proposed",
    "reason",
    "evidence",
)


class RecommendFormat(StrEnum):
    """How ``recommend`` prints."""

    table = "table"
    json = "json"
    yaml = "yaml"


def _help(name: str) -> str:
    return _FIELDS[name].description or name


def build_settings(**values: object) -> ControllerSettings:
    """Validated settings; a bad value becomes a :class:`ConfigError` naming the flag."""
    return settings_from_flags(ControllerSettings, "controller", **values)


def _mode(act: bool, annotate: bool) -> Mode:
    if act and annotate:
        raise ConfigError("--act and --annotate exclude each other; --act also annotates")
    return Mode.ACT if act else Mode.ANNOTATE if annotate else Mode.DRY_RUN


# -- recommend ------------------------------------------------------------------------------


def recommendations(
    store: Store,
    settings: ControllerSettings,
    at: datetime,
    *,
    state: CurrentState | None = None,
) -> list[dict[str, Any]]:
    """Every standing recommendation (not skipped), as ``recommend`` prints it."""
    signals = signals_from_store(store, at, settings)
    current = state if state is not None else state_from_store(store, at)
    plan = make_plan(signals, current, settings, History.of(), at=at, keep_recommended=True)
    return plan.recommendations()


def print_recommendations(rows: list[dict[str, Any]], fmt: RecommendFormat) -> None:
    """Print ``rows`` (keys :data:`RECOMMENDATION_KEYS`) on stdout."""
    if fmt is RecommendFormat.json:
        sys.stdout.write(json.dumps(rows, indent=2, default=str) + "\n")
    elif fmt is RecommendFormat.yaml:
        sys.stdout.write(yaml.safe_dump(rows, sort_keys=False, allow_unicode=True))
    elif not rows:
        out.print("no recommendations")
    else:
        # The evidence is a JSON object per row: too wide for a terminal table; json / yaml
        # carry it.
        shown = [{k: r[k] for k in RECOMMENDATION_KEYS if k != "evidence"} for r in rows]
        print_rows(shown, OutputFormat.table, title="sits_observe recommendations")


# -- controller -------------------------------------------------------------------------------


def build_loop(
    *,
    store: Store,
    kube: KubeJson,
    settings: ControllerSettings,
    registry: CollectorRegistry,
    leader_election: bool = True,
) -> ControllerLoop:
    """The loop with every collaborator built from ``settings`` (also used by tests)."""
    metrics = ControllerMetrics(registry)
    now = datetime.now(UTC)
    recorder = StoreRecorder(
        store, metrics, settings.replica_id, history=load_history(store, now - HISTORY_WINDOW)
    )
    applier = Applier(kube, settings, recorder)
    elector = (
        LeaderElector(kube, settings, on_change=lambda held: metrics.leader.set(int(held)))
        if leader_election
        else None
    )
    return ControllerLoop(
        settings=settings,
        read_signals=lambda at: signals_from_store(store, at, settings),
        read_state=lambda: read_state(kube, settings),
        applier=applier,
        recorder=recorder,
        metrics=metrics,
        store=store,
        elector=elector,
    )


def _install_stop(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM / SIGINT set ``stop``; returns a function that restores the old handlers."""

    def handler(signum: int, frame: FrameType | None) -> None:
        log.info("signal %s: stopping after this pass", signum)
        stop.set()

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def register(app: typer.Typer) -> None:
    """Add ``controller`` and ``recommend`` to ``app``."""

    @app.command("controller")
    def controller(
        *,
        db: Path = typer.Option(..., "--db", help="DuckDB file (signals in, decisions out)"),
        kubeconfig: Path | None = typer.Option(
            None, "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)"
        ),
        context: str | None = typer.Option(None, "--context", help="kubeconfig context"),
        in_cluster: bool = typer.Option(
            False, "--in-cluster", help="use the pod's service account instead of a kubeconfig"
        ),
        act: bool = typer.Option(
            False, "--act", help="write labels, quotas, ConfigMap entry, annotations, Events"
        ),
        annotate: bool = typer.Option(
            False, "--annotate", help="write only recommendation annotations and Events"
        ),
        interval_s: float = typer.Option(_DEFAULTS.interval_s, help=_help("interval_s")),
        replica_id: str | None = typer.Option(
            None, "--replica-id", help="identity in the Lease (default: the host name)"
        ),
        time_slicing_configmap: str | None = typer.Option(
            None, "--time-slicing-configmap", help=_help("time_slicing_configmap")
        ),
        writes_per_minute: float = typer.Option(
            _DEFAULTS.writes_per_minute, help=_help("writes_per_minute")
        ),
        lease_namespace: str = typer.Option(
            _DEFAULTS.lease_namespace, help=_help("lease_namespace")
        ),
        leader_election: bool = typer.Option(
            True, "--leader-election/--no-leader-election", help="hold a Lease before acting"
        ),
        once: bool = typer.Option(False, "--once", help="run one pass and exit"),
        metrics_port: int = typer.Option(
            0, "--metrics-port", help="serve Prometheus /metrics on this port (0: off)"
        ),
        metrics_host: str = typer.Option("127.0.0.1", "--metrics-host", help="/metrics address"),
        log_level: str = typer.Option("info", "--log-level", help="debug, info, warning, error"),
    ) -> None:
        """Run the control loop (dry-run unless --annotate or --act)."""

        def go() -> None:
            logging.basicConfig(
                level=log_level.upper(),
                format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            )
            settings = build_settings(
                mode=_mode(act, annotate),
                interval_s=interval_s,
                replica_id=replica_id or socket.gethostname(),
                time_slicing_configmap=time_slicing_configmap,
                writes_per_minute=writes_per_minute,
                lease_namespace=lease_namespace,
            )
            api = build_api_client(kubeconfig, context, in_cluster)
            registry = CollectorRegistry()
            if metrics_port:
                start_http_server(metrics_port, addr=metrics_host, registry=registry)
            stop = threading.Event()
            restore = _install_stop(stop)
            try:
                with Store.open(db) as store:
                    loop = build_loop(
                        store=store,
                        kube=KubeJson(api, timeout_s=settings.request_timeout_s),
                        settings=settings,
                        registry=registry,
                        leader_election=leader_election,
                    )
                    log.info(
                        "controller %s in %s mode against %s",
                        settings.replica_id,
                        settings.mode,
                        api.configuration.host,
                    )
                    loop.run(stop, passes=1 if once else None)
                    if loop.last_plan is not None and once:
                        out.print(
                            f"{len(loop.last_plan)} decision(s), suppressed "
                            f"{dict(loop.last_plan.suppressed)}"
                        )
            finally:
                restore()
                api.close()  # type: ignore[no-untyped-call]

        run_cli(go)

    @app.command("recommend")
    def recommend(
        *,
        db: Path = typer.Option(..., "--db", help="DuckDB file to read signals from"),
        fmt: RecommendFormat = typer.Option(
            RecommendFormat.table,
            "--format",
            help="table (without the evidence), json or yaml (with it)",
        ),
        kubeconfig: Path | None = typer.Option(
            None, "--kubeconfig", help="read current values from this cluster"
        ),
        context: str | None = typer.Option(None, "--context", help="kubeconfig context"),
        in_cluster: bool = typer.Option(
            False, "--in-cluster", help="read current values with the pod's service account"
        ),
        namespace: str | None = typer.Option(
            None, "--namespace", "-n", help="only objects in this namespace"
        ),
        action: str | None = typer.Option(None, "--action", help="only this action"),
        time_slicing_configmap: str | None = typer.Option(
            None, "--time-slicing-configmap", help=_help("time_slicing_configmap")
        ),
    ) -> None:
        """Print the controller's recommendations (writes nothing)."""

        def go() -> None:
            settings = build_settings(time_slicing_configmap=time_slicing_configmap)
            at = datetime.now(UTC)
            state = None
            if kubeconfig is not None or context is not None or in_cluster:
                api = build_api_client(kubeconfig, context, in_cluster)
                try:
                    state = read_state(
                        KubeJson(api, timeout_s=settings.request_timeout_s), settings
                    )
                except KubeApiError as exc:
                    raise ConfigError(f"cannot read the cluster state: {exc}") from exc
                finally:
                    api.close()  # type: ignore[no-untyped-call]
            with Store.open(db, read_only=True) as store:
                latest = latest_data_at(store)
                if latest is not None:
                    at = min(at, latest.replace(tzinfo=UTC))
                rows = recommendations(store, settings, at, state=state)
            if namespace is not None:
                rows = [
                    r
                    for r in rows
                    if r["namespace"] == namespace
                    or (r["kind"] == "Namespace" and r["name"] == namespace)
                ]
            if action is not None:
                rows = [r for r in rows if r["action"] == action]
            print_recommendations(rows, fmt)

        run_cli(go)
