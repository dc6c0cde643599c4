"""The shipped path in the what-if replay: kube-scheduler calling the sits extender in process.

``simulate --policy kube-sits`` and ``kube-sits-gpuhint`` replay a trace through the
kube-scheduler model (:mod:`sits_observe.lab.scheduler.model`) with the extenders of a
``KubeSchedulerConfiguration`` (``deploy/scheduler-config.yaml`` by default), and every
extender call goes through the *same* request handling ``serve``'s ``/scheduler/*`` routes run
(:class:`~sits_observe.control.extender.handler.ExtenderHandler`: the body kube-scheduler
writes, parsed, scored, answered as bytes), against a view built by the service's builder
(:func:`~sits_observe.control.extender.clusterview.view.build_view`):

- **the store**: an in-memory store holding the replay's cluster as inventory tables, as the
  inventory collector and the agents would write them: one ``nodes`` row per node, one
  ``gpu_samples`` row per GPU (UUID ``GPU-<node>-<index>``, no measurements), and every pod of
  the replayed pod list as a Pending ``pods`` row (the workload the cluster is about to get,
  so the view's FGD target workload M is the replay's typical pods, as ``fgd``'s is). Built
  once per replay;
- **placements**: applied to the view as the service learns them, through the assumed-pods
  overlay (:mod:`~sits_observe.control.extender.overlay`). With a bind verb, the extender's
  own bind records the pods it binds; every other placement (no bind verb, or pods the
  extender is not interested in) is reported by the replay's placement observer, which
  stands for the service's pod watch / next inventory snapshot (it reports the device
  plugin's actual GPUs). Without the overlay the view would never change during a replay;
- ``kube-sits``: the configuration as given; shares are scored for the GPU HAMi's device
  plugin will pick (``spread``);
- ``kube-sits-gpuhint``: the same with ``bindVerb: bind`` added and the service's
  ``gpu_hint`` on: the bind verb names FGD's GPU in ``nvidia.com/use-gpuuuid``, which the
  replay's device plugin honours, and shares are scored for that GPU.

An extender answer with a status other than 200 raises
:class:`~sits_observe.lab.scheduler.wire.ExtenderCallError`, as kube-scheduler's
HTTP client fails the call.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.analytics.traces.cluster_trace import PodList
from sits_observe.control.extender.bind import Binder
from sits_observe.control.extender.clusterview.cache import ViewCache
from sits_observe.control.extender.clusterview.view import ClusterView, build_view
from sits_observe.control.extender.clusterview.view_settings import ViewSettings
from sits_observe.control.extender.handler import Answer, ExtenderHandler
from sits_observe.control.extender.overlay import AssumedPods, Placement
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.domain.times import utc_naive
from sits_observe.errors import ConfigError, KubeApiError, UnknownNameError
from sits_observe.lab.replay.engine.kube import (
    REPLAY_NAMESPACE,
    DeviceStep,
    KubePolicy,
    PodStore,
)
from sits_observe.lab.replay.engine.policies import Choice, Policy
from sits_observe.lab.replay.engine.replay import policy_names
from sits_observe.lab.replay.engine.state import SimPod, SimState
from sits_observe.lab.scheduler.config import SchedulerConfig, load_scheduler_config
from sits_observe.lab.scheduler.kube_nodes import MIB, SchedPod
from sits_observe.lab.scheduler.model import Extender
from sits_observe.lab.scheduler.wire import ExtenderCallError
from sits_observe.store import Store

#: The replay's inventory snapshot time (any fixed time: the view's clock stands still).
SNAPSHOT_AT = datetime(2026, 1, 1, tzinfo=UTC)
#: The shipped configuration, next to the package in a checkout.
DEFAULT_SCHEDULER_CONFIG = Path(__file__).resolve().parents[3] / "deploy" / "scheduler-config.yaml"
KUBE_SITS = "kube-sits"
KUBE_SITS_GPUHINT = "kube-sits-gpuhint"
KUBE_SITS_NOBIND = "kube-sits-nobind"
REPLAY_POLICIES = (KUBE_SITS, KUBE_SITS_GPUHINT, KUBE_SITS_NOBIND)
BIND_VERB = "bind"


# -- the replay's store ------------------------------------------------------------------------


def replay_store(sim: SimState, pods: PodList, at: datetime = SNAPSHOT_AT) -> Store:
    """An in-memory store with the replay's (empty) cluster and pod list as inventory."""
    store = Store.open(":memory:")
    cluster = sim.cluster
    names = list(cluster.node_names)
    ts = utc_naive(at)
    models = [cluster.gpu_models[m] if m >= 0 else None for m in cluster.gpu_model_id.tolist()]
    store.append(
        "nodes",
        pa.table(
            {
                "ts": pa.array([ts] * len(names), pa.timestamp("us")),
                "node": names,
                "gpu_allocatable": pa.array(cluster.gpu_count.tolist(), pa.int32()),
                "gpu_product": models,
                "cpu_allocatable_milli": cluster.cpu_capacity_milli.tolist(),
                "memory_allocatable_bytes": (sim.memory_free_mib * MIB).tolist(),
                "ready": [True] * len(names),
                "labels_json": ["{}"] * len(names),
            }
        ),
    )
    node_of = [n for n, c in zip(names, cluster.gpu_count.tolist(), strict=True) for _ in range(c)]
    index = [g for c in cluster.gpu_count.tolist() for g in range(c)]
    store.append(
        "gpu_samples",
        pa.table(
            {
                "ts": pa.array([ts] * len(index), pa.timestamp("us")),
                "node": node_of,
                "gpu_uuid": [f"GPU-{n}-{g}" for n, g in zip(node_of, index, strict=True)],
                "gpu_index": pa.array(index, pa.int16()),
                "source": ["sim"] * len(index),
            }
        ),
    )
    store.append("pods", _pods_table(pods, ts))
    return store


