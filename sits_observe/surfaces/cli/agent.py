"""CLI: ``sits-observe agent``, the composition root of the node agent.

Builds the collectors named by the flags (imported lazily, so a node only loads what it
uses), the shipper, the spool, the dead-letter and the quarantine directories, serves the
agent's own metrics on ``--metrics-port`` when given, and runs :class:`AgentLoop` until
SIGTERM / SIGINT.

The agent must stay small on every GPU node (target: < 2 % of one core, < 100 MB RSS).
``python -m sits_observe.surfaces.cli.agent ...`` runs the same command without loading the
rest of the CLI (which pulls in DuckDB for the store commands); the DaemonSet uses that form.
"""

from __future__ import annotations

import importlib
import importlib.abc
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import ModuleType
from typing import Any, cast

import typer
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.collectors.agent.settings import AgentSettings
from sits_observe.domain.collect import Collector
from sits_observe.errors import ConfigError
from sits_observe.surfaces.cli.common import run_cli
from sits_observe.surfaces.cli.flags import SectionedCommand, SettingFlags, with_flags
from sits_observe.surfaces.cli.process_settings import LogSettings, MetricsEndpointSettings
from sits_observe.surfaces.cli.stop_signals import stop_on_signals
from sits_observe.surfaces.tracing import AGENT_SERVICE_NAME, OTLP_ENDPOINT_HELP, configure_tracing

log = logging.getLogger(__name__)

TOKEN_ENV = "SITS_TOKEN"
NODE_ENV = "NODE_NAME"
DEFAULT_SPOOL_DIR = Path("/var/lib/sits-observe/spool")


