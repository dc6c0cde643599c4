"""The service's Kubernetes inventory loop.

Every ``interval_s`` the service snapshots nodes and pods through the official client
(:class:`KubeInventoryCollector`), stores them with the drop counts in one batch, and names
the containers of cgroup samples from the snapshot (:func:`attribute_containers`). The
service runs it because it holds the one write handle on the store and the RBAC to list
pods; agents need no Kubernetes credentials.

A failed snapshot (API down, 403, ...) is logged once per distinct message, counted, and
retried next interval; the loop never takes the service down. Shutdown is prompt: the loop
waits on an event.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

from sits_observe.domain.collect import Collector, drops_table
from sits_observe.errors import SitsError
from sits_observe.store import Batch, Store, utc_naive
from sits_observe.store.attribution import attribute_containers

log = logging.getLogger(__name__)


@dataclass
class InventoryStats:
    """What the loop has done so far."""

    snapshots: int = 0
    errors: int = 0
    attributed: int = 0
    last_error: str | None = None


class InventoryLoop:
    """Snapshots the inventory into the store on an interval (see module docstring)."""

    def __init__(
        self,
        collector: Collector,
        store: Store,
        *,
        interval_s: float,
        node: str = "control-plane",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.collector = collector
        self.store = store
        self.interval_s = interval_s
        self.node = node
        self.clock = clock
        self.stats = InventoryStats()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="inventory", daemon=True)

    def run_once(self) -> None:
        """One snapshot, store and attribution; errors are counted, never raised."""
        now = self.clock()
        try:
            result = self.collector.collect(now)
            drops = drops_table(
                result.dropped, at=utc_naive(now), node=self.node, collector=self.collector.name
            )
            self.store.ingest(Batch({**result.tables, "collector_drops": drops}, now, self.node))
            self.stats.attributed += attribute_containers(self.store)
            self.stats.snapshots += 1
            self.stats.last_error = None
        except SitsError as exc:
            self.stats.errors += 1
            if str(exc) != self.stats.last_error:
                log.warning("inventory snapshot failed (will retry): %s", exc)
            self.stats.last_error = str(exc)

    def start(self) -> InventoryLoop:
        """Run in a background thread until :meth:`stop`."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop promptly and wait for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.interval_s)
