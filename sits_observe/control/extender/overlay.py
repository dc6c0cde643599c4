"""Assumed pods: placements the extender knows of before an inventory snapshot shows them.

kube-scheduler assumes a pod on its node the moment it decides, before the bind completes
(``schedule_one.go``, ``assume``); the extender's view comes from inventory snapshots, taken
every few seconds, so without help it would score the next pods as if the last ones had not
been placed. The overlay closes that gap:

- a :class:`Placement` (pod, node, the GPU indices it holds) is recorded when the service
  learns of it: its own ``bind`` verb (``extender_bind``), or, in the replay without a bind
  verb, the replay's placement observer standing for the service's pod watch;
- :func:`with_placements` returns a new :class:`ClusterView` with the placements applied
  (copy-on-write: the FGD state is copied, the placed nodes' F_n(M) recomputed, the view
  calls are reading stays unchanged), so a call never sees a half-applied placement;
- :class:`AssumedPods` keeps every placement until an inventory snapshot shows the pod bound
  (then the snapshot accounts for it) or ``ttl_s`` passes (a pod deleted before any snapshot,
  a bind that failed after it was recorded); each rebuilt view gets the placements still
  pending, so they survive view rebuilds.

A placement that no longer fits the rebuilt view (the snapshot changed under it) is skipped
and counted in :attr:`AssumedPods.skipped`; it never fails a build.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from sits_observe.analytics.fragmentation.fgd.model import PodShape
from sits_observe.control.extender.clusterview.view import ClusterView, Inventory, gpu_free_counts


@dataclass(frozen=True)
class Placement:
    """One pod on one node: its request as the FGD measure sees it and its GPU indices
    (``()`` for a CPU-only pod)."""

    namespace: str
    name: str
    node: str
    shape: PodShape
    gpus: tuple[int, ...]
    uid: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)``, as the inventory names pods."""
        return (self.namespace, self.name)


def with_placements(
    view: ClusterView, placements: Sequence[Placement]
) -> tuple[ClusterView, list[Placement]]:
    """``view`` with ``placements`` applied, and the placements that did not fit (skipped).

    The returned view keeps ``view``'s base inventory (the store's snapshot without any
    assumed pod), which :func:`sits_observe.control.extender.clusterview.view.build_view` reuses.
    """
    if not placements or not len(view):
        return view, list(placements)
    base = view.base_inventory or view.inventory
    inventory = view.inventory
    fgd = inventory.fgd.copy() if inventory.fgd is not None else None
    state = fgd.state if fgd is not None else inventory.state.copy()
    pods = view.gpu_pods.copy()
    skipped: list[Placement] = []
    for p in placements:
        row = view.index.get(p.node)
        if row is None:
            skipped.append(p)
            continue
        try:
            if fgd is not None:
                fgd.place(row, p.shape, p.gpus or None)
            else:
                state.place(row, p.shape, p.gpus or None)
        except ValueError:
            skipped.append(p)
            continue
        for g in p.gpus:
            pods[row, g] += 1
    placed = replace(inventory, state=state, fgd=fgd)
    return (
        replace(
            view,
            inventory=placed,
            base_inventory=base,
            gpu_free=gpu_free_counts(state),
            gpu_pods=pods,
        ),
        skipped,
    )


class AssumedPods:
    """Placements not yet in an inventory snapshot (see the module docstring). Thread-safe."""

    def __init__(self, *, ttl_s: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._ttl_s = ttl_s
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._pending: dict[tuple[str, str], tuple[float, Placement]] = {}
        #: Placements dropped because they no longer fitted a rebuilt view.
        self.skipped = 0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, placement: Placement) -> bool:
        """Remember ``placement``; False (and nothing changes) when the pod is already
        assumed: the bind verb and a later pod watch report the same placement."""
        with self._lock:
            if placement.key in self._pending:
                return False
            self._pending[placement.key] = (self._monotonic(), placement)
            return True

    def get(self, namespace: str, name: str) -> Placement | None:
        """The assumed placement of a pod, if any."""
        with self._lock:
            found = self._pending.get((namespace, name))
            return found[1] if found is not None else None

    def pending(self, inventory: Inventory) -> list[Placement]:
        """The placements ``inventory`` does not show yet, oldest first; drops the others."""
        now = self._monotonic()
        with self._lock:
            for key, (at, _) in list(self._pending.items()):
                if key in inventory.bound_pods or now - at > self._ttl_s:
                    del self._pending[key]
            return [p for _, p in self._pending.values()]

    def count_skipped(self, placements: Iterable[Placement]) -> None:
        """Count (and forget) placements a rebuilt view could not take."""
        with self._lock:
            for p in placements:
                self.skipped += 1
                self._pending.pop(p.key, None)
