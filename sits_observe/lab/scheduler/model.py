"""A model of kube-scheduler's scheduling cycle for one pod, extenders included.

Used by the what-if replay (``simulate --policy kube-*``) and by the simulated cluster's live
scheduler, so both run one implementation of what kube-scheduler does. Read from
kubernetes/kubernetes ``pkg/scheduler/schedule_one.go`` (``schedulePod``,
``findNodesThatFitPod``, ``findNodesThatPassFilters``, ``numFeasibleNodesToFind``,
``findNodesThatPassExtenders``, ``prioritizeNodes``, ``selectHost``, ``extendersBinding``),
``pkg/scheduler/framework/plugins/noderesources`` (``fit.go``, ``least_allocated.go``,
``most_allocated.go``, ``balanced_allocation.go``, ``resource_allocation.go``) and
``pkg/scheduler/extender.go``. One cycle:

1. **Filter**, starting at a rotating index into the node list (``nextStartNodeIndex`` moves
   by the nodes examined, so every node gets its turn), stopping once
   :func:`nodes_to_find` feasible nodes are found: ``percentageOfNodesToScore`` of the
   cluster, adaptive when 0 (50 % - 1 % per 125 nodes, at least 5 %), never fewer than 100
   nodes. The modelled filter plugins, in kube-scheduler's order: NodeAffinity (the pod's
   required ``nvidia.com/gpu.product`` terms), then NodeResourcesFit (CPU and memory
   requests against allocatable minus requested) with the GPU devices checked per device, as
   a sharing-aware GPU filter (HAMi's, or DRA's structured parameters) does: enough devices
   with the pod's per-GPU share free. Examination is sequential here where upstream runs 16
   goroutines; the found set is the same, the count of examined nodes may differ by the
   few upstream evaluates in parallel past the last needed one.
2. **Extender filters**, in configuration order, for each extender interested in the pod
   (``managedResources``): the feasible names (``nodeCacheCapable``) or objects go out; a
   failure of an ``ignorable`` extender skips it, of another one fails the attempt.
3. **One node left**: it is chosen without scoring (upstream's shortcut; no prioritize call).
4. **Score**: NodeResourcesFit's ``LeastAllocated`` (default) or ``MostAllocated`` and
   NodeResourcesBalancedAllocation, each 0-100 times its plugin weight; extender priorities
   0-10 x ``weight`` x MaxNodeScore / MaxExtenderPriority (= 10) added on; a failed
   prioritize call adds nothing. The other default score plugins give every node the same
   score here (no taints, preferences, spread constraints or images) and are left out.
5. **Select**: the highest total; ties uniformly at random (``selectHost``'s reservoir
   sampling).
6. **Bind**: by the first interested extender with a ``bindVerb`` (an error from an
   ``ignorable`` one falls through to the next), else by the default binder.

Which GPUs of the node the pod gets is the device plugin's choice
(:mod:`sits_observe.analytics.placement.device_plugin`), after the bind: see :class:`Decision`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from sits_observe.analytics.placement.device_plugin import DEFAULT_SPLIT_COUNT
from sits_observe.domain.quantity import format_quantity
from sits_observe.lab.scheduler.config import (
    BALANCED,
    FIT,
    ExtenderConfig,
    ResourceWeight,
    SchedulerConfig,
)
from sits_observe.lab.scheduler.kube_nodes import (
    DEFAULT_CPU_MILLI,
    DEFAULT_MEMORY_BYTES,
    MILLI_PER_GPU,
    NodeInfos,
    SchedPod,
)
from sits_observe.lab.scheduler.wire import (
    ExtenderCallError,
    ExtenderTransport,
    FilterAnswer,
    binding_args,
    extender_args,
    read_binding,
    read_filter,
    read_priorities,
)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# Filter outcomes: a bit per short resource, or the node affinity alone (kube-scheduler's
# NodeAffinity runs before NodeResourcesFit, so a node it rejects has no resource reasons).
_CPU, _MEMORY, _GPU, _AFFINITY = 1, 2, 4, 8
#: NodeResourcesFit's and NodeAffinity's words per outcome code ("" = the node passes).
FILTER_REASONS: tuple[str, ...] = (
    *(
        ", ".join(
            f"Insufficient {name}"
            for bit, name in ((_CPU, "cpu"), (_MEMORY, "memory"), (_GPU, "nvidia.com/gpu"))
            if code & bit
        )
        for code in range(_AFFINITY)
    ),
    "node(s) didn't match Pod's node affinity/selector",
)

#: framework.MaxNodeScore and extenderv1.MaxExtenderPriority.
MAX_NODE_SCORE = 100
MAX_EXTENDER_PRIORITY = 10
#: schedule_one.go: minFeasibleNodesToFind, minFeasibleNodesPercentageToFind and the base of
#: the adaptive percentage.
MIN_FEASIBLE_NODES = 100
MIN_FEASIBLE_PERCENTAGE = 5
BASE_PERCENTAGE = 50


def nodes_to_find(percentage: int, nodes: int) -> int:
    """``numFeasibleNodesToFind``: how many feasible nodes a cycle looks for."""
    if nodes < MIN_FEASIBLE_NODES:
        return nodes
    if percentage <= 0:
        percentage = max(BASE_PERCENTAGE - nodes // 125, MIN_FEASIBLE_PERCENTAGE)
    found = nodes * percentage // 100
    return max(found, MIN_FEASIBLE_NODES)


@dataclass(frozen=True)
class Decision:
    """What one scheduling cycle decided for a pod.

    ``node`` is None when the pod stays Pending; ``message`` is then the FailedScheduling text
    kube-scheduler would write (``0/N nodes are available: ...``). ``bound_by`` names the
    extender (its URL) that bound the pod, "" for the default binder. ``calls`` counts extender
    calls by verb; ``examined`` the nodes the filter looked at.
    """

    node: int | None
    node_name: str | None
    message: str
    bound_by: str = ""
    feasible: int = 0
    examined: int = 0
    calls: Counter[str] = field(default_factory=Counter)


@dataclass
class Extender:
    """A configured extender and how to reach it."""

    config: ExtenderConfig
    transport: ExtenderTransport

    def url(self, verb: str) -> str:
        """``urlPrefix + "/" + verb``."""
        return f"{self.config.url_prefix}/{verb}"


class KubeScheduler:
    """kube-scheduler's cycle over a :class:`NodeInfos` cache (see the module docstring).

    Stateful only in the rotating start index, as upstream; the caller assumes the decided
    placement into the cache (:meth:`NodeInfos.assume`) once the device plugin has chosen
    the GPUs.
    """

    def __init__(
        self,
        config: SchedulerConfig,
        extenders: Sequence[Extender] = (),
        *,
        split_count: int = DEFAULT_SPLIT_COUNT,
    ) -> None:
        if len(extenders) != len(config.extenders):
            raise ValueError(
                f"{len(config.extenders)} extender(s) configured, {len(extenders)} given"
            )
        self.config = config
        self.extenders = list(extenders)
        self.split_count = split_count
        self.next_start = 0

    # -- one cycle ----------------------------------------------------------------------

    def schedule(self, nodes: NodeInfos, pod: SchedPod, rng: np.random.Generator) -> Decision:
        """Run one scheduling cycle for ``pod``."""
        total = len(nodes)
        if total == 0:
            return Decision(None, None, "no nodes available to schedule pods")
        calls: Counter[str] = Counter()
        codes = self._filter_codes(nodes, pod)
        feasible, examined = self._sample(codes == 0, total)
        #: Why the extenders' filters dropped nodes (a node's status as kube-scheduler keeps it).
        dropped: dict[int, str] = {}
        if not feasible:
            return Decision(None, None, _fit_error(total, codes, dropped), examined=examined)
        names = [nodes.names[i] for i in feasible]
        interested = [e for e in self.extenders if e.config.interested(pod.resource_names)]
        for extender in interested:
            if not names or not extender.config.filter_verb:
                continue
            try:
                answer = self._filter_call(extender, pod, nodes, names)
            except ExtenderCallError as exc:
                calls["filter_error"] += 1
                if extender.config.ignorable:
                    continue
                return Decision(
                    None,
                    None,
                    f"extender {extender.config.url_prefix}: {exc}",
                    examined=examined,
                    calls=calls,
                )
            calls["filter"] += 1
            for name, why in {**answer.failed, **answer.unresolvable}.items():
                if name in nodes.index:
                    dropped[nodes.index[name]] = why
            keep = set(answer.passing)
            names = [n for n in names if n in keep]
        if not names:
            return Decision(
                None,
                None,
                _fit_error(total, codes, dropped),
                feasible=0,
                examined=examined,
                calls=calls,
            )
        rows = np.array([nodes.index[n] for n in names], dtype=np.int64)
        if rows.shape[0] == 1:
            chosen = int(rows[0])
        else:
            scores = self.plugin_scores(nodes, pod, rows)
            for extender in interested:
                if extender.config.prioritize_verb:
                    scores += self._priorities(extender, pod, nodes, names, calls)
            tied = rows[scores == scores.max()]
            chosen = int(tied[rng.integers(tied.shape[0])]) if tied.shape[0] > 1 else int(tied[0])
        bound_by, error = self._bind(interested, pod, nodes.names[chosen], calls)
        if error:
            return Decision(None, None, error, feasible=len(names), examined=examined, calls=calls)
        return Decision(chosen, nodes.names[chosen], "", bound_by, len(names), examined, calls)

    # -- filter -------------------------------------------------------------------------

    def _filter_codes(self, nodes: NodeInfos, pod: SchedPod) -> IntArray:
        """Per node: 0 when it passes the modelled filter plugins, else the index of the first
        failing plugin's reasons in :data:`FILTER_REASONS`."""
        cpu_short = (pod.cpu_milli > 0) & (
            pod.cpu_milli > nodes.cpu_alloc_milli - nodes.cpu_requested_milli
        )
        memory_short = (pod.memory_bytes > 0) & (
            pod.memory_bytes > nodes.memory_alloc_bytes - nodes.memory_requested_bytes
        )
        codes = cpu_short * _CPU + memory_short * _MEMORY
        if pod.num_gpu:
            codes += (nodes.gpus_fitting(pod, self.split_count) < pod.num_gpu) * _GPU
            if pod.gpu_types:
                codes[~nodes.model_allowed(pod.gpu_types)] = _AFFINITY
        return np.asarray(codes, dtype=np.int64)

    def _sample(self, passes: BoolArray, total: int) -> tuple[list[int], int]:
        """The feasible nodes of this cycle's sample, and how many nodes were examined."""
        wanted = nodes_to_find(self.config.percentage_of_nodes_to_score, total)
        order = (self.next_start + np.arange(total)) % total
        ok = passes[order]
        positions = np.flatnonzero(ok)
        if positions.shape[0] >= wanted:
            examined = int(positions[wanted - 1]) + 1
            feasible = order[positions[:wanted]].tolist()
        else:
            examined = total
            feasible = order[positions].tolist()
        self.next_start = (self.next_start + examined) % total
        return [int(i) for i in feasible], examined

    def _filter_call(
        self, extender: Extender, pod: SchedPod, nodes: NodeInfos, names: Sequence[str]
    ) -> FilterAnswer:
        body = self._args(extender, pod, nodes, names)
        answer = extender.transport.post(
            extender.url(extender.config.filter_verb), body, extender.config.http_timeout_s
        )
        return read_filter(answer, names, node_cache_capable=extender.config.node_cache_capable)

    # -- score --------------------------------------------------------------------------

    def plugin_scores(self, nodes: NodeInfos, pod: SchedPod, rows: IntArray) -> IntArray:
        """Weighted sum of the modelled score plugins for the candidate ``rows``."""
        weights = self.config.plugin_weights
        total = np.zeros(rows.shape[0], dtype=np.int64)
        if weights.get(FIT):
            fit = _fit_score(nodes, pod, rows, self.config.fit_resources, self.config.fit_strategy)
            total += weights[FIT] * fit
        if weights.get(BALANCED):
            total += weights[BALANCED] * _balanced_score(
                nodes, pod, rows, self.config.balanced_resources
            )
        return total

    def _priorities(
        self,
        extender: Extender,
        pod: SchedPod,
        nodes: NodeInfos,
        names: Sequence[str],
        calls: Counter[str],
    ) -> IntArray:
        body = self._args(extender, pod, nodes, names)
        try:
            answer = extender.transport.post(
                extender.url(extender.config.prioritize_verb), body, extender.config.http_timeout_s
            )
            scores = read_priorities(answer)
        except ExtenderCallError:
            calls["prioritize_error"] += 1  # ignored: no score from this extender
            return np.zeros(len(names), dtype=np.int64)
        calls["prioritize"] += 1
        factor = extender.config.weight * (MAX_NODE_SCORE // MAX_EXTENDER_PRIORITY)
        return np.array([scores.get(n, 0) * factor for n in names], dtype=np.int64)

    # -- bind ---------------------------------------------------------------------------

    def _bind(
        self, interested: Sequence[Extender], pod: SchedPod, node: str, calls: Counter[str]
    ) -> tuple[str, str]:
        """(who bound, error): the first interested binder extender, else the default binder."""
        for extender in interested:
            if not extender.config.bind_verb:
                continue
            try:
                answer = extender.transport.post(
                    extender.url(extender.config.bind_verb),
                    binding_args(pod.manifest, node),
                    extender.config.http_timeout_s,
                )
                read_binding(answer)
            except ExtenderCallError as exc:
                calls["bind_error"] += 1
                if extender.config.ignorable:
                    continue
                return "", f"binding rejected: extender {extender.config.url_prefix}: {exc}"
            calls["bind"] += 1
            return extender.config.url_prefix, ""
        return "", ""

    @staticmethod
    def _args(extender: Extender, pod: SchedPod, nodes: NodeInfos, names: Sequence[str]) -> bytes:
        if extender.config.node_cache_capable:
            return extender_args(pod.manifest, names, node_cache_capable=True)
        objects = [node_object(nodes, nodes.index[n]) for n in names]
        return extender_args(pod.manifest, names, node_cache_capable=False, node_objects=objects)


def node_object(nodes: NodeInfos, i: int) -> dict[str, object]:
    """A minimal ``v1.Node`` for an extender configured without ``nodeCacheCapable``."""
    allocatable = {
        "cpu": format_quantity(int(nodes.cpu_alloc_milli[i]), "millicores"),
        "memory": format_quantity(int(nodes.memory_alloc_bytes[i]), "bytes"),
        "nvidia.com/gpu": str(int(nodes.gpu_count[i])),
    }
    return {
        "metadata": {
            "name": nodes.names[i],
            "labels": {"nvidia.com/gpu.product": nodes.gpu_model[i]},
        },
        "status": {"allocatable": allocatable, "capacity": allocatable},
    }


# -- score plugins ----------------------------------------------------------------------


def _requested_allocatable(
    nodes: NodeInfos, pod: SchedPod, rows: IntArray, resource: str, *, nonzero: bool
) -> tuple[FloatArray, FloatArray]:
    """Requested (node + this pod) and allocatable of ``resource`` on ``rows``."""
    if resource == "cpu":
        node_req = (nodes.cpu_nonzero_milli if nonzero else nodes.cpu_requested_milli)[rows]
        own = pod.cpu_milli or (DEFAULT_CPU_MILLI if nonzero else 0)
        return (node_req + own).astype(np.float64), nodes.cpu_alloc_milli[rows].astype(np.float64)
    if resource == "memory":
        node_req = (nodes.memory_nonzero_bytes if nonzero else nodes.memory_requested_bytes)[rows]
        own = pod.memory_bytes or (DEFAULT_MEMORY_BYTES if nonzero else 0)
        alloc = nodes.memory_alloc_bytes[rows].astype(np.float64)
        return (node_req + own).astype(np.float64), alloc
    if resource == "nvidia.com/gpu":
        own_gpu = pod.num_gpu * pod.gpu_milli / MILLI_PER_GPU if pod.num_gpu else 0.0
        if own_gpu == 0:
            # resource_allocation.go: an extended resource the pod does not request is skipped.
            zero = np.zeros(rows.shape[0])
            return zero, zero
        return nodes.gpu_requested[rows] + own_gpu, nodes.gpu_count[rows].astype(np.float64)
    zero = np.zeros(rows.shape[0])
    return zero, zero


def _fit_score(
    nodes: NodeInfos,
    pod: SchedPod,
    rows: IntArray,
    resources: Sequence[ResourceWeight],
    strategy: str,
) -> IntArray:
    """LeastAllocated: sum_r w_r (cap - req) x 100 // cap / sum w; MostAllocated: req x 100 //
    cap (req capped at cap). Resources with zero allocatable are skipped (weight and all)."""
    score = np.zeros(rows.shape[0], dtype=np.int64)
    weight_sum = np.zeros(rows.shape[0], dtype=np.int64)
    for r in resources:
        requested, capacity = _requested_allocatable(nodes, pod, rows, r.name, nonzero=True)
        counted = capacity > 0
        safe = np.where(counted, capacity, 1.0)
        if strategy == "MostAllocated":
            part = np.floor(np.minimum(requested, capacity) * MAX_NODE_SCORE / safe)
        else:
            part = np.where(
                requested > capacity, 0.0, np.floor((capacity - requested) * MAX_NODE_SCORE / safe)
            )
        score += np.where(counted, part.astype(np.int64) * r.weight, 0)
        weight_sum += np.where(counted, r.weight, 0)
    return np.where(weight_sum > 0, score // np.maximum(weight_sum, 1), 0).astype(np.int64)


def _balanced_score(
    nodes: NodeInfos, pod: SchedPod, rows: IntArray, resources: Sequence[ResourceWeight]
) -> IntArray:
    """(1 - std of the requested fractions) x 100, truncated; two resources: std = |f1-f2|/2."""
    fractions: list[FloatArray] = []
    counted: list[BoolArray] = []
    for r in resources:
        requested, capacity = _requested_allocatable(nodes, pod, rows, r.name, nonzero=False)
        ok = capacity > 0
        fractions.append(
            np.where(ok, np.minimum(requested / np.where(ok, capacity, 1.0), 1.0), 0.0)
        )
        counted.append(ok)
    f = np.vstack(fractions) if fractions else np.zeros((0, rows.shape[0]))
    c = np.vstack(counted) if counted else np.zeros((0, rows.shape[0]), dtype=np.bool_)
    n = c.sum(axis=0)
    mean = np.where(n > 0, (f * c).sum(axis=0) / np.maximum(n, 1), 0.0)
    variance = np.where(n > 0, (((f - mean) ** 2) * c).sum(axis=0) / np.maximum(n, 1), 0.0)
    std = np.where(n >= 2, np.sqrt(variance), 0.0)
    return np.trunc((1.0 - std) * MAX_NODE_SCORE).astype(np.int64)


def _fit_error(total: int, codes: IntArray, dropped: Mapping[int, str]) -> str:
    """``FitError.Error()``: ``0/N nodes are available: <count> <reason>, ...``, from the
    filter plugins' codes and the reasons the extenders' filters gave (for nodes that had
    passed the plugins)."""
    counts: Counter[str] = Counter()
    per_code = np.bincount(codes, minlength=len(FILTER_REASONS))
    for code in np.flatnonzero(per_code[1:]) + 1:
        for part in FILTER_REASONS[code].split(", "):
            counts[part] += int(per_code[code])
    for text in dropped.values():
        for part in text.split(", "):
            if part:
                counts[part] += 1
    summary = ", ".join(f"{n} {reason}" for reason, n in sorted(counts.items()))
    return (
        f"0/{total} nodes are available: {summary}."
        if summary
        else f"0/{total} nodes are available."
    )
