"""The parts of one ``sits-observe experiment`` run, built as the demo builds them, on a
simulated clock.

:class:`RunParts` composes, for one arm and one seed, the same components as the embedded demo
(:mod:`sits_observe.lab.demo.demo`, :mod:`sits_observe.lab.demo.loop`), each stepped one
pass at a time by :mod:`.experiment_run` instead of running in its own thread:

- the Kubernetes emulator (kmock on loopback) stamping objects with the simulated clock, the
  simulated nodes registered in it, and the demo's namespaces, time-slicing ConfigMap and
  ``training`` ResourceQuota (:func:`~sits_observe.lab.demo.loop.seed_cluster`);
- the simulated cluster's files and exporters (:class:`SimulationRuntime` without its ticker),
  the simulated kubelets and device plugins, the workload controllers creating Pending pods;
- the service's ingest (the same FastAPI app as ``serve``, on a loopback port) owning the run's
  DuckDB file, its inventory loop, and one agent per node (the same :class:`AgentLoop`,
  collectors and shipper as ``sits-observe agent``), collecting on a coarser simulated interval
  than the scheduler's step;
- the live kube-scheduler (the scheduler model) with the arm's extenders, called over HTTP as
  kube-scheduler calls them (:class:`~sits_observe.lab.scheduler.http.HttpExtenderTransport`):
  the sits extender is the service's own extender app (``serve --extender-port``'s:
  :func:`~sits_observe.surfaces.service.extender.create_extender_app` over
  :class:`~sits_observe.control.extender.handler.ExtenderHandler`) on a loopback port, its
  view built from this run's store by the service's builder
  (:func:`~sits_observe.control.extender.clusterview.view.build_view`) and rebuilt after every
  inventory snapshot (on the simulated clock, not by the service's timer), plus the bind verb's
  assumed pods; the bind verb writes the GPU hint and the Binding through the emulator; the lab's
  scheduler, kubelets and workload controllers read informers
  (:mod:`sits_observe.lab.kube.informer`) and write over HTTP;
- the controller in ``--act`` mode (``kube-sits*`` arms): plan from the store, apply against the
  emulator, record in the store's ``decisions`` table.

Arms (:data:`ARMS`): ``kube-default`` is kube-scheduler without extenders and no controller
(what a team runs today); ``kube-sits`` the shipped ``deploy/scheduler-config.yaml`` (filter,
prioritize and the GPU-hinting bind verb) with the controller; ``kube-sits-gpuhint`` adds a bind
verb where the configuration has none (the shipped one already binds: the same as
``kube-sits``); ``kube-sits-nobind`` drops the bind verb (HAMi's device plugin picks the GPU).

The agents' batches reach the ingest over HTTP too. Nothing is placed by the experiment
itself.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry

from sits_observe.analytics.serving.step_profiles import GPU_PRODUCTS
from sits_observe.collectors.agent import AgentLoop, Shipper, Spool
from sits_observe.collectors.kube.gpu import hami_allocation
from sits_observe.collectors.kube.inventory import KubeInventoryCollector
from sits_observe.control.controller.apply import Applier
from sits_observe.control.controller.kube import KubeJson
from sits_observe.control.controller.loop import HISTORY_WINDOW, ControllerLoop
from sits_observe.control.controller.planning.safety import TokenBucket
from sits_observe.control.controller.record import ControllerMetrics, StoreRecorder, load_history
from sits_observe.control.controller.settings import ControllerSettings, Mode
from sits_observe.control.controller.state import read_state
from sits_observe.control.extender.bind import Binder
from sits_observe.control.extender.clusterview.cache import ViewCache
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.handler import ExtenderHandler
from sits_observe.control.extender.kube import KubePodApi
from sits_observe.control.extender.overlay import AssumedPods
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.control.signals.source import SignalMetrics
from sits_observe.control.signals.store import signals_from_store
from sits_observe.errors import ConfigError
from sits_observe.lab.cluster.cluster import PodEvent, SimulatedCluster
from sits_observe.lab.cluster.kubelet import KubeletSettings, SimulatedKubelet
from sits_observe.lab.cluster.pods.generator import WorkloadGenerator
from sits_observe.lab.cluster.pods.specs import PodSpec
from sits_observe.lab.cluster.runtime import SimulationRuntime
from sits_observe.lab.cluster.sim_clock import SimClock
from sits_observe.lab.demo.demo import node_collectors
from sits_observe.lab.demo.loop import TIME_SLICING, TIME_SLICING_KEY, seed_cluster
from sits_observe.lab.experiment.settings import ARM_DOCS, RULES_OFF, RULES_ON, Cadence
from sits_observe.lab.kube.emulator import KubeEmulator
from sits_observe.lab.kube.publish import KubePublisher
from sits_observe.lab.kube.raw import LabKube
from sits_observe.lab.kube.workloads import WorkloadDriver
from sits_observe.lab.replay.extender import with_gpu_hint, without_bind
from sits_observe.lab.scheduler.config import SchedulerConfig, load_scheduler_config
from sits_observe.lab.scheduler.http import HttpExtenderTransport
from sits_observe.lab.scheduler.loop import LiveScheduler, SchedulerLoopSettings
from sits_observe.lab.scheduler.model import Extender, KubeScheduler
from sits_observe.lab.scheduler.nodes import read_gpu_request
from sits_observe.store import Store
from sits_observe.surfaces.service.app import create_app
from sits_observe.surfaces.service.extender import (
    ExtenderEndpoints,
    ExtenderMetrics,
    ExtenderSettings,
    create_extender_app,
    view_source,
)
from sits_observe.surfaces.service.http.loopback import LoopbackService
from sits_observe.surfaces.service.metrics import ServiceMetrics
from sits_observe.surfaces.service.settings import ServiceSettings


@dataclass(frozen=True)
class Arm:
    """One way of running the cluster: the scheduler's extenders and whether the controller
    acts."""

    name: str
    extender: bool
    controller: bool
    configure: Callable[[SchedulerConfig], SchedulerConfig]
    doc: str
    #: The extender service's settings (an ablation arm switches one module off here).
    extender_settings: ExtenderSettings = field(default_factory=ExtenderSettings)
    #: Controller actions switched off (a rule ablation arm).
    rules_off: tuple[str, ...] = ()
    #: Controller rules off by default switched on.
    rules_on: tuple[str, ...] = ()


def _same(config: SchedulerConfig) -> SchedulerConfig:
    return config


def _scoring_without(**weights: float) -> ExtenderSettings:
    return ExtenderSettings(scoring=ScoringSettings(**weights))


#: How each arm configures the scheduler, whether its controller acts, and its extender.
_ARM_PARTS: dict[str, tuple[bool, bool, Callable[[SchedulerConfig], SchedulerConfig]]] = {
    "kube-default": (False, False, lambda c: c.without_extenders()),
    "kube-sits": (True, True, _same),
    "kube-sits-gpuhint": (True, True, with_gpu_hint),
    "kube-sits-nobind": (True, True, without_bind),
    "kube-sits-no-fragmentation": (True, True, _same),
    "kube-sits-no-memory-fit": (True, True, _same),
    "kube-sits-no-interference": (True, True, _same),
    "kube-sits-no-gpuhint": (True, True, _same),
    "kube-sits-no-controller": (True, False, _same),
    **{arm: (True, True, _same) for arm in (*RULES_OFF, *RULES_ON)},
}
_ARM_EXTENDER: dict[str, ExtenderSettings] = {
    "kube-sits-no-fragmentation": _scoring_without(fragmentation_weight=0),
    "kube-sits-no-memory-fit": _scoring_without(memory_fit_weight=0),
    "kube-sits-no-interference": _scoring_without(interference_weight=0),
    "kube-sits-no-gpuhint": ExtenderSettings(gpu_hint=False),
}


def _arm(name: str, doc: str) -> Arm:
    extender = _ARM_EXTENDER.get(name) or ExtenderSettings()
    return Arm(
        name,
        *_ARM_PARTS[name],
        doc=doc,
        extender_settings=extender,
        rules_off=RULES_OFF.get(name, ()),
        rules_on=RULES_ON.get(name, ()),
    )


ARMS: dict[str, Arm] = {name: _arm(name, doc) for name, doc in ARM_DOCS.items()}


def find_arm(name: str) -> Arm:
    """The arm called ``name``; :class:`ConfigError` listing the valid names otherwise."""
    try:
        return ARMS[name]
    except KeyError:
        raise ConfigError(
            f"unknown experiment arm {name!r}; valid arms: {', '.join(ARMS)}"
        ) from None


class ObservedWorkloads(WorkloadGenerator):
    """The cluster's workload generator (same products, size and seed, so the same pods in
    the same order) that remembers when each Job and notebook arrived, simulated seconds."""

    def __init__(self, *, products: list[str], gpus_per_node: int, seed: int) -> None:
        super().__init__(products=products, gpus_per_node=gpus_per_node, seed=seed)
        self.arrived: list[tuple[float, PodSpec]] = []

    def arrivals(self, start_s: float, end_s: float) -> list[PodSpec]:
        """The arrivals of ``[start_s, end_s)``, each noted at ``end_s`` (the pass that
        takes them)."""
        specs = super().arrivals(start_s, end_s)
        self.arrived.extend((end_s, spec) for spec in specs)
        return specs


class RunParts:
    """Every component of one run (see the module docstring); :meth:`stop` ends them all."""

    def __init__(
        self,
        arm: Arm,
        *,
        seed: int,
        nodes: int,
        gpus_per_node: int,
        cadence: Cadence,
        scheduler_config: Path,
        workdir: Path,
    ) -> None:
        self.arm = arm
        self.seed = seed
        self.cadence = cadence
        self.workdir = workdir
        self.registry = CollectorRegistry()
        self.cluster = SimulatedCluster(
            nodes=nodes, gpus_per_node=gpus_per_node, seed=seed, standalone=False
        )
        self.clock = SimClock(lambda: self.cluster.now_s)
        self.workloads = ObservedWorkloads(
            products=[GPU_PRODUCTS[n.kind] for n in self.cluster.nodes.values()],
            gpus_per_node=gpus_per_node,
            seed=seed,
        )
        self.config = arm.configure(load_scheduler_config(scheduler_config))
        # kmock scans its kept request history on every request (O(kept)); the experiment
        # asserts nothing on requests, so it keeps one.
        self.emulator = KubeEmulator(now_fn=self.clock.utc, keep_requests=1)
        self.token = secrets.token_urlsafe(24)
        self.pod_events: list[PodEvent] = []
        self.store: Store | None = None
        self.service: LoopbackService | None = None
        self.runtime: SimulationRuntime | None = None
        self.views: ViewCache | None = None
        self.transport: HttpExtenderTransport | None = None
        self.extender_metrics: ExtenderMetrics | None = None
        self.extender_service: LoopbackService | None = None
        self.agents: list[AgentLoop] = []
        # One client for every agent's shipper: they post to one loopback service, one at a
        # time, and each new client loads the CA bundle (about 70 ms).
        self._ship_client: httpx.Client | None = None
        self.controller: ControllerLoop | None = None
        self._batch_ids = itertools.count()

    # -- life cycle -------------------------------------------------------------------

    def start(self) -> RunParts:
        """Start the emulator, the store and service, the nodes, workloads and scheduler."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.emulator.start()
        api = self.emulator.api_client()
        KubePublisher(api).register_nodes(self.cluster)
        seed_cluster(
            api,
            quota_gpus=self.workloads.spare_gpus,
            inference=[d.name for d in self.workloads.deployments],
        )
        self.store = Store.open(self.workdir / "sits.duckdb")
        self.service = self._service(self.store)
        self.runtime = SimulationRuntime(
            self.cluster,
            self.workdir / "cluster",
            on_pod_event=self._on_pod_event,
            files_every_s=self.cadence.collect_every_s,
            clock=self.clock.utc,
        ).start(ticker=False)
        self.kubelet = SimulatedKubelet(
            self.emulator.api_client(),
            self.cluster,
            read_gpu=read_gpu_request,
            allocation=lambda uuids, mib, cores: hami_allocation(
                uuids, memory_mib=mib, cores_percent=cores
            ),
            settings=KubeletSettings(
                time_slicing_configmap=TIME_SLICING, time_slicing_key=TIME_SLICING_KEY
            ),
            registry=self.registry,
            clock=self.clock.utc,
            pods=self.emulator.informer("pods").items,
            configmaps=self.emulator.informer("configmaps").items,
        )
        self.driver = WorkloadDriver(
            self.emulator.api_client(),
            self.workloads,
            sim_now=self.clock.monotonic,
            registry=self.registry,
            pods=self.emulator.informer("pods").items,
        )
        self.inventory_collector = KubeInventoryCollector(
            self.emulator.api_client(), now_fn=self.clock.utc
        )
        self.scheduler = self._scheduler(self.store)
        if self.arm.controller:
            self.controller = self._controller(self.store)
        return self

    def stop(self) -> None:
        """Stop everything that started, in reverse order; the DuckDB file stays."""
        if self.runtime is not None:
            self.runtime.stop()
        if self._ship_client is not None:
            self._ship_client.close()
        if self.transport is not None:
            self.transport.close()
        if self.extender_service is not None:
            self.extender_service.stop()
        if self.service is not None:
            self.service.stop()
        self.emulator.stop()
        if self.store is not None:
            self.store.close()

    def _on_pod_event(self, event: PodEvent, at: object) -> None:
        self.pod_events.append(event)
        self.kubelet.on_pod_event(event, self.clock.at(event.at_s))

    # -- parts ------------------------------------------------------------------------

    def _service(self, store: Store) -> LoopbackService:
        """The service app for the agents' batches (its own extender is off: the scheduler
        calls the in-process handler, whose view this run refreshes deterministically)."""
        settings = ServiceSettings(
            db_path=self.workdir / "sits.duckdb",
            token=self.token,
            port=0,
            retention_interval_s=0,
        )
        app = create_app(
            settings, store, clock=self.clock.utc, extender=ExtenderSettings(enabled=False)
        )
        return LoopbackService(app, name="the experiment's service").start()

    def _scheduler(self, store: Store) -> LiveScheduler:
        extenders: list[Extender] = []
        if self.arm.extender:
            self.transport = self._extender_transport(store)
            extenders = [Extender(e, self.transport) for e in self.config.extenders]
        return LiveScheduler(
            LabKube(self.emulator.api_client()),
            KubeScheduler(self.config, extenders),
            settings=SchedulerLoopSettings(seed=self.seed),
            registry=self.registry,
            monotonic=self.clock.monotonic,
            clock=self.clock.utc,
            nodes=self.emulator.informer("nodes").items,
            pods=self.emulator.informer("pods").items,
        )

    def _extender_transport(self, store: Store) -> HttpExtenderTransport:
        """The service's extender app on a loopback port, over a view of this run's store."""
        settings = self.arm.extender_settings
        clock = self.clock
        source = view_source(store, settings.view)

        def build(previous: ClusterView | None) -> ClusterView:
            return build_view(source, clock.utc(), settings.view, previous)

        # Rebuilt only by refresh_view (after each inventory snapshot), never in a thread.
        self.views = ViewCache(
            build,
            refresh_interval_s=float("inf"),
            monotonic=clock.monotonic,
            assumed=AssumedPods(ttl_s=settings.assumed_ttl_s, monotonic=clock.monotonic),
        )
        binder = None
        if any(e.bind_verb for e in self.config.extenders):
            binder = Binder(
                KubePodApi(self.emulator.api_client()),
                scoring=settings.scoring,
                gpu_hint=settings.gpu_hint,
                assume=self.views.assume,
                monotonic=clock.monotonic,
            )
        handler = ExtenderHandler(
            settings.scoring,
            max_snapshot_age_s=settings.view.max_snapshot_age_s,
            clock=clock.utc,
            binder=binder,
        )
        metrics = ServiceMetrics()
        self.extender_metrics = ExtenderMetrics(metrics.registry)
        endpoints = ExtenderEndpoints(settings, self.views, self.extender_metrics, handler, source)
        app = create_extender_app(endpoints, metrics, ServiceSettings().extender_http)
        self.extender_service = LoopbackService(app, name="the experiment's extender").start()
        self.config = self.config.pointed_at(self.extender_service.url)
        return HttpExtenderTransport(registry=self.registry)

    def extender_calls(self) -> dict[tuple[str, str], int]:
        """The extender's calls by (verb, outcome), as the service counted them."""
        if self.extender_metrics is None:
            return {}
        return {
            (sample.labels["verb"], sample.labels["outcome"]): int(sample.value)
            for metric in self.extender_metrics.calls.collect()
            for sample in metric.samples
            if sample.name.endswith("_total")
        }

    def _controller(self, store: Store) -> ControllerLoop:
        """The controller in ``--act`` against the emulator, every clock simulated."""
        settings = ControllerSettings(
            mode=Mode.ACT,
            interval_s=self.cadence.controller_every_s,
            time_slicing_configmap="/".join(TIME_SLICING),
            rules_off=self.arm.rules_off,
            rules_on=self.arm.rules_on,
        )
        kube = KubeJson(self.emulator.api_client())
        registry = CollectorRegistry()
        metrics = ControllerMetrics(registry)
        signal_metrics = SignalMetrics(registry)
        recorder = StoreRecorder(
            store,
            metrics,
            settings.replica_id,
            history=load_history(store, self.clock.utc() - HISTORY_WINDOW),
        )
        limiter = TokenBucket(
            settings.writes_per_minute / 60.0, settings.write_burst, clock=self.clock.monotonic
        )
        applier = Applier(
            kube, settings, recorder, limiter=limiter, sleep=lambda _: None, clock=self.clock.utc
        )
        return ControllerLoop(
            settings=settings,
            read_signals=lambda at: signals_from_store(store, at, settings, metrics=signal_metrics),
            read_state=lambda: read_state(kube, settings),
            applier=applier,
            recorder=recorder,
            metrics=metrics,
            store=store,
            clock=self.clock.utc,
        )

    def start_agents(self) -> None:
        """One agent per node, its collectors fixed now (the inference pods must run)."""
        assert self.runtime is not None and self.service is not None
        self._ship_client = self._ship_client or httpx.Client()
        for name in self.cluster.nodes:
            # Every collection reads the slow cgroup files too: collections are minutes apart.
            collectors = node_collectors(self.runtime, name, slow_every=1)
            spool = Spool(self.workdir / "spool" / name, max_bytes=64 * 1024 * 1024, max_files=1000)
            self.agents.append(
                AgentLoop(
                    collectors,
                    Shipper(self.service.url, self.token, node=name, client=self._ship_client),
                    spool,
                    interval_s=self.cadence.collect_every_s,
                    node=name,
                    clock=self.clock.utc,
                    monotonic=self.clock.monotonic,
                    batch_ids=lambda: f"exp-{next(self._batch_ids)}",
                )
            )

    def refresh_view(self) -> None:
        """Rebuild the extender's view from the store now (after an inventory snapshot)."""
        if self.views is not None:
            self.views.refresh()
