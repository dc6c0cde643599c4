"""CLI: ``sits-observe controller``, the control loop.

``controller --db DB [--kubeconfig PATH | --in-cluster] [--act | --annotate]`` runs the
level-triggered loop against a cluster: signals from the store (or, with ``--promql-url``,
from kube-state-metrics, dcgm-exporter and vLLM series in a Prometheus-compatible store:
:mod:`sits_observe.control.signals.promql`), state from the API, decisions recorded in
the store's ``decisions`` table. Dry-run unless ``--annotate`` or ``--act``
(docs/controller.md says what each mode writes). It owns the DuckDB file for writing, like
``serve``; inside a cluster run it next to (or, later, inside) the service.

What the loop would recommend, without running it, is the ``recommend`` report
(:mod:`sits_observe.reports.actions.recommend`; ``sits-observe recommend`` / ``kubectl sits
recommend``).

This module is the composition root of the loop: it builds settings, the store, the official
client, the elector, the recorder and the metrics from flags.
"""

from __future__ import annotations

import logging
import socket
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import typer
from prometheus_client import CollectorRegistry, start_http_server

from sits_observe.control.controller.apply import Applier
from sits_observe.control.controller.kube import KubeJson
from sits_observe.control.controller.leader import LeaderElector
from sits_observe.control.controller.loop import HISTORY_WINDOW, ControllerLoop
from sits_observe.control.controller.record import ControllerMetrics, StoreRecorder, load_history
from sits_observe.control.controller.settings import ControllerSettings, Mode
from sits_observe.control.controller.state import read_state
from sits_observe.control.signals.promql import PromQLSignalSettings, PromQLSignalSource
from sits_observe.control.signals.source import SignalMetrics, SignalSource, signals_of
from sits_observe.control.signals.store import DuckSignalSource
from sits_observe.control.signals.store_queues import queue_signals
from sits_observe.errors import ConfigError
from sits_observe.store import Store
from sits_observe.store.promql.client import PromQLClient
from sits_observe.surfaces.cli.common import out, run_cli
from sits_observe.surfaces.cli.flags import SectionedCommand, SettingFlags, with_flags
from sits_observe.surfaces.cli.ingest.k8s import build_api_client
from sits_observe.surfaces.cli.process_settings import LogSettings, MetricsEndpointSettings
from sits_observe.surfaces.cli.stop_signals import stop_on_signals

log = logging.getLogger(__name__)

#: The controller's settings flags: every field of its model but the mode (``--act`` /
#: ``--annotate`` choose it) and the replica id (its default here is the host name).
CONTROLLER = SettingFlags(
    ControllerSettings, skip=("mode", "replica_id"), panel="Controller settings"
)
PROMQL = SettingFlags(PromQLSignalSettings, panel="Signals from a PromQL store")
METRICS = SettingFlags(MetricsEndpointSettings, panel="Process")
LOG = SettingFlags(LogSettings, panel="Process")


def _mode(act: bool, annotate: bool) -> Mode:
    if act and annotate:
        raise ConfigError("--act and --annotate exclude each other; --act also annotates")
    return Mode.ACT if act else Mode.ANNOTATE if annotate else Mode.DRY_RUN


# -- controller -------------------------------------------------------------------------------


def build_loop(
    *,
    store: Store,
    kube: KubeJson,
    settings: ControllerSettings,
    registry: CollectorRegistry,
    leader_election: bool = True,
    signals: SignalSource | None = None,
    signal_metrics: SignalMetrics | None = None,
) -> ControllerLoop:
    """The loop with every collaborator built from ``settings`` (also used by tests).

    ``signals``: where the signals are read (None: ``store``); the Kueue / KAI queues'
    measured use reads the store's inventory, so a source other than the store measures
    none. ``signal_metrics``: the source's error counter when it already has one (on
    ``registry``)."""
    metrics = ControllerMetrics(registry)
    signal_metrics = signal_metrics or SignalMetrics(registry)
    source = signals or DuckSignalSource(store)
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
        read_signals=lambda at: signals_of(source, at, settings, metrics=signal_metrics),
        read_state=lambda: read_state(kube, settings),
        read_queue_signals=(
            (lambda at, members: queue_signals(store, at, settings, members))
            if signals is None
            else None
        ),
        applier=applier,
        recorder=recorder,
        metrics=metrics,
        store=store,
        elector=elector,
    )


def register(app: typer.Typer) -> None:
    """Add ``controller`` to ``app``."""
    app.command("controller", cls=SectionedCommand)(controller)


@with_flags(CONTROLLER, PROMQL, METRICS, LOG)
def controller(
    *,
    db: Path = typer.Option(
        ..., "--db", help="DuckDB file (signals in unless --promql-url, decisions out)"
    ),
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
    replica_id: str | None = typer.Option(
        None,
        "--replica-id",
        help=f"{ControllerSettings.model_fields['replica_id'].description} [default: the host "
        "name]",
    ),
    leader_election: bool = typer.Option(
        True, "--leader-election/--no-leader-election", help="hold a Lease before acting"
    ),
    once: bool = typer.Option(False, "--once", help="run one pass and exit"),
    **flags: Any,
) -> None:
    """Run the control loop (dry-run unless --annotate or --act)."""

    def go() -> None:
        LOG.validate(flags, what="controller").configure()
        settings = CONTROLLER.validate(
            flags,
            what="controller",
            mode=_mode(act, annotate),
            replica_id=replica_id or socket.gethostname(),
        )
        endpoint = METRICS.validate(flags, what="controller")
        promql = PROMQL.validate(flags, what="controller")
        api = build_api_client(kubeconfig, context, in_cluster)
        registry = CollectorRegistry()
        signal_metrics = SignalMetrics(registry)
        client = None if promql.promql_url is None else PromQLClient(promql.promql_url)
        source = (
            None if client is None else PromQLSignalSource(client, promql, metrics=signal_metrics)
        )
        if endpoint.enabled:
            start_http_server(
                endpoint.metrics_port or 0, addr=endpoint.metrics_host, registry=registry
            )
        stop = threading.Event()
        try:
            with stop_on_signals(stop, "stopping after this pass"), Store.open(db) as store:
                loop = build_loop(
                    store=store,
                    kube=KubeJson(api, timeout_s=settings.request_timeout_s),
                    settings=settings,
                    registry=registry,
                    leader_election=leader_election,
                    signals=source,
                    signal_metrics=signal_metrics,
                )
                log.info(
                    "controller %s in %s mode against %s, signals from %s",
                    settings.replica_id,
                    settings.mode,
                    api.configuration.host,
                    db if client is None else client.base_url,
                )
                loop.run(stop, passes=1 if once else None)
                if loop.last_plan is not None and once:
                    out.print(
                        f"{len(loop.last_plan)} decision(s), suppressed "
                        f"{dict(loop.last_plan.suppressed)}"
                    )
        finally:
            if client is not None:
                client.close()
            api.close()  # type: ignore[no-untyped-call]

    run_cli(go)
