"""The extender's ``bind`` verb: bind the pod, name its GPU for the device plugin, assume it.

kube-scheduler hands the binding of a pod to the first interested extender with a
``bindVerb`` (``extendersBinding`` in ``schedule_one.go``), POSTing ``ExtenderBindingArgs``
(pod name, namespace, UID, node). This is how an extender that chose a GPU tells the device
plugin, as HAMi's own scheduler extender does: HAMi's device plugin only gives a pod the GPUs
its annotation ``nvidia.com/use-gpuuuid`` names. In order:

1. the pod's request: from the filter / prioritize call of the same scheduling cycle
   (:class:`RecentPods`, by UID), else read from the API server;
2. with ``gpu_hint`` and a share of one GPU, the GPU the ``sits`` score was computed for (FGD's
   best GPU on that node, :mod:`extender_gpus`) is written to the hint annotation by a merge
   PATCH, *before* the Binding, so the kubelet's admission already sees it. A pod that carries
   its own hint keeps it. Whole GPUs get no hint (which free GPUs does not change F_n(M));
3. the Binding, through the ``pods/binding`` subresource;
4. the placement (node and GPU indices: the hinted GPU, else the one the device plugin will
   pick) goes into the view's assumed pods at once (:mod:`extender_overlay`), so the next
   pod is scored against it rather than against the last inventory snapshot.

Any failure answers ``ExtenderBindingResult.Error``: kube-scheduler then forgets the assumed
pod and retries it (or, for an ``ignorable`` extender, binds it itself).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sits_observe.analytics.placement.device_plugin import DeviceAllocationError, allocate_gpus
from sits_observe.collectors.kube.gpu import GPU_HINT_ANNOTATION
from sits_observe.control.extender.clusterview.view import ClusterView
from sits_observe.control.extender.overlay import Placement
from sits_observe.control.extender.scoring import PodRequest, gpu_placements
from sits_observe.control.extender.scoring_settings import ScoringSettings
from sits_observe.control.extender.wire import (
    BindingArgsWire,
    PodWire,
    binding_result,
    parse_binding_args,
    pod_request,
)
from sits_observe.errors import KubeApiError, ParseError


class PodApi(Protocol):
    """What the bind verb does to the Kubernetes API (the official client in ``serve``, the
    replay's pod store in ``simulate``)."""

    def read_pod(self, namespace: str, name: str) -> Mapping[str, Any]:
        """The pod as the API server returns it; :class:`KubeApiError` on failure."""
        ...

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Merge ``annotations`` into the pod's; :class:`KubeApiError` on failure."""
        ...

    def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        """Create the pod's Binding to ``node``; :class:`KubeApiError` on failure."""
        ...


class RecentPods:
    """The pods of the last ``size`` filter / prioritize calls, by UID (thread-safe)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._pods: OrderedDict[str, PodRequest] = OrderedDict()

    def remember(self, pod: PodRequest) -> None:
        """Keep ``pod`` (a pod without a UID cannot be matched and is not kept)."""
        if not pod.uid:
            return
        with self._lock:
            self._pods[pod.uid] = pod
            self._pods.move_to_end(pod.uid)
            while len(self._pods) > self._size:
                self._pods.popitem(last=False)

    def get(self, uid: str) -> PodRequest | None:
        """The pod with ``uid``, if a recent call carried it."""
        with self._lock:
            return self._pods.get(uid)


@dataclass(frozen=True)
class BindOutcome:
    """What one bind call did: the answer body, an outcome for the metrics (``bound``,
    ``bad_request``, ``error``), the placement assumed (None when the view could not place
    it) and whether a GPU hint was written."""

    body: bytes
    outcome: str
    placement: Placement | None = None
    hinted: bool = False


class Binder:
    """The bind verb over a :class:`PodApi` (see the module docstring)."""

    def __init__(
        self,
        api: PodApi,
        *,
        scoring: ScoringSettings,
        gpu_hint: bool,
        assume: Callable[[Placement], None],
        recent: RecentPods | None = None,
        binding_window_s: float = 600.0,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api = api
        self.scoring = scoring
        self.gpu_hint = gpu_hint
        self.assume = assume
        self.recent = recent or RecentPods()
        self._window_s = binding_window_s
        self._monotonic = monotonic
        self._last_bind: float | None = None

    def hinting(self) -> bool:
        """True while kube-scheduler binds through this verb (a call within
        ``binding_window_s``) and ``gpu_hint`` is on: shares will get FGD's GPU, so score them
        for it. Before the first call, or when kube-scheduler's configuration has no
        ``bindVerb``, the device plugin chooses and the score predicts its choice."""
        last = self._last_bind
        return self.gpu_hint and last is not None and self._monotonic() - last <= self._window_s

    def bind(self, body: bytes, view: ClusterView | None) -> BindOutcome:
        """Handle one ``ExtenderBindingArgs`` body; never raises."""
        try:
            args = parse_binding_args(body)
        except ParseError as exc:
            return BindOutcome(binding_result(str(exc)), "bad_request")
        who = f"{args.pod_namespace}/{args.pod_name}"
        self._last_bind = self._monotonic()
        try:
            request = self._request(args)
            gpus, hint = self._gpus(request, args.node, view)
            if hint:
                self.api.annotate_pod(
                    args.pod_namespace, args.pod_name, {GPU_HINT_ANNOTATION: ",".join(hint)}
                )
            self.api.bind_pod(args.pod_namespace, args.pod_name, args.pod_uid, args.node)
        except (KubeApiError, ParseError) as exc:
            return BindOutcome(binding_result(f"binding {who} to {args.node}: {exc}"), "error")
        placement = None
        if gpus is not None:
            placement = Placement(
                args.pod_namespace,
                args.pod_name,
                args.node,
                request.shape(),
                gpus,
                args.pod_uid,
            )
            self.assume(placement)
        return BindOutcome(binding_result(), "bound", placement, bool(hint))

    def _request(self, args: BindingArgsWire) -> PodRequest:
        known = self.recent.get(args.pod_uid) if args.pod_uid else None
        if known is not None:
            return known
        pod = self.api.read_pod(args.pod_namespace, args.pod_name)
        return pod_request(PodWire.model_validate(pod))

    def _gpus(
        self, request: PodRequest, node: str, view: ClusterView | None
    ) -> tuple[tuple[int, ...] | None, tuple[str, ...]]:
        """(GPU indices to assume, None if the view cannot place it; UUIDs to hint)."""
        row = view.index.get(node) if view is not None else None
        if view is None or row is None:
            return None, ()
        if not request.gpus:
            return (), ()
        uuids = view.gpu_uuids[row]
        if request.shared and self.gpu_hint and not request.hint_uuids:
            gpu = int(gpu_placements(view, request, self.scoring, gpu_choice="fgd").gpu[row])
            if 0 <= gpu < len(uuids) and uuids[gpu]:
                return (gpu,), (uuids[gpu],)
            # No UUID sampled for that GPU: no hint can name it; the device plugin chooses.
        try:
            # What the device plugin will give it (honouring the pod's own hint, if any).
            gpus = allocate_gpus(
                view.state.gpu_free_milli[row],
                view.gpu_pods[row],
                uuids,
                num_gpu=request.gpus,
                gpu_milli=request.gpu_milli,
                hint=request.hint_uuids,
                policy=self.scoring.device_plugin_policy,
                split_count=self.scoring.device_split_count,
            )
        except DeviceAllocationError:
            return None, ()
        return gpus, ()
