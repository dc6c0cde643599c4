"""CLI: ``sits-observe ingest k8s --db DB [--kubeconfig PATH] [--context NAME] [--in-cluster]``.

Snapshots the cluster's nodes and pods once into the store (one batch with the drop counts),
then names the containers of stored cgroup samples from that inventory, and prints what was
stored. This module is the composition root of that command: it builds the official client
from the flags, the collector and the store.
"""

from __future__ import annotations

import socket
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

import typer
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

from sits_observe.collectors.kube.inventory import KubeInventoryCollector, KubeInventorySettings
from sits_observe.domain.collect import drops_table
from sits_observe.domain.tables import COLLECTOR_DROPS, NODES, PODS
from sits_observe.errors import ConfigError
from sits_observe.store import Batch, Store, prepare, utc_naive
from sits_observe.store.attribution import attribute_containers
from sits_observe.surfaces.cli.common import OutputFormat, print_rejected, print_rows, run_cli

_DEFAULTS = KubeInventorySettings()


def build_api_client(
    kubeconfig: Path | None, context: str | None, in_cluster: bool
) -> k8s_client.ApiClient:
    """An official-client ``ApiClient`` from a kubeconfig (default lookup) or in-cluster."""
    if in_cluster and (kubeconfig is not None or context is not None):
        raise ConfigError("--in-cluster takes no --kubeconfig or --context; pass one or the other")
    try:
        if in_cluster:
            configuration = k8s_client.Configuration()
            k8s_config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            return k8s_client.ApiClient(configuration)
        api: k8s_client.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig) if kubeconfig is not None else None, context=context
        )
        return api
    except (
        k8s_config.ConfigException,
        yaml.YAMLError,
        OSError,
        ValueError,
        TypeError,
        KeyError,
        AttributeError,
    ) as exc:  # the loader raises whatever a malformed file provokes
        source = (
            "the in-cluster service account"
            if in_cluster
            else (f"kubeconfig {kubeconfig}" if kubeconfig else "the default kubeconfig")
        )
        where = f" (context {context!r})" if context else ""
        raise ConfigError(f"cannot load {source}{where}: {exc}") from exc


def ingest_k8s_once(
    api: k8s_client.ApiClient, db: Path, now: datetime, settings: KubeInventorySettings
) -> dict[str, int]:
    """Snapshot the inventory into ``db``, attribute containers, print and return counts."""
    collector = KubeInventoryCollector(api, settings=settings)
    result = collector.collect(now)
    node = socket.gethostname()
    drops = drops_table(result.dropped, at=utc_naive(now), node=node, collector=collector.name)
    # Stamped with ``now``: the service's rules pass them, but every ingest path runs them.
    ready = prepare(Batch({**result.tables, COLLECTOR_DROPS.name: drops}, now, node))
    batch = ready.tables
    with Store.open(db) as store:
        store.ingest(ready)
        attributed = attribute_containers(store)
    counts = {
        NODES.name: batch[NODES.name].num_rows,
        PODS.name: batch[PODS.name].num_rows,
        COLLECTOR_DROPS.name: batch[COLLECTOR_DROPS.name].num_rows,
        "container_samples attributed": attributed,
    }
    print_rows(
        [{"table": k, "rows": v} for k, v in counts.items()],
        OutputFormat.table,
        title=f"stored in {db} from {api.configuration.host}",
    )
    print_rejected(result.dropped + Counter(ready.dropped))
    return counts


def register(app: typer.Typer) -> None:
    """Add ``k8s`` to the ``ingest`` group ``app``."""

    @app.command("k8s")
    def ingest_k8s(
        *,
        db: Path = typer.Option(
            ..., "--db", help="DuckDB file (created when absent; its folder must exist)"
        ),
        kubeconfig: Path | None = typer.Option(
            None, "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)"
        ),
        context: str | None = typer.Option(None, "--context", help="kubeconfig context"),
        in_cluster: bool = typer.Option(
            False, "--in-cluster", help="use the pod's service account instead of a kubeconfig"
        ),
        page_size: int = typer.Option(
            _DEFAULTS.page_size,
            "--page-size",
            help=KubeInventorySettings.model_fields["page_size"].description,
        ),
        request_timeout_s: float = typer.Option(
            _DEFAULTS.request_timeout_s,
            "--request-timeout-s",
            help=KubeInventorySettings.model_fields["request_timeout_s"].description,
        ),
    ) -> None:
        """Snapshot nodes and pods once, store them, and name cgroup samples' containers."""

        def go() -> None:
            try:
                settings = KubeInventorySettings(
                    page_size=page_size, request_timeout_s=request_timeout_s
                )
            except ValueError as exc:
                raise ConfigError(f"invalid setting: {exc}") from exc
            api = build_api_client(kubeconfig, context, in_cluster)
            try:
                ingest_k8s_once(api, db, datetime.now(UTC), settings)
            finally:
                api.close()  # type: ignore[no-untyped-call]

        run_cli(go)
