"""What-if scheduling simulator: replay a trace onto a cluster the way the ATC'23 evaluation does.

Method (Weng et al., USENIX ATC 2023, and their simulator
hkust-adsl/kubernetes-scheduler-simulator; docs/analytics/simulator.md has the details):

1. **Arrival order.** The pod list, sorted by name, is shuffled with the seed; pods arrive one
   at a time in that order and never leave (the trace's timestamps are ignored).
2. **Inflation to the load.** While the arrived GPU request is below ``load_ratio`` x the
   cluster's GPU capacity, pods are drawn *with replacement*, uniformly, from the original
   (name-sorted) list and *appended after* the shuffled list, stopping at the first draw that
   would push the total past the target (the simulator's ``tuneUpPods``; it compares the
   draw's per-GPU milli, we compare its whole request). A list already above the target is
   trimmed by removing uniformly random pods until it fits (``tuneDownPods``).
3. **Scheduling.** Each pod goes where the policy puts it (:mod:`.policies`); a pod
   no node can take fails and is dropped (it does not retry).
4. **Measures.** At each arrived-load step p (0, 1%, ..., ``load_ratio`` rounded down to a
   whole percent; as fractions) the state *after every pod whose cumulative GPU request is at
   most p x capacity* is recorded: ``alloc_ratio`` = allocated GPU milli / capacity,
   ``frag_ratio`` = F(M) / idle GPU milli, ``frag_amount_ratio`` = F(M) / capacity, with M the
   typical-pod set of the *original* pod list (fixed for the run). ``first_failure_arrived``
   is the arrived fraction (including the failing pod's request) when the first pod fails;
   ``unallocated_gpus`` = (capacity - allocated milli) / 1000 at the end, which is how the
   paper turns its 130% allocation ratio into "GPUs unallocated" (FGD 95.39% of 6,212 -> 286);
   ``frag_by_cause_gpus`` = F(M) at the end split by why the typical pods cannot use the idle
   GPUs (:func:`sits_observe.analytics.fragmentation.fgd.measure.fragmentation`'s causes, in GPUs):
   free shares too small (``lack_gpu``), free CPU too small (``lack_cpu``), both, the GPU model,
   CPU-only pods; ``failed_pods_by_kind`` / ``failed_gpus_by_kind`` = the pods that failed and the
   GPUs they asked for, by kind (CPU-only, a share of one GPU, k whole GPUs): which demand went
   unmet.

The arrival sequence and the node tie-break order depend only on the seed, so every policy
sees the same pods in the same order for a given seed (their curves coincide until the first
failure, as in the paper); random choices inside a policy (``random``) use a second,
independent stream of the same seed.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from sits_observe.analytics.fragmentation.fgd.measure import fragmentation
from sits_observe.analytics.fragmentation.fgd.workload import (
    TargetWorkload,
    TypicalPodSettings,
    typical_pods,
)
from sits_observe.analytics.traces.cluster_trace import NodeList, PodList
from sits_observe.errors import ConfigError, NoDataError, UnknownNameError
from sits_observe.lab.replay.engine import policies
from sits_observe.lab.replay.engine.kube import KubePolicy
from sits_observe.lab.replay.engine.results import PolicyResult, ReplayResult, Spread
from sits_observe.lab.replay.engine.sits import SitsPolicy
from sits_observe.lab.replay.engine.state import NodeSignals, SimPod, SimState, pod_kinds

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

__all__ = [
    "PolicyResult",
    "ReplayResult",
    "SimulationSettings",
    "Spread",
    "arrival_order",
    "find_policy",
    "policy_names",
    "register_policy",
    "replay",
    "sim_pods",
    "simulate",
    "target_workload",
]


class SimulationSettings(BaseModel):
    """How a replay is run (the defaults are the ATC'23 evaluation's)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    load_ratio: float = Field(
        1.3,
        gt=0.0,
        le=10.0,
        description="arrived GPU request at the end, as a multiple of cluster GPU capacity",
        json_schema_extra={"flags": ["--load", "--load-ratio"]},
    )
    memory_filter: bool = Field(
        True, description="filter nodes on memory too (kube-scheduler NodeResourcesFit: yes)"
    )
    tie_break: Literal["node_order", "random"] = Field(
        "node_order",
        description=(
            "equal scores: first node of a seeded random order fixed per replay (the authors' "
            "patched kube-scheduler) or uniformly random per pod (stock kube-scheduler)"
        ),
    )
    coverage_ratio: float = Field(
        TypicalPodSettings().coverage_ratio,
        gt=0.0,
        le=1.0,
        description="pods (0-1) the typical-pod set M of the fragmentation measure covers",
    )


# -- policies ------------------------------------------------------------------------------

PolicyFactory = Callable[[], policies.Policy]
#: The policies by name, in the paper's order, then ours.
_POLICIES: dict[str, PolicyFactory] = {
    "random": policies.RandomPolicy,
    "dotprod": policies.DotProductPolicy,
    "clustering": policies.ClusteringPolicy,
    "packing": policies.PackingPolicy,
    "bestfit": policies.BestFitPolicy,
    "fgd": policies.FgdPolicy,
    "sits": SitsPolicy,
    # kube-scheduler as users run it, no extender (kube-sits* are registered by the control
    # layer: they call the service's extender handler).
    "kube-default": KubePolicy,
}