def _pods_table(pods: PodList, ts: datetime) -> pa.Table:
    n = len(pods)
    gpus = pods.num_gpu.tolist()
    return pa.table(
        {
            "ts": pa.array([ts] * n, pa.timestamp("us")),
            "pod_uid": [f"uid-{name}" for name in pods.names],
            "namespace": [REPLAY_NAMESPACE] * n,
            "pod": list(pods.names),
            "phase": ["Pending"] * n,
            "gpu_request": pa.array(gpus, pa.int32()),
            "cpu_request_milli": pods.cpu_milli.tolist(),
            "memory_request_bytes": (pods.memory_mib * MIB).tolist(),
            "gpu_milli": pa.array(
                [m if g else None for m, g in zip(pods.gpu_milli.tolist(), gpus, strict=True)],
                pa.int32(),
            ),
            "gpu_types": ["|".join(t) if t else None for t in pods.gpu_types],
        }
    )


# -- the in-process service ------------------------------------------------------------------


class ReplayPodApi:
    """The bind verb's Kubernetes API in the replay: the replay's pod store."""

    def __init__(self, pods: PodStore) -> None:
        self.pods = pods
        self.bindings = 0

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        """Not needed: the bind verb knows the pod from the cycle's prioritize call."""
        raise KubeApiError(f"pod {namespace}/{name} is not readable in the replay", status=404)

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Write ``annotations`` onto the pending pod (the device plugin reads the hint)."""
        try:
            for key, value in annotations.items():
                self.pods.annotate(namespace, name, key, value)
        except KeyError as exc:
            raise KubeApiError(str(exc), status=404) from None

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Count the Binding (the replay places what the scheduler decided)."""
        self.bindings += 1


