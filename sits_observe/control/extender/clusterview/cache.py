"""The extender's view cache: the current :class:`ClusterView`, rebuilt off the request path.

kube-scheduler gives an extender a few milliseconds per call, so a call must never wait for
the store. :class:`ViewCache` keeps the last built view and, when it is older than the
refresh interval, rebuilds it in one background thread while calls keep reading the old one
(stale while revalidating). Only the first call of the process waits for a build.

Placements the service makes or learns between snapshots (its bind verb) go through
:meth:`ViewCache.assume`: applied to the current view at once (a new view object, so a call in
flight keeps reading a consistent one) and to every rebuilt view until an inventory snapshot
shows the pod bound (:class:`sits_observe.control.extender.overlay.AssumedPods`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from sits_observe.control.extender.clusterview.view import ClusterView
from sits_observe.control.extender.overlay import AssumedPods, Placement, with_placements

log = logging.getLogger(__name__)


class ViewCache:
    """Holds the current :class:`ClusterView` and rebuilds it in the background when due.

    ``get`` never blocks: it returns the current view (None before the first build) and, when
    the view is older than ``refresh_interval_s``, starts one rebuild thread unless one runs.
    A failed build is logged, counted in :attr:`errors` and reported to ``on_error``; the old
    view stays in use.
    """

    def __init__(
        self,
        build: Callable[[ClusterView | None], ClusterView],
        *,
        refresh_interval_s: float,
        monotonic: Callable[[], float] = time.monotonic,
        on_error: Callable[[Exception], None] | None = None,
        assumed: AssumedPods | None = None,
    ) -> None:
        self._build = build
        #: Placements not yet in an inventory snapshot, applied to every view.
        self.assumed = assumed if assumed is not None else AssumedPods(ttl_s=600.0)
        self._swap = threading.Lock()
        self._interval_s = refresh_interval_s
        self._monotonic = monotonic
        self._on_error = on_error
        self._lock = threading.Lock()
        self._built = threading.Event()
        self._view: ClusterView | None = None
        self._built_mono: float | None = None
        self._running = False
        self.errors = 0
        self.builds = 0

    def get(self) -> ClusterView | None:
        """The current view; starts a background rebuild when it is due."""
        built = self._built_mono
        if built is None or self._monotonic() - built >= self._interval_s:
            self._start()
        return self._view

    def wait(self, timeout_s: float) -> ClusterView | None:
        """The current view, waiting up to ``timeout_s`` for the first one."""
        view = self.get()
        if view is None:
            self._built.wait(timeout_s)
            view = self._view
        return view

    def assume(self, placement: Placement) -> None:
        """Account ``placement`` in the current view now and in every rebuilt one until an
        inventory snapshot shows the pod bound (a pod already assumed is left as it is)."""
        with self._swap:
            if not self.assumed.add(placement):
                return
            if self._view is not None:
                view, skipped = with_placements(self._view, [placement])
                self.assumed.count_skipped(skipped)
                self._view = view

    def refresh(self) -> ClusterView | None:
        """Rebuild now in the calling thread (tests, benchmarks); returns the current view."""
        self._run()
        return self._view

    def _start(self) -> None:
        with self._lock:
            if self._running:
                return
            self._running = True
        threading.Thread(target=self._run, name="extender-view", daemon=True).start()

    def _run(self) -> None:
        started = self._monotonic()
        try:
            view = self._build(self._view)
        except Exception as exc:
            # Keep serving the previous view; count the failure and retry when next due.
            self.errors += 1
            log.exception("extender view rebuild failed; keeping the previous view")
            if self._on_error is not None:
                self._on_error(exc)
            self._built_mono = started  # back off one interval before retrying
        else:
            with self._swap:
                pending = self.assumed.pending(view.base_inventory or view.inventory)
                view, skipped = with_placements(view, pending)
                self.assumed.count_skipped(skipped)
                self._view = view
            self._built_mono = started
            self.builds += 1
            self._built.set()
        finally:
            with self._lock:
                self._running = False
