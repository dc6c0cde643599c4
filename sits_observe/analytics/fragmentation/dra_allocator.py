"""kube-scheduler's DRA device choice on one node: first fit, and a best-fit alternative.

kube-scheduler's DynamicResources plugin allocates a claim on the node it chose by walking the
node's ResourceSlices and taking the **first** device that satisfies the request and still
fits, in the order the slices list them (kubernetes/kubernetes
``staging/src/k8s.io/dynamic-resource-allocation/structured``, the allocator's depth-first
search over the pool's devices). For a partitionable GPU (KEP-4815, dynamic MIG) a device
fits when every counter it consumes is within what the allocated devices of the same counter
set leave; a device without counters fits while no claim holds it.

:class:`NodeDevices` is one node's pool; :class:`NodeAllocation` allocates requests on it by
one of two rules and measures what is left:

- ``first_fit``: the allocator's rule above;
- ``best_fit``: among the devices that fit, the one that leaves the fewest stranded memory
  slices on its GPU, then the fewest free slices on its GPU (fill a partly used GPU before
  splitting another), then blocks the fewest other devices that still fit (a plain GPU
  before the whole device of a partitionable one, a 1g placement where it keeps the larger
  placements free), then the published order. A rule the allocator does not offer: the
  reference that first fit's waste is measured against.

A request is a *profile*: a MIG profile (``1g.5gb``) or :data:`WHOLE_GPU` for a whole GPU
(the ``gpu`` device of a partitionable GPU, or a plain one), times a count. Consumable
shares are not modelled here (:mod:`.dra` measures what they leave over).

Stranded slices follow :mod:`.dra`: a free ``memory-slice-<i>`` counter that no device still
fitting covers (on an A100 a lone free slice 7: only 7g.40gb and the whole GPU cover it). A
GPU is *split* when some of its slices are used and some are free. Units: memory slices,
GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

#: The request profile of a whole GPU (a device of type ``gpu``).
WHOLE_GPU = "gpu"
#: Memory slice counters of a partitionable GPU's counter set (NVIDIA's dynamic MIG).
SLICE_PREFIX = "memory-slice-"

Rule = Literal["first_fit", "best_fit"]


@dataclass(frozen=True)
class PoolDevice:
    """One device a node's ResourceSlices publish.

    ``gpu``: the physical GPU it is or is part of (its counter set for a partitionable one);
    ``profile``: what a request for it names (a MIG profile or :data:`WHOLE_GPU`);
    ``counters``: what it consumes from the ``gpu``'s counter set (empty: none).
    """

    name: str
    gpu: str
    profile: str
    counters: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeDevices:
    """A node's devices in published order, and the totals of its counter sets by GPU."""

    node: str
    devices: tuple[PoolDevice, ...]
    counter_sets: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[str, ...]:
        """The node's physical GPUs, in published order."""
        return tuple(dict.fromkeys(d.gpu for d in self.devices))


@dataclass(frozen=True)
class Leftover:
    """What a node's allocated devices leave. Units: memory slices, GPUs."""

    slices_free: int
    slices_stranded: int
    split_gpus: int
    failed: int