class HandlerTransport:
    """An :class:`~sits_observe.lab.scheduler.wire.ExtenderTransport` that runs the
    service's handler in process: the verb is the URL's last path segment."""

    def __init__(self, handler: ExtenderHandler, views: ViewCache) -> None:
        self.views = views
        self._verbs: dict[str, Callable[[bytes, ClusterView | None], Answer]] = {
            "filter": handler.filter,
            "prioritize": handler.prioritize,
            BIND_VERB: handler.bind,
        }
        #: Calls by (verb, outcome), as ``sits_extender_calls_total`` counts them.
        self.calls: Counter[tuple[str, str]] = Counter()

    def post(self, url: str, body: bytes, timeout_s: float) -> bytes:
        """Handle one call; :class:`ExtenderCallError` for a status other than 200."""
        verb = url.rstrip("/").rsplit("/", 1)[-1]
        handle = self._verbs.get(verb)
        if handle is None:
            raise ExtenderCallError(f"POST {url}: HTTP 404 (the service has no verb {verb!r})")
        answer = handle(body, self.views.get())
        self.calls[(verb, answer.outcome)] += 1
        if answer.status != 200:
            raise ExtenderCallError(f"POST {url}: HTTP {answer.status}")
        return answer.body


class OverlayObserver:
    """Tells the service's view of every placement it did not make itself (the pod watch)."""

    def __init__(self, views: ViewCache) -> None:
        self.views = views
        #: Pods the bind verb assumed on other GPUs than the device plugin gave them.
        self.mismatched = 0

    def placed(self, pod: SchedPod, node: str, gpus: Sequence[int]) -> None:
        """Assume ``pod`` on ``node`` with ``gpus`` unless the bind verb already did."""
        known = self.views.assumed.get(pod.namespace, pod.name)
        if known is not None:
            self.mismatched += int(known.node != node or known.gpus != tuple(gpus))
            return
        self.views.assume(
            Placement(pod.namespace, pod.name, node, _shape(pod), tuple(gpus), pod.uid)
        )


def _shape(pod: SchedPod) -> PodShape:
    if not pod.num_gpu:
        return PodShape(pod.cpu_milli, 0, 0)
    return PodShape(pod.cpu_milli, pod.num_gpu, pod.gpu_milli, pod.gpu_types)


# -- the policies ----------------------------------------------------------------------------


def with_gpu_hint(config: SchedulerConfig) -> SchedulerConfig:
    """``config`` with ``bindVerb: bind`` on its prioritizing extenders, unless one of its
    extenders binds already (kube-scheduler lets one extender bind a pod)."""
    if any(e.bind_verb for e in config.extenders):
        return config
    extenders = tuple(
        replace(e, bind_verb=BIND_VERB) if e.prioritize_verb else e for e in config.extenders
    )
    return replace(config, extenders=extenders, source=f"{config.source}, bindVerb: bind")


def without_bind(config: SchedulerConfig) -> SchedulerConfig:
    """``config`` without bind verbs (extenders left with no verb are dropped)."""
    extenders = tuple(
        replace(e, bind_verb="") for e in config.extenders if e.filter_verb or e.prioritize_verb
    )
    return replace(config, extenders=extenders, source=f"{config.source}, no bindVerb")