class TopologyFlags(BaseModel):
    """The topology and NUMA collectors' settings (docs/collectors/topology.md)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sys_root: Path | None = Field(
        None,
        description="host /sys to read NUMA counters from (with --cgroup-root also each "
        "container's memory.numa_stat), e.g. /sys",
    )
    topology: bool = Field(False, description="read the GPU topology through NVML every 300 s")
    sync_delay_url: str | None = Field(
        None, description="/metrics URL of the series holding collective sync delays"
    )
    sync_delay_metric: str | None = Field(
        None,
        description="name of that series: a gauge (one delay a sample) or a histogram / summary",
    )
    sync_delay_scale_s: float = Field(
        1.0, gt=0, le=3600, description="seconds per unit of the series (0.001 for ms)"
    )


#: The agent's settings flags (defaults, bounds and help from the models).
AGENT = SettingFlags(AgentSettings, panel="Collection, delivery and spool")
METRICS = SettingFlags(MetricsEndpointSettings, panel="Process")
LOG = SettingFlags(LogSettings, panel="Process")
TOPOLOGY = SettingFlags(TopologyFlags, panel="Topology, NUMA and sync delays")


def register(app: typer.Typer) -> None:
    """Add ``agent`` to ``app``."""
    app.command("agent", cls=SectionedCommand)(agent)


@with_flags(AGENT, METRICS, TOPOLOGY, LOG)
def agent(
    *,
    service: str = typer.Option(..., "--service", help="service base URL, e.g. http://sits:8080"),
    node: str = typer.Option(
        ..., "--node", envvar=NODE_ENV, help=f"this node's name (default ${NODE_ENV})"
    ),
    token_file: Path | None = typer.Option(
        None, "--token-file", help=f"file holding the bearer token; else ${TOKEN_ENV} is used"
    ),
    dcgm_url: list[str] = typer.Option(
        [], "--dcgm-url", help="dcgm-exporter /metrics URL (or file); repeatable"
    ),
    cgroup_root: Path | None = typer.Option(
        None, "--cgroup-root", help="cgroup v2 mount to read containers from, e.g. /sys/fs/cgroup"
    ),
    nvml: bool | None = typer.Option(
        None, "--nvml/--no-nvml", help="read GPUs through NVML (default: on without --dcgm-url)"
    ),
    vllm_url: list[str] = typer.Option([], "--vllm-url", help="vLLM /metrics URL; repeatable"),
    pod_resources_socket: Path | None = typer.Option(
        None,
        "--pod-resources-socket",
        help="the kubelet's pod-resources socket (/var/lib/kubelet/pod-resources/kubelet.sock): "
        "GPU samples are attributed to the pods holding each GPU (gpu_attribution)",
    ),
    server_url: list[str] = typer.Option(
        [],
        "--server-url",
        help="serving engine /metrics URL as ENGINE=URL, ENGINE one of vllm, triton, sglang, "
        "trtllm, dynamo, llm-d-epp, otel-genai; repeatable",
    ),
    spool_dir: Path = typer.Option(
        DEFAULT_SPOOL_DIR, "--spool-dir", help="directory for batches the service did not take"
    ),
    otlp_endpoint: str | None = typer.Option(None, "--otlp-endpoint", help=OTLP_ENDPOINT_HELP),
    **flags: Any,
) -> None:
    """Run the node agent: collect every interval, ship batches, spool while the service is down."""

    def go() -> None:
        LOG.validate(flags, what="agent").configure()
        configure_tracing(AGENT_SERVICE_NAME, otlp_endpoint, attributes={"k8s.node.name": node})
        settings = AGENT.validate(flags, what="agent")
        endpoint = METRICS.validate(flags, what="agent")
        token = _token(token_file)
        run_agent(
            settings,
            service=service,
            token=token,
            node=node,
            collector_factories=collector_factories(
                node,
                dcgm_url,
                cgroup_root,
                nvml,
                vllm_url,
                server_urls=server_url,
                cgroup_slow_every=settings.cgroup_slow_every,
                topology=TOPOLOGY.validate(flags, what="agent"),
                pod_resources=pod_resources_socket,
            ),
            spool_dir=spool_dir,
            metrics=endpoint,
        )

    run_cli(go)


def run_agent(
    settings: AgentSettings,
    *,
    service: str,
    token: str,
    node: str,
    collector_factories: list[Callable[[Any], Collector]],
    spool_dir: Path,
    metrics: MetricsEndpointSettings | None = None,
) -> None:
    """Build the agent's parts, run the loop until SIGTERM / SIGINT, then release them
    (the agent's own ``/metrics`` served where ``metrics`` says; off by default)."""
    from prometheus_client import start_http_server

    from sits_observe.collectors.agent import AgentLoop, AgentMetrics, Shipper, Spool
    from sits_observe.collectors.agent.shipper import service_url
    from sits_observe.collectors.agent.wire import NODE_PATTERN
    from sits_observe.collectors.http import new_client

    # Checked before anything is built: a URL httpx cannot use would look like an outage.
    service = service_url(service)
    if not NODE_PATTERN.match(node):
        raise ConfigError(f"--node {node!r} is not a node name (letters, digits, '.', '_', '-')")
    stop = threading.Event()
    try:
        spool = Spool(
            spool_dir, max_bytes=settings.spool_max_bytes, max_files=settings.spool_max_files
        )
        dead = Spool(
            spool_dir / "dead-letter",
            max_bytes=settings.spool_max_bytes,
            max_files=settings.dead_letter_max_files,
        )
        quarantine = Spool(
            spool_dir / "quarantine",
            max_bytes=settings.spool_max_bytes,
            max_files=settings.quarantine_max_files,
        )
    except OSError as exc:
        raise ConfigError(
            f"cannot use spool directory {spool_dir}: {exc.strerror or exc}; pass --spool-dir"
        ) from exc
    keep_pandas_out()
    client = new_client()
    collectors = [make(client) for make in collector_factories]
    shipper = Shipper(
        service,
        token,
        node=node,
        client=client,
        timeout_s=settings.ship_timeout_s,
        retries=settings.ship_retries,
        backoff_s=settings.backoff_s,
        backoff_max_s=settings.backoff_max_s,
        stop_event=stop,
    )
    agent_metrics = AgentMetrics()
    loop = AgentLoop(
        collectors,
        shipper,
        spool,
        interval_s=settings.interval_s,
        node=node,
        dead_letter=dead,
        quarantine=quarantine,
        quarantine_after_failures=settings.quarantine_after_failures,
        metrics=agent_metrics,
        stop_event=stop,
        replay_max_per_tick=settings.replay_max_per_tick,
        compression=settings.compression,
        ship_every=settings.ship_every,
    )
    server = None
    endpoint = metrics or MetricsEndpointSettings()
    if endpoint.metrics_port:
        try:
            server, _ = start_http_server(
                endpoint.metrics_port, addr=endpoint.metrics_host, registry=agent_metrics.registry
            )
        except OSError as exc:
            client.close()
            raise ConfigError(
                f"cannot serve metrics on {endpoint.metrics_host}:{endpoint.metrics_port}: "
                f"{exc.strerror or exc}"
            ) from exc

    try:
        with stop_on_signals(stop, "stopping after the current tick"):
            loop.run()
    finally:
        if server is not None:
            server.shutdown()
        shipper.close()
        for collector in collectors:
            close = getattr(collector, "close", None)
            if callable(close):
                close()
        client.close()


class _NoPandas(importlib.abc.MetaPathFinder):
    """Refuses ``import pandas`` (see :func:`keep_pandas_out`)."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname == "pandas" or fullname.startswith("pandas."):
            raise ImportError("pandas is kept out of the node agent (see keep_pandas_out)")
        return None


def keep_pandas_out() -> None:
    """Make ``import pandas`` fail in this process.

    pyarrow imports pandas, when it is installed, the first time it builds an array, only to
    check whether its input is a pandas object. The agent never hands pandas objects to
    pyarrow, and the import would add about 35 MB to every node's agent (measured with
    bench/bench_agent_cost.py), so the composition root refuses it. pyarrow treats the
    failed import as "pandas absent". Called by :func:`run_agent` only, never at import time.
    """
    if "pandas" not in sys.modules and not any(isinstance(f, _NoPandas) for f in sys.meta_path):
        sys.meta_path.insert(0, _NoPandas())


def collector_factories(
    node: str,
    dcgm_urls: list[str],
    cgroup_root: Path | None,
    nvml: bool | None,
    vllm_urls: list[str],
    *,
    server_urls: list[str] | tuple[str, ...] = (),
    cgroup_slow_every: int = 1,
    topology: TopologyFlags | None = None,
    pod_resources: Path | None = None,
) -> list[Callable[[Any], Collector]]:
    """One factory per collector the flags ask for; each takes the shared scrape client.

    ``nvml`` None means "NVML when no DCGM URL is given, if this build has the collector";
    True insists (a missing collector is an error), False never. With ``pod_resources`` (the
    kubelet's socket) the GPU collectors' samples are attributed to pods.

    Collector modules are imported here, lazily: a node without vLLM never loads its parser.
    """
    factories: list[Callable[[Any], Collector]] = []
    gpu = _attributor(pod_resources, node)
    for url in dcgm_urls:
        dcgm = _collector_class("sits_observe.collectors.dcgm_collector", "DcgmCollector")
        factories.append(gpu(_factory(dcgm, url, node=node, with_client=True)))
    if cgroup_root is not None:
        cgroup = _collector_class("sits_observe.collectors.cgroup.collector", "CgroupCollector")
        factories.append(_factory(cgroup, cgroup_root, node=node, slow_every=cgroup_slow_every))
    if nvml or (nvml is None and not dcgm_urls):
        try:
            nvml_cls = _collector_class("sits_observe.collectors.nvml", "NvmlCollector")
        except ConfigError:
            if nvml:
                raise
            log.warning("NVML collector not in this build; GPUs are read only through DCGM")
        else:
            factories.append(gpu(_factory(nvml_cls, node=node)))
    for url in vllm_urls:
        vllm = _collector_class("sits_observe.collectors.inference.vllm", "VllmCollector")
        factories.append(_factory(vllm, url, node=node, with_client=True))
    for spec in server_urls:
        factories.append(_server_factory(spec, node))
    if topology is not None:
        factories += _topology_factories(node, cgroup_root, topology)
    if not factories:
        raise ConfigError(
            "no collectors: give --dcgm-url, --cgroup-root, --nvml, --vllm-url, --server-url, "
            "--sys-root, --topology or --sync-delay-url at least once"
        )
    return factories


Factory = Callable[[Any], Collector]


def _attributor(socket: Path | None, node: str) -> Callable[[Factory], Factory]:
    """What a GPU collector's factory becomes: unchanged without the kubelet's socket; with
    it, a factory of the collector wrapped to attribute its samples to pods (one client of
    the socket shared by the GPU collectors)."""
    if socket is None:
        return lambda make: make
    client_cls = _collector_class("sits_observe.collectors.podresources", "PodResourcesClient")
    wrapper = _collector_class("sits_observe.collectors.podresources", "PodAttributed")
    client = client_cls(socket)

    def wrap(make: Factory) -> Factory:
        return lambda http: cast(Collector, wrapper(make(http), client, node=node))

    return wrap


def _topology_factories(
    node: str, cgroup_root: Path | None, flags: TopologyFlags
) -> list[Callable[[Any], Collector]]:
    factories: list[Callable[[Any], Collector]] = []
    if flags.sys_root is not None:
        numa = _collector_class("sits_observe.collectors.cgroup.numa", "NumaCollector")
        factories.append(
            _factory(numa, node=node, sys_root=flags.sys_root, cgroup_root=cgroup_root)
        )
    if flags.topology:
        topology = _collector_class("sits_observe.collectors.topology", "TopologyCollector")
        sys_root = flags.sys_root if flags.sys_root is not None else Path("/sys")
        factories.append(_factory(topology, node=node, sys_root=sys_root))
    if (flags.sync_delay_url is None) != (flags.sync_delay_metric is None):
        raise ConfigError("--sync-delay-url and --sync-delay-metric go together: give both")
    if flags.sync_delay_url is not None:
        sync = _collector_class("sits_observe.collectors.sync_delay", "SyncDelayCollector")
        factories.append(
            _factory(
                sync,
                flags.sync_delay_url,
                flags.sync_delay_metric,
                node=node,
                with_client=True,
                scale_s=flags.sync_delay_scale_s,
            )
        )
    return factories


def _server_factory(spec: str, node: str) -> Callable[[Any], Collector]:
    """A factory for ``--server-url ENGINE=URL`` (the engine's collector, from the table)."""
    engine, sep, url = spec.partition("=")
    if not sep or not engine or not url:
        raise ConfigError(
            f"--server-url {spec!r}: expected ENGINE=URL, e.g. sglang=http://h/metrics"
        )
    find = _collector_class("sits_observe.collectors.inference.engines", "find")
    find(engine)  # an unknown engine fails here, at start, with the known names
    new_collector = _collector_class("sits_observe.collectors.inference.engine", "new_collector")

    def make(client: Any) -> Collector:
        return cast(Collector, new_collector(engine, url, node=node, client=client))

    return make


def _factory(
    cls: Any, *args: object, node: str, with_client: bool = False, **options: object
) -> Callable[[Any], Collector]:
    def make(client: Any) -> Collector:
        if with_client:
            options["client"] = client
        return cast(Collector, cls(*args, node=node, **options))

    return make


def _collector_class(module: str, name: str) -> Any:
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"collector {name} is not available in this build ({module})") from exc


def _token(token_file: Path | None) -> str:
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ConfigError(
                f"cannot read token file {token_file}: {exc.strerror or exc}"
            ) from exc
    else:
        token = os.environ.get(TOKEN_ENV, "").strip()
    if not token:
        raise ConfigError(f"no bearer token: pass --token-file FILE or set {TOKEN_ENV}")
    return token


def main() -> None:
    """Run ``agent`` as the only command (``python -m sits_observe.surfaces.cli.agent``)."""
    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
    app.command(cls=SectionedCommand)(agent)
    app()


if __name__ == "__main__":
    main()