def register_policy(name: str, factory: PolicyFactory) -> None:
    """Make ``factory`` available as ``name`` (replacing an earlier one)."""
    _POLICIES[name] = factory


def find_policy(name: str) -> policies.Policy:
    """A new policy by name; raises :class:`UnknownNameError` listing the valid names."""
    try:
        return _POLICIES[name]()
    except KeyError:
        raise UnknownNameError(
            f"unknown policy {name!r}; choose from {', '.join(policy_names())}"
        ) from None


def policy_names() -> tuple[str, ...]:
    """Registered policy names (the paper's order, then ``sits``)."""
    return tuple(_POLICIES)


# -- the workload ----------------------------------------------------------------------------


def sim_pods(pods: PodList) -> list[SimPod]:
    """One :class:`SimPod` per pod of the list, in file order."""
    return [SimPod(pods.shape(i), int(pods.memory_mib[i])) for i in range(len(pods))]


def target_workload(pods: PodList, settings: SimulationSettings) -> TargetWorkload:
    """The typical-pod set M of the original pod list (fixed for every replay of it)."""
    return typical_pods(pods.shapes(), TypicalPodSettings(coverage_ratio=settings.coverage_ratio))


def arrival_order(
    pods: PodList, capacity_milli: int, load_ratio: float, rng: np.random.Generator
) -> IntArray:
    """Indices into ``pods`` in arrival order, inflated or trimmed to the load (see above).

    Raises :class:`NoDataError` when the pods request no GPU or the cluster has none.
    """
    by_name = np.argsort(np.asarray(pods.names), kind="stable").astype(np.int64)
    request = pods.num_gpu * pods.gpu_milli
    total = int(request.sum())
    if len(pods) == 0 or total == 0 or capacity_milli <= 0:
        raise NoDataError(
            f"cannot replay to a GPU load: {len(pods)} pods requesting {total} milli-GPU onto "
            f"{capacity_milli} milli-GPU of capacity (both must be > 0)"
        )
    order = rng.permutation(by_name)
    target = int(load_ratio * capacity_milli)
    if total > target:
        removal = rng.permutation(order.shape[0])
        left = total - np.cumsum(request[order[removal]])
        cut = int(np.argmax(left <= target)) + 1
        keep = np.ones(order.shape[0], dtype=np.bool_)
        keep[removal[:cut]] = False
        return order[keep]
    extra: list[IntArray] = []
    while True:
        draws = by_name[rng.integers(0, by_name.shape[0], size=4096)]
        running = total + np.cumsum(request[draws])
        over = np.flatnonzero(running > target)
        if over.shape[0]:
            extra.append(draws[: over[0]])
            break
        extra.append(draws)
        total = int(running[-1])
    return np.concatenate([order, *extra])


# -- one replay ------------------------------------------------------------------------------


def replay(
    nodes: NodeList,
    pods: PodList,
    policy: str | policies.Policy,
    seed: int,
    settings: SimulationSettings | None = None,
    *,
    signals: NodeSignals | None = None,
    workload: TargetWorkload | None = None,
    arriving: Sequence[SimPod] | None = None,
    on_place: Callable[[SimState, SimPod, int, tuple[int, ...]], None] | None = None,
) -> ReplayResult:
    """Replay ``pods`` onto the empty cluster of ``nodes`` with ``policy`` and ``seed``.

    ``policy`` is a registered name or a policy object; ``signals`` are per-node measurements
    the ``sits`` policy uses when present. ``workload`` and ``arriving`` (one
    :class:`SimPod` per pod) may be passed to share them between replays; they default to
    :func:`target_workload` and :func:`sim_pods`. ``on_place`` is called after every
    placement with the cluster, the pod, its node row and its GPUs (to inspect the end state,
    as :class:`~sits_observe.lab.replay.engine.room.ShareLedger` does).
    """
    settings = settings or SimulationSettings()
    chooser = find_policy(policy) if isinstance(policy, str) else policy
    workload = workload or target_workload(pods, settings)
    arriving = arriving if arriving is not None else sim_pods(pods)
    sim = SimState.from_node_list(
        nodes, workload, memory_filter=settings.memory_filter, signals=signals
    )
    capacity = sim.total_gpu_milli
    arrival_rng, choice_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2)
    )
    order = arrival_order(pods, capacity, settings.load_ratio, arrival_rng)
    sim.shuffle_ties(arrival_rng)
    sim.random_ties = settings.tie_break == "random"
    steps = int(np.floor(settings.load_ratio * 100 + 1e-9))
    thresholds = np.arange(steps + 1, dtype=np.int64) * capacity // 100
    curve = np.zeros((3, steps + 1), dtype=np.float64)
    arrived = placed = failed = 0
    failed_pods = dict.fromkeys(pod_kinds(arriving), 0)
    failed_milli = dict.fromkeys(failed_pods, 0)
    first_failure: float | None = None
    step = 0
    started = time.perf_counter()
    for i in order:
        pod = arriving[int(i)]
        request = pod.gpu_request_milli
        while step <= steps and arrived + request > thresholds[step]:
            _record(sim, curve, step)
            step += 1
        arrived += request
        choice = chooser.choose(sim, pod, choice_rng)
        if choice is None:
            failed += 1
            failed_pods[pod.kind] += 1
            failed_milli[pod.kind] += request
            if first_failure is None:
                first_failure = arrived / capacity if capacity else 0.0
            continue
        gpus = sim.place(choice.node, pod, choice.gpus)
        if on_place is not None:
            on_place(sim, pod, choice.node, gpus)
        placed += 1
    while step <= steps:
        _record(sim, curve, step)
        step += 1
    elapsed = time.perf_counter() - started
    causes = fragmentation(sim.cluster, workload).by_cause
    return ReplayResult(
        policy=chooser.name,
        seed=seed,
        arrived_ratio=np.arange(steps + 1, dtype=np.float64) / 100.0,
        alloc_ratio=curve[0],
        frag_ratio=curve[1],
        frag_amount_ratio=curve[2],
        first_failure_arrived=first_failure,
        unallocated_gpus=(capacity - sim.allocated_gpu_milli) / 1000.0,
        pods_arrived=int(order.shape[0]),
        pods_placed=placed,
        pods_failed=failed,
        elapsed_s=elapsed,
        frag_by_cause_gpus={cause: milli / 1000.0 for cause, milli in causes.items()},
        failed_pods_by_kind=failed_pods,
        failed_gpus_by_kind={kind: milli / 1000.0 for kind, milli in failed_milli.items()},
    )