class ExtenderReplayPolicy:
    """kube-scheduler with the sits extender in the loop (see the module docstring).

    Picklable until its first :meth:`choose` (the replay's worker processes get a copy); it
    builds its store, view and scheduler on the first pod of each replay.
    """

    def __init__(
        self,
        name: str,
        config: SchedulerConfig,
        pods: PodList,
        *,
        gpu_hint: bool = False,
        no_bind: bool = False,
        scoring: ScoringSettings | None = None,
        view: ViewSettings | None = None,
        devices: DeviceStep | None = None,
    ) -> None:
        if not config.extenders:
            raise ConfigError(
                f"{name}: the scheduler configuration {config.source} has no extender"
            )
        self.name = name
        self.config = with_gpu_hint(config) if gpu_hint else config
        if no_bind:
            self.config = without_bind(self.config)
        self.pod_list = pods
        self.scoring = scoring or ScoringSettings()
        self.view_settings = view or ViewSettings()
        #: DRA's device choice in place of the device plugin's (None: the device plugin).
        self.devices = devices
        self._sim: SimState | None = None
        self._kube: KubePolicy | None = None
        self._observer: OverlayObserver | None = None
        self._transport: HandlerTransport | None = None

    def choose(self, sim: SimState, pod: SimPod, rng: np.random.Generator) -> Choice | None:
        """Schedule ``pod`` through kube-scheduler and the extender; None when it stays Pending."""
        if self._kube is None or self._sim is not sim:
            self._start(sim)
        assert self._kube is not None
        return self._kube.choose(sim, pod, rng)

    @property
    def counts(self) -> Counter[str]:
        """Outcomes and calls of this replay (empty before the first pod)."""
        counts: Counter[str] = Counter(self._kube.counts if self._kube else {})
        if self._transport is not None:
            counts.update({f"{v}_{o}": n for (v, o), n in self._transport.calls.items()})
        if self._observer is not None:
            counts["gpu_mismatch"] = self._observer.mismatched
        return counts

    def _start(self, sim: SimState) -> None:
        store = replay_store(sim, self.pod_list)
        settings = self.view_settings

        def build(previous: ClusterView | None) -> ClusterView:
            return build_view(store, SNAPSHOT_AT, settings, previous)

        # The clock stands still: the view is built once and then only changes by the overlay.
        views = ViewCache(
            build,
            refresh_interval_s=float("inf"),
            monotonic=lambda: 0.0,
            assumed=AssumedPods(ttl_s=float("inf"), monotonic=lambda: 0.0),
        )
        views.refresh()
        pod_store = PodStore()
        binder = None
        if any(e.bind_verb for e in self.config.extenders):
            binder = Binder(
                ReplayPodApi(pod_store),
                scoring=self.scoring,
                gpu_hint=True,  # the service's default (ExtenderSettings.gpu_hint)
                assume=views.assume,
                monotonic=lambda: 0.0,
            )
        handler = ExtenderHandler(
            self.scoring,
            max_snapshot_age_s=settings.max_snapshot_age_s,
            clock=lambda: SNAPSHOT_AT,
            binder=binder,
        )
        self._transport = HandlerTransport(handler, views)
        self._observer = OverlayObserver(views)
        extenders = [Extender(e, self._transport) for e in self.config.extenders]
        self._kube = KubePolicy(
            self.name,
            self.config,
            extenders,
            observers=[self._observer],
            pods=pod_store,
            devices=self.devices,
        )
        self._sim = sim


def replay_policies(
    pods: PodList, config_path: str | Path | None = None
) -> dict[str, Callable[[], ExtenderReplayPolicy]]:
    """Factories of ``kube-sits`` and ``kube-sits-gpuhint`` for ``pods`` and the configuration
    at ``config_path`` (the shipped one by default); raises :class:`ConfigError`."""
    path = Path(config_path) if config_path is not None else DEFAULT_SCHEDULER_CONFIG
    config = load_scheduler_config(path)
    if not config.extenders:
        raise ConfigError(f"scheduler configuration {path} has no extender to replay")
    return {
        KUBE_SITS: lambda: ExtenderReplayPolicy(KUBE_SITS, config, pods),
        KUBE_SITS_GPUHINT: lambda: ExtenderReplayPolicy(
            KUBE_SITS_GPUHINT, config, pods, gpu_hint=True
        ),
        KUBE_SITS_NOBIND: lambda: ExtenderReplayPolicy(
            KUBE_SITS_NOBIND, config, pods, no_bind=True
        ),
    }


def all_policy_names() -> list[str]:
    """Every policy a replay can run: the registered ones, then the replay-extender ones."""
    return list(dict.fromkeys([*policy_names(), *REPLAY_POLICIES]))


def choose_policies(
    names: Sequence[str], pods: PodList, config_path: str | Path | None = None
) -> list[str | Policy]:
    """``names`` as :func:`~sits_observe.lab.replay.engine.replay.simulate` takes them: registered
    names as they are, the replay-extender ones built for ``pods`` and the configuration at
    ``config_path``; an unknown name is an :class:`UnknownNameError`."""
    known = all_policy_names()
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UnknownNameError(f"unknown policy {unknown[0]!r}: choose from {', '.join(known)}")
    wanted = [n for n in names if n in REPLAY_POLICIES]
    factories = replay_policies(pods, config_path) if wanted else {}
    return [factories[n]() if n in factories else n for n in names]