class NodeAllocation:
    """The devices allocated on one node so far, and what fits next (see the module docstring)."""

    def __init__(self, pool: NodeDevices) -> None:
        self.pool = pool
        self.left: dict[str, dict[str, int]] = {g: dict(c) for g, c in pool.counter_sets.items()}
        self.taken: set[str] = set()
        #: Requests (of one device) that found no device.
        self.failed = 0
        self._by_profile: dict[str, list[int]] = {}
        self._by_gpu: dict[str, list[int]] = {}
        for i, device in enumerate(pool.devices):
            self._by_profile.setdefault(device.profile, []).append(i)
            self._by_gpu.setdefault(device.gpu, []).append(i)

    # -- reading ----------------------------------------------------------------------------

    def fits(self, device: PoolDevice) -> bool:
        """Whether ``device`` can be allocated now."""
        if device.name in self.taken:
            return False
        left = self.left.get(device.gpu, {})
        return all(v <= left.get(c, 0) for c, v in device.counters.items())

    def fitting(self, profile: str) -> list[PoolDevice]:
        """The devices of ``profile`` that fit now, in published order."""
        devices = self.pool.devices
        return [devices[i] for i in self._by_profile.get(profile, ()) if self.fits(devices[i])]

    def can_allocate(self, profile: str, count: int = 1) -> bool:
        """Whether ``count`` devices of ``profile`` fit together, taken by first fit (the
        DynamicResources filter: a node where the claim cannot be allocated is infeasible)."""
        trial = self.copy()
        return all(trial.allocate(profile, "first_fit") is not None for _ in range(count))

    def leftover(self) -> Leftover:
        """Free and stranded slices, split GPUs and failed requests of the node now."""
        free = stranded = split = 0
        for gpu, totals in self.pool.counter_sets.items():
            slices = [c for c in totals if c.startswith(SLICE_PREFIX)]
            if not slices:
                continue
            left = self.left[gpu]
            free_here = {c for c in slices if left.get(c, 0) > 0}
            free += len(free_here)
            stranded += len(free_here - self._covered(gpu))
            split += int(0 < len(free_here) < len(slices))
        return Leftover(free, stranded, split, self.failed)

    # -- changing ---------------------------------------------------------------------------

    def allocate(self, profile: str, rule: Rule) -> PoolDevice | None:
        """Allocate one device of ``profile`` by ``rule``; None (counted) when none fits."""
        candidates = self.fitting(profile)
        if not candidates:
            self.failed += 1
            return None
        chosen = candidates[0] if rule == "first_fit" else self._best(candidates)
        self.take(chosen)
        return chosen

    def take(self, device: PoolDevice) -> None:
        """Account ``device`` as allocated (it must fit)."""
        if not self.fits(device):
            raise ValueError(f"device {device.name} of {self.pool.node} does not fit now")
        self.taken.add(device.name)
        left = self.left.get(device.gpu)
        for counter, value in device.counters.items():
            if left is not None:
                left[counter] = left.get(counter, 0) - value

    def copy(self) -> NodeAllocation:
        """An independent allocation in the same state."""
        other = NodeAllocation.__new__(NodeAllocation)
        other.pool = self.pool
        other.left = {g: dict(c) for g, c in self.left.items()}
        other.taken = set(self.taken)
        other.failed = self.failed
        other._by_profile = self._by_profile
        other._by_gpu = self._by_gpu
        return other

    # -- the best-fit rule ------------------------------------------------------------------

    def _best(self, candidates: Sequence[PoolDevice]) -> PoolDevice:
        def cost(item: tuple[int, PoolDevice]) -> tuple[int, int, int, int]:
            order, device = item
            before = self.left.get(device.gpu, {})
            after = dict(before)
            for counter, value in device.counters.items():
                after[counter] = after.get(counter, 0) - value
            siblings = [self.pool.devices[i] for i in self._by_gpu[device.gpu]]
            still = [d for d in siblings if d is not device and self._fits_in(d, before)]
            fitting_after = [d for d in still if self._fits_in(d, after)]
            free = {c for c in after if c.startswith(SLICE_PREFIX) and after[c] > 0}
            covered = {c for d in fitting_after for c in d.counters if c.startswith(SLICE_PREFIX)}
            return (len(free - covered), len(free), len(still) - len(fitting_after), order)

        return min(enumerate(candidates), key=cost)[1]

    def _fits_in(self, device: PoolDevice, left: Mapping[str, int]) -> bool:
        if device.name in self.taken:
            return False
        return all(v <= left.get(c, 0) for c, v in device.counters.items())

    def _covered(self, gpu: str) -> set[str]:
        covered: set[str] = set()
        for i in self._by_gpu.get(gpu, ()):
            device = self.pool.devices[i]
            if self.fits(device):
                covered |= {c for c in device.counters if c.startswith(SLICE_PREFIX)}
        return covered


@dataclass(frozen=True)
class FirstFitWaste:
    """One node's requests allocated by first fit and by best fit, from an empty node.

    ``wasted_slices``: the slices first fit strands beyond best fit's (0 when best fit
    strands as many or more); ``extra_split_gpus`` likewise for split GPUs.
    """

    node: str
    requests: int
    first_fit: Leftover
    best_fit: Leftover

    @property
    def wasted_slices(self) -> int:
        """Stranded slices first fit leaves that best fit keeps usable."""
        return max(0, self.first_fit.slices_stranded - self.best_fit.slices_stranded)

    @property
    def extra_split_gpus(self) -> int:
        """GPUs first fit splits beyond those best fit splits."""
        return max(0, self.first_fit.split_gpus - self.best_fit.split_gpus)


def first_fit_waste(pool: NodeDevices, requests: Sequence[tuple[str, int]]) -> FirstFitWaste:
    """Allocate ``requests`` (profile, count), in order, on an empty ``pool`` by each rule and
    compare what is left (:class:`FirstFitWaste`)."""
    left: dict[Rule, Leftover] = {}
    for rule in ("first_fit", "best_fit"):
        allocation = NodeAllocation(pool)
        for profile, count in requests:
            for _ in range(count):
                allocation.allocate(profile, rule)
        left[rule] = allocation.leftover()
    return FirstFitWaste(pool.node, len(requests), left["first_fit"], left["best_fit"])