def _record(sim: SimState, curve: FloatArray, step: int) -> None:
    total = sim.total_gpu_milli
    idle = total - sim.allocated_gpu_milli
    # F(M) never exceeds the idle capacity; the float sum of the nodes' terms can, by an ulp.
    frag = min(sim.index.frag_milli, float(idle))
    curve[0, step] = sim.alloc_ratio
    curve[1, step] = frag / idle if idle else 0.0
    curve[2, step] = frag / total if total else 0.0


# -- many replays ----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _Job:
    """What every replay of a :func:`simulate` call shares (built once per process)."""

    nodes: NodeList
    pods: PodList
    settings: SimulationSettings
    signals: NodeSignals | None
    workload: TargetWorkload
    arriving: list[SimPod]


_JOB: list[_Job] = []


def _init_worker(
    nodes: NodeList, pods: PodList, settings: SimulationSettings, signals: NodeSignals | None
) -> None:
    _JOB[:] = [
        _Job(nodes, pods, settings, signals, target_workload(pods, settings), sim_pods(pods))
    ]


def _run_one(policy: str | policies.Policy, seed: int) -> ReplayResult:
    job = _JOB[0]
    return replay(
        job.nodes,
        job.pods,
        policy,
        seed,
        job.settings,
        signals=job.signals,
        workload=job.workload,
        arriving=job.arriving,
    )


def simulate(
    nodes: NodeList,
    pods: PodList,
    policy_list: Sequence[str | policies.Policy],
    seeds: Sequence[int],
    settings: SimulationSettings | None = None,
    *,
    signals: NodeSignals | None = None,
    workers: int = 1,
    progress: Callable[[ReplayResult], None] | None = None,
) -> list[PolicyResult]:
    """Every policy x every seed; one :class:`PolicyResult` per policy, in the given order.

    ``workers`` > 1 runs replays in that many processes; ``progress`` is called (in this
    process) after each replay. Raises :class:`UnknownNameError` for an unknown policy before
    any work, :class:`ConfigError` for no seeds or two policies with the same name.
    """
    settings = settings or SimulationSettings()
    if not seeds:
        raise ConfigError("at least one seed is needed")
    chosen = [find_policy(p) if isinstance(p, str) else p for p in policy_list]
    names = [p.name for p in chosen]
    if len(set(names)) != len(names):
        raise ConfigError(f"policy names must be distinct, got {', '.join(names)}")
    jobs = [(policy, seed) for policy in chosen for seed in seeds]
    done: list[ReplayResult] = []
    if workers <= 1 or len(jobs) <= 1:
        _init_worker(nodes, pods, settings, signals)
        for policy, seed in jobs:
            done.append(_run_one(policy, seed))
            if progress:
                progress(done[-1])
    else:
        init = (nodes, pods, settings, signals)
        # forkserver, not fork: a forked child inherits polars' and DuckDB's thread pools in
        # whatever state the parent left them and can hang in its first query (a policy that
        # builds a store, such as kube-sits, does).
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(
            workers, mp_context=context, initializer=_init_worker, initargs=init
        ) as pool:
            futures = [pool.submit(_run_one, policy, seed) for policy, seed in jobs]
            for future in as_completed(futures):
                done.append(future.result())
                if progress:
                    progress(done[-1])
    return [PolicyResult.combine([r for r in done if r.policy == p.name]) for p in chosen]
